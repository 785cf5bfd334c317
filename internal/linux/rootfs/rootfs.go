// Package rootfs builds a sandbox's root file system and makes it the
// calling process's root.
//
// [Build] runs in the sandbox's new mount namespace, as root of its user
// namespace. It attaches a size-limited tmpfs on a scratch directory and
// builds there an overlay whose lower layer is a skeleton written fresh
// (mount points, merged-/usr links, a minimal /etc with the sandbox's
// users) and whose upper layer takes every write, so everything the
// sandbox stores shares the tmpfs's one limit. Onto the overlay go
// read-only binds of the host's /usr and a few /etc files, the
// precompiled kernel drivers, the session's volumes, a fresh /proc with
// what it would reveal of the host masked, and a minimal /dev. [Pivot]
// then makes it the root and detaches the host's. A template's layers
// (layers_linux.go) go beneath the skeleton, in place of the host's /usr
// binds or, for a template based on the host's system, along with them.
//
// What comes from the host comes as descriptors, not names: the sandbox's
// PID 1 runs as a uid that has no right to walk to its scratch directory
// or to the kernel drivers (the state directory is private to its
// owner), and a name could be swapped for a link anyway.
//
// Errors name the step that failed: "pivot_root: operation not permitted".
package rootfs

import "os"

// Options describe one sandbox's root.
type Options struct {
	// Scratch is a directory, open in the sandbox's mount namespace
	// (O_PATH will do), the sandbox's tmpfs is attached on; the root is
	// built in the tmpfs. The host keeps seeing what is beneath.
	Scratch *os.File
	// DiskBytes is the tmpfs's size: all the sandbox may write.
	DiskBytes int64
	// UID owns Home and Workspace (and is their group too).
	UID int
	// Home and Workspace are sandbox paths made for user code.
	Home, Workspace string
	// Kernels is a detached mount tree (mount.Clone), attached read-only
	// at KernelsAt, a sandbox path; none when nil.
	Kernels   *os.File
	KernelsAt string
	// Volumes are host directories bound into the sandbox.
	Volumes []Volume
	// Layers, when not nil, is a detached mount tree (mount.Clone) of a
	// template's layer store: the root is then the overlay of the
	// skeleton on LayerNames (directories in it, top first) instead of
	// the host's /usr (unless HostSystem). See layers_linux.go.
	Layers     *os.File
	LayerNames []string
	// HostSystem, with Layers, keeps the host template's root around the
	// layers (commits of host-template sessions, no system of their
	// own): its skeleton on top of them and the host's /usr and /etc
	// files bound read-only, as in a host-template sandbox.
	HostSystem bool
	// Workdir is made, owned by UID, when not "" (a template's working
	// directory).
	Workdir string
	// KeepDiskFD, when above 2, is where Build leaves a descriptor of the
	// sandbox's tmpfs open (close-on-exec): the host reads the overlay's
	// upper directory through /proc/<pid>/fd/<KeepDiskFD>/upper to commit
	// a session's changes.
	KeepDiskFD int
}

// Volume is a host directory bound into the sandbox.
type Volume struct {
	// Root is the allow-listed host directory HostPath lies beneath.
	Root        string
	HostPath    string
	SandboxPath string
	ReadOnly    bool
}

// String is the mapping as written in config: host:sandbox[:ro].
func (v Volume) String() string {
	s := v.HostPath + ":" + v.SandboxPath
	if v.ReadOnly {
		s += ":ro"
	}
	return s
}
