package conv

// depthwisePlan is the direct algorithm for one input channel per group
// (Groups == InChannels, any channel multiplier Og), for channel-major
// layouts such as NCHW: each (image, output channel) task accumulates one
// output row at a time in a contiguous buffer, applying all x taps of a
// kernel row in one pass whose loads are unit-stride when the input's x
// stride and the conv stride are 1. (im2col + gemm would multiply matrices
// only Og rows tall.) Two-dimensional convolutions with contiguous input
// rows take the plane path instead (dwPlanes): one kernel call per block of
// channels, which computes each output row from all its input rows in one
// pass.
type depthwisePlan struct {
	q      *ConvParams
	g      *geometry
	kl     kernelLayout
	tapKer []int // kernel offset of each outer tap
	rows   int   // output rows per channel
	// Outputs [interLo, interHi) read input through every x tap; there the
	// taps are fused when fuse (no input dilation along x).
	interLo, interHi int
	fuse             bool
	fast             *dwPlanes // the plane path, when it applies
}

// depthwiseWorkspace is one worker's scratch: acc, w and oc for the
// generic path, buf and plane for the plane path (dwPlanes.scratch).
type depthwiseWorkspace struct {
	acc        *[]float32 // one output row
	w          []float32  // the channel's weights, w[outer tap·kx + x tap]
	oc         []int
	buf, plane *[]float32
}

// depthwise runs the direct algorithm in parallel over images × blocks of
// output channels.
func depthwise(q *ConvParams, g *geometry, kl kernelLayout, in, out []float32, threads int) error {
	pl := &depthwisePlan{q: q, g: g, kl: kl, rows: prod(g.outerOut), fast: newDWPlanes(q, g, kl, dwActive)}
	if q.Post != nil && (pl.fast == nil || q.OutSpatialStrides[g.n-1] != 1) {
		return afterwards(q, out, threads, func(q *ConvParams) error { return depthwise(q, g, kl, in, out, threads) })
	}
	for _, k := range g.taps {
		off := 0
		for d, x := range k {
			off += x * kl.spatial[d]
		}
		pl.tapKer = append(pl.tapKer, off)
	}
	pl.fuse, pl.interLo, pl.interHi = q.InputDilations[g.n-1] == 1, 0, g.outX
	for _, r := range g.xRuns {
		pl.interLo, pl.interHi = max(pl.interLo, r.lo), min(pl.interHi, r.hi)
	}
	newWS := func() *depthwiseWorkspace {
		if pl.fast != nil {
			ws := &depthwiseWorkspace{}
			ws.buf, ws.plane = pl.fast.scratch(q)
			return ws
		}
		return &depthwiseWorkspace{acc: getFloats(g.outX), w: make([]float32, len(g.taps)*g.kx), oc: make([]int, g.n)}
	}
	release := func(ws *depthwiseWorkspace) {
		putFloats(ws.acc)
		putFloats(ws.buf)
		putFloats(ws.plane)
	}
	// Tasks are blocks of channels, about four per thread per image, so
	// that workers take the shared counter once per block, not per
	// (possibly 7×7) channel.
	blk := ceilDiv(q.OutChannels, min(q.OutChannels, 4*threads))
	blocks := ceilDiv(q.OutChannels, blk)
	return forTasks(q.Batch*blocks, threads, newWS, release, func(ws *depthwiseWorkspace, i int) error {
		b, o0 := i/blocks, i%blocks*blk
		o1 := min(q.OutChannels, o0+blk)
		if pl.fast != nil {
			pl.fast.block(pl, ws, in, out, b, o0, o1)
			return nil
		}
		for o := o0; o < o1; o++ {
			pl.channel(ws, in, out, b, o)
		}
		return nil
	})
}

// channel computes every output of image b, output channel o. The
// channel's weights are gathered once, in tap order, for all its rows.
func (pl *depthwisePlan) channel(ws *depthwiseWorkspace, in, out []float32, b, o int) {
	q, g := pl.q, pl.g
	inBase := b*q.InBatchStride + o/g.og*q.InChanStride
	outBase := b*q.OutBatchStride + o*q.OutChanStride
	kBase, ksx := o*pl.kl.out, pl.kl.spatial[g.n-1]
	for j, t := range pl.tapKer {
		for kx := range g.kx {
			ws.w[j*g.kx+kx] = pl.kl.data[kBase+t+kx*ksx]
		}
	}
	isx, osx := q.InSpatialStrides[g.n-1], q.OutSpatialStrides[g.n-1]
	oc, acc := ws.oc[:g.n-1], *ws.acc
	clear(oc)
	for range pl.rows {
		clear(acc)
		for j, k := range g.taps {
			if off, ok := g.inOffset(oc, k); ok {
				pl.taps(acc, ws.w[j*g.kx:(j+1)*g.kx], in, inBase+off, isx)
			}
		}
		pl.store(out, outBase+rowOffset(oc, q.OutSpatialStrides), osx, acc)
		advance(oc, g.outerOut)
	}
}

// store writes a finished output row.
func (pl *depthwisePlan) store(out []float32, base, stride int, acc []float32) {
	if stride == 1 {
		copy(out[base:base+len(acc)], acc)
		return
	}
	for x, v := range acc {
		out[base+x*stride] = v
	}
}

// rowOffset is the offset of outer coordinates oc under strides.
func rowOffset(oc, strides []int) int {
	off := 0
	for d, x := range oc {
		off += x * strides[d]
	}
	return off
}

// taps adds to the output row acc the x taps w applied to the input row
// whose element i is in[base+i·inc]. Without input dilation, the outputs
// where every tap reads input take one fused pass (acc loaded and stored
// once) and the few border outputs a bounds-checked loop; otherwise each
// tap is an axpy over its run.
func (pl *depthwisePlan) taps(acc, w, in []float32, base, inc int) {
	if !pl.fuse {
		for kx, r := range pl.g.xRuns {
			r.axpy(acc, 0, len(acc), w[kx], in, base, inc)
		}
		return
	}
	q, n := pl.q, pl.g.n
	s, pad, dx, size := q.Strides[n-1], q.PadLow[n-1], q.KernelDilations[n-1], q.InSpatial[n-1]
	lo, hi := pl.interLo, max(pl.interLo, pl.interHi)
	border := func(x0, x1 int) {
		for x := x0; x < x1; x++ {
			for k, wk := range w {
				if i := x*s - pad + k*dx; i >= 0 && i < size {
					acc[x] += wk * in[base+i*inc]
				}
			}
		}
	}
	border(0, lo)
	border(hi, len(acc))
	if lo < hi {
		fusedTaps(acc[lo:hi], w, in, base+(lo*s-pad)*inc, s*inc, dx*inc)
	}
}

// fusedTaps sets acc[i] += Σ_k w[k]·src[p + i·ps + k·dk].
func fusedTaps(acc, w, src []float32, p, ps, dk int) {
	if len(w) == 3 && ps == 1 && dk == 1 {
		n := len(acc)
		w0, w1, w2 := w[0], w[1], w[2]
		s0, s1, s2 := src[p:p+n], src[p+1:p+1+n], src[p+2:p+2+n]
		for i := range acc {
			acc[i] += w0*s0[i] + w1*s1[i] + w2*s2[i]
		}
		return
	}
	if len(w) == 3 {
		w0, w1, w2 := w[0], w[1], w[2]
		for i := range acc {
			acc[i] += w0*src[p] + w1*src[p+dk] + w2*src[p+2*dk]
			p += ps
		}
		return
	}
	for i := range acc {
		v, q := acc[i], p
		for _, wk := range w {
			v += wk * src[q]
			q += dk
		}
		acc[i] = v
		p += ps
	}
}

// axpy adds to acc[x], x in [x0, x1), w times the input the run's output x
// reads; element i of the input row is src[base+i·inc].
func (r axisRun) axpy(acc []float32, x0, x1 int, w float32, src []float32, base, inc int) {
	i0, i1 := r.clip(x0, x1)
	if i0 >= i1 {
		return
	}
	lo := r.lo + i0*r.step
	p, d := base+(r.first+i0*r.inStep)*inc, r.inStep*inc
	if r.step == 1 && d == 1 {
		a := acc[lo : lo+i1-i0]
		s := src[p : p+len(a)]
		for i := range a {
			a[i] += w * s[i]
		}
		return
	}
	for i := i0; i < i1; i++ {
		acc[lo] += w * src[p]
		lo += r.step
		p += d
	}
}

// depthwiseLastPlan is the direct depthwise algorithm for channels-last
// tensors (input and output channel strides 1, e.g. NHWC): each task is one
// output row of one image, and for every output position and kernel tap the
// inner loop runs over the contiguous channels, with the kernel repacked
// as [tap × OutChannels] so its weights are contiguous too.
type depthwiseLastPlan struct {
	q    *ConvParams
	g    *geometry
	w    []float32 // packed kernel, w[tap·O + o]
	rows int       // output rows per image
}

type depthwiseLastWorkspace struct {
	oc     []int
	tapOff []int
	tapOK  []bool
	pairs  []tapPair
}

// tapPair is one kernel tap's weights for every output channel and the
// input channels it multiplies at one output position.
type tapPair struct{ w, src []float32 }

// depthwiseLast runs the channels-last algorithm in parallel over images × rows.
func depthwiseLast(q *ConvParams, g *geometry, kl kernelLayout, in, out []float32, threads int) error {
	w := getFloats(g.kk * q.OutChannels)
	defer putFloats(w)
	taps := make([]int, g.kk)
	offsets(taps, 0, q.KernelSpatial, kl.spatial, make([]int, g.n))
	for t, off := range taps {
		for o := range q.OutChannels {
			(*w)[t*q.OutChannels+o] = kl.data[o*kl.out+off]
		}
	}
	pl := &depthwiseLastPlan{q: q, g: g, w: *w, rows: prod(g.outerOut)}
	newWS := func() *depthwiseLastWorkspace {
		return &depthwiseLastWorkspace{oc: make([]int, g.n), tapOff: make([]int, len(g.taps)),
			tapOK: make([]bool, len(g.taps)), pairs: make([]tapPair, 0, g.kk)}
	}
	return forTasks(q.Batch*pl.rows, threads, newWS, func(*depthwiseLastWorkspace) {}, func(ws *depthwiseLastWorkspace, i int) error {
		pl.row(ws, in, out, i/pl.rows, i%pl.rows)
		return nil
	})
}

// row computes output row r (row-major over the outer axes) of image b.
func (pl *depthwiseLastPlan) row(ws *depthwiseLastWorkspace, in, out []float32, b, r int) {
	q, g := pl.q, pl.g
	oc := ws.oc[:g.n-1]
	unflatten(r, g.outerOut, oc)
	for j, k := range g.taps {
		ws.tapOff[j], ws.tapOK[j] = g.inOffset(oc, k)
	}
	o, c, m := q.OutChannels, q.InChannels, g.og
	ib := b * q.InBatchStride
	ob := b*q.OutBatchStride + rowOffset(oc, q.OutSpatialStrides)
	isx, osx := q.InSpatialStrides[g.n-1], q.OutSpatialStrides[g.n-1]
	for x := range g.outX {
		pairs := ws.pairs[:0]
		for j := range g.taps {
			if !ws.tapOK[j] {
				continue
			}
			for kx, run := range g.xRuns {
				if i, ok := run.index(x); ok {
					p, t := ib+ws.tapOff[j]+i*isx, j*g.kx+kx
					pairs = append(pairs, tapPair{pl.w[t*o : (t+1)*o], in[p : p+c]})
				}
			}
		}
		multiplyAdd(out[ob+x*osx:ob+x*osx+o], pairs, m)
	}
}

// multiplyAdd sets dst[ch·m + k] = Σ_pairs w[ch·m + k] · src[ch] for every
// input channel ch and multiplier index k < m. With m = 1 it takes the taps
// four at a time, so dst is loaded and stored once per four taps.
func multiplyAdd(dst []float32, pairs []tapPair, m int) {
	clear(dst)
	if m != 1 {
		for _, p := range pairs {
			for ch, v := range p.src {
				d, w := dst[ch*m:(ch+1)*m], p.w[ch*m:(ch+1)*m]
				for k := range d {
					d[k] += w[k] * v
				}
			}
		}
		return
	}
	for ; len(pairs) >= 4; pairs = pairs[4:] {
		fma4(dst, pairs[:4])
	}
	for _, p := range pairs {
		w, src := p.w[:len(dst)], p.src[:len(dst)]
		for i := range dst {
			dst[i] += w[i] * src[i]
		}
	}
}

// fma4 adds four taps' products to dst in one pass.
func fma4(dst []float32, p []tapPair) {
	n := len(dst)
	w0, w1, w2, w3 := p[0].w[:n], p[1].w[:n], p[2].w[:n], p[3].w[:n]
	s0, s1, s2, s3 := p[0].src[:n], p[1].src[:n], p[2].src[:n], p[3].src[:n]
	for i := range dst {
		dst[i] += w0[i]*s0[i] + w1[i]*s1[i] + w2[i]*s2[i] + w3[i]*s3[i]
	}
}
