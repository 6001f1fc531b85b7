package engine

import (
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// mlpGraph is the benchmark MLP 784-512-256-10 (bias and ReLU after the
// first two layers), weights as constants, as the ONNX importer builds it.
func mlpGraph(batch int) ([]shapes.Shape, graphFn) {
	rng := rand.New(rand.NewPCG(1, 1))
	dims := []int{784, 512, 256, 10}
	fn := func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
		x := p[0]
		for l := range 3 {
			w, err := b.Constant(randF32(rng, dims[l]*dims[l+1]), dims[l+1], dims[l])
			if err != nil {
				return nil, err
			}
			bias, err := b.Constant(randF32(rng, dims[l+1]), dims[l+1])
			if err != nil {
				return nil, err
			}
			if x, err = b.DotGeneral(x, []int{1}, nil, w, []int{1}, nil); err != nil {
				return nil, err
			}
			bb, err := b.BroadcastInDim(bias, shapes.Make(dtypes.Float32, batch, dims[l+1]), []int{1})
			if err != nil {
				return nil, err
			}
			if x, err = b.Add(x, bb); err != nil {
				return nil, err
			}
			if l < 2 {
				zero, _ := b.Constant([]float32{0})
				zb, _ := b.BroadcastInDim(zero, shapes.Make(dtypes.Float32, batch, dims[l+1]), nil)
				if x, err = b.Max(x, zb); err != nil {
					return nil, err
				}
			}
		}
		return []backends.Op{x}, nil
	}
	return []shapes.Shape{shapes.Make(dtypes.Float32, batch, 784)}, fn
}

// BenchmarkMLP runs the MLP on this engine (and engine=simplego), batch 1
// and 8, reporting allocations per run.
func BenchmarkMLP(b *testing.B) {
	e, oracle := newPair(b)
	for _, batch := range []int{1, 8} {
		for _, eng := range []backends.Backend{e, oracle} {
			b.Run(eng.Name()+"/batch="+string(rune('0'+batch)), func(b *testing.B) {
				ins, fn := mlpGraph(batch)
				bl := eng.Builder("mlp")
				x, _ := bl.Parameter("x", ins[0], nil)
				outs, err := fn(bl, []backends.Op{x})
				if err != nil {
					b.Fatal(err)
				}
				exe, err := bl.Compile(outs, nil)
				if err != nil {
					b.Fatal(err)
				}
				defer exe.Finalize()
				in, _ := eng.BufferFromFlatData(0, randF32(rand.New(rand.NewPCG(2, 2)), ins[0].Size()), ins[0])
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					res, err := exe.Execute([]backends.Buffer{in}, nil, 0)
					if err != nil {
						b.Fatal(err)
					}
					_ = eng.BufferFinalize(res[0])
				}
			})
		}
	}
}

// TestSteadyStateAllocations: after a first run, a run of the MLP takes
// every intermediate buffer from the engine's free lists and its kernels
// allocate nothing, so it allocates only what it hands over: the slice of
// outputs and the one output buffer (the inner engine's header for it).
// AllocsPerRun runs on one thread (GOMAXPROCS 1).
func TestSteadyStateAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	e, _ := newPair(t)
	for _, batch := range []int{1, 8} {
		ins, fn := mlpGraph(batch)
		bl := e.Builder("mlp")
		x, _ := bl.Parameter("x", ins[0], nil)
		outs, err := fn(bl, []backends.Op{x})
		if err != nil {
			t.Fatal(err)
		}
		exe, err := bl.Compile(outs, nil)
		if err != nil {
			t.Fatal(err)
		}
		in, _ := e.BufferFromFlatData(0, randF32(rand.New(rand.NewPCG(2, 2)), ins[0].Size()), ins[0])
		args := []backends.Buffer{in}
		allocs := testing.AllocsPerRun(100, func() {
			res, err := exe.Execute(args, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			_ = e.BufferFinalize(res[0])
		})
		if allocs > 2 {
			t.Errorf("batch %d: a steady-state run allocates %.1f objects, want at most 2 (the outputs' slice and buffer)", batch, allocs)
		}
		exe.Finalize()
	}
}
