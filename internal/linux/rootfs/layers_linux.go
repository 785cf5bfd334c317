package rootfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/mcpbox/mcpbox/internal/linux/mount"
)

// A template's root: the host hands PID 1 a read-only copy of the layer
// store's mount (Options.Layers), attached in the tmpfs at layers/; the
// overlay's lower layers are the skeleton on top of the template's layers
// (their names in it, top first). Whiteouts and opaque directories are in
// the user.overlay.* form ("userxattr"): the trusted.* one is out of reach
// of a user namespace. Lower directories are named relative to the
// tmpfs (this process's working directory while it mounts), which keeps
// the mount's options, at most a page, short enough for ~50 layers.
//
// A template based on the host's system (Options.HostSystem) is mounted
// the same way, its skeleton the host template's: the layers then hold
// only what sessions wrote, and the host's /usr is bound on top as in any
// host-template sandbox.

var layerName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

func mountLayers(disk *os.File, o Options) error {
	if len(o.LayerNames) == 0 {
		return errors.New("template has no layers")
	}
	base := "/proc/self/fd/" + strconv.Itoa(int(disk.Fd()))
	if err := os.Mkdir(filepath.Join(base, "layers"), 0o755); err != nil {
		return step("mkdir layers", err)
	}
	dst, err := os.OpenFile(filepath.Join(base, "layers"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return step("open layers", err)
	}
	defer dst.Close()
	if err := mount.Attach(o.Layers, dst, true); err != nil {
		return err
	}
	lower := []string{"lower"}
	for _, n := range o.LayerNames {
		if !layerName.MatchString(n) || n == "." || n == ".." {
			return fmt.Errorf("invalid layer name %q", n)
		}
		if _, err := os.Stat(filepath.Join(base, "layers", n)); err != nil {
			return step("layer "+n, err)
		}
		lower = append(lower, "layers/"+n)
	}
	opts := "lowerdir=" + strings.Join(lower, ":") + ",upperdir=upper,workdir=work,userxattr"
	if len(opts) >= os.Getpagesize() {
		return fmt.Errorf("template has %d layers, more than an overlay mount can name (about 50)", len(o.LayerNames))
	}
	if err := step("chdir to the sandbox's disk", unix.Fchdir(int(disk.Fd()))); err != nil {
		return err
	}
	defer unix.Chdir("/")
	return mount.Mount("overlay", "root", "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts)
}

// buildTemplateLower is buildLower's part for a template: the sandbox's
// own directories and the /etc files that describe the sandbox, not the
// image (hosts, hostname, resolv.conf). Users come from the image's
// /etc/passwd, completed by EnsureUser once the root is the sandbox's.
func buildTemplateLower(lower string, o Options) error {
	for _, d := range []string{o.Home, o.Workspace, o.Workdir} {
		if d == "" {
			continue
		}
		p := filepath.Join(lower, filepath.Clean("/"+d))
		if err := os.MkdirAll(p, 0o755); err != nil {
			return step("mkdir "+d, err)
		}
		if err := os.Chown(p, o.UID, o.UID); err != nil {
			return step("chown "+d, err)
		}
	}
	files := map[string]string{
		"etc/hosts":       "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"etc/hostname":    "sandbox\n",
		"etc/resolv.conf": "# This sandbox has no network of its own.\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(lower, name), []byte(content), 0o644); err != nil {
			return step("write /"+name, err)
		}
	}
	return nil
}

// EnsureUser makes uid a user of the sandbox, named "user" (or "sandbox"
// when the image has a "user" already) with home as its home, unless the
// image's /etc/passwd has it; the same for its group. It runs once the
// root is the sandbox's: nothing it touches can lead to the host.
func EnsureUser(uid int, home string) error {
	id := strconv.Itoa(uid)
	for _, f := range []struct{ path, line string }{
		{"/etc/passwd", ":x:" + id + ":" + id + ":user:" + home + ":/bin/sh\n"},
		{"/etc/group", ":x:" + id + ":\n"},
	} {
		old, err := readRegular(f.path)
		if err != nil {
			return step("read "+f.path, err)
		}
		name, has := "user", false
		sc := bufio.NewScanner(bytes.NewReader(old))
		for sc.Scan() {
			fields := strings.Split(sc.Text(), ":")
			if len(fields) > 2 && fields[2] == id {
				has = true
			}
			if len(fields) > 0 && fields[0] == "user" {
				name = "sandbox"
			}
		}
		if has {
			continue
		}
		if len(old) > 0 && old[len(old)-1] != '\n' {
			old = append(old, '\n')
		}
		if uid == 0 {
			name = "root"
		}
		// A new file, not a write through whatever the image put there.
		os.Remove(f.path)
		if err := os.WriteFile(f.path, append(old, name+f.line...), 0o644); err != nil {
			return step("write "+f.path, err)
		}
	}
	return nil
}

// readRegular reads path if it is a regular file; anything else (absent,
// a link, a device) reads as empty.
func readRegular(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ELOOP) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() > 1<<20 {
		return nil, nil
	}
	b := make([]byte, 0, 4096)
	buf := bytes.NewBuffer(b)
	_, err = buf.ReadFrom(f)
	return buf.Bytes(), err
}
