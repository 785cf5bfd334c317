// Package config is mcpbox's configuration: defaults, then a YAML file,
// then MCPBOX_* environment variables, then command-line flags, each
// overriding the one before. Every key is documented in the README with
// its default; Validate refuses a bad value with the key's name.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/mcpbox/mcpbox"
)

// Config is the effective configuration. The yaml tag is the key in the
// file; the env tag the MCPBOX_ variable.
type Config struct {
	Home string `yaml:"home" env:"MCPBOX_HOME"`
	Host string `yaml:"host" env:"MCPBOX_HOST"`
	Port int    `yaml:"port" env:"MCPBOX_PORT"`

	MaxSessions             int           `yaml:"max_sessions" env:"MCPBOX_MAX_SESSIONS"`
	MaxSessionsPerOwner     int           `yaml:"max_sessions_per_owner" env:"MCPBOX_MAX_SESSIONS_PER_OWNER"`
	MaxConcurrentExecutions int           `yaml:"max_concurrent_executions" env:"MCPBOX_MAX_CONCURRENT_EXECUTIONS"`
	IdleTimeout             time.Duration `yaml:"idle_timeout" env:"MCPBOX_IDLE_TIMEOUT"`
	DefaultTTL              time.Duration `yaml:"default_ttl" env:"MCPBOX_DEFAULT_TTL"`
	MaxTTL                  time.Duration `yaml:"max_ttl" env:"MCPBOX_MAX_TTL"`
	MaxBackgroundCommands   int           `yaml:"max_background_commands" env:"MCPBOX_MAX_BACKGROUND_COMMANDS"`
	// MaxOutputBytes caps what the host keeps of one command's stdout and
	// of its stderr; MaxFileBytes one file read. Past them output is
	// dropped (and the reply says how much), a file read is refused.
	MaxOutputBytes int `yaml:"max_output_bytes" env:"MCPBOX_MAX_OUTPUT_BYTES"`
	MaxFileBytes   int `yaml:"max_file_bytes" env:"MCPBOX_MAX_FILE_BYTES"`
	// Overcommit is how many times the host's memory the live sandboxes'
	// flavors (memory and disk) may add up to before creates are refused.
	Overcommit float64 `yaml:"overcommit" env:"MCPBOX_OVERCOMMIT"`
	// LeaseTTL is how long an mcpbox process's lease in the store lasts
	// unrenewed: another process takes over its sandboxes this long after
	// it dies.
	LeaseTTL           time.Duration `yaml:"lease_ttl" env:"MCPBOX_LEASE_TTL"`
	StopSessionsOnExit bool          `yaml:"stop_sessions_on_exit" env:"MCPBOX_STOP_SESSIONS_ON_EXIT"`
	LogLevel           string        `yaml:"log_level" env:"MCPBOX_LOG_LEVEL"`

	// CORSOrigins are the browser origins allowed to call the HTTP
	// endpoints; any other Origin is refused with 403.
	CORSOrigins []string `yaml:"cors_origins" env:"MCPBOX_CORS_ORIGINS"`
	// MaxBodyMB caps an HTTP request body (write_file content travels in it).
	MaxBodyMB int `yaml:"max_body_mb" env:"MCPBOX_MAX_BODY_MB"`
	// HTTPBodyTimeout bounds reading one request body; HTTPIdleTimeout
	// closes keep-alive connections idle this long; MaxConnections bounds
	// open HTTP connections (more wait in the listen backlog).
	HTTPBodyTimeout time.Duration `yaml:"http_body_timeout" env:"MCPBOX_HTTP_BODY_TIMEOUT"`
	HTTPIdleTimeout time.Duration `yaml:"http_idle_timeout" env:"MCPBOX_HTTP_IDLE_TIMEOUT"`
	MaxConnections  int           `yaml:"max_connections" env:"MCPBOX_MAX_CONNECTIONS"`
	// RequireSessionID makes tool calls without a session_id an error.
	RequireSessionID bool `yaml:"require_session_id" env:"MCPBOX_REQUIRE_SESSION_ID"`
	// Insecure allows listening beyond loopback with no API key.
	Insecure bool `yaml:"insecure" env:"MCPBOX_INSECURE"`

	// Flavors adds custom flavors, by name.
	Flavors map[string]Flavor `yaml:"flavors"`
	// Pools keeps sandboxes ready per (template, flavor).
	Pools []Pool `yaml:"pools"`
	// VolumeRoots are the host directories volumes may come from.
	VolumeRoots []string `yaml:"volume_roots"`
	// Volumes, host_path:sandbox_path[:ro], are mapped into every session.
	Volumes []string `yaml:"volumes"`

	// Network is the network policy of sessions created without one
	// (public, allow, deny); left out, they have no network.
	Network *mcpbox.NetworkPolicy `yaml:"network"`
	// EgressMaxConnectionsPerSession bounds one session's open connections
	// through the egress proxy; EgressMaxConnections all sessions'
	// together (0: a quarter of the process's descriptor limit);
	// EgressBytesPerSecond one session's bandwidth (0: unbounded).
	EgressMaxConnectionsPerSession int   `yaml:"egress_max_connections_per_session" env:"MCPBOX_EGRESS_MAX_CONNECTIONS_PER_SESSION"`
	EgressMaxConnections           int   `yaml:"egress_max_connections" env:"MCPBOX_EGRESS_MAX_CONNECTIONS"`
	EgressBytesPerSecond           int64 `yaml:"egress_bytes_per_second" env:"MCPBOX_EGRESS_BYTES_PER_SECOND"`

	// ServersFile holds the hosted MCP server definitions (e2b-mcp's
	// servers.json format); default servers.json beside the config file.
	ServersFile string `yaml:"servers_file" env:"MCPBOX_SERVERS_FILE"`
	// Gateway lists the hosted servers' tools (server__tool), prompts
	// and resources on mcpbox's own MCP endpoint; false turns that off.
	Gateway bool `yaml:"gateway" env:"MCPBOX_GATEWAY"`
}

// DefaultServersFile is servers.json in the config directory.
func DefaultServersFile() string {
	f := DefaultFile()
	if f == "" {
		return ""
	}
	return filepath.Join(filepath.Dir(f), "servers.json")
}

// Pool is one warm pool in the file.
type Pool struct {
	Template string `yaml:"template"`
	Flavor   string `yaml:"flavor"`
	Size     int    `yaml:"size"`
}

// Flavor is a custom flavor in the file: sizes in whole units.
type Flavor struct {
	CPUs     float64 `yaml:"cpus"`
	MemoryMB int64   `yaml:"memory_mb"`
	DiskMB   int64   `yaml:"disk_mb"`
	Pids     int64   `yaml:"pids"`
}

// Default returns the built-in configuration.
func Default() Config {
	return Config{
		Host: "127.0.0.1", Port: 8080,
		MaxSessions: 100, MaxSessionsPerOwner: 20, MaxConcurrentExecutions: 4, MaxBackgroundCommands: 8,
		MaxOutputBytes: 1 << 20, MaxFileBytes: 16 << 20, Overcommit: 4, LeaseTTL: 15 * time.Second,
		IdleTimeout: 15 * time.Minute, DefaultTTL: time.Hour, MaxTTL: 24 * time.Hour,
		LogLevel: "info", MaxBodyMB: 64,
		HTTPBodyTimeout: time.Minute, HTTPIdleTimeout: 2 * time.Minute, MaxConnections: 1024,
		ServersFile: DefaultServersFile(), Gateway: true,
		EgressMaxConnectionsPerSession: 256, EgressBytesPerSecond: 100 << 20,
	}
}

// DefaultFile is where Load looks when no file is named: the config
// directory of the user ($XDG_CONFIG_HOME/mcpbox/config.yaml), or
// /etc/mcpbox/config.yaml as root.
func DefaultFile() string {
	if os.Geteuid() == 0 {
		return "/etc/mcpbox/config.yaml"
	}
	d, err := os.UserConfigDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "mcpbox", "config.yaml")
}

// Load builds the configuration from the defaults, the file (explicit: it
// must exist; "" means DefaultFile if it exists) and the environment.
// Flags are applied by the caller afterwards, then Validate.
func Load(file string, environ []string) (Config, error) {
	c := Default()
	explicit := file != ""
	if !explicit {
		file = DefaultFile()
	}
	if file != "" {
		b, err := os.ReadFile(file)
		switch {
		case err == nil:
			dec := yaml.NewDecoder(bytes.NewReader(b))
			dec.KnownFields(true)
			// An empty file (io.EOF) holds no settings, which is fine.
			if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
				return c, fmt.Errorf("config file %s: %w", file, err)
			}
		case explicit || !os.IsNotExist(err):
			return c, fmt.Errorf("config file: %w", err)
		}
	}
	if err := c.applyEnv(environ); err != nil {
		return c, err
	}
	return c, nil
}

// applyEnv sets every field whose env variable is present.
func (c *Config) applyEnv(environ []string) error {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	v := reflect.ValueOf(c).Elem()
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		name := t.Field(i).Tag.Get("env")
		val, ok := env[name]
		if name == "" || !ok {
			continue
		}
		if err := set(v.Field(i), val); err != nil {
			return fmt.Errorf("%s=%q: %w", name, val, err)
		}
	}
	return nil
}

func set(f reflect.Value, s string) error {
	switch f.Interface().(type) {
	case string:
		f.SetString(s)
	case int:
		n, err := strconv.Atoi(s)
		if err != nil {
			return errors.New("not a whole number")
		}
		f.SetInt(int64(n))
	case bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return errors.New("not true or false")
		}
		f.SetBool(b)
	case []string:
		var list []string
		for _, item := range strings.Split(s, ",") {
			if item = strings.TrimSpace(item); item != "" {
				list = append(list, item)
			}
		}
		f.Set(reflect.ValueOf(list))
	case int64:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return errors.New("not a whole number")
		}
		f.SetInt(n)
	case float64:
		n, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return errors.New("not a number")
		}
		f.SetFloat(n)
	case time.Duration:
		d, err := time.ParseDuration(s)
		if err != nil {
			return errors.New("not a duration such as 15m or 1h")
		}
		f.SetInt(int64(d))
	}
	return nil
}

// Validate refuses values mcpbox cannot run with, naming the key.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("config %s: "+format, append([]any{key}, args...)...))
	}
	if c.Port < 0 || c.Port > 65535 {
		bad("port", "%d is not a TCP port (0..65535)", c.Port)
	}
	if c.Host == "" {
		bad("host", "is empty")
	}
	for key, n := range map[string]int{"max_sessions": c.MaxSessions, "max_sessions_per_owner": c.MaxSessionsPerOwner,
		"max_concurrent_executions": c.MaxConcurrentExecutions, "max_background_commands": c.MaxBackgroundCommands,
		"max_output_bytes": c.MaxOutputBytes, "max_file_bytes": c.MaxFileBytes, "max_connections": c.MaxConnections} {
		if n < 1 {
			bad(key, "must be at least 1, got %d", n)
		}
	}
	if c.MaxBodyMB < 1 || c.MaxBodyMB > 4096 {
		bad("max_body_mb", "%d is outside 1..4096", c.MaxBodyMB)
	}
	for i, o := range c.CORSOrigins {
		if u, err := url.Parse(o); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			bad(fmt.Sprintf("cors_origins[%d]", i), "%q is not an origin such as https://app.example.com", o)
		}
	}
	if c.MaxSessionsPerOwner > c.MaxSessions {
		bad("max_sessions_per_owner", "%d is above max_sessions (%d)", c.MaxSessionsPerOwner, c.MaxSessions)
	}
	if c.Overcommit <= 0 {
		bad("overcommit", "must be above 0, got %g", c.Overcommit)
	}
	for key, d := range map[string]time.Duration{"idle_timeout": c.IdleTimeout, "default_ttl": c.DefaultTTL, "max_ttl": c.MaxTTL, "lease_ttl": c.LeaseTTL,
		"http_body_timeout": c.HTTPBodyTimeout, "http_idle_timeout": c.HTTPIdleTimeout} {
		if d <= 0 {
			bad(key, "must be above 0, got %s", d)
		}
	}
	if c.DefaultTTL > c.MaxTTL {
		bad("default_ttl", "%s is above max_ttl (%s)", c.DefaultTTL, c.MaxTTL)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("log_level", "%q is not one of debug, info, warn, error", c.LogLevel)
	}
	for name, f := range c.Flavors {
		if err := mcpbox.ValidateID(name); err != nil {
			bad("flavors."+name, "a flavor name must be lowercase letters and digits")
		}
		if err := f.Flavor(name).Validate(); err != nil {
			bad("flavors."+name, "%v", err)
		}
	}
	for i, v := range c.Volumes {
		if _, err := mcpbox.ParseVolume(v); err != nil {
			bad(fmt.Sprintf("volumes[%d]", i), "%v", err)
		}
	}
	if err := c.Network.Validate(); err != nil {
		bad("network", "%v", err)
	}
	if c.EgressMaxConnectionsPerSession < 1 {
		bad("egress_max_connections_per_session", "must be at least 1, got %d", c.EgressMaxConnectionsPerSession)
	}
	if c.EgressMaxConnections < 0 {
		bad("egress_max_connections", "must be 0 (automatic) or more, got %d", c.EgressMaxConnections)
	}
	if c.EgressBytesPerSecond < 0 {
		bad("egress_bytes_per_second", "must be 0 (unbounded) or more, got %d", c.EgressBytesPerSecond)
	}
	for i, p := range c.Pools {
		if p.Size < 0 || p.Size > c.MaxSessions {
			bad(fmt.Sprintf("pools[%d].size", i), "%d is outside 0..max_sessions (%d)", p.Size, c.MaxSessions)
		}
	}
	return errors.Join(errs...)
}

// Flavor converts a file flavor to the domain's.
func (f Flavor) Flavor(name string) mcpbox.Flavor {
	return mcpbox.Flavor{Name: name, CPUs: f.CPUs, MemoryBytes: f.MemoryMB << 20, DiskBytes: f.DiskMB << 20, Pids: f.Pids}
}

// YAML renders the configuration as a file would hold it.
func (c Config) YAML() string {
	b, _ := yaml.Marshal(c)
	return string(b)
}
