// Package cgroup puts each sandbox in its own control groups and limits its
// memory, tasks and CPU there.
//
// A [Group] is one sandbox's cgroup in every hierarchy this host offers:
// on cgroup v1 the memory, pids, cpu and freezer hierarchies, on cgroup v2
// the unified tree, and on a hybrid host (v1 controllers plus a cgroup2
// mount without them, at /sys/fs/cgroup/unified) both. Limits go wherever
// their controller lives; the v2 tree, even without controllers, tracks the
// processes and offers cgroup.kill.
//
// Groups live at the root of each hierarchy under a name such as
// "mcpbox/<id>". They are leaves: mcpbox does not delegate them to the
// sandbox, which sees them through its cgroup namespace but cannot write
// to them. Parents such as "mcpbox" are created on first use and never
// removed.
//
// Creating a group is on the sandbox start path, so [New] is a handful of
// mkdir and write calls: the host's layout is probed once per process and
// parents are set up once.
package cgroup

// Limits are the resource limits of one sandbox. A zero field means no
// limit; a limit this host cannot enforce makes New fail rather than run
// the sandbox unlimited.
type Limits struct {
	// CPUs is CPU time as a number of CPUs (0.5 is half of one CPU), as a
	// CFS quota over a 100 ms period. At least 0.01.
	CPUs float64
	// MemoryBytes caps the group's memory. Swap is capped at zero where
	// the kernel accounts it, so the limit cannot be dodged by swapping.
	MemoryBytes int64
	// Pids caps the number of tasks (processes and threads).
	Pids int64
}

// Stats is a snapshot of a group's usage. A field is -1 when no hierarchy
// of the group reports it.
type Stats struct {
	MemoryBytes int64 // memory in use, page cache included
	Pids        int64 // tasks (processes and threads)
	OOMKills    int64 // processes the OOM killer killed in the group
}

// Info describes what this host offers, for `mcpbox doctor`.
type Info struct {
	// Version is "v1", "v2", "hybrid" (v1 controllers beside a cgroup2
	// mount) or "none".
	Version string
	// Controllers tells, for "memory", "pids", "cpu" and "freezer", whether
	// a hierarchy carries the controller and this process may write to it.
	Controllers map[string]bool
	// Unified is the cgroup2 mount point, or "" if there is none.
	Unified string
}
