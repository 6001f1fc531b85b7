package engine

import (
	"math"
	"slices"
	"unsafe"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tensorbridge/tensorbridge/cpu/parallel"
)

// Pad and Reverse of any dtype of whole bytes, and SelectAndScatter of
// float32: the ops GoMLX's reverse-mode autodiff emits for the gradients
// of Slice and sum pooling (Pad), of a convolution's input (Reverse) and
// of max and min pooling (SelectAndScatter). The inner engine runs them as
// compositions of a dozen ops each (package cpu's ops.go), a quarter of a
// ResNet training step; here each is one pass. Semantics are XLA's
// (https://openxla.org/xla/operation_semantics#pad, #rev_reverse,
// #selectandscatter); padrev_test.go checks them against the compositions.

type padAttr struct{ axes []backends.PadAxis }

// padKernel fills the output with the fill value and copies each input
// element to its place: start + i·(interior+1) on every axis, dropped
// where a negative start or end cuts it off.
func padKernel(n *node) kernel {
	in, out := n.in[0].shape(), n.shapes[0]
	axes := n.attr.(padAttr).axes
	if !byteSized(in) || len(axes) != in.Rank() {
		return nil
	}
	size, r := in.DType.Size(), in.Rank()
	return func(rn *run, ins []backends.Buffer) ([]backends.Buffer, error) {
		src, err := rn.data(ins[0])
		if err != nil {
			return nil, err
		}
		fill, err := rn.data(ins[1])
		if err != nil {
			return nil, err
		}
		ob, dst, err := rn.alloc(out)
		if err != nil {
			return nil, err
		}
		d := rawBytes(dst, size)
		fillBytes(d, rawBytes(fill, size)[:size])
		if in.Size() == 0 || out.Size() == 0 {
			return rn.one(ob), nil
		}
		if r == 0 {
			copy(d, rawBytes(src, size))
			return rn.one(ob), nil
		}
		padCopy(d, rawBytes(src, size), in.Dimensions, out.Dimensions, axes, size)
		return rn.one(ob), nil
	}
}

// fillBytes sets every element of d (len(v) bytes each) to v, doubling
// the filled prefix.
func fillBytes(d, v []byte) {
	if len(d) == 0 {
		return
	}
	n := copy(d, v)
	for n < len(d) {
		n += copy(d[n:], d[:n])
	}
}

// padCopy places the elements of src (dims in) into d (dims out).
func padCopy(d, src []byte, in, out []int, axes []backends.PadAxis, size int) {
	r := len(in)
	ost := rowMajorStrides(out)
	last := axes[r-1]
	step := last.Interior + 1
	// The input range of the last axis whose places lie inside the output.
	lo := 0
	if last.Start < 0 {
		lo = (-last.Start + step - 1) / step
	}
	hi := in[r-1]
	if over := last.Start + (in[r-1]-1)*step - (out[r-1] - 1); over > 0 {
		hi -= (over + step - 1) / step
	}
	idx := make([]int, r)
	rows := 1
	for _, x := range in[:r-1] {
		rows *= x
	}
	for row := range rows {
		rem, base, ok := row, 0, true
		for a := r - 2; a >= 0; a-- {
			idx[a], rem = rem%in[a], rem/in[a]
			o := axes[a].Start + idx[a]*(axes[a].Interior+1)
			if o < 0 || o >= out[a] {
				ok = false
				break
			}
			base += o * ost[a]
		}
		if !ok || lo >= hi {
			continue
		}
		sBase := row * in[r-1]
		if step == 1 {
			o := base + last.Start + lo
			copy(d[o*size:(o+hi-lo)*size], src[(sBase+lo)*size:(sBase+hi)*size])
			continue
		}
		for j := lo; j < hi; j++ {
			o := base + last.Start + j*step
			copy(d[o*size:(o+1)*size], src[(sBase+j)*size:(sBase+j+1)*size])
		}
	}
}

// reverseKernel copies its input with the coordinates of the given axes
// mirrored.
func reverseKernel(n *node) kernel {
	in := n.in[0].shape()
	axes := n.attr.(axesAttr).axes
	if !byteSized(in) {
		return nil
	}
	size, r := in.DType.Size(), in.Rank()
	rev := make([]bool, r)
	for _, a := range axes {
		if a < 0 || a >= r {
			return nil
		}
		rev[a] = true
	}
	return func(rn *run, ins []backends.Buffer) ([]backends.Buffer, error) {
		src, err := rn.data(ins[0])
		if err != nil {
			return nil, err
		}
		ob, dst, err := rn.alloc(in)
		if err != nil {
			return nil, err
		}
		if in.Size() > 0 {
			if err := reverseCopy(rawBytes(dst, size), rawBytes(src, size), in.Dimensions, rev, size, rn.threads); err != nil {
				_ = rn.x.e.inner.BufferFinalize(ob)
				return nil, err
			}
		}
		return rn.one(ob), nil
	}
}

// reverseCopy writes each row of src (dims) to its mirrored row of d,
// itself mirrored when the last axis is reversed. The rows are split
// between the threads; within a range, the mirrored offset follows the
// row index as an odometer (the kernels a convolution's gradient reverses
// have rows of 3 values: a division per axis and row was most of the time).
func reverseCopy(d, src []byte, dims []int, rev []bool, size, threads int) error {
	r := len(dims)
	if r == 0 {
		copy(d, src)
		return nil
	}
	st := rowMajorStrides(dims)
	w := dims[r-1]
	rows := len(src) / size / w
	return parallel.For(rows, max(1, 4096/w), threads, func(lo, hi int) {
		idx := make([]int, r)
		rem, o := lo, 0
		for a := r - 2; a >= 0; a-- {
			idx[a], rem = rem%dims[a], rem/dims[a]
			x := idx[a]
			if rev[a] {
				x = dims[a] - 1 - x
			}
			o += x * st[a]
		}
		for row := lo; row < hi; row++ {
			s := src[row*w*size : (row+1)*w*size]
			switch {
			case !rev[r-1]:
				copy(d[o*size:(o+w)*size], s)
			case size == 4:
				reverse32(d[o*4:(o+w)*4], s)
			default:
				for j := range w {
					k := o + w - 1 - j
					copy(d[k*size:(k+1)*size], s[j*size:(j+1)*size])
				}
			}
			// Advance the odometer to the next row.
			for a := r - 2; a >= 0; a-- {
				step := st[a]
				if rev[a] {
					step = -step
				}
				if idx[a]++; idx[a] < dims[a] {
					o += step
					break
				}
				idx[a] = 0
				o -= step * (dims[a] - 1)
			}
		}
	})
}

type scatterAttr struct {
	window, strides []int
	paddings        [][2]int
}

// scatterKernel is SelectAndScatter{Max,Min} of float32: each source
// value is added at the position of its window's extremum in the
// operand. As the composition it replaces: the operand is padded with the
// dtype's lowest (max) or highest (min) value, the extremum m is folded
// with Go's max or min in window order, the first position equal to m is
// selected (none when m is NaN), a selection in the padding is dropped,
// and the contributions to one position are summed in window order.
func scatterKernel(n *node) kernel {
	if !allFloat32(n) {
		return nil
	}
	xs, ss := n.in[0].shape(), n.in[1].shape()
	a := n.attr.(scatterAttr)
	r := xs.Rank()
	if len(a.window) != r || ss.Rank() != r {
		return nil
	}
	strides, pads := slices.Clone(a.strides), a.paddings
	if len(strides) == 0 {
		strides = make([]int, r)
	}
	if len(pads) == 0 {
		pads = make([][2]int, r)
	}
	isMax := n.op == backends.OpTypeSelectAndScatterMax
	sc := &scatterPlan{xs: xs, ss: ss, window: a.window, strides: strides, pads: pads, isMax: isMax}
	for i := range r {
		sc.strides[i] = max(sc.strides[i], 1)
	}
	return sc.run
}

type scatterPlan struct {
	xs, ss          shapes.Shape
	window, strides []int
	pads            [][2]int
	isMax           bool
}

func (sc *scatterPlan) run(rn *run, ins []backends.Buffer) ([]backends.Buffer, error) {
	x, err := rn.f32(ins[0])
	if err != nil {
		return nil, err
	}
	src, err := rn.f32(ins[1])
	if err != nil {
		return nil, err
	}
	ob, flat, err := rn.alloc(sc.xs)
	if err != nil {
		return nil, err
	}
	out := flat.([]float32)
	clear(out)
	if sc.ss.Size() > 0 && sc.xs.Size() > 0 {
		if err := sc.scatter(out, x, src, rn.threads); err != nil {
			_ = rn.x.e.inner.BufferFinalize(ob)
			return nil, err
		}
	}
	return rn.one(ob), nil
}

// scatter selects each source window's position (sel: the window offset
// index, -1 for none, and the operand offset), in parallel over the
// source, then adds the sources offset by offset, so each position sums in
// window order.
func (sc *scatterPlan) scatter(out, x, src []float32, threads int) error {
	r := sc.xs.Rank()
	xst := rowMajorStrides(sc.xs.Dimensions)
	ident := float32(math.Inf(-1))
	if lo, ok := sc.xs.DType.LowestValue().(float32); ok {
		ident = lo
	}
	if !sc.isMax {
		ident = float32(math.Inf(1))
		if hi, ok := sc.xs.DType.HighestValue().(float32); ok {
			ident = hi
		}
	}
	if planes, ok := sc.planes(); ok {
		return sc.scatter2D(out, x, src, planes, ident, threads)
	}
	offs := WindowOffsets(sc.window)
	lin := make([]int, len(offs)) // each offset's distance in the operand
	for k, off := range offs {
		for a, o := range off {
			lin[k] += o * xst[a]
		}
	}
	selK, selPos := make([]int32, len(src)), make([]int, len(src))
	err := parallel.For(len(src), 1024, threads, func(lo, hi int) {
		q, pos, vals := make([]int, r), make([]int, r), make([]float32, len(offs))
		for i := lo; i < hi; i++ {
			unflattenTo(i, sc.ss.Dimensions, q)
			base, inside := 0, true
			for a := range q {
				st := q[a]*sc.strides[a] - sc.pads[a][0]
				inside = inside && st >= 0 && st+sc.window[a] <= sc.xs.Dimensions[a]
				base += st * xst[a]
			}
			for k, off := range offs {
				if inside {
					vals[k] = x[base+lin[k]]
				} else {
					vals[k], _ = sc.at(x, xst, q, off, pos, ident)
				}
			}
			m := vals[0]
			for _, v := range vals[1:] {
				if sc.isMax {
					m = max(m, v)
				} else {
					m = min(m, v)
				}
			}
			selK[i] = -1
			for k, v := range vals {
				if v == m {
					p := base + lin[k]
					if !inside {
						_, p = sc.at(x, xst, q, offs[k], pos, ident)
					}
					if p >= 0 {
						selK[i], selPos[i] = int32(k), p
					}
					break
				}
			}
		}
	})
	if err != nil {
		return err
	}
	for k := range offs {
		for i, s := range src {
			if selK[i] == int32(k) {
				out[selPos[i]] += s
			}
		}
	}
	return nil
}

// at returns the padded operand's value at window offset off of source
// position q, and its operand offset (-1 in the padding).
func (sc *scatterPlan) at(x []float32, xst, q, off, pos []int, ident float32) (float32, int) {
	p := 0
	for a := range q {
		pos[a] = q[a]*sc.strides[a] - sc.pads[a][0] + off[a]
		if pos[a] < 0 || pos[a] >= sc.xs.Dimensions[a] {
			return ident, -1
		}
		p += pos[a] * xst[a]
	}
	return x[p], p
}

// WindowOffsets lists every multi-index of a window in row-major order:
// the order SelectAndScatter visits a window in, here and in package
// cpu's composition of it, on which ties depend.
func WindowOffsets(window []int) [][]int {
	total := 1
	for _, w := range window {
		total *= w
	}
	out := make([][]int, 0, total)
	cur := make([]int, len(window))
	for range total {
		out = append(out, append([]int(nil), cur...))
		for a := len(window) - 1; a >= 0; a-- {
			if cur[a]++; cur[a] < window[a] {
				break
			}
			cur[a] = 0
		}
	}
	return out
}

// unflattenTo writes the row-major coordinates of flat index t into c.
func unflattenTo(t int, dims, c []int) {
	for i := len(dims) - 1; i >= 0; i-- {
		c[i], t = t%dims[i], t/dims[i]
	}
}

// reverse32 writes the 4-byte elements of s to d in reverse order.
func reverse32(d, s []byte) {
	dv := unsafe.Slice((*uint32)(unsafe.Pointer(&d[0])), len(d)/4)
	sv := unsafe.Slice((*uint32)(unsafe.Pointer(&s[0])), len(s)/4)
	n := len(sv)
	for j, v := range sv {
		dv[n-1-j] = v
	}
}
