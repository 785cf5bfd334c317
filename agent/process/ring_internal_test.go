package process

import (
	"math/rand/v2"
	"testing"
)

// TestRing compares the ring with the obvious slice that keeps the tail,
// over writes of every size around the ring's.
func TestRing(t *testing.T) {
	for _, size := range []int{1, 7, 64, 5000} {
		rnd := rand.New(rand.NewPCG(1, uint64(size)))
		r := ring{max: size}
		var all []byte
		for i := range 500 {
			b := make([]byte, rnd.IntN(3*size+2))
			for j := range b {
				b[j] = 'a' + byte(rnd.IntN(26)) // ASCII: text returns it unchanged
			}
			r.write(b)
			all = append(all, b...)
			want := all[max(0, len(all)-size):]
			if got := r.text(); got != string(want) {
				t.Fatalf("size %d, write %d: kept %q, want %q", size, i, got, want)
			}
			if r.dropped != int64(len(all)-len(want)) {
				t.Fatalf("size %d, write %d: dropped %d, want %d", size, i, r.dropped, len(all)-len(want))
			}
			if cap(r.buf) > size {
				t.Fatalf("size %d: buffer grew to %d", size, cap(r.buf))
			}
		}
	}
}
