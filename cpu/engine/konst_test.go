package engine

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// TestCompiledKeepsPackedKernelOnly compiles convolutions with a constant
// kernel of a few MiB (1x1 on package conv, 3x3 on the im2col path) and
// checks what compiling adds to the heap: the kernel packed for the
// product, while the constant it was packed from is let go (the builder's
// nodes stay reachable after Compile, through GoMLX's graph, and held it:
// twice the weights). Fault injected once: without dropConstants the
// heap grows by the constant's size again (4.2 and 5.3 MB).
func TestCompiledKeepsPackedKernelOnly(t *testing.T) {
	e, _ := newPair(t)
	heap := func() int64 {
		var ms runtime.MemStats
		for range 3 {
			runtime.GC()
		}
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	axes := backends.ConvolveAxesConfig{InputBatch: 0, InputChannels: 1, InputSpatial: []int{2, 3},
		KernelOutputChannels: 0, KernelInputChannels: 1, KernelSpatial: []int{2, 3},
		OutputBatch: 0, OutputChannels: 1, OutputSpatial: []int{2, 3}}
	for _, tc := range []struct{ c, k int }{{1024, 1}, {384, 3}} {
		t.Run(fmt.Sprintf("%dx%d", tc.k, tc.k), func(t *testing.T) {
			kvals := make([]float32, tc.c*tc.c*tc.k*tc.k)
			rng := rand.New(rand.NewPCG(1, 1))
			for i := range kvals {
				kvals[i] = rng.Float32()
			}
			size := int64(len(kvals) * 4)
			b := e.Builder("konst")
			x, err := b.Parameter("x", shapes.Make(dtypes.Float32, 1, tc.c, 5, 5), nil)
			if err != nil {
				t.Fatal(err)
			}
			k, err := b.Constant(kvals, tc.c, tc.c, tc.k, tc.k)
			if err != nil {
				t.Fatal(err)
			}
			kvals = nil
			y, err := b.ConvGeneral(x, k, axes, []int{1, 1}, [][2]int{{0, 0}, {0, 0}}, []int{1, 1}, []int{1, 1}, 1, 1)
			if err != nil {
				t.Fatal(err)
			}
			before := heap()
			exe, err := b.Compile([]backends.Op{y}, nil)
			if err != nil {
				t.Fatal(err)
			}
			grew := heap() - before
			runtime.KeepAlive(b)
			t.Logf("compiling a %d-byte kernel grew the heap by %d bytes", size, grew)
			// The packed copy replaces the constant: the plan's own
			// structures only (measured 1.6 to 7.2 KB).
			if grew > 64<<10 {
				t.Errorf("compiling grew the heap by %d bytes for a %d-byte kernel: the constant is still held beside its packed copy", grew, size)
			}
			exe.Finalize()
		})
	}
}
