package engine

import (
	"reflect"
	"unsafe"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// Slice and Concatenate of any dtype of whole bytes, as copies of
// contiguous runs: they only move values, so they are exact.

// rawBytes returns the bytes of a flat slice of elements of size bytes.
func rawBytes(flat any, size int) []byte {
	v := reflect.ValueOf(flat)
	if v.Len() == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(v.UnsafePointer()), v.Len()*size)
}

// byteSized reports whether values of shape s are whole bytes.
func byteSized(s shapes.Shape) bool { return s.DType.Bits()%8 == 0 && s.DType.Size() > 0 }

type sliceAttr struct{ starts, limits, strides []int }

// sliceKernel copies a strided window of its input.
func sliceKernel(n *node) kernel {
	in, out := n.in[0].shape(), n.shapes[0]
	if !byteSized(in) || in.Rank() == 0 {
		return nil
	}
	a := n.attr.(sliceAttr)
	size := in.DType.Size()
	ist := rowMajorStrides(in.Dimensions)
	r := in.Rank()
	start, step := 0, make([]int, r)
	for i := range r {
		st := at(a.strides, i, 1)
		start += a.starts[i] * ist[i]
		step[i] = st * ist[i]
	}
	od := out.Dimensions
	return func(rn *run, ins []backends.Buffer) ([]backends.Buffer, error) {
		src, err := rn.data(ins[0])
		if err != nil {
			return nil, err
		}
		ob, dst, err := rn.alloc(out)
		if err != nil {
			return nil, err
		}
		if out.Size() > 0 {
			copyStrided(rawBytes(dst, size), rawBytes(src, size), od, start, step, size)
		}
		return rn.one(ob), nil
	}
}

// copyStrided fills dst (row-major, dims) from src, element idx coming
// from src element start+Σ idx[a]·step[a]: whole runs when the last axis
// is contiguous.
func copyStrided(dst, src []byte, dims []int, start int, step []int, size int) {
	r := len(dims)
	inner := dims[r-1]
	idx := make([]int, r)
	so := start
	for o := 0; o < len(dst); o += inner * size {
		if step[r-1] == 1 {
			copy(dst[o:o+inner*size], src[so*size:(so+inner)*size])
		} else if step[r-1] == 0 {
			fillBytes(dst[o:o+inner*size], src[so*size:(so+1)*size])
		} else {
			for j := range inner {
				s := (so + j*step[r-1]) * size
				copy(dst[o+j*size:o+(j+1)*size], src[s:s+size])
			}
		}
		for a := r - 2; a >= 0; a-- {
			idx[a]++
			so += step[a]
			if idx[a] < dims[a] {
				break
			}
			so -= step[a] * dims[a]
			idx[a] = 0
		}
	}
}

// concatKernel copies its inputs' blocks side by side along axis.
func concatKernel(n *node) kernel {
	out := n.shapes[0]
	if !byteSized(out) || out.Rank() == 0 {
		return nil
	}
	axis := n.attr.(int)
	size := out.DType.Size()
	outer := 1
	for _, d := range out.Dimensions[:axis] {
		outer *= d
	}
	blocks := make([]int, len(n.in)) // bytes of each input per outer index
	for i, v := range n.in {
		blocks[i] = v.shape().Size() / max(outer, 1) * size
	}
	return func(rn *run, ins []backends.Buffer) ([]backends.Buffer, error) {
		srcs := make([][]byte, len(ins))
		for i, b := range ins {
			flat, err := rn.data(b)
			if err != nil {
				return nil, err
			}
			srcs[i] = rawBytes(flat, size)
		}
		ob, dst, err := rn.alloc(out)
		if err != nil {
			return nil, err
		}
		d := rawBytes(dst, size)
		o := 0
		for k := range outer {
			for i, s := range srcs {
				o += copy(d[o:], s[k*blocks[i]:(k+1)*blocks[i]])
			}
		}
		return rn.one(ob), nil
	}
}

// broadcastKernel is BroadcastInDim of a dtype the fused loops do not
// handle (bool and integer masks, indices): a strided copy reading each
// broadcast axis at stride 0, by XLA's definition
// (https://openxla.org/xla/operation_semantics#broadcastindim). Float32
// broadcasts stay in fused regions, as strided reads of their readers.
func broadcastKernel(n *node) kernel {
	in, out := n.in[0].shape(), n.shapes[0]
	if !byteSized(in) || in.DType == dtypes.Float32 {
		return nil
	}
	size := in.DType.Size()
	step := broadcastStrides(in, out.Dimensions, n.attr.(axesAttr).axes)
	return func(rn *run, ins []backends.Buffer) ([]backends.Buffer, error) {
		src, err := rn.data(ins[0])
		if err != nil {
			return nil, err
		}
		ob, dst, err := rn.alloc(out)
		if err != nil {
			return nil, err
		}
		switch d, s := rawBytes(dst, size), rawBytes(src, size); {
		case out.Size() == 0:
		case out.Rank() == 0 || in.Size() == 1:
			fillBytes(d, s[:size])
		default:
			copyStrided(d, s, out.Dimensions, 0, step, size)
		}
		return rn.one(ob), nil
	}
}
