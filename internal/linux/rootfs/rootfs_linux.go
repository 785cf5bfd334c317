package rootfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/mcpbox/mcpbox/internal/linux/mount"
	"github.com/mcpbox/mcpbox/internal/linux/safepath"
)

// Host paths bound read-only into every sandbox. /usr is the system; the
// /etc entries are what the dynamic loader, TLS, Python and
// Debian's matplotlib (its matplotlibrc lives in /etc) need.
var (
	usrDirs  = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}
	etcBinds = []string{"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "ssl",
		"ca-certificates", "python3", "python3.11", "mime.types", "os-release", "localtime", "matplotlibrc"}
	// Masked like runc does: kernel memory, keys and timers reveal the host.
	procMasked   = []string{"kcore", "keys", "key-users", "timer_list", "sched_debug", "latency_stats", "kallsyms", "kpagecount", "kpageflags", "kpagecgroup", "config.gz"}
	procMaskDirs = []string{"acpi", "scsi", "asound", "driver"}
	procReadOnly = []string{"sys", "sysrq-trigger", "irq", "bus", "fs"}
	devNodes     = []string{"null", "zero", "full", "random", "urandom", "tty"}
)

func step(name string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", name, err)
}

// Build assembles the sandbox root in a tmpfs it attaches on o.Scratch
// and returns the root, open O_PATH, for Pivot.
func Build(o Options) (*os.File, error) {
	if err := mount.MakePrivate("/"); err != nil {
		return nil, err
	}
	inodes := max(o.DiskBytes/8192, 4096)
	disk, err := mount.Tmpfs(o.DiskBytes, inodes, 0o755)
	if err != nil {
		return nil, err
	}
	defer disk.Close()
	if err := mount.Attach(disk, o.Scratch, false); err != nil {
		return nil, err
	}
	// Everything below is named through the tmpfs's own descriptor: the
	// scratch directory's host path leads through directories this
	// process may not search, and lookups through the scratch directory
	// would find what the tmpfs covers.
	base := "/proc/self/fd/" + strconv.Itoa(int(disk.Fd()))
	lower, upper, work, root := filepath.Join(base, "lower"), filepath.Join(base, "upper"),
		filepath.Join(base, "work"), filepath.Join(base, "root")
	for _, d := range []string{lower, upper, work, root} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, step("mkdir", err)
		}
	}
	if err := buildLower(lower, o); err != nil {
		return nil, err
	}
	if o.Layers != nil {
		if err := mountLayers(disk, o); err != nil {
			return nil, err
		}
	} else if err := mount.Mount("overlay", root, "overlay", unix.MS_NOSUID|unix.MS_NODEV,
		fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)); err != nil {
		return nil, err
	}
	if o.KeepDiskFD > 2 {
		if err := step("keep the disk open", unix.Dup3(int(disk.Fd()), o.KeepDiskFD, unix.O_CLOEXEC)); err != nil {
			return nil, err
		}
	}
	if err := bindHost(root, o); err != nil {
		return nil, err
	}
	if err := bindVolumes(root, o.Volumes); err != nil {
		return nil, err
	}
	if err := mountProc(filepath.Join(root, "proc")); err != nil {
		return nil, err
	}
	if err := mountDev(filepath.Join(root, "dev")); err != nil {
		return nil, err
	}
	r, err := os.OpenFile(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	return r, step("open new root", err)
}

// hostSystem reports whether the root's system is the host's: the host
// template, or a template based on it. Another template brings its own.
func (o *Options) hostSystem() bool { return o.Layers == nil || o.HostSystem }

// bindHost binds the host's system directories, a few /etc files and the
// kernel drivers read-only into root. Their mount points are the
// skeleton's, the top lower layer: no template layer beneath can make
// one a link that leads elsewhere.
func bindHost(root string, o Options) error {
	for _, d := range usrDirs {
		if !o.hostSystem() {
			break
		}
		src := "/" + d
		fi, err := os.Lstat(src)
		if err != nil || fi.Mode()&os.ModeSymlink != 0 || !fi.IsDir() {
			continue // a merged-/usr symlink, recreated in buildLower
		}
		if err := mount.BindReadOnly(src, filepath.Join(root, d)); err != nil {
			return err
		}
	}
	for _, e := range etcBinds {
		src := filepath.Join("/etc", e)
		if _, err := os.Stat(src); err != nil || !o.hostSystem() {
			continue
		}
		if err := mount.BindReadOnly(src, filepath.Join(root, "etc", e)); err != nil {
			return err
		}
	}
	if o.Kernels != nil {
		p := filepath.Join(root, o.KernelsAt)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return step("mkdir "+o.KernelsAt, err)
		}
		dst, err := os.OpenFile(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return step("open "+o.KernelsAt, err)
		}
		defer dst.Close()
		if err := mount.Attach(o.Kernels, dst, true); err != nil {
			return err
		}
	}
	return nil
}

// buildLower writes the skeleton every sandbox starts from: mount points,
// merged-/usr symlinks, and a minimal /etc with the sandbox's users. A
// template's skeleton, unless it is based on the host's system, has no
// mount points for the host's and takes its users from the image.
func buildLower(lower string, o Options) error {
	dirs := map[string]os.FileMode{
		"etc": 0o755, "home": 0o755, "root": 0o700, "proc": 0o555, "dev": 0o755,
		"tmp": 0o1777 | os.ModeSticky, "var": 0o755, "var/tmp": 0o1777 | os.ModeSticky,
		"opt": 0o755, "run": 0o755, "mnt": 0o755, "usr": 0o755,
	}
	for d, mode := range dirs {
		p := filepath.Join(lower, d)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return step("mkdir "+d, err)
		}
		if err := os.Chmod(p, mode); err != nil {
			return step("chmod "+d, err)
		}
	}
	if !o.hostSystem() {
		return buildTemplateLower(lower, o)
	}
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
	for _, d := range usrDirs[1:] {
		src := "/" + d
		fi, err := os.Lstat(src)
		if err != nil {
			continue
		}
		dst := filepath.Join(lower, d)
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(src)
			if err != nil {
				return step("readlink "+src, err)
			}
			if err := os.Symlink(target, dst); err != nil {
				return step("symlink "+d, err)
			}
		} else if err := os.Mkdir(dst, 0o755); err != nil {
			return step("mkdir "+d, err)
		}
	}
	for _, e := range etcBinds {
		fi, err := os.Stat(filepath.Join("/etc", e))
		if err != nil {
			continue
		}
		p := filepath.Join(lower, "etc", e)
		if fi.IsDir() {
			err = os.Mkdir(p, 0o755)
		} else {
			err = os.WriteFile(p, nil, 0o644)
		}
		if err != nil {
			return step("create mount point /etc/"+e, err)
		}
	}
	u := strconv.Itoa(o.UID)
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/bash\n" +
			"user:x:" + u + ":" + u + ":user:" + o.Home + ":/bin/bash\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"etc/group":         "root:x:0:\nuser:x:" + u + ":\nnogroup:x:65534:\n",
		"etc/hosts":         "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"etc/hostname":      "sandbox\n",
		"etc/resolv.conf":   "# This sandbox has no network of its own.\n",
		"etc/nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n",
	}
	if o.UID == 0 { // rootless: one uid, so "user" would shadow root
		files["etc/passwd"] = "root:x:0:0:root:" + o.Home + ":/bin/bash\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
		files["etc/group"] = "root:x:0:\nnogroup:x:65534:\n"
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(lower, name), []byte(content), 0o644); err != nil {
			return step("write /"+name, err)
		}
	}
	return nil
}

// bindVolumes binds each volume's host directory at its sandbox path.
// Neither path is used by name once checked: the host directory is opened
// beneath its root and the mount point made beneath the new root, both
// without following a link (see internal/linux/safepath), and the bind
// goes from one descriptor to the other. A link swapped into the host
// path after the manager checked it, or planted in one volume where
// another's mount point must be made, fails the volume instead of
// redirecting it.
func bindVolumes(root string, volumes []Volume) error {
	for _, v := range volumes {
		for _, w := range volumes {
			if v != w && (v.SandboxPath == w.SandboxPath || strings.HasPrefix(v.SandboxPath, w.SandboxPath+"/")) {
				return fmt.Errorf("volume %s: its sandbox path is inside volume %s's (volumes may not nest)", v, w)
			}
		}
	}
	r, err := os.OpenFile(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return step("open new root", err)
	}
	defer r.Close()
	for _, v := range volumes {
		if err := bindVolume(r, v); err != nil {
			return fmt.Errorf("volume %s: %w", v, err)
		}
	}
	return nil
}

func bindVolume(root *os.File, v Volume) error {
	// Without a root (a record older than roots), the whole path must be
	// free of links: what the manager checked by name is what is bound.
	hostRoot, what := v.Root, "open host path beneath "+v.Root
	if hostRoot == "" {
		hostRoot, what = "/", "open host path (no root given: no link allowed anywhere on it)"
	}
	rel, err := safepath.Rel(hostRoot, v.HostPath)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	// The root is the operator's allow-list entry, trusted as named.
	hr, err := os.OpenFile(hostRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open volume root: %w", err)
	}
	defer hr.Close()
	src, err := safepath.OpenDir(hr, rel)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer src.Close()
	dst, err := safepath.MkdirAll(root, strings.TrimPrefix(v.SandboxPath, "/"), 0o755)
	if err != nil {
		return fmt.Errorf("make mount point: %w", err)
	}
	defer dst.Close()
	return mount.BindFD(src, dst, v.ReadOnly)
}

// mountProc mounts a proc of the sandbox's own pid namespace and hides
// what it would reveal about the host.
func mountProc(dir string) error {
	if err := mount.Mount("proc", dir, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	for _, f := range procMasked {
		p := filepath.Join(dir, f)
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if err := mount.Mount("/dev/null", p, "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	for _, d := range procMaskDirs {
		p := filepath.Join(dir, d)
		if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
			continue
		}
		if err := mount.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0"); err != nil {
			return err
		}
	}
	for _, d := range procReadOnly {
		p := filepath.Join(dir, d)
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if err := mount.BindReadOnly(p, p); err != nil {
			return err
		}
	}
	return nil
}

// mountDev builds a minimal /dev: a few host device nodes bound in (a user
// namespace cannot mknod), a private devpts, and a small /dev/shm.
func mountDev(dir string) error {
	if err := mount.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755"); err != nil {
		return err
	}
	for _, n := range devNodes {
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, nil, 0o666); err != nil {
			return step("create /dev/"+n, err)
		}
		if err := mount.Mount("/dev/"+n, p, "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	for _, d := range []string{"pts", "shm"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			return step("mkdir /dev/"+d, err)
		}
	}
	if err := mount.Mount("devpts", filepath.Join(dir, "pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC,
		"newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return err
	}
	if err := mount.Mount("tmpfs", filepath.Join(dir, "shm"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV,
		"size=64m,mode=1777"); err != nil {
		return err
	}
	links := map[string]string{"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			return step("symlink /dev/"+name, err)
		}
	}
	return nil
}

// Pivot makes root (from Build) the filesystem root and detaches the
// host's.
func Pivot(root *os.File) error {
	if err := step("chdir new root", unix.Fchdir(int(root.Fd()))); err != nil {
		return err
	}
	// pivot_root(".", ".") stacks the old root on the new one, so no
	// directory for it is needed inside the sandbox (as runc does).
	if err := step("pivot_root", unix.PivotRoot(".", ".")); err != nil {
		return err
	}
	if err := step("detach old root", unix.Unmount(".", unix.MNT_DETACH)); err != nil {
		return err
	}
	return step("chdir /", unix.Chdir("/"))
}
