package engine

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// DynamicSlice and DynamicUpdateSlice (XLA's: start indices clamped so the
// window stays inside the operand) of any whole-byte dtype. An update
// writes into the operand's own buffer when the run owns it and reads it
// last (a donated KV cache, updated layer after layer), so only the
// updated window is copied.

// scalarIndex reads a scalar integer start index.
func scalarIndex(flat any) (int, error) {
	read := indexReader(flat)
	if read == nil {
		return 0, fmt.Errorf("start index of type %T", flat)
	}
	return read(0), nil
}

// starts reads and clamps the start indices ins[from:] for a window of
// size win in dims.
func starts(r *run, ins []backends.Buffer, from int, dims, win []int) ([]int, error) {
	st := make([]int, len(dims))
	for i := range dims {
		flat, err := r.data(ins[from+i])
		if err != nil {
			return nil, err
		}
		v, err := scalarIndex(flat)
		if err != nil {
			return nil, err
		}
		st[i] = min(max(v, 0), dims[i]-win[i])
	}
	return st, nil
}

func dynamicSliceKernel(n *node) kernel {
	in, out := n.in[0].shape(), n.shapes[0]
	if !byteSized(in) || in.Rank() == 0 {
		return nil
	}
	size, ist := in.DType.Size(), rowMajorStrides(in.Dimensions)
	one := make([]int, in.Rank())
	for i := range one {
		one[i] = ist[i]
	}
	return func(r *run, ins []backends.Buffer) ([]backends.Buffer, error) {
		st, err := starts(r, ins, 1, in.Dimensions, out.Dimensions)
		if err != nil {
			return nil, err
		}
		src, err := r.data(ins[0])
		if err != nil {
			return nil, err
		}
		ob, dst, err := r.alloc(out)
		if err != nil {
			return nil, err
		}
		if out.Size() > 0 {
			copyStrided(rawBytes(dst, size), rawBytes(src, size), out.Dimensions, offset(st, ist), one, size)
		}
		return r.one(ob), nil
	}
}

func dynamicUpdateSliceKernel(n *node) kernel {
	op, up := n.in[0].shape(), n.in[1].shape()
	if !byteSized(op) || op.Rank() == 0 {
		return nil
	}
	size, ost := op.DType.Size(), rowMajorStrides(op.Dimensions)
	return func(r *run, ins []backends.Buffer) ([]backends.Buffer, error) {
		st, err := starts(r, ins, 2, op.Dimensions, up.Dimensions)
		if err != nil {
			return nil, err
		}
		ub, err := r.data(ins[1])
		if err != nil {
			return nil, err
		}
		out := r.take(0)
		if out == nil {
			if out, err = r.clone(ins[0]); err != nil {
				return nil, err
			}
		}
		dst, err := r.data(out)
		if err != nil {
			return nil, err
		}
		if up.Size() > 0 {
			scatterWindow(rawBytes(dst, size), rawBytes(ub, size), up, offset(st, ost), ost, size)
		}
		return r.one(out), nil
	}
}

// scatterWindow writes the row-major window src (shape up) into dst at
// element offset base, dst having strides st: runs along the last axis.
func scatterWindow(dst, src []byte, up shapes.Shape, base int, st []int, size int) {
	dims := up.Dimensions
	r := len(dims)
	run := dims[r-1] * size
	idx := make([]int, r)
	for o := 0; o < len(src); o += run {
		d := base
		for a := range r - 1 {
			d += idx[a] * st[a]
		}
		copy(dst[d*size:d*size+run], src[o:o+run])
		for a := r - 2; a >= 0; a-- {
			if idx[a]++; idx[a] < dims[a] {
				break
			}
			idx[a] = 0
		}
	}
}
