//go:build linux

// Why not containerd's cgroup1 and cgroup2 packages, when the v3 module is
// already a dependency: they pull in D-Bus, go-systemd, cilium/ebpf and
// logrus (cgroup2's Kill logs through it), none of which this binary
// otherwise needs; their errors drop the failing path or its cause
// (cgroup1's Delete says only "unable to remove paths"); and a group here
// is ten or so file operations that read more plainly written out. The
// module's root package still decides which mode the host runs in.

package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// cpuPeriod is the CFS period in microseconds. It is the kernel's default
// for a new group, so New writes only the quota.
const cpuPeriod = 100000

// killTimeout bounds how long Kill waits for the group to empty.
const killTimeout = 5 * time.Second

// Group is one sandbox's cgroup in every hierarchy of the host. Its methods
// are safe for concurrent use; a Group holds no open files.
type Group struct {
	name string
	dirs []dir // in layout order: v1 hierarchies, then v2
}

// dir is the group's directory in one hierarchy.
type dir struct {
	path string
	hierarchy
}

// New creates the cgroup name (such as "mcpbox/<id>") in every hierarchy and
// sets the limits l wherever their controller lives. It fails if the group
// already exists (errors.Is(err, fs.ErrExist)) or if a limit is asked for
// whose controller no hierarchy carries (errors.ErrUnsupported). On error
// nothing is left behind.
func New(name string, l Limits) (*Group, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := l.check(); err != nil {
		return nil, err
	}
	lay := hostLayout()
	if len(lay.hierarchies) == 0 {
		return nil, fmt.Errorf("cgroup: new %s: no cgroup hierarchy mounted at %s: %w", name, mountRoot, errors.ErrUnsupported)
	}
	for _, need := range l.controllers() {
		if _, ok := lay.carrier(need); !ok {
			return nil, fmt.Errorf("cgroup: new %s: a %s limit needs the %s controller, which no hierarchy carries: %w",
				name, need, need, errors.ErrUnsupported)
		}
	}
	g := &Group{name: name}
	for _, h := range lay.hierarchies {
		d := dir{path: filepath.Join(h.root, name), hierarchy: h}
		if err := makeGroupDir(h, name, d.path); err != nil {
			g.Delete() // removes only the directories this call made
			return nil, err
		}
		g.dirs = append(g.dirs, d)
		if err := d.setLimits(l); err != nil {
			g.Delete()
			return nil, err
		}
	}
	return g, nil
}

// check rejects limits the kernel would refuse with a less helpful error.
func (l Limits) check() error {
	switch {
	case l.CPUs < 0 || math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0):
		return fmt.Errorf("cgroup: invalid CPUs %v", l.CPUs)
	case l.CPUs > 0 && l.CPUs < 0.01:
		return fmt.Errorf("cgroup: CPUs %v is below the kernel's minimum quota of 0.01 CPU", l.CPUs)
	case l.MemoryBytes < 0:
		return fmt.Errorf("cgroup: invalid MemoryBytes %d", l.MemoryBytes)
	case l.Pids < 0:
		return fmt.Errorf("cgroup: invalid Pids %d", l.Pids)
	}
	return nil
}

// controllers lists the controllers the non-zero limits need.
func (l Limits) controllers() []string {
	var c []string
	if l.MemoryBytes > 0 {
		c = append(c, "memory")
	}
	if l.Pids > 0 {
		c = append(c, "pids")
	}
	if l.CPUs > 0 {
		c = append(c, "cpu")
	}
	return c
}

// setLimits writes the limits whose controller this hierarchy carries.
func (d dir) setLimits(l Limits) error {
	if l.MemoryBytes > 0 && d.has("memory") {
		limit, swap, swapValue := "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", l.MemoryBytes
		if d.v2 {
			limit, swap, swapValue = "memory.max", "memory.swap.max", 0
		}
		if err := writeInt(filepath.Join(d.path, limit), l.MemoryBytes); err != nil {
			return err
		}
		// v1 caps memory+swap, v2 swap alone; both files are missing when
		// the kernel does not account swap, and then there is nothing to cap.
		if err := writeInt(filepath.Join(d.path, swap), swapValue); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if l.Pids > 0 && d.has("pids") {
		if err := writeInt(filepath.Join(d.path, "pids.max"), l.Pids); err != nil {
			return err
		}
	}
	if l.CPUs > 0 && d.has("cpu") {
		quota := int64(math.Round(l.CPUs * cpuPeriod))
		var err error
		if d.v2 {
			err = writeFile(filepath.Join(d.path, "cpu.max"), strconv.FormatInt(quota, 10)+" "+strconv.Itoa(cpuPeriod))
		} else {
			err = writeInt(filepath.Join(d.path, "cpu.cfs_quota_us"), quota)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// readyParents holds the parent directories (per hierarchy) this process
// has already created and, on v2, opened to the controllers.
var readyParents sync.Map // string → struct{}

// makeGroupDir creates a group's directory, setting up its parents the
// first time this process uses them, and again if someone removed them.
func makeGroupDir(h hierarchy, name, path string) error {
	key := filepath.Join(h.root, filepath.Dir(name))
	for attempt := 0; ; attempt++ {
		if _, ok := readyParents.Load(key); !ok {
			if err := prepareParents(h, name); err != nil {
				return err
			}
			readyParents.Store(key, struct{}{})
		}
		err := mkdir(path)
		if attempt == 0 && errors.Is(err, fs.ErrNotExist) {
			readyParents.Delete(key)
			continue
		}
		return err
	}
}

// prepareParents creates the parents of name in h. On v2 it also enables
// the controllers in the subtree_control of the root and of every parent:
// a group only gets memory.max and friends if its parent delegates them.
func prepareParents(h hierarchy, name string) error {
	rel := filepath.Dir(name)
	if err := os.MkdirAll(filepath.Join(h.root, rel), 0o755); err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	if !h.v2 || len(h.controllers) == 0 {
		return nil
	}
	enable := "+" + strings.Join(h.controllers, " +")
	dirs := []string{h.root}
	if rel != "." {
		p := h.root
		for part := range strings.SplitSeq(rel, "/") {
			p = filepath.Join(p, part)
			dirs = append(dirs, p)
		}
	}
	for _, d := range dirs {
		if err := writeFile(filepath.Join(d, "cgroup.subtree_control"), enable); err != nil {
			return err
		}
	}
	return nil
}

// Load returns the group name created earlier, by this process or one
// before it, in whichever hierarchies it still exists. If it exists in none,
// the error matches errors.Is(err, fs.ErrNotExist).
func Load(name string) (*Group, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	g := &Group{name: name}
	for _, h := range hostLayout().hierarchies {
		d := dir{path: filepath.Join(h.root, name), hierarchy: h}
		_, err := os.Stat(d.path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("cgroup: load %s: %w", name, err)
		}
		g.dirs = append(g.dirs, d)
	}
	if len(g.dirs) == 0 {
		return nil, fmt.Errorf("cgroup: load %s: no hierarchy under %s has it: %w", name, mountRoot, fs.ErrNotExist)
	}
	return g, nil
}

// Name returns the group's name, such as "mcpbox/<id>".
func (g *Group) Name() string { return g.name }

// Add moves the process pid, with all its threads, into the group in every
// hierarchy. Its future children start there.
func (g *Group) Add(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("cgroup: add %d to %s: invalid pid", pid, g.name)
	}
	s := strconv.Itoa(pid)
	for _, d := range g.dirs {
		path := filepath.Join(d.path, "cgroup.procs")
		err := writeFile(path, s)
		// EINVAL while one of the process's threads is still being
		// created (runc retries the same way); it passes in a moment.
		for i := 0; i < 5 && errors.Is(err, syscall.EINVAL); i++ {
			time.Sleep(10 * time.Millisecond)
			err = writeFile(path, s)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Pids returns the processes in the group, in any hierarchy, sorted.
func (g *Group) Pids() ([]int, error) {
	var all []int
	for _, d := range g.dirs {
		pids, err := readPids(filepath.Join(d.path, "cgroup.procs"))
		if err != nil {
			return nil, err
		}
		all = append(all, pids...)
	}
	slices.Sort(all)
	return slices.Compact(all), nil
}

// Kill sends SIGKILL to every process in the group until it is empty,
// including processes forked meanwhile, and gives up after 5 seconds.
func (g *Group) Kill() error {
	deadline := time.Now().Add(killTimeout)
	wait := time.Millisecond
	for {
		pids, err := g.Pids()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup: kill %s: %d processes still there after %v: %v", g.name, len(pids), killTimeout, pids)
		}
		if err := g.signal(); err != nil {
			return err
		}
		// Killed processes leave their cgroups as they exit, which for a
		// large address space takes a few milliseconds.
		time.Sleep(wait)
		wait = min(2*wait, 20*time.Millisecond)
	}
}

// signal sends SIGKILL to every process in the group once. On v2 (Linux
// 5.14+) writing cgroup.kill does it in the kernel, with forks blocked.
// Processes cgroup.kill did not reach (all of them on a v1-only host or an
// older kernel) are killed one by one, with the group frozen where it can
// be, so that none forks between the listing and the kill.
func (g *Group) signal() error {
	var covered []int // pids cgroup.kill has signalled
	killed := false
	for _, d := range g.dirs {
		if !d.v2 {
			continue
		}
		err := writeFile(filepath.Join(d.path, "cgroup.kill"), "1")
		if errors.Is(err, fs.ErrNotExist) {
			break // before Linux 5.14
		}
		if err != nil {
			return err
		}
		killed = true
		if covered, err = readPids(filepath.Join(d.path, "cgroup.procs")); err != nil {
			return err
		}
	}
	var rest []int
	for _, d := range g.dirs {
		if d.v2 && killed {
			continue
		}
		pids, err := readPids(filepath.Join(d.path, "cgroup.procs"))
		if err != nil {
			return err
		}
		for _, pid := range pids {
			if !slices.Contains(covered, pid) && !slices.Contains(rest, pid) {
				rest = append(rest, pid)
			}
		}
	}
	if len(rest) == 0 {
		if killed {
			// A process frozen by the v1 freezer (a paused sandbox) dies
			// of cgroup.kill's SIGKILL only once thawed.
			return g.freeze(false)
		}
		return nil
	}
	if err := g.freeze(true); err != nil {
		return err
	}
	for _, pid := range rest {
		// ESRCH: it exited since the listing.
		if err := unix.Kill(pid, unix.SIGKILL); err != nil && err != unix.ESRCH {
			g.freeze(false)
			return fmt.Errorf("cgroup: kill %d in %s: %w", pid, g.name, err)
		}
	}
	// A v1-frozen process dies only once thawed.
	return g.freeze(false)
}

// freeze freezes or thaws the group with the v1 freezer, or else with v2's
// cgroup.freeze (Linux 5.2+). It does not wait for the freeze to complete:
// a process that forks meanwhile is caught by Kill's next round.
func (g *Group) freeze(frozen bool) error {
	v1, v2 := "THAWED", "0"
	if frozen {
		v1, v2 = "FROZEN", "1"
	}
	for _, d := range g.dirs {
		if d.has("freezer") {
			return writeFile(filepath.Join(d.path, "freezer.state"), v1)
		}
	}
	for _, d := range g.dirs {
		if d.v2 {
			err := writeFile(filepath.Join(d.path, "cgroup.freeze"), v2)
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
	}
	return nil
}

// Delete removes the group from every hierarchy. The group must be empty
// (see Kill). Deleting a group that is already gone is not an error.
func (g *Group) Delete() error {
	var errs []error
	for _, d := range slices.Backward(g.dirs) {
		if err := rmdir(d.path); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Stats reads the group's current usage.
func (g *Group) Stats() (Stats, error) {
	s := Stats{MemoryBytes: -1, Pids: -1, OOMKills: -1}
	var err error
	for _, d := range g.dirs {
		if d.has("memory") {
			usage, events, oomKey := "memory.usage_in_bytes", "memory.oom_control", "oom_kill"
			if d.v2 {
				usage, events = "memory.current", "memory.events"
			}
			if s.MemoryBytes, err = readInt(filepath.Join(d.path, usage)); err != nil {
				return Stats{}, err
			}
			// oom_kill is in memory.oom_control since Linux 4.13.
			if n, err := readKey(filepath.Join(d.path, events), oomKey); err == nil {
				s.OOMKills = n
			}
		}
		if d.has("pids") {
			if s.Pids, err = readInt(filepath.Join(d.path, "pids.current")); err != nil {
				return Stats{}, err
			}
		}
	}
	return s, nil
}
