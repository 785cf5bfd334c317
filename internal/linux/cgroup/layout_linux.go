//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	cgroups "github.com/containerd/cgroups/v3"
	"golang.org/x/sys/unix"
)

// mountRoot is where hosts mount their cgroup hierarchies.
const mountRoot = "/sys/fs/cgroup"

// v1Controllers are the v1 hierarchies a group joins, in the order New
// creates them. cpuset is left out: a new cpuset group is unusable until
// cpus and mems are copied into it, and the cpu quota is what we limit.
var v1Controllers = []string{"memory", "pids", "cpu", "freezer"}

// v2Controllers are the controllers a group enables on cgroup v2.
var v2Controllers = []string{"memory", "pids", "cpu"}

// hierarchy is one mounted cgroup tree.
type hierarchy struct {
	root        string   // mount point, e.g. /sys/fs/cgroup/memory
	v2          bool     // cgroup2
	controllers []string // the ones of v1Controllers or v2Controllers it carries
}

func (h hierarchy) has(controller string) bool { return slices.Contains(h.controllers, controller) }

// layout is what this host mounts, probed once per process: mounts do not
// change under a running mcpbox, and probing on every New would double
// its cost.
type layout struct {
	version     string
	hierarchies []hierarchy // v1 in v1Controllers order, then v2
}

var hostLayout = sync.OnceValue(func() layout { return probeLayout(mountRoot) })

// probeLayout uses containerd's cgroups.Mode for the version and the v1
// convention it shares with containerd and systemd: hierarchy "x" is
// mounted at <root>/x (a symlink when controllers are co-mounted).
func probeLayout(root string) layout {
	var l layout
	var unified string
	switch cgroups.Mode() {
	case cgroups.Unified:
		l.version, unified = "v2", root
	case cgroups.Hybrid:
		l.version, unified = "hybrid", filepath.Join(root, "unified")
	case cgroups.Legacy:
		l.version = "v1"
	default:
		l.version = "none"
		return l
	}
	seen := map[string]int{} // resolved mount → index in l.hierarchies
	for _, c := range v1Controllers {
		dir := filepath.Join(root, c)
		var st unix.Statfs_t
		if unix.Statfs(dir, &st) != nil || st.Type != unix.CGROUP_SUPER_MAGIC {
			continue
		}
		resolved, err := filepath.EvalSymlinks(dir)
		if err != nil {
			continue
		}
		if i, ok := seen[resolved]; ok {
			l.hierarchies[i].controllers = append(l.hierarchies[i].controllers, c)
			continue
		}
		seen[resolved] = len(l.hierarchies)
		l.hierarchies = append(l.hierarchies, hierarchy{root: dir, controllers: []string{c}})
	}
	if unified != "" {
		h := hierarchy{root: unified, v2: true}
		if b, err := os.ReadFile(filepath.Join(unified, "cgroup.controllers")); err == nil {
			for _, c := range strings.Fields(string(b)) {
				if slices.Contains(v2Controllers, c) {
					h.controllers = append(h.controllers, c)
				}
			}
		}
		l.hierarchies = append(l.hierarchies, h)
	}
	return l
}

// carrier returns the hierarchy that carries controller, if any. A
// controller is bound to one hierarchy at a time, v1 or v2.
func (l layout) carrier(controller string) (hierarchy, bool) {
	for _, h := range l.hierarchies {
		if h.has(controller) {
			return h, true
		}
	}
	return hierarchy{}, false
}

// Probe reports what this host offers. It creates nothing.
func Probe() Info {
	l := hostLayout()
	info := Info{Version: l.version, Controllers: map[string]bool{}}
	for _, c := range v1Controllers {
		h, ok := l.carrier(c)
		// W_OK also catches a read-only mount (EROFS), as inside many
		// containers.
		info.Controllers[c] = ok && unix.Access(h.root, unix.W_OK) == nil
	}
	for _, h := range l.hierarchies {
		if h.v2 {
			info.Unified = h.root
		}
	}
	return info
}

// List returns the names of the groups directly under prefix (such as
// "mcpbox") in any hierarchy, sorted, so leftovers of a crash can be found
// and deleted.
func List(prefix string) ([]string, error) {
	if err := checkName(prefix); err != nil {
		return nil, err
	}
	var names []string
	for _, h := range hostLayout().hierarchies {
		dir := filepath.Join(h.root, prefix)
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		for _, e := range entries {
			if e.IsDir() {
				names = append(names, prefix+"/"+e.Name())
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// checkName accepts relative, clean paths such as "mcpbox/abc": a name is
// joined to every hierarchy's root and must stay below it.
func checkName(name string) error {
	if name == "" || !filepath.IsLocal(name) || filepath.Clean(name) != name {
		return fmt.Errorf("cgroup: invalid group name %q: want a clean relative path such as mcpbox/<id>", name)
	}
	return nil
}
