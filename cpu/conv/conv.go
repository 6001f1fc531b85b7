package conv

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/tensorbridge/tensorbridge/cpu/gemm"
	"github.com/tensorbridge/tensorbridge/cpu/parallel"
)

// Float32 computes the convolution p of in with kernel into out, writing
// every output element. threads ≤ 0 means GOMAXPROCS. A panic inside a
// worker is returned as *parallel.PanicError.
func Float32(p *ConvParams, in, kernel, out []float32, threads int) error {
	if err := p.Validate(len(in), len(kernel), len(out)); err != nil {
		return err
	}
	q := p.normalized()
	return guard(func() error {
		return run(q, kernelLayout{kernel, q.KerOutStride, q.KerInStride, q.KerSpatialStrides}, in, out, threads)
	})
}

// guard runs fn and returns its error, or a panic it raises (in code that
// runs on the calling goroutine, such as kernel packing) as a
// *parallel.PanicError, so that no input can end the process.
func guard(fn func() error) error {
	var err error
	if perr := parallel.Run(func() { err = fn() }); perr != nil {
		return perr
	}
	return err
}

// PackKernel returns kernel as the contiguous row-major [OutChannels ×
// Cg·∏KernelSpatial] matrix the gemm path multiplies, so constant weights
// can be packed once and passed to Float32Packed with the same p. Column
// order follows the input layout (see channelMinor): c·∏KernelSpatial + kk
// in general, kk·Cg + c when the input's channels are contiguous, with kk
// the row-major kernel position.
func PackKernel(p *ConvParams, kernel []float32) ([]float32, error) {
	if err := p.validateShape(); err != nil {
		return nil, err
	}
	if err := p.validateStrides(); err != nil {
		return nil, err
	}
	if err := checkLen("kernel", len(kernel), p.kerExtent()); err != nil {
		return nil, err
	}
	q := p.normalized()
	var packed []float32
	err := guard(func() error {
		packed = make([]float32, p.packedLen())
		packInto(packed, q, kernelLayout{kernel, q.KerOutStride, q.KerInStride, q.KerSpatialStrides})
		return nil
	})
	return packed, err
}

// Float32Packed is Float32 with a kernel packed by PackKernel for the same
// p; the kernel strides in p are ignored.
func Float32Packed(p *ConvParams, packed, in, out []float32, threads int) error {
	if err := p.validatePost(); err != nil {
		return err
	}
	if err := p.validateShape(); err != nil {
		return err
	}
	if err := p.validateStrides(); err != nil {
		return err
	}
	if want := p.packedLen(); len(packed) != want {
		return fmt.Errorf("conv: len(packed) = %d, want %d (OutChannels·InChannels/Groups·∏KernelSpatial)", len(packed), want)
	}
	if err := checkLen("in", len(in), p.inExtent()); err != nil {
		return err
	}
	if err := checkLen("out", len(out), p.outExtent()); err != nil {
		return err
	}
	q := p.normalized()
	return guard(func() error { return run(q, packedLayout(q, packed), in, out, threads) })
}

// channelMinor reports whether the gemm path orders a patch channel-minor
// (kk·Cg + c): when the input's channels are contiguous, im2col then copies
// runs of Cg channels instead of single elements.
func channelMinor(q *ConvParams) bool {
	return q.InChanStride == 1 && q.InChannels/q.Groups > 1
}

// packedLayout is the kernelLayout of PackKernel's result.
func packedLayout(q *ConvParams, packed []float32) kernelLayout {
	cg, kk := q.InChannels/q.Groups, prod(q.KernelSpatial)
	sp := rowMajor(q.KernelSpatial)
	if !channelMinor(q) {
		return kernelLayout{packed, cg * kk, kk, sp}
	}
	for i := range sp {
		sp[i] *= cg
	}
	return kernelLayout{packed, cg * kk, 1, sp}
}

// kernelLayout locates kernel element (o, c, k…) at
// data[o·out + c·in + Σ k_d·spatial_d].
type kernelLayout struct {
	data    []float32
	out, in int
	spatial []int
}

// patchAxes returns the sizes and strides of the axes of one output
// channel's kernel in patch column order (see channelMinor).
func (kl kernelLayout) patchAxes(q *ConvParams) (dims, strides []int) {
	cg := q.InChannels / q.Groups
	if channelMinor(q) {
		return append(slices.Clone(q.KernelSpatial), cg), append(slices.Clone(kl.spatial), kl.in)
	}
	return append([]int{cg}, q.KernelSpatial...), append([]int{kl.in}, kl.spatial...)
}

// matrix returns the kernel as an [O × Cg·KK] gemm operand: a strided view
// when each output channel's patch axes walk at one stride (OIHW, and HWIO
// or OHWI for channels-last inputs), else a copy packed once per call into
// pooled scratch, returned for putFloats.
func (kl kernelLayout) matrix(q *ConvParams, g *geometry) (gemm.Matrix, *[]float32) {
	if s, ok := flatStride(kl.patchAxes(q)); ok {
		return gemm.Matrix{Data: kl.data, RowStride: kl.out, ColStride: s}, nil
	}
	buf := getFloats(q.OutChannels * g.k)
	packInto(*buf, q, kl)
	return gemm.Matrix{Data: *buf, RowStride: g.k, ColStride: 1}, buf
}

// packInto writes the kernel read through kl into dst in PackKernel's order.
func packInto(dst []float32, q *ConvParams, kl kernelLayout) {
	dims, strides := kl.patchAxes(q)
	cols := make([]int, prod(dims))
	offsets(cols, 0, dims, strides, make([]int, len(dims)))
	for o := range q.OutChannels {
		row := dst[o*len(cols) : (o+1)*len(cols)]
		for i, c := range cols {
			row[i] = kl.data[o*kl.out+c]
		}
	}
}

// rowMajor returns the strides of a dense row-major array of dims.
func rowMajor(dims []int) []int {
	s := make([]int, len(dims))
	acc := 1
	for i := len(dims) - 1; i >= 0; i-- {
		s[i] = acc
		acc *= dims[i]
	}
	return s
}

// run picks the algorithm for a validated, normalized q.
func run(q *ConvParams, kl kernelLayout, in, out []float32, threads int) error {
	g := newGeometry(q)
	if q.Batch == 0 || q.OutChannels == 0 || g.np == 0 {
		return nil
	}
	if g.k == 0 {
		zeroOutput(q, out)
		if q.Post != nil {
			applyPost(q, out)
		}
		return nil
	}
	threads = parallel.Threads(threads)
	if g.cg == 1 && q.Groups > 1 {
		if q.InChanStride == 1 && q.OutChanStride == 1 {
			return afterwards(q, out, threads, func(q *ConvParams) error { return depthwiseLast(q, g, kl, in, out, threads) })
		}
		return depthwise(q, g, kl, in, out, threads)
	}
	return gemmConv(q, g, kl, in, out, threads)
}

// geometry holds the sizes and per-tap tables shared by the algorithms. The
// last spatial axis is the "row" (x) axis that inner loops walk; the others
// are "outer" axes enumerated by coordinates.
type geometry struct {
	q                 *ConvParams
	n                 int // spatial rank (≥ 1 after normalization)
	cg, og, kk, k, np int // channels per group, kernel positions, Cg·KK, output positions
	outX, kx          int
	xRuns             []axisRun // per kernel tap along x: which outputs read input
	taps              [][]int   // kernel coordinates of each outer tap, row-major
	outerOut          []int
}

func newGeometry(q *ConvParams) *geometry {
	n := len(q.InSpatial)
	g := &geometry{q: q, n: n, cg: q.InChannels / q.Groups, og: q.OutChannels / q.Groups,
		kk: prod(q.KernelSpatial), np: prod(q.OutSpatial),
		outX: q.OutSpatial[n-1], kx: q.KernelSpatial[n-1], outerOut: q.OutSpatial[:n-1]}
	g.k = g.cg * g.kk
	for kx := range g.kx {
		off := kx*q.KernelDilations[n-1] - q.PadLow[n-1]
		g.xRuns = append(g.xRuns, newAxisRun(g.outX, q.Strides[n-1], off, q.InSpatial[n-1], q.InputDilations[n-1]))
	}
	outer := q.KernelSpatial[:n-1]
	for t := range prod(outer) {
		c := make([]int, n-1)
		unflatten(t, outer, c)
		g.taps = append(g.taps, c)
	}
	return g
}

// inOffset returns the input offset of the outer coordinates read by outer
// output coordinates oc through outer kernel tap k, or false for padding.
func (g *geometry) inOffset(oc, k []int) (int, bool) {
	q, off := g.q, 0
	for d := range g.n - 1 {
		pos := oc[d]*q.Strides[d] - q.PadLow[d] + k[d]*q.KernelDilations[d]
		idx, ok := dilatedIndex(pos, q.InSpatial[d], q.InputDilations[d])
		if !ok {
			return 0, false
		}
		off += idx * q.InSpatialStrides[d]
	}
	return off, true
}

// zeroOutput writes zeros to every output element (empty reductions).
func zeroOutput(q *ConvParams, out []float32) {
	dims, strides := q.outAxes()
	offs := make([]int, prod(dims))
	offsets(offs, 0, dims, strides, make([]int, len(dims)))
	for _, o := range offs {
		out[o] = 0
	}
}

// forTasks runs task(i) for i in [0, n) on up to threads workers. Workers
// take tasks from a shared counter, so uneven tasks still balance; each
// worker gets its own workspace from newWS, released with release. It
// returns the first task error, or a worker panic as *parallel.PanicError.
func forTasks[W any](n, threads int, newWS func() W, release func(W), task func(W, int) error) error {
	workers := min(threads, n)
	var (
		next  atomic.Int64
		once  sync.Once
		first error
	)
	perr := parallel.For(workers, 1, workers, func(lo, hi int) {
		ws := newWS()
		defer release(ws)
		for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
			if err := task(ws, i); err != nil {
				once.Do(func() { first = err })
				next.Store(int64(n))
			}
		}
	})
	if first != nil {
		return first
	}
	return perr
}
