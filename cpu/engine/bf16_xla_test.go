package engine_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tensorbridge/tensorbridge/cpu/engine"
	"github.com/tensorbridge/tensorbridge/driver"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	_ "github.com/tensorbridge/tensorbridge/pjrt" // registers xla-cpu
	"github.com/tensorbridge/tensorbridge/precision"
)

// TestBFloat16MatchesXLACPU runs bfloat16 graphs (a Linear layer's
// product x·Wᵀ on the GEMM and on the matrix-vector path, a row sum, a
// multiply-add) on this engine and on XLA's CPU compiler, the independent
// reference, on random normal inputs. XLA computes each op in float32 and
// rounds its result to bfloat16 to nearest even, as this engine does; the
// two sum in different orders, so a result may round to the other
// neighbour where the float32 sums straddle a rounding boundary: every
// element is within one bfloat16 ulp and at least 99% are bitwise equal
// (measured: all of them). XLA's Reduce of bfloat16 accumulates in
// bfloat16 (each addition rounded: 5 of 32 row sums of 2048 equal ours),
// where PyTorch's sum and JAX's jnp.sum accumulate in float32 and round
// once, as this engine does: the row sum is checked against the exact sum
// (float64) rounded to bfloat16 instead.
func TestBFloat16MatchesXLACPU(t *testing.T) {
	ctx := context.Background()
	d, _ := driver.Lookup("xla-cpu")
	if av := d.Probe(ctx); !av.Available {
		testreq.Skipf(t, "xla-cpu not installed (run scripts/install-plugins.sh xla-cpu): %s", av.Reason)
	}
	xb, err := d.Open(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer xb.Close()
	inner, err := simplego.New("ops_sequential")
	if err != nil {
		t.Fatal(err)
	}
	e := engine.New(inner)
	defer e.Finalize()
	rng := rand.New(rand.NewPCG(11, 12))
	for _, c := range []struct {
		name string
		ins  [][]int
		fn   func(b backends.Builder, p []backends.Op) (backends.Op, error)
		// exact, when set, is the reference instead of xla-cpu.
		exact func(in [][]bfloat16.BFloat16) []bfloat16.BFloat16
	}{
		{"dot gemm", [][]int{{64, 768}, {96, 768}}, func(b backends.Builder, p []backends.Op) (backends.Op, error) {
			return b.DotGeneral(p[0], []int{1}, nil, p[1], []int{1}, nil)
		}, nil},
		{"dot gemv", [][]int{{4, 768}, {256, 768}}, func(b backends.Builder, p []backends.Op) (backends.Op, error) {
			return b.DotGeneral(p[0], []int{1}, nil, p[1], []int{1}, nil)
		}, nil},
		{"reduce sum", [][]int{{32, 2048}}, func(b backends.Builder, p []backends.Op) (backends.Op, error) {
			return b.ReduceSum(p[0], 1)
		}, func(in [][]bfloat16.BFloat16) []bfloat16.BFloat16 {
			out := make([]bfloat16.BFloat16, 32)
			for r := range out {
				acc := 0.0
				for _, v := range in[0][r*2048 : (r+1)*2048] {
					acc += float64(math.Float32frombits(uint32(v) << 16))
				}
				out[r] = bfloat16.BFloat16(precision.BFloat16(float32(acc)))
			}
			return out
		}},
		{"mul add", [][]int{{8, 300}, {8, 300}}, func(b backends.Builder, p []backends.Op) (backends.Op, error) {
			m, err := b.Mul(p[0], p[1])
			if err != nil {
				return nil, err
			}
			return b.Add(m, p[1])
		}, nil},
	} {
		vals := make([][]bfloat16.BFloat16, len(c.ins))
		for i, dims := range c.ins {
			s := shapes.Make(dtypes.BFloat16, dims...)
			vals[i] = make([]bfloat16.BFloat16, s.Size())
			for j := range vals[i] {
				vals[i][j] = bfloat16.BFloat16(precision.BFloat16(float32(rng.NormFloat64())))
			}
		}
		got := runBF16(t, e, c.ins, vals, c.fn)
		want, ref := runBF16(t, xb.Engine(), c.ins, vals, c.fn), "xla-cpu"
		if c.exact != nil {
			xla := want
			want, ref = c.exact(vals), "the exact sum rounded"
			same := 0
			for i := range xla {
				if xla[i] == want[i] {
					same++
				}
			}
			t.Logf("%s: xla-cpu (bfloat16 accumulation) gives %d of %d bitwise equal to the exact sum rounded", c.name, same, len(xla))
		}
		same := 0
		for i := range got {
			g, w := math.Float32frombits(uint32(got[i])<<16), math.Float32frombits(uint32(want[i])<<16)
			if got[i] == want[i] {
				same++
				continue
			}
			// One bfloat16 ulp of the larger magnitude (2⁻⁷ of its binade).
			_, exp := math.Frexp(float64(max(abs32(g), abs32(w))))
			if d := math.Abs(float64(g - w)); d > math.Ldexp(1, exp-8) {
				t.Errorf("%s [%d]: %g, %s %g: more than one bfloat16 ulp apart", c.name, i, g, ref, w)
			}
		}
		t.Logf("%s: %d of %d bitwise equal to %s", c.name, same, len(got), ref)
		if float64(same) < 0.99*float64(len(got)) {
			t.Errorf("%s: %d of %d bitwise equal to %s, want at least 99%%", c.name, same, len(got), ref)
		}
	}
}

func abs32(f float32) float32 { return float32(math.Abs(float64(f))) }

// runBF16 builds fn over bfloat16 parameters on eng and runs it.
func runBF16(t *testing.T, eng backends.Backend, dims [][]int, vals [][]bfloat16.BFloat16,
	fn func(b backends.Builder, p []backends.Op) (backends.Op, error)) []bfloat16.BFloat16 {
	t.Helper()
	b := eng.Builder("bf16")
	params := make([]backends.Op, len(dims))
	bufs := make([]backends.Buffer, len(dims))
	for i, d := range dims {
		s := shapes.Make(dtypes.BFloat16, d...)
		p, err := b.Parameter(fmt.Sprintf("p%d", i), s, nil)
		if err != nil {
			t.Fatal(err)
		}
		params[i] = p
		if bufs[i], err = eng.BufferFromFlatData(0, vals[i], s); err != nil {
			t.Fatal(err)
		}
	}
	o, err := fn(b, params)
	if err != nil {
		t.Fatalf("%s: %v", eng.Name(), err)
	}
	exe, err := b.Compile([]backends.Op{o}, nil)
	if err != nil {
		t.Fatalf("%s: %v", eng.Name(), err)
	}
	defer exe.Finalize()
	res, err := exe.Execute(bufs, nil, 0)
	if err != nil {
		t.Fatalf("%s: %v", eng.Name(), err)
	}
	s, err := eng.BufferShape(res[0])
	if err != nil {
		t.Fatal(err)
	}
	out := make([]bfloat16.BFloat16, s.Size())
	if err := eng.BufferToFlatData(res[0], out); err != nil {
		t.Fatal(err)
	}
	_ = eng.BufferFinalize(res[0])
	return out
}
