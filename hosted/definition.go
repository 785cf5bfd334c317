package hosted

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/mcpbox/mcpbox"
)

// Server is a hosted MCP server's definition. The first six fields are
// e2b-mcp's, spelled as its servers.json spells them, so that file carries
// over; the rest are mcpbox's.
type Server struct {
	// Name matches ^[a-zA-Z0-9_-]+$. In servers.json it is the key.
	Name string `json:"name,omitempty"`
	// Command is the shell line that starts the server speaking MCP over
	// stdio, run by /bin/sh in the working directory of the server's sandbox (/workspace).
	Command string `json:"command"`
	// Env reaches the server process (and its install commands) only: it
	// is sent in the agent's start request, never on a command line, never
	// logged, and never shown by `server list` (names only).
	Env map[string]string `json:"env,omitempty"`
	// InstallCommands run, in order, before the server first starts in a
	// sandbox (npm install, pip install …).
	InstallCommands []string `json:"install_commands,omitempty"`
	Description     string   `json:"description,omitempty"`
	// TimeoutMinutes is how long the server stays warm unused before its
	// sandbox is stopped; default 10, as in e2b-mcp.
	TimeoutMinutes float64 `json:"timeout_minutes,omitempty"`

	// Template is the sandbox's template; "" is the host template.
	Template string `json:"template,omitempty"`
	// Network is the sandbox's egress policy; nil is no network.
	Network *mcpbox.NetworkPolicy `json:"network,omitempty"`
	// Volumes are host_path:sandbox_path[:ro] mappings, each under the
	// configured volume_roots.
	Volumes []string `json:"volumes,omitempty"`
	// Scope is "owner" (the default: each owner gets its own instance, in
	// a sandbox of its own) or "shared" (one instance serves every owner;
	// each call's arguments and results still reach only its caller).
	Scope string `json:"scope,omitempty"`
}

// Scopes of a Server.
const (
	ScopeOwner  = "owner"
	ScopeShared = "shared"
)

// DefaultTimeoutMinutes is e2b-mcp's default idle timeout.
const DefaultTimeoutMinutes = 10

// nameRE is what a server name may be: it becomes part of tool names
// (server__tool) that strict clients check against ^[a-zA-Z0-9_-]{1,64}$.
var nameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// maxNameLen leaves room in a 64-character tool name for "__" and a tool.
const maxNameLen = 48

// Validate checks a definition and says what to fix.
func (s *Server) Validate() error {
	if !nameRE.MatchString(s.Name) || len(s.Name) > maxNameLen {
		return mcpbox.Errorf(mcpbox.EINVALID, "server name %q is not valid: use 1 to %d letters, digits, _ or -", s.Name, maxNameLen).
			WithSuggestion("pick a name such as filesystem or my-server")
	}
	if strings.TrimSpace(s.Command) == "" {
		return mcpbox.Errorf(mcpbox.EINVALID, "server %s has no command", s.Name).
			WithSuggestion(`give the command that starts it over stdio, such as --command "npx -y @modelcontextprotocol/server-memory"`)
	}
	for k := range s.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return mcpbox.Errorf(mcpbox.EINVALID, "server %s: env name %q is not valid", s.Name, k).WithSuggestion("use KEY=VALUE with a KEY of letters, digits and _")
		}
	}
	for _, c := range s.InstallCommands {
		if strings.TrimSpace(c) == "" {
			return mcpbox.Errorf(mcpbox.EINVALID, "server %s has an empty install command", s.Name)
		}
	}
	if s.TimeoutMinutes < 0 || s.TimeoutMinutes > 24*60 {
		return mcpbox.Errorf(mcpbox.EINVALID, "server %s: timeout_minutes %g is outside 0..1440", s.Name, s.TimeoutMinutes)
	}
	for _, v := range s.Volumes {
		if _, err := mcpbox.ParseVolume(v); err != nil {
			return mcpbox.Errorf(mcpbox.EINVALID, "server %s: volume %q: %v", s.Name, v, err).WithSuggestion("write volumes as host_path:sandbox_path[:ro]")
		}
	}
	switch s.Scope {
	case "", ScopeOwner, ScopeShared:
	default:
		return mcpbox.Errorf(mcpbox.EINVALID, "server %s: scope %q is not owner or shared", s.Name, s.Scope)
	}
	return nil
}

// Idle is how long the server stays warm unused.
func (s *Server) Idle() time.Duration {
	m := s.TimeoutMinutes
	if m == 0 {
		m = DefaultTimeoutMinutes
	}
	return time.Duration(m * float64(time.Minute))
}

// Shared reports whether one instance serves every owner.
func (s *Server) Shared() bool { return s.Scope == ScopeShared }

// clone is a deep copy: definitions are handed out, never shared.
func (s Server) clone() Server {
	s.Env = maps.Clone(s.Env)
	s.InstallCommands = slices.Clone(s.InstallCommands)
	s.Volumes = slices.Clone(s.Volumes)
	if s.Network != nil {
		n := *s.Network
		n.Allow, n.Deny = slices.Clone(n.Allow), slices.Clone(n.Deny)
		s.Network = &n
	}
	return s
}

// InstallKey is a hash of everything that affects what the install
// commands produce: the commands, the template they run on, the network
// they may reach, the env they see and the volumes. The same key means
// the same install.
func (s *Server) InstallKey() string {
	h := sha256.New()
	b, _ := json.Marshal(struct {
		Install  []string              `json:"install"`
		Template string                `json:"template"`
		Network  *mcpbox.NetworkPolicy `json:"network"`
		Env      map[string]string     `json:"env"`
		Volumes  []string              `json:"volumes"`
	}{s.InstallCommands, s.Template, s.Network, s.Env, s.Volumes})
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// runKey is a hash of the whole definition: a running instance whose
// definition changed is replaced.
func (s *Server) runKey() string {
	b, _ := json.Marshal(s)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// FromMap builds a definition from a map shaped like one entry of
// e2b-mcp's servers.json ({"command": …, "env": {…}, …}); name is the
// entry's key.
func FromMap(name string, m map[string]any) (Server, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return Server{}, mcpbox.Errorf(mcpbox.EINVALID, "server %s: %v", name, err)
	}
	var s Server
	if err := strictUnmarshal(b, &s); err != nil {
		return Server{}, mcpbox.Errorf(mcpbox.EINVALID, "server %s: %v", name, err).
			WithSuggestion("use the fields name, command, env, install_commands, description, timeout_minutes, template, network, volumes, scope")
	}
	if s.Name != "" && s.Name != name {
		return Server{}, mcpbox.Errorf(mcpbox.EINVALID, "server %s: its name field says %q", name, s.Name)
	}
	s.Name = name
	return s, s.Validate()
}

func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w", err)
	}
	return nil
}
