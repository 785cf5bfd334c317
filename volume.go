package mcpbox

import (
	"path/filepath"
	"strings"
)

// Volume maps a host directory into a sandbox.
type Volume struct {
	HostPath    string `json:"host_path"`
	SandboxPath string `json:"sandbox_path"`
	ReadOnly    bool   `json:"read_only,omitempty"`
	// Root is the allow-listed host directory HostPath lies beneath,
	// filled in by the manager once it has checked the mapping. A runtime
	// opens HostPath beneath Root without following symlinks, so a link
	// swapped in after the check cannot redirect the bind.
	Root string `json:"root,omitempty"`
}

// String is the mapping as written in config: host:sandbox[:ro].
func (v Volume) String() string {
	s := v.HostPath + ":" + v.SandboxPath
	if v.ReadOnly {
		s += ":ro"
	}
	return s
}

// reservedSandboxPaths are where a volume may not be mounted: the system
// the sandbox runs on.
var reservedSandboxPaths = []string{"/", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/proc", "/dev", "/sys"}

// ParseVolume reads host_path:sandbox_path[:ro|:rw].
func ParseVolume(s string) (Volume, error) {
	parts := strings.Split(s, ":")
	var v Volume
	switch {
	case len(parts) == 2:
	case len(parts) == 3 && (parts[2] == "ro" || parts[2] == "rw"):
		v.ReadOnly = parts[2] == "ro"
	default:
		return v, Errorf(EINVALID, "volume %q: expected host_path:sandbox_path[:ro]", s)
	}
	v.HostPath, v.SandboxPath = parts[0], parts[1]
	return v, v.Validate()
}

// Validate checks the shape of a mapping; whether the host path is allowed
// is the manager's to say.
func (v Volume) Validate() error {
	for _, p := range []string{v.HostPath, v.SandboxPath} {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return Errorf(EINVALID, "volume %s: %q must be an absolute, clean path", v, p)
		}
	}
	for _, r := range reservedSandboxPaths {
		if v.SandboxPath == r || (r != "/" && strings.HasPrefix(v.SandboxPath, r+"/")) {
			return Errorf(EINVALID, "volume %s: cannot mount over %s inside the sandbox", v, r).
				WithSuggestion("mount under /mnt, /data or /workspace")
		}
	}
	return nil
}
