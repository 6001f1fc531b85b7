package engine

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// TestConvEpilogue: a 1×1 or depthwise convolution followed by its bias,
// ReLU or clip runs as one step (convpost.go), with the bits of the same
// graph compiled with fusion off (the ops run one after the other), on
// inputs with NaN, infinities and signed zeros; chains it must not fuse
// (bias as the first operand, a value read twice) give the same bits too.
func TestConvEpilogue(t *testing.T) {
	e, _ := newPair(t)
	plain, _ := newPair(t)
	plain.fuse = false
	rng := rand.New(rand.NewPCG(21, 22))
	nchw := backends.ConvolveAxesConfig{InputBatch: 0, InputChannels: 1, InputSpatial: []int{2, 3},
		KernelOutputChannels: 0, KernelInputChannels: 1, KernelSpatial: []int{2, 3},
		OutputBatch: 0, OutputChannels: 1, OutputSpatial: []int{2, 3}}
	type chain struct {
		name         string
		bias, lo, hi bool
		biasFirst    bool // Add(bias, conv): not fused
		readTwice    bool // the bias Add is also an output: not fused
		steps        int  // planned steps when fused
	}
	chains := []chain{
		{name: "bias-relu6", bias: true, lo: true, hi: true, steps: 1},
		{name: "bias-relu", bias: true, lo: true, steps: 1},
		{name: "bias", bias: true, steps: 1},
		{name: "clip", lo: true, hi: true, steps: 1},
		{name: "bias-first", bias: true, lo: true, biasFirst: true},
		{name: "read-twice", bias: true, lo: true, readTwice: true},
	}
	convs := []struct {
		name              string
		cin, cout, groups int
		k, stride, pad    int
	}{
		{"1x1", 24, 40, 1, 1, 1, 0},
		{"dw3x3", 16, 16, 16, 3, 1, 1},
		{"dw3x3-s2", 16, 16, 16, 3, 2, 1},
	}
	special := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.Copysign(0, -1)), 1e30}
	for _, cv := range convs {
		for _, ch := range chains {
			t.Run(cv.name+"/"+ch.name, func(t *testing.T) {
				in := shapes.Make(dtypes.Float32, 2, cv.cin, 13, 11)
				ker := []int{cv.cout, cv.cin / cv.groups, cv.k, cv.k}
				kv := randF32(rng, shapes.Make(dtypes.Float32, ker...).Size())
				bias := randF32(rng, cv.cout)
				x := randF32(rng, in.Size())
				for i, s := range special {
					x[i*97] = s
				}
				fn := func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
					k, err := b.Constant(kv, ker...)
					if err != nil {
						return nil, err
					}
					pads := [][2]int{{cv.pad, cv.pad}, {cv.pad, cv.pad}}
					y, err := b.ConvGeneral(p[0], k, nchw, []int{cv.stride, cv.stride}, pads, nil, []int{1, 1}, cv.groups, 1)
					if err != nil {
						return nil, err
					}
					outs := []backends.Op{}
					out := shapeOf(t, b, y)
					if ch.bias {
						bc, _ := b.Constant(bias, cv.cout)
						bb, err := b.BroadcastInDim(bc, out, []int{1})
						if err != nil {
							return nil, err
						}
						if ch.biasFirst {
							y, err = b.Add(bb, y)
						} else {
							y, err = b.Add(y, bb)
						}
						if err != nil {
							return nil, err
						}
						if ch.readTwice {
							outs = append(outs, y)
						}
					}
					for _, bound := range []struct {
						on  bool
						v   float32
						max bool
					}{{ch.lo, 0, true}, {ch.hi, 0.75, false}} {
						if !bound.on {
							continue
						}
						sc, _ := b.Constant([]float32{bound.v})
						bs, err := b.BroadcastInDim(sc, out, nil)
						if err != nil {
							return nil, err
						}
						if bound.max {
							y, err = b.Max(y, bs)
						} else {
							y, err = b.Min(y, bs)
						}
						if err != nil {
							return nil, err
						}
					}
					return append(outs, y), nil
				}
				ins, vals := []shapes.Shape{in}, []any{x}
				if ch.steps > 0 {
					if steps := planOf(t, e, ins, fn); len(steps) != ch.steps {
						t.Errorf("planned as %d steps, want %d", len(steps), ch.steps)
					}
				}
				bitsEqual(t, runGraph(t, e, ins, vals, fn), runGraph(t, plain, ins, vals, fn))
			})
		}
	}
}

// shapeOf is the shape the builder gives op.
func shapeOf(t *testing.T, b backends.Builder, op backends.Op) shapes.Shape {
	t.Helper()
	s, err := b.OpShape(op)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestCompiledKeepsOnlyItsKernels: an executable holds the kernels its
// steps run and nothing the compiler chose on the way. A 1×1 convolution
// fused with its ReLU is packed twice while compiling (the plain kernel,
// then the fused one); the executable must keep one packed copy (16 MiB
// here), not the compiler with both (the plan used to point into the
// compiler: ResNet-50 held 46 MB of 1×1 kernels twice). Measured as the
// live heap's growth over compiling (the test's own 16 MiB of weights come
// before): 16 MiB. Fault injected once: returning &c.p from compile fails
// it (32 MiB against a bound of 24).
func TestCompiledKeepsOnlyItsKernels(t *testing.T) {
	e, _ := newPair(t)
	const c = 2048 // 2048x2048 float32: 16 MiB
	kv := make([]float32, c*c)
	for i := range kv {
		kv[i] = float32(i%7) - 3
	}
	nchw := backends.ConvolveAxesConfig{InputBatch: 0, InputChannels: 1, InputSpatial: []int{2, 3},
		KernelOutputChannels: 0, KernelInputChannels: 1, KernelSpatial: []int{2, 3},
		OutputBatch: 0, OutputChannels: 1, OutputSpatial: []int{2, 3}}
	live := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := live()
	b := e.Builder("keeps")
	x, err := b.Parameter("x", shapes.Make(dtypes.Float32, 1, c, 2, 2), nil)
	if err != nil {
		t.Fatal(err)
	}
	k, err := b.Constant(kv, c, c, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	y, err := b.ConvGeneral(x, k, nchw, []int{1, 1}, [][2]int{{0, 0}, {0, 0}}, nil, []int{1, 1}, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	zero, _ := b.Constant([]float32{0})
	z, err := b.BroadcastInDim(zero, shapes.Make(dtypes.Float32, 1, c, 2, 2), nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.Max(y, z)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := b.Compile([]backends.Op{r}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Finalize()
	if steps := exe.(*Executable).Steps(); len(steps) != 1 {
		t.Fatalf("plan %v, want the fused convolution alone", steps)
	}
	grew := int64(live()) - int64(before)
	runtime.KeepAlive(kv)
	if limit := int64(24 << 20); grew > limit {
		t.Errorf("the live heap grew by %d MiB compiling a 16 MiB convolution (beside the test's 16 MiB), want at most %d MiB: the executable keeps kernels no step runs", grew>>20, limit>>20)
	}
}
