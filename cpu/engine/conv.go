package engine

import (
	"sync/atomic"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tensorbridge/tensorbridge/cpu/gemm"
	"github.com/tensorbridge/tensorbridge/cpu/parallel"
)

// Convolutions (XLA's ConvGeneral, any layout, strides, padding, input and
// kernel dilations, feature groups) of float32. Each group is one product
// of its kernel, as a [Og, Cg·∏K] matrix, by the patches of its input,
// one row of Cg·∏K values per output position (im2col), computed in
// chunks of positions so the patches stay in cache. Pointwise and
// depthwise convolutions run on package conv instead (convdirect.go).
// Constant kernels are packed once, at compile time.

// convPlan is one convolution.
type convPlan struct {
	batch, groups, cg, og     int   // batch, groups, input and output channels per group
	inSp, kSp, outSp          []int // spatial dimensions
	strides, kDil, inDil, pad []int
	inB, inC                  int   // input strides of batch and channel
	inSt                      []int // input strides of the spatial axes
	kO, kC                    int   // kernel strides of output and input channel
	kSt                       []int
	outB, outC                int
	outSt                     []int
	out                       shapes.Shape
	taps, positions           int // ∏K and ∏ output spatial
	contiguousOut             bool
	// tapMajor: two spatial axes: patches
	// are laid out (tap, channel) and read from a channels-last copy of
	// the input, a run of Cg channels per tap.
	tapMajor bool
}

// convKernel returns the float32 ConvGeneral kernel, or nil for batch
// groups (only backward passes of grouped convolutions emit them), which
// run in a segment.
func convKernel(e *Engine, n *node) (kernel, []*value) {
	a := n.attr.(convAttr)
	if !allFloat32(n) || a.batchGroup > 1 {
		return nil, nil
	}
	if directConv(n, a) {
		return convKernelPkg(e, n, a)
	}
	p := newConvPlan(n, a)
	if p.kernelMajor() {
		return func(r *run, ins []backends.Buffer) ([]backends.Buffer, error) {
			return p.runKernelMajor(r, ins[0], ins[1])
		}, n.in
	}
	if k := n.in[1].n; k.konst != nil {
		if flat, err := e.inner.BufferData(k.konst); err == nil {
			w := p.packKernel(flat.([]float32))
			return func(r *run, ins []backends.Buffer) ([]backends.Buffer, error) {
				return p.run(r, ins[0], w)
			}, n.in[:1]
		}
	}
	return func(r *run, ins []backends.Buffer) ([]backends.Buffer, error) {
		k, err := r.f32(ins[1])
		if err != nil {
			return nil, err
		}
		w := getF32(p.groups * p.og * p.cg * p.taps)
		defer putF32(w)
		p.packKernelInto(*w, k, r.threads)
		return p.run(r, ins[0], *w)
	}, n.in
}

func newConvPlan(n *node, a convAttr) *convPlan {
	in, ker, out := n.in[0].shape(), n.in[1].shape(), n.shapes[0]
	ist, kst, ost := rowMajorStrides(in.Dimensions), rowMajorStrides(ker.Dimensions), rowMajorStrides(out.Dimensions)
	ax := a.axes
	p := &convPlan{batch: in.Dimensions[ax.InputBatch], groups: max(a.channelGroups, 1), out: out,
		inB: ist[ax.InputBatch], inC: ist[ax.InputChannels], kO: kst[ax.KernelOutputChannels], kC: kst[ax.KernelInputChannels],
		outB: ost[ax.OutputBatch], outC: ost[ax.OutputChannels], taps: 1, positions: 1}
	p.cg = in.Dimensions[ax.InputChannels] / p.groups
	p.og = out.Dimensions[ax.OutputChannels] / p.groups
	for i := range ax.InputSpatial {
		p.inSp = append(p.inSp, in.Dimensions[ax.InputSpatial[i]])
		p.kSp = append(p.kSp, ker.Dimensions[ax.KernelSpatial[i]])
		p.outSp = append(p.outSp, out.Dimensions[ax.OutputSpatial[i]])
		p.inSt = append(p.inSt, ist[ax.InputSpatial[i]])
		p.kSt = append(p.kSt, kst[ax.KernelSpatial[i]])
		p.outSt = append(p.outSt, ost[ax.OutputSpatial[i]])
		p.strides = append(p.strides, at(a.strides, i, 1))
		p.kDil = append(p.kDil, at(a.kerDil, i, 1))
		p.inDil = append(p.inDil, at(a.inDil, i, 1))
		low := 0
		if i < len(a.paddings) {
			low = a.paddings[i][0]
		}
		p.pad = append(p.pad, low)
		p.taps *= p.kSp[i]
		p.positions *= p.outSp[i]
	}
	p.tapMajor = len(p.outSp) == 2
	// The output positions of a channel are one contiguous run when the
	// spatial axes are row-major and innermost.
	p.contiguousOut = true
	acc := 1
	for i := len(p.outSp) - 1; i >= 0; i-- {
		if p.outSt[i] != acc && p.outSp[i] > 1 {
			p.contiguousOut = false
		}
		acc *= p.outSp[i]
	}
	return p
}

// packKernel lays the kernel out as [groups·Og][Cg·∏K], (c, tap) order,
// or (tap, c) for tapMajor, into a new slice (a constant kernel, packed
// once at compile time).
func (p *convPlan) packKernel(k []float32) []float32 {
	w := make([]float32, p.groups*p.og*p.cg*p.taps)
	p.packKernelInto(w, k, 1)
	return w
}

// packKernelInto packs k into w on up to threads threads, output channels
// split between them: a kernel that is a run-time value (the gradient
// convolutions of training, whose "kernel" is an activation gradient of
// megabytes) is packed at every run.
func (p *convPlan) packKernelInto(w, k []float32, threads int) {
	row := p.cg * p.taps
	taps := p.tapOffsets(p.kSt)
	_ = parallel.For(p.groups*p.og, max(1, 4096/max(row, 1)), threads, func(lo, hi int) {
		for o := lo; o < hi; o++ {
			dst := w[o*row : (o+1)*row]
			for c := range p.cg {
				src := k[o*p.kO+c*p.kC:]
				if p.tapMajor {
					for t, off := range taps {
						dst[t*p.cg+c] = src[off]
					}
					continue
				}
				d := dst[c*p.taps : (c+1)*p.taps]
				for t, off := range taps {
					d[t] = src[off]
				}
			}
		}
	})
}

// tapOffsets returns, for each kernel position in row-major order, its
// offset under strides st.
func (p *convPlan) tapOffsets(st []int) []int {
	offs := make([]int, p.taps)
	idx := make([]int, len(p.kSp))
	for t := range offs {
		o := 0
		for i, k := range idx {
			o += k * st[i]
		}
		offs[t] = o
		for i := len(idx) - 1; i >= 0; i-- {
			if idx[i]++; idx[i] < p.kSp[i] {
				break
			}
			idx[i] = 0
		}
	}
	return offs
}

// chunk is the number of output positions whose patches are built at once.
func (p *convPlan) chunk() int { return max(16, min(p.positions, (1<<19)/max(1, p.cg*p.taps*4))) }

func (p *convPlan) run(r *run, x backends.Buffer, w []float32) ([]backends.Buffer, error) {
	in, err := r.f32(x)
	if err != nil {
		return nil, err
	}
	ob, flat, err := r.alloc(p.out)
	if err != nil {
		return nil, err
	}
	out := flat.([]float32)
	if p.positions == 0 || p.batch == 0 || p.og == 0 {
		return r.one(ob), nil
	}
	err = p.im2col(in, w, out, r.threads)
	if err != nil {
		_ = r.x.e.inner.BufferFinalize(ob)
		return nil, err
	}
	return r.one(ob), nil
}

// coord returns the input index of output position o, tap k on spatial
// axis i, or -1 when it falls in padding or between dilated inputs.
func (p *convPlan) coord(i, o, k int) int {
	c := o*p.strides[i] - p.pad[i] + k*p.kDil[i]
	if c < 0 || c%p.inDil[i] != 0 {
		return -1
	}
	c /= p.inDil[i]
	if c >= p.inSp[i] {
		return -1
	}
	return c
}

// patch writes the Cg·∏K values output position pos of batch b, group g
// reads into dst (0 for padding).
func (p *convPlan) patch(dst, in []float32, b, g, pos int, oidx, kidx []int) {
	rem := pos
	for i := len(p.outSp) - 1; i >= 0; i-- {
		oidx[i], rem = rem%p.outSp[i], rem/p.outSp[i]
	}
	clear(kidx)
	base := b*p.inB + g*p.cg*p.inC
	for t := range p.taps {
		off, ok := base, true
		for i, k := range kidx {
			c := p.coord(i, oidx[i], k)
			if c < 0 {
				ok = false
				break
			}
			off += c * p.inSt[i]
		}
		for c := range p.cg {
			v := float32(0)
			if ok {
				v = in[off+c*p.inC]
			}
			dst[c*p.taps+t] = v
		}
		for i := len(kidx) - 1; i >= 0; i-- {
			if kidx[i]++; kidx[i] < p.kSp[i] {
				break
			}
			kidx[i] = 0
		}
	}
}

// channelsLast copies one batch element of the input (channel stride inC,
// spatial strides inSt) to dst as [H][W][C].
func (p *convPlan) channelsLast(dst, in []float32, threads int) {
	h, w, ch := p.inSp[0], p.inSp[1], p.cg*p.groups
	const cb = 8 // channels per pass: each pixel's 8 values are written together
	_ = parallel.For(h, 1, threads, func(lo, hi int) {
		for y := lo; y < hi; y++ {
			row := dst[y*w*ch : (y+1)*w*ch]
			c := 0
			if p.inSt[1] == 1 {
				for ; c+cb <= ch; c += cb {
					var s [cb][]float32
					for i := range s {
						s[i] = in[(c+i)*p.inC+y*p.inSt[0]:][:w]
					}
					for x := range w {
						d := row[x*ch+c : x*ch+c+cb]
						d[0], d[1], d[2], d[3] = s[0][x], s[1][x], s[2][x], s[3][x]
						d[4], d[5], d[6], d[7] = s[4][x], s[5][x], s[6][x], s[7][x]
					}
				}
			}
			for ; c < ch; c++ {
				src := in[c*p.inC+y*p.inSt[0]:]
				for x := range w {
					row[x*ch+c] = src[x*p.inSt[1]]
				}
			}
		}
	})
}

// patchTaps writes the patch of output position pos as (tap, channel):
// per tap, the Cg channels at that input pixel of a channels-last view
// (pixel strides pix, channel stride 1, group offset base), or zeros where
// the tap falls in padding or between dilated inputs.
func (p *convPlan) patchTaps(dst, src []float32, base int, pix []int, pos int) {
	oh, ow := pos/p.outSp[1], pos%p.outSp[1]
	kw := p.kSp[1]
	iw0 := ow*p.strides[1] - p.pad[1]
	dy, dx := p.inDil[0], p.inDil[1]
	// The taps of a kernel row read kw adjacent pixels: with one group and
	// no dilation along x, their channels are one run to copy at once.
	whole := pix[1] == p.cg && p.kDil[1] == 1 && dx == 1 && iw0 >= 0 && iw0+kw <= p.inSp[1]
	for y := range p.kSp[0] {
		ih := oh*p.strides[0] - p.pad[0] + y*p.kDil[0]
		rowOK := ih >= 0 && ih%dy == 0 && ih/dy < p.inSp[0]
		ih /= dy
		if rowOK && whole {
			d := dst[y*kw*p.cg : (y+1)*kw*p.cg]
			copy(d, src[base+ih*pix[0]+iw0*pix[1]:])
			continue
		}
		for x := range kw {
			iw := ow*p.strides[1] - p.pad[1] + x*p.kDil[1]
			d := dst[(y*kw+x)*p.cg : (y*kw+x+1)*p.cg]
			if !rowOK || iw < 0 || iw%dx != 0 || iw/dx >= p.inSp[1] {
				clear(d)
				continue
			}
			copy(d, src[base+ih*pix[0]+(iw/dx)*pix[1]:])
		}
	}
}

// im2col computes each (batch, group, chunk of positions) as a product of
// the group's kernel rows by the chunk's patches. With at least two chunks
// per thread, each thread takes whole chunks (it builds the patches and
// multiplies them alone, so the patches stay in its cache and the threads
// never wait for each other within the layer); otherwise every chunk is
// split between the threads, patches and product.
func (p *convPlan) im2col(in, w, out []float32, threads int) error {
	row, ch := p.cg*p.taps, p.chunk()
	nch := (p.positions + ch - 1) / ch
	ch = (p.positions + nch - 1) / nch // equal chunks
	tasks, t := p.batch*p.groups*nch, parallel.Threads(threads)
	src, pix, imgStride := in, p.inSt, p.inB // the channels-last view of the input
	if p.tapMajor && p.inC != 1 {
		imgStride = p.inSp[0] * p.inSp[1] * p.cg * p.groups
		nhwc := getF32(p.batch * imgStride)
		defer putF32(nhwc)
		for b := range p.batch {
			p.channelsLast((*nhwc)[b*imgStride:], in[b*p.inB:], threads)
		}
		src, pix = *nhwc, []int{p.inSp[1] * p.cg * p.groups, p.cg * p.groups}
	}
	chunkOf := func(i int) (b, g, p0, n int) {
		b, g, c := i/(p.groups*nch), i/nch%p.groups, i%nch
		return b, g, c * ch, min(ch, p.positions-c*ch)
	}
	if t > 1 && tasks >= 2*t {
		var first atomic.Pointer[error]
		perr := parallel.For(tasks, 1, t, func(lo, hi int) {
			cw := p.newChunkWork(row, ch)
			defer cw.free()
			for i := lo; i < hi; i++ {
				b, g, p0, n := chunkOf(i)
				if err := cw.product(p, src, pix, b*imgStride, in, w, out, b, g, p0, n, 1); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		})
		if e := first.Load(); e != nil {
			return *e
		}
		return perr
	}
	cw := p.newChunkWork(row, ch)
	defer cw.free()
	for i := range tasks {
		b, g, p0, n := chunkOf(i)
		if err := cw.product(p, src, pix, b*imgStride, in, w, out, b, g, p0, n, threads); err != nil {
			return err
		}
	}
	return nil
}

// chunkWork is the scratch of one thread's chunks: patches, the product
// tile of a non-contiguous output, index vectors.
type chunkWork struct {
	cols, tmp  *[]float32
	oidx, kidx []int
}

func (p *convPlan) newChunkWork(row, ch int) *chunkWork {
	cw := &chunkWork{cols: getF32(ch * row), oidx: make([]int, len(p.outSp)), kidx: make([]int, len(p.kSp))}
	if !p.contiguousOut {
		cw.tmp = getF32(p.og * ch)
	}
	return cw
}

func (cw *chunkWork) free() {
	putF32(cw.cols)
	if cw.tmp != nil {
		putF32(cw.tmp)
	}
}

// product computes positions p0..p0+n of batch b, group g: the patches
// (from the channels-last view src at base, or from in), then the kernel
// rows times them, on up to threads threads.
func (cw *chunkWork) product(p *convPlan, src []float32, pix []int, base int, in, w, out []float32, b, g, p0, n, threads int) error {
	row := p.cg * p.taps
	c := (*cw.cols)[:n*row]
	if err := parallel.For(n, 64, threads, func(lo, hi int) {
		oi, ki := cw.oidx, cw.kidx
		if threads > 1 {
			oi, ki = make([]int, len(p.outSp)), make([]int, len(p.kSp))
		}
		for q := lo; q < hi; q++ {
			if p.tapMajor {
				p.patchTaps(c[q*row:(q+1)*row], src, base+g*p.cg, pix, p0+q)
			} else {
				p.patch(c[q*row:(q+1)*row], in, b, g, p0+q, oi, ki)
			}
		}
	}); err != nil {
		return err
	}
	wg := gemm.Matrix{Data: w[g*p.og*row:], RowStride: row, ColStride: 1}
	patches := gemm.Matrix{Data: c, RowStride: 1, ColStride: row}
	if p.contiguousOut {
		dst := out[b*p.outB+g*p.og*p.outC+p0:]
		return gemm.Sgemm(p.og, n, row, wg, patches, dst, p.outC, false, threads)
	}
	t := (*cw.tmp)[:p.og*n]
	if err := gemm.Sgemm(p.og, n, row, wg, patches, t, n, false, threads); err != nil {
		return err
	}
	p.scatter(out, t, b, g, p0, n, cw.oidx)
	return nil
}

// scatter writes a [Og, n] tile of positions p0.. to a non-contiguous
// output layout.
func (p *convPlan) scatter(out, t []float32, b, g, p0, n int, oidx []int) {
	for q := range n {
		rem := p0 + q
		off := b*p.outB + g*p.og*p.outC
		for i := len(p.outSp) - 1; i >= 0; i-- {
			oidx[i], rem = rem%p.outSp[i], rem/p.outSp[i]
			off += oidx[i] * p.outSt[i]
		}
		for o := range p.og {
			out[off+o*p.outC] = t[o*n+q]
		}
	}
}
