package conv

// dwPlanes is depthwisePlan's path for 2-D convolutions with contiguous
// input rows and no dilation along x or input dilation (MobileNet's 3×3
// layers): each task is one dwShape.planes call for a block of channels,
// which computes every output row from all the input rows it reads in one
// pass, with the sums kept in registers (assembly for 3×3 and 5×5 kernels
// at x stride 1 or 2, Go otherwise).
type dwPlanes struct {
	shape dwShape
	w     []float32 // the kernel, w[o·ky·k + ky·k + kx]
}

// newDWPlanes returns the plane path for q with kern, or nil when it does
// not apply: rank other than 2, input x stride ≠ 1, dilation along x,
// input dilation, or an empty input.
func newDWPlanes(q *ConvParams, g *geometry, kl kernelLayout, kern dwKernel) *dwPlanes {
	if g.n != 2 || q.InSpatialStrides[1] != 1 || q.KernelDilations[1] != 1 ||
		q.InputDilations[0] != 1 || q.InputDilations[1] != 1 || q.InSpatial[0] < 1 || q.InSpatial[1] < 1 {
		return nil
	}
	f := &dwPlanes{shape: dwShape{
		ky: q.KernelSpatial[0], k: q.KernelSpatial[1], sy: q.Strides[0], dy: q.KernelDilations[0],
		padY: q.PadLow[0], height: q.InSpatial[0], ldin: q.InSpatialStrides[0], outH: q.OutSpatial[0],
		s: q.Strides[1], width: q.InSpatial[1], pad: q.PadLow[1], n: q.OutSpatial[1],
	}}
	f.shape.init(kern)
	kk := f.shape.ky * f.shape.k
	if kl.out == kk && kl.spatial[0] == f.shape.k && kl.spatial[1] == 1 {
		// Already in this order (PackKernel's layout): read in place,
		// no copy per call.
		f.w = kl.data[:q.OutChannels*kk]
		return f
	}
	f.w = make([]float32, q.OutChannels*kk)
	for o := range q.OutChannels {
		for ky := range f.shape.ky {
			for kx := range f.shape.k {
				f.w[o*kk+ky*f.shape.k+kx] = kl.data[o*kl.out+ky*kl.spatial[0]+kx*kl.spatial[1]]
			}
		}
	}
	return f
}

// scratch returns a worker's buffers: the zeroed padded copy the assembly
// reads, and an output plane for outputs whose x stride is not 1.
func (f *dwPlanes) scratch(q *ConvParams) (buf, plane *[]float32) {
	buf = getFloats(f.shape.bufLen())
	clear(*buf)
	if q.OutSpatialStrides[1] != 1 {
		plane = getFloats(f.shape.outH * f.shape.n)
	}
	return buf, plane
}

// block computes output channels [o0, o1) of image b: one kernel call
// when input channel o feeds output channel o and outputs are contiguous
// along x, else one per channel, through ws.plane when the output's x
// stride is not 1.
func (f *dwPlanes) block(pl *depthwisePlan, ws *depthwiseWorkspace, in, out []float32, b, o0, o1 int) {
	q, d, kk := pl.q, &f.shape, f.shape.ky*f.shape.k
	inB, outB := b*q.InBatchStride, b*q.OutBatchStride
	osy, osx := q.OutSpatialStrides[0], q.OutSpatialStrides[1]
	if pl.g.og == 1 && osx == 1 {
		d.planes(out[outB+o0*q.OutChanStride:], osy, q.OutChanStride,
			in[inB+o0*q.InChanStride:], q.InChanStride, f.w[o0*kk:], *ws.buf, o1-o0)
		for o := o0; o < o1; o++ { // the epilogue on the planes just written
			f.post(q, out[outB+o*q.OutChanStride:], o)
		}
		return
	}
	for o := o0; o < o1; o++ {
		ib, ob := inB+o/pl.g.og*q.InChanStride, outB+o*q.OutChanStride
		if osx == 1 {
			d.planes(out[ob:], osy, 0, in[ib:], 0, f.w[o*kk:], *ws.buf, 1)
			f.post(q, out[ob:], o)
			continue
		}
		p := *ws.plane
		d.planes(p, d.n, 0, in[ib:], 0, f.w[o*kk:], *ws.buf, 1)
		for y := range d.outH {
			pl.store(out, ob+y*osy, osx, p[y*d.n:(y+1)*d.n])
		}
	}
}

// post applies q.Post to output channel o's plane at the start of out
// (x stride 1): in one pass when its rows are contiguous.
func (f *dwPlanes) post(q *ConvParams, out []float32, o int) {
	if q.Post == nil {
		return
	}
	d, osy := &f.shape, q.OutSpatialStrides[0]
	if osy == d.n {
		q.Post.Row(out[:d.outH*d.n], o)
		return
	}
	for y := range d.outH {
		q.Post.Row(out[y*osy:y*osy+d.n], o)
	}
}
