package engine

import (
	"sync/atomic"

	"github.com/gomlx/gomlx/backends"

	"github.com/tensorbridge/tensorbridge/cpu/gemm"
	"github.com/tensorbridge/tensorbridge/cpu/parallel"
)

// Kernel-major convolutions: those whose kernel is larger than their
// output, as the weight gradient of a convolution is (GoMLX's autodiff
// convolves the layer's input, batch and channel axes swapped, by the
// output gradient: a 3×3 output from a 56×56 "kernel" with the batch as
// the contracting channels). The im2col path of conv.go would compute
// each of the many "batch" elements (the layer's input channels) as its
// own product of a few output positions against the whole kernel, packed
// at every run and streamed from memory once per element: the weight
// gradients of a ResNet-18 step ran at 50 to 120 GFLOP/s that way.
//
// Here one product covers every (batch, position) column at once, blocked
// over the contraction (the kernel's channels and rows): per block, a
// strip of the kernel (read in place when its rows are contiguous) times
// patches built from runs of input rows, accumulated into the output.

// kernelMajor reports whether the convolution runs here: one group, two
// spatial axes, no input dilation, a kernel with at least 16 taps and
// four times as many taps as output positions. (Taking also the late
// layers of a ResNet forward, few positions per image and long patches,
// measured slower: a ResNet-18 training step at batch 8 on 2 threads,
// 628 against 666 ms.)
func (p *convPlan) kernelMajor() bool {
	if p.groups != 1 || len(p.outSp) != 2 || p.inDil[0] != 1 || p.inDil[1] != 1 {
		return false
	}
	return p.taps >= 16 && p.taps >= 4*p.positions
}

// kBlock is one block of the contraction: channels c0..c1-1, kernel rows
// y0..y1-1 of each (whole channels, or a run of rows of one channel).
type kBlock struct{ c0, c1, y0, y1 int }

// kBlocks splits the contraction (Cg channels × kernel rows) into blocks
// of about kcTarget values.
func (p *convPlan) kBlocks() []kBlock {
	const kcTarget = 512
	kh, kw := p.kSp[0], p.kSp[1]
	var bs []kBlock
	if kh*kw <= kcTarget {
		per := max(1, kcTarget/(kh*kw))
		for c := 0; c < p.cg; c += per {
			bs = append(bs, kBlock{c, min(p.cg, c+per), 0, kh})
		}
		return bs
	}
	rows := max(1, kcTarget/kw)
	for c := range p.cg {
		for y := 0; y < kh; y += rows {
			bs = append(bs, kBlock{c, c + 1, y, min(kh, y+rows)})
		}
	}
	return bs
}

func (b kBlock) size(kw int) int { return (b.c1 - b.c0) * (b.y1 - b.y0) * kw }

// runKernelMajor computes the convolution of x by the kernel k.
func (p *convPlan) runKernelMajor(r *run, x, k backends.Buffer) ([]backends.Buffer, error) {
	in, err := r.f32(x)
	if err != nil {
		return nil, err
	}
	ker, err := r.f32(k)
	if err != nil {
		return nil, err
	}
	ob, flat, err := r.alloc(p.out)
	if err != nil {
		return nil, err
	}
	if err := p.kernelMajorInto(in, ker, flat.([]float32), r.threads); err != nil {
		_ = r.x.e.inner.BufferFinalize(ob)
		return nil, err
	}
	return r.one(ob), nil
}

// kernelMajorInto writes the convolution of in by ker to out. The columns
// (batch element, output position) are split in chunks over the threads;
// the contraction blocks run in order, each adding to the output.
func (p *convPlan) kernelMajorInto(in, ker, out []float32, threads int) error {
	cols := p.batch * p.positions
	if cols == 0 || p.og == 0 {
		return nil
	}
	// The output is written in place when, per output channel, the
	// columns are one run (batch-major, positions contiguous).
	direct := p.contiguousOut && (p.batch == 1 || p.outB == p.positions)
	c, ldc := out, p.outC
	if !direct {
		t := getF32(p.og * cols)
		defer putF32(t)
		c, ldc = *t, cols
	}
	if p.taps == 0 || p.cg == 0 {
		for o := range p.og {
			clear(c[o*ldc : o*ldc+cols])
		}
	} else if err := p.kernelMajorBlocks(in, ker, c, ldc, cols, threads); err != nil {
		return err
	}
	if !direct {
		p.scatterColumns(out, c, cols)
	}
	return nil
}

func (p *convPlan) kernelMajorBlocks(in, ker, c []float32, ldc, cols, threads int) error {
	kw := p.kSp[1]
	blocks := p.kBlocks()
	kcMax := 0
	for _, b := range blocks {
		kcMax = max(kcMax, b.size(kw))
	}
	t := parallel.Threads(threads)
	// Chunks of columns whose patches fill about 256 KiB, a multiple of
	// the threads so each takes the same number.
	cc := max(8, (64<<10)/kcMax)
	nch := (cols + cc - 1) / cc
	nch = (nch + t - 1) / t * t
	cc = (cols + nch - 1) / nch
	nch = (cols + cc - 1) / cc
	inPlace := p.kSt[1] == 1 && p.kSt[0] == kw
	apack := getF32(p.og * kcMax)
	defer putF32(apack)
	for bi, blk := range blocks {
		kc := blk.size(kw)
		a := gemm.Matrix{Data: (*apack)[:p.og*kc], RowStride: kc, ColStride: 1}
		if inPlace && blk.c1 == blk.c0+1 {
			a = gemm.Matrix{Data: ker[blk.c0*p.kC+blk.y0*p.kSt[0]:], RowStride: p.kO, ColStride: 1}
		} else {
			p.packKernelBlock(a.Data, ker, blk)
		}
		var first atomic.Pointer[error]
		perr := parallel.For(nch, 1, t, func(lo, hi int) {
			pt := getF32(cc * kc)
			defer putF32(pt)
			for ch := lo; ch < hi; ch++ {
				j0 := ch * cc
				n := min(cc, cols-j0)
				for j := range n {
					p.kernelMajorPatch((*pt)[j*kc:(j+1)*kc], in, j0+j, blk)
				}
				b := gemm.Matrix{Data: *pt, RowStride: 1, ColStride: kc}
				if err := gemm.Sgemm(p.og, n, kc, a, b, c[j0:], ldc, bi > 0, 1); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		})
		if e := first.Load(); e != nil {
			return *e
		}
		if perr != nil {
			return perr
		}
	}
	return nil
}

// packKernelBlock copies block blk of the kernel as [Og][kc], (channel,
// row, column) order.
func (p *convPlan) packKernelBlock(d, ker []float32, blk kBlock) {
	kw := p.kSp[1]
	kc := blk.size(kw)
	for o := range p.og {
		row := d[o*kc : (o+1)*kc]
		i := 0
		for c := blk.c0; c < blk.c1; c++ {
			for y := blk.y0; y < blk.y1; y++ {
				src := ker[o*p.kO+c*p.kC+y*p.kSt[0]:]
				for x := range kw {
					row[i] = src[x*p.kSt[1]]
					i++
				}
			}
		}
	}
}

// kernelMajorPatch writes, for column j (batch element j/positions, output
// position j%positions), the input values block blk's taps read, in the
// kernel block's (channel, row, column) order, 0 where a tap falls in
// padding.
func (p *convPlan) kernelMajorPatch(dst, in []float32, j int, blk kBlock) {
	b, pos := j/p.positions, j%p.positions
	oy, ox := pos/p.outSp[1], pos%p.outSp[1]
	kw, w := p.kSp[1], p.inSp[1]
	// Taps x0..x1-1 of a kernel row fall inside the input row.
	ix0 := ox*p.strides[1] - p.pad[1]
	dx := p.kDil[1]
	x0, x1 := 0, kw
	if ix0 < 0 {
		x0 = min(kw, (-ix0+dx-1)/dx)
	}
	if last := ix0 + (kw-1)*dx; last >= w {
		x1 = max(x0, kw-((last-w)/dx+1))
	}
	i := 0
	for c := blk.c0; c < blk.c1; c++ {
		base := b*p.inB + c*p.inC
		for y := blk.y0; y < blk.y1; y++ {
			d := dst[i : i+kw]
			i += kw
			iy := oy*p.strides[0] - p.pad[0] + y*p.kDil[0]
			if iy < 0 || iy >= p.inSp[0] || x0 >= x1 {
				clear(d)
				continue
			}
			clear(d[:x0])
			clear(d[x1:])
			src := in[base+iy*p.inSt[0]+(ix0+x0*dx)*p.inSt[1]:]
			if step := dx * p.inSt[1]; step == 1 {
				copy(d[x0:x1], src)
			} else {
				for x := x0; x < x1; x++ {
					d[x] = src[(x-x0)*step]
				}
			}
		}
	}
}

// scatterColumns writes c, [Og][batch·positions], to the output layout.
func (p *convPlan) scatterColumns(out, c []float32, cols int) {
	for j := range cols {
		b, pos := j/p.positions, j%p.positions
		off := b*p.outB + (pos/p.outSp[1])*p.outSt[0] + (pos%p.outSp[1])*p.outSt[1]
		for o := range p.og {
			out[off+o*p.outC] = c[o*cols+j]
		}
	}
}
