// Package mcpbox is the domain of mcpbox: sandboxes, flavors, languages and
// the typed errors every layer shares, plus the Runtime interface that
// separates the session layer from the sandbox backends.
//
// It does no I/O and imports nothing else of this module, so every other
// package can depend on it.
package mcpbox

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Version is the mcpbox release, overridden at link time with
// -ldflags "-X github.com/mcpbox/mcpbox.Version=…".
var Version = "0.1.0-dev"

// EnvdVersion is the envd protocol version the agent reports. E2B's SDKs
// switch features on by this number, so it must stay at or above 0.6.4.
const EnvdVersion = "0.6.4"

// Language is a language the sandbox can run code in.
type Language string

// The languages mcpbox runs.
const (
	Python     Language = "python"
	JavaScript Language = "javascript"
	Shell      Language = "shell"
)

// Languages lists the supported languages in a stable order.
var Languages = []Language{Python, JavaScript, Shell}

// ParseLanguage accepts a language name or a common alias ("py", "js",
// "node", "sh", "bash").
func ParseLanguage(s string) (Language, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "python", "python3", "py":
		return Python, nil
	case "javascript", "js", "node", "nodejs":
		return JavaScript, nil
	case "shell", "sh", "bash":
		return Shell, nil
	}
	return "", Errorf(EINVALID, "unknown language %q", s).
		WithSuggestion("use one of: python, javascript, shell")
}

// Flavor is a size of sandbox: the limits its cgroups, rlimits and
// writable storage enforce.
type Flavor struct {
	Name        string  `json:"name"`
	CPUs        float64 `json:"cpus"`
	MemoryBytes int64   `json:"memory_bytes"`
	DiskBytes   int64   `json:"disk_bytes"`
	// Pids caps the number of tasks (processes and threads) in the sandbox.
	Pids int64 `json:"pids"`
}

const gib = 1 << 30

// Flavors are the built-in sizes; configuration may add custom ones.
var Flavors = map[string]Flavor{
	"small":  {Name: "small", CPUs: 1, MemoryBytes: 1 * gib, DiskBytes: 1 * gib, Pids: 512},
	"medium": {Name: "medium", CPUs: 2, MemoryBytes: 2 * gib, DiskBytes: 2 * gib, Pids: 1024},
	"large":  {Name: "large", CPUs: 4, MemoryBytes: 4 * gib, DiskBytes: 4 * gib, Pids: 2048},
}

// DefaultFlavor is used when a caller names none.
const DefaultFlavor = "small"

// LookupFlavor returns the built-in flavor called name ("" means the default).
func LookupFlavor(name string) (Flavor, error) {
	if name == "" {
		name = DefaultFlavor
	}
	if f, ok := Flavors[name]; ok {
		return f, nil
	}
	names := make([]string, 0, len(Flavors))
	for n := range Flavors {
		names = append(names, n)
	}
	sort.Strings(names)
	return Flavor{}, Errorf(EINVALID, "unknown flavor %q", name).
		WithSuggestion("use one of: " + strings.Join(names, ", "))
}

// Validate reports whether f describes limits a sandbox can run with.
func (f Flavor) Validate() error {
	switch {
	case f.CPUs <= 0:
		return Errorf(EINVALID, "flavor %q: cpus must be above 0, got %g", f.Name, f.CPUs)
	case f.MemoryBytes < 16<<20:
		return Errorf(EINVALID, "flavor %q: memory must be at least 16 MiB, got %d bytes", f.Name, f.MemoryBytes)
	case f.DiskBytes < 16<<20:
		return Errorf(EINVALID, "flavor %q: disk must be at least 16 MiB, got %d bytes", f.Name, f.DiskBytes)
	case f.Pids < 16:
		return Errorf(EINVALID, "flavor %q: pids must be at least 16, got %d", f.Name, f.Pids)
	}
	return nil
}

// MaxTimeout is the longest a single execution may be given.
const MaxTimeout = time.Hour

// ValidateTimeout checks an execution timeout: above zero and at most MaxTimeout.
func ValidateTimeout(d time.Duration) error {
	if d <= 0 {
		return Errorf(EINVALID, "timeout must be above 0, got %s", d).
			WithSuggestion("pass a positive duration such as 30s")
	}
	if d > MaxTimeout {
		return Errorf(EINVALID, "timeout %s is above the maximum of %s", d, MaxTimeout).
			WithSuggestion("split the work, or run it in the background")
	}
	return nil
}

var idPattern = regexp.MustCompile(`^[a-z0-9]{1,63}$`)

// ValidateID checks a sandbox or session id: lowercase letters and digits
// only, because E2B clients split host names on '-' and '.'.
func ValidateID(id string) error {
	if !idPattern.MatchString(id) {
		return Errorf(EINVALID, "invalid id %q: use 1 to 63 lowercase letters and digits", id)
	}
	return nil
}

// SandboxSpec is what a runtime needs to create a sandbox.
type SandboxSpec struct {
	// ID names the sandbox; see ValidateID.
	ID     string
	Flavor Flavor
	// Template names the root filesystem the sandbox starts from; "" is
	// the host template (read-only binds of the host's /usr).
	Template string
	// Env is added to every process's environment, over the defaults
	// (PATH, HOME, LANG, TERM). Nothing from the host leaks in.
	Env map[string]string
	// Volumes are host directories bound into the sandbox; the caller has
	// already checked them against its allow-list and set their Root.
	Volumes []Volume
	// Network is the sandbox's egress policy; nil means no network.
	Network *NetworkPolicy
	// Prestart names languages whose kernel starts with the sandbox, while
	// the rest of it is still being set up, so that the first execution
	// does not wait for an interpreter to boot.
	Prestart []Language
	// Ephemeral sandboxes die with the process that created them, however
	// it ends (a one-shot `mcpbox run`); others outlive it, to be adopted.
	Ephemeral bool
}

// Sandbox describes a sandbox as its runtime sees it. What only one
// backend knows (a host pid, a socket path) stays inside that backend.
type Sandbox struct {
	ID      string    `json:"id"`
	Flavor  Flavor    `json:"flavor"`
	Created time.Time `json:"created"`
	// Alive is set by Runtime.List: false when the sandbox's agent is
	// gone and only its leftovers remain for Destroy.
	Alive bool `json:"-"`
}

// Runtime creates and destroys sandboxes and connects to their agents.
// The local backend (namespaces, cgroups, seccomp) and the Kubernetes
// backend implement it; the same agent runs inside both.
type Runtime interface {
	// Create starts a sandbox and returns once its agent answers.
	Create(ctx context.Context, spec SandboxSpec) (*Sandbox, error)
	// Destroy kills every process in the sandbox and removes all it left
	// behind. Destroying a sandbox that is already gone is not an error.
	Destroy(ctx context.Context, id string) error
	// List returns the sandboxes this runtime knows about, live or not
	// (see Sandbox.Alive), including ones an earlier process started.
	List(ctx context.Context) ([]*Sandbox, error)
	// Dial opens a connection to the sandbox's agent, whatever the
	// transport: HTTP (h2c or HTTP/1.1) is spoken over it. Any process
	// sharing the runtime's state may dial any of its sandboxes.
	Dial(ctx context.Context, id string) (net.Conn, error)
}

// String implements fmt.Stringer for log lines.
func (s *Sandbox) String() string {
	return fmt.Sprintf("sandbox %s (%s)", s.ID, s.Flavor.Name)
}

// NewID returns a fresh random id: 20 lowercase letters and digits, which
// passes ValidateID and E2B's host-name routing.
func NewID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 20)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}
