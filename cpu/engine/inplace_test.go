package engine

import (
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"math/rand/v2"
)

// TestFusedInPlace runs fused regions over a reduction's result (a
// buffer the run owns and the region reads last), which a region may
// overwrite with its output, and compares with simplego bit for bit: read
// several times element for element (written over), read transposed only
// or also transposed (must not be), a scalar read as [1] (must not be:
// the buffer keeps its shape), and regions with two outputs (must not
// be). Faults injected once: dropping the strides condition of
// inPlaceLoad breaks "transposed", comparing sizes instead of dimensions
// "a scalar as [1]".
func TestFusedInPlace(t *testing.T) {
	e, oracle := newPair(t)
	rng := rand.New(rand.NewPCG(5, 6))
	s, s3 := shapes.Make(dtypes.Float32, 64, 64), shapes.Make(dtypes.Float32, 64, 64, 3)
	a, b := randF32(rng, s.Size()), randF32(rng, s3.Size())
	// The reduction is bit for bit simplego's (reduce.go), so the
	// comparison can be exact.
	dot := func(bl backends.Builder, p []backends.Op) backends.Op {
		d, err := bl.ReduceSum(p[1], 2)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	must := func(o backends.Op, err error) backends.Op {
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	cases := map[string]graphFn{
		"element for element": func(bl backends.Builder, p []backends.Op) ([]backends.Op, error) {
			d := dot(bl, p)
			sq := must(bl.Mul(d, d))
			return []backends.Op{must(bl.Add(must(bl.Max(sq, d)), d))}, nil
		},
		"transposed": func(bl backends.Builder, p []backends.Op) ([]backends.Op, error) {
			d := dot(bl, p)
			tr := must(bl.Transpose(d, 1, 0))
			return []backends.Op{must(bl.Add(tr, p[0]))}, nil
		},
		"also transposed": func(bl backends.Builder, p []backends.Op) ([]backends.Op, error) {
			d := dot(bl, p)
			return []backends.Op{must(bl.Add(must(bl.Transpose(d, 1, 0)), d))}, nil
		},
		"a scalar as [1]": func(bl backends.Builder, p []backends.Op) ([]backends.Op, error) {
			d := must(bl.ReduceSum(p[1], 0, 1, 2))
			one := must(bl.Reshape(d, 1))
			return []backends.Op{must(bl.Add(one, one))}, nil
		},
		"two outputs": func(bl backends.Builder, p []backends.Op) ([]backends.Op, error) {
			d := dot(bl, p)
			y := must(bl.Add(d, p[0]))
			return []backends.Op{y, must(bl.Mul(y, d))}, nil
		},
	}
	inPlace := map[string]bool{"element for element": true}
	for name, fn := range cases {
		t.Run(name, func(t *testing.T) {
			ins := []shapes.Shape{s, s3}
			steps := planOf(t, e, ins, fn)
			got := false
			for _, st := range steps {
				got = got || strings.HasSuffix(st.name, " in place")
			}
			if got != inPlace[name] {
				t.Errorf("planned in place: %v, want %v (%d steps)", got, inPlace[name], len(steps))
			}
			for range 2 { // the second run reuses the first's buffers
				bitsEqual(t, runGraph(t, e, ins, []any{a, b}, fn), runGraph(t, oracle, ins, []any{a, b}, fn))
			}
		})
	}
}
