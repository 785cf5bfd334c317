// Package caps empties a thread's capability bounding set.
package caps

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// DropBoundingSet empties the calling thread's capability bounding set,
// so nothing it executes can hold a capability again, whatever its uid.
// The set is per thread: call it on every thread that forks user code.
func DropBoundingSet() error {
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("drop capability %d: %w", c, err)
		}
	}
	return nil
}
