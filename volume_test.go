package mcpbox_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpbox/mcpbox"
)

func TestParseVolume(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want "" means refused
	}{
		{"/data:/mnt/data", "/data:/mnt/data"},
		{"/data:/mnt/data:ro", "/data:/mnt/data:ro"},
		{"/data:/mnt/data:rw", "/data:/mnt/data"},
		{"data:/mnt", ""},
		{"/data:/usr/x", ""},
		{"/data:/", ""},
		{"/data/../etc:/mnt", ""},
		{"/data:/mnt:rx", ""},
		{"/a:/b:/c:ro", ""},
		{"", ""},
	} {
		v, err := mcpbox.ParseVolume(tc.in)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%q was accepted as %s", tc.in, v)
		case tc.want != "" && err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case tc.want != "" && v.String() != tc.want:
			t.Errorf("%q parsed as %s, want %s", tc.in, v, tc.want)
		}
		if err != nil && mcpbox.ErrorCode(err) != mcpbox.EINVALID {
			t.Errorf("%q: %v is not INVALID_ARGUMENT", tc.in, err)
		}
	}
}

// FuzzParseVolume: a volume spec a caller sends never panics, and one that
// is accepted has clean absolute paths outside the system's directories
// and says the same thing when written back.
func FuzzParseVolume(f *testing.F) {
	for _, s := range []string{"/data:/mnt/data", "/d:/m:ro", "/a/../b:/c", ":/", "/x:/proc/1", "/x:/usrx", "\x00:/a", "/a:/b:rw:ro"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := mcpbox.ParseVolume(s)
		if err != nil {
			if mcpbox.ErrorCode(err) != mcpbox.EINVALID {
				t.Errorf("%q: %v is not INVALID_ARGUMENT", s, err)
			}
			return
		}
		for _, p := range []string{v.HostPath, v.SandboxPath} {
			if !filepath.IsAbs(p) || filepath.Clean(p) != p {
				t.Errorf("%q accepted with path %q", s, p)
			}
		}
		for _, sys := range []string{"/usr", "/etc", "/proc", "/dev", "/sys", "/bin", "/lib"} {
			if v.SandboxPath == sys || strings.HasPrefix(v.SandboxPath, sys+"/") || v.SandboxPath == "/" {
				t.Errorf("%q mounts over %s", s, v.SandboxPath)
			}
		}
		again, err := mcpbox.ParseVolume(v.String())
		if err != nil || again != v {
			t.Errorf("%q → %s → %+v, %v", s, v, again, err)
		}
	})
}
