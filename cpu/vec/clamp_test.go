package vec

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestAddClamp: every kernel and every combination of steps gives the
// bits of Go's +, max and min applied one after the other (the single-op
// kernels' semantics, NaN payloads included), on every length of the
// table (whole vectors, the unrolled loop and masked tails), in place and
// not, with special values in the input and as the bias.
func TestAddClamp(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, k := range availableKernels() {
		for combo := range 8 {
			add, hasLo, hasHi := combo&1 != 0, combo&2 != 0, combo&4 != 0
			for _, n := range lengths {
				a := randVec(rng, n, nil)
				s := specials[rng.IntN(len(specials))]
				if rng.IntN(2) == 0 {
					s = randVal(rng)
				}
				lo, hi := float32(0), float32(6)
				if rng.IntN(2) == 0 {
					lo, hi = -0.5, 0.25
				}
				want := make([]float32, n)
				for i, x := range a {
					if add {
						x += s
					}
					if hasLo {
						x = max(x, lo)
					}
					if hasHi {
						x = min(x, hi)
					}
					want[i] = x
				}
				what := fmt.Sprintf("%v/add=%v,lo=%v,hi=%v/n=%d/s=%v", k, add, hasLo, hasHi, n, s)
				d, guardOK := newOut(t, n)
				clamp(k, d, a, s, lo, hi, add, hasLo, hasHi)
				check(t, what, d, want, false, a)
				guardOK(what)
				inPlace := append([]float32(nil), a...)
				clamp(k, inPlace, inPlace, s, lo, hi, add, hasLo, hasHi)
				check(t, what+"/inplace", inPlace, want, false, a)
			}
		}
	}
}
