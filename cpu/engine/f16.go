package engine

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/x448/float16"

	"github.com/tensorbridge/tensorbridge/cpu/parallel"
	"github.com/tensorbridge/tensorbridge/precision"
)

// float16 is a storage type here: values are kept as IEEE binary16 and every
// op computes in float32, its result rounded to binary16 (to nearest, ties
// to even) as the op's float16 output. The builder rewrites each op that
// reads float16 values as ConvertDType to float32 of those inputs, the op
// on float32 and ConvertDType back of its float32 outputs, so only the two
// conversions (native kernels below) ever touch float16 buffers; the
// inner engine, which has no float16, never sees one. Widening is exact,
// so each op's result is its float32 result rounded once to binary16, as
// an op computing in float32 and storing binary16 gives it.
//
// The shadow builder (shape inference) cannot hold float16 either: a
// float16 parameter or constant is a float32 parameter there, which only
// the conversions read.

// isF16 reports whether v holds float16 or bfloat16 values: the 16-bit
// storage types (bf16.go).
func isF16(v *value) bool { return narrowFloat(v.shape().DType) }

// shadowShape is the shape a value of shape s has in the shadow builder.
func shadowShape(s shapes.Shape) shapes.Shape {
	if !narrowFloat(s.DType) {
		return s
	}
	s = s.Clone()
	s.DType = dtypes.Float32
	return s
}

// viaFloat32 records op with its float16 or bfloat16 inputs widened to
// float32 and its float32 outputs narrowed back to that 16-bit type.
func (b *Builder) viaFloat32(op backends.OpType, attr any, replay replayFn, ins []*value) ([]backends.Op, error) {
	wide := make([]backends.Op, len(ins))
	narrow := dtypes.InvalidDType // the storage type results go back to
	for i, v := range ins {
		wide[i] = v
		if isF16(v) {
			if narrow == dtypes.InvalidDType {
				narrow = v.shape().DType
			}
			w, err := b.ConvertDType(v, dtypes.Float32)
			if err != nil {
				return nil, err
			}
			wide[i] = w
		}
	}
	outs, err := b.record(op, attr, replay, wide...)
	if err != nil {
		return nil, err
	}
	for i, o := range outs {
		if o.(*value).shape().DType == dtypes.Float32 {
			if outs[i], err = b.ConvertDType(o, narrow); err != nil {
				return nil, err
			}
		}
	}
	return outs, nil
}

// convertF16 records ConvertDType when x or the target is float16 or
// bfloat16: those to and from float32 and float64 are native; other dtypes
// go through float32 (exact: integers of float16's range are exact in
// float32, and both 16-bit types widen exactly), except other dtypes to
// bfloat16, which go through float64 (bf16.go: integers beyond 2²⁴ would
// round twice through float32).
func (b *Builder) convertF16(x *value, dtype dtypes.DType) (backends.Op, error) {
	from := x.shape().DType
	direct := func(t dtypes.DType) bool { return t == dtypes.Float32 || t == dtypes.Float64 }
	if (narrowFloat(from) && direct(dtype)) || (narrowFloat(dtype) && direct(from)) {
		out := x.shape().Clone()
		out.DType = dtype
		return b.recordShaped(backends.OpTypeConvertDType, out, func(t backends.Builder, in []backends.Op) ([]backends.Op, error) {
			return nil, fmt.Errorf("ConvertDType %s to %s runs natively only", from, dtype)
		}, x)
	}
	via := dtypes.Float32
	if dtype == dtypes.BFloat16 && !narrowFloat(from) {
		via = dtypes.Float64
	}
	mid, err := b.ConvertDType(x, via)
	if err != nil {
		return nil, err
	}
	return b.ConvertDType(mid, dtype)
}

// convertF16Kernel returns the native kernel of a float16 ConvertDType.
func convertF16Kernel(n *node) kernel {
	if n.op != backends.OpTypeConvertDType || len(n.in) != 1 {
		return nil
	}
	from, to := n.in[0].shape().DType, n.shapes[0].DType
	if !narrowFloat(from) && !narrowFloat(to) {
		return nil
	}
	out := n.shapes[0]
	return func(r *run, ins []backends.Buffer) ([]backends.Buffer, error) {
		src, err := r.data(ins[0])
		if err != nil {
			return nil, err
		}
		ob, dst, err := r.alloc(out)
		if err != nil {
			return nil, err
		}
		if err := convertF16Flat(dst, src, r.threads); err != nil {
			_ = r.x.e.inner.BufferFinalize(ob)
			return nil, err
		}
		return r.one(ob), nil
	}
}

// convertF16Flat converts src into dst, one of them []float16.Float16 or
// []bfloat16.BFloat16 and the other []float32 or []float64, in blocks over
// the threads.
func convertF16Flat(dst, src any, threads int) error {
	f := bf16Converter(dst, src)
	switch d := dst.(type) {
	case []float16.Float16:
		h := halves(d)
		switch s := src.(type) {
		case []float32:
			f = func(lo, hi int) { precision.Float16s(h[lo:hi], s[lo:hi]) }
		case []float64:
			f = func(lo, hi int) {
				for i := lo; i < hi; i++ {
					h[i] = float16From64(s[i])
				}
			}
		}
	case []float32:
		if s, ok := src.([]float16.Float16); ok {
			h := halves(s)
			f = func(lo, hi int) {
				for i := lo; i < hi; i++ {
					d[i] = precision.FromFloat16(h[i])
				}
			}
		}
	case []float64:
		if s, ok := src.([]float16.Float16); ok {
			h := halves(s)
			f = func(lo, hi int) {
				for i := lo; i < hi; i++ {
					d[i] = float64(precision.FromFloat16(h[i]))
				}
			}
		}
	}
	if f == nil {
		return fmt.Errorf("ConvertDType: no float16 conversion from %T to %T", src, dst)
	}
	return parallel.For(lenOf(dst), 1<<14, threads, f)
}

// halves views float16 values as their bits.
func halves(s []float16.Float16) []uint16 {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&s[0])), len(s))
}

func lenOf(flat any) int {
	switch s := flat.(type) {
	case []float16.Float16:
		return len(s)
	case []float32:
		return len(s)
	case []float64:
		return len(s)
	case []bfloat16.BFloat16:
		return len(s)
	}
	return 0
}

// float16From64 rounds x to the nearest binary16, ties to even, in one
// rounding: x is first rounded to float32 to odd (its last bit set when
// inexact), which keeps enough bits for the second rounding to be the
// correct one (float32 has 13 more significand bits than binary16).
func float16From64(x float64) uint16 {
	f := float32(x)
	if math.IsNaN(x) || math.IsInf(float64(f), 0) || float64(f) == x {
		return precision.Float16(f)
	}
	// Toward zero, then the sticky bit.
	if math.Abs(float64(f)) > math.Abs(x) {
		f = math.Nextafter32(f, 0)
	}
	return precision.Float16(math.Float32frombits(math.Float32bits(f) | 1))
}
