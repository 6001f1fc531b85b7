package engine

import (
	"fmt"
	"math"
	"reflect"
	"unsafe"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"

	"github.com/tensorbridge/tensorbridge/cpu/parallel"
	"github.com/tensorbridge/tensorbridge/precision"
)

// bfloat16 is a storage type here, as float16 is (f16.go): values are kept
// as bfloat16 and every op that reads them computes in float32. The
// builder records such an op as
//
//	ConvertDType(bf16 → f32) of its bfloat16 inputs (exact: a 16-bit shift)
//	→ the op on float32 (native kernels: GEMM, fused element-wise regions,
//	  reductions, ...)
//	→ ConvertDType(f32 → bf16) of its float32 results,
//
// so each op's bfloat16 result is its float32 result rounded once, to
// nearest with ties to even (NaN stays a quiet NaN, overflow goes to
// infinity: package precision's BFloat16). That is what XLA's CPU backend
// and PyTorch give: a bfloat16 matrix product accumulates in float32 and
// rounds its result once; a reduction sums in float32 and rounds the sum
// once; an element-wise op rounds its result. Inside one op nothing is
// rounded to bfloat16: a DotGeneral's products and partial sums, a
// ReduceSum's partial sums, a fused op's intermediate values are float32
// (fusion never spans two recorded ops of a bfloat16 graph: the rounding
// between them is a ConvertDType pair, which ends a region).
//
// GoMLX's simplego computes bfloat16 itself (a generic path per element,
// tens of times slower than its float32 kernels) and rounds by truncation
// (bfloat16.FromFloat32 keeps the top 16 bits); this engine never hands it
// a bfloat16 op, so results round to nearest even instead and run on the
// float32 kernels.
//
// Conversions: bfloat16 to and from float32 and float64 run natively
// (float64 to bfloat16 in one rounding, through float32 rounded to odd);
// integers and other dtypes go to bfloat16 through float64, exact for
// integers up to 2⁵³ in magnitude (an int64 or uint64 beyond that rounds
// twice), and from bfloat16 through float32 (exact).

// narrowFloat reports whether dt is a 16-bit float this engine stores and
// computes in float32.
func narrowFloat(dt dtypes.DType) bool { return dt == dtypes.Float16 || dt == dtypes.BFloat16 }

// brains views bfloat16 values as their bits.
func brains(s []bfloat16.BFloat16) []uint16 {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&s[0])), len(s))
}

// bf16Converter returns the loop converting src into dst over [lo, hi)
// when one of them is []bfloat16.BFloat16 and the other []float32 or
// []float64, else nil.
func bf16Converter(dst, src any) func(lo, hi int) {
	switch d := dst.(type) {
	case []bfloat16.BFloat16:
		h := brains(d)
		switch s := src.(type) {
		case []float32:
			return func(lo, hi int) { narrowBF16(h[lo:hi], s[lo:hi]) }
		case []float64:
			return func(lo, hi int) {
				for i := lo; i < hi; i++ {
					h[i] = bfloat16From64(s[i])
				}
			}
		}
	case []float32:
		if s, ok := src.([]bfloat16.BFloat16); ok {
			return func(lo, hi int) { widenBF16(d[lo:hi], brains(s)[lo:hi]) }
		}
	case []float64:
		if s, ok := src.([]bfloat16.BFloat16); ok {
			h := brains(s)
			return func(lo, hi int) {
				for i := lo; i < hi; i++ {
					d[i] = float64(math.Float32frombits(uint32(h[i]) << 16))
				}
			}
		}
	}
	return nil
}

// widenBF16 sets d[i] to the float32 value of bfloat16 bits h[i]: the bits
// shifted into the high half, exact.
func widenBF16(d []float32, h []uint16) {
	h = h[:len(d)]
	k := widenBF16Arch(d, h)
	for i, v := range h[k:] {
		d[k+i] = math.Float32frombits(uint32(v) << 16)
	}
}

// narrowBF16 sets d[i] to the bfloat16 bits nearest to a[i], ties to even
// (precision.BFloat16; the AVX2 loop computes the same bits).
func narrowBF16(d []uint16, a []float32) {
	a = a[:len(d)]
	k := narrowBF16Arch(d, a)
	precision.BFloat16s(d[k:], a[k:])
}

// bfloat16From64 rounds x to the nearest bfloat16, ties to even, in one
// rounding: x is first rounded to float32 to odd (its last bit set when
// inexact), which keeps enough bits for the second rounding to be the
// correct one (float32 has 16 more significand bits than bfloat16, two
// more suffice, and the same exponent range).
func bfloat16From64(x float64) uint16 {
	return precision.BFloat16(toOdd32(x))
}

// toOdd32 rounds x to float32 toward zero and sets the last significand
// bit when that was inexact (rounding to odd); NaN, infinities and values
// exact in float32 convert plainly.
func toOdd32(x float64) float32 {
	f := float32(x)
	if math.IsNaN(x) || math.IsInf(float64(f), 0) || float64(f) == x {
		return f
	}
	if math.Abs(float64(f)) > math.Abs(x) {
		f = math.Nextafter32(f, 0)
	}
	return math.Float32frombits(math.Float32bits(f) | 1)
}

// bitcastBF16 records a Bitcast between bfloat16 and another 2-byte dtype
// (int16, uint16), run natively (bitcast16Kernel: simplego v0.26.0 has no
// Bitcast); ok is false for any other Bitcast reading or making a 16-bit
// float, which the caller refuses.
func (b *Builder) bitcastBF16(x *value, to dtypes.DType) (backends.Op, bool, error) {
	from := x.shape().DType
	if from == dtypes.Float16 || to == dtypes.Float16 || from.Size() != 2 || to.Size() != 2 {
		return nil, false, nil
	}
	out := x.shape().Clone()
	out.DType = to
	o, err := b.recordShaped(backends.OpTypeBitcast, out, func(t backends.Builder, in []backends.Op) ([]backends.Op, error) {
		return nil, fmt.Errorf("Bitcast %s to %s runs natively only", from, to)
	}, x)
	return o, true, err
}

// bitcast16Kernel returns the native kernel of a Bitcast between two
// 2-byte dtypes, one of them bfloat16: a copy of the bits.
func bitcast16Kernel(n *node) kernel {
	if n.op != backends.OpTypeBitcast || len(n.in) != 1 {
		return nil
	}
	from, to := n.in[0].shape().DType, n.shapes[0].DType
	if (from != dtypes.BFloat16 && to != dtypes.BFloat16) || from.Size() != 2 || to.Size() != 2 {
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
		s, ok1 := bits16(src)
		d, ok2 := bits16(dst)
		if !ok1 || !ok2 || len(s) != len(d) {
			_ = r.x.e.inner.BufferFinalize(ob)
			return nil, fmt.Errorf("Bitcast %s to %s: buffers of %T and %T", from, to, src, dst)
		}
		copy(d, s)
		return r.one(ob), nil
	}
}

// bits16 views a flat slice of a 2-byte dtype as its bits; ok is false
// for any other type.
func bits16(flat any) (bits []uint16, ok bool) {
	v := reflect.ValueOf(flat)
	if v.Kind() != reflect.Slice || v.Type().Elem().Size() != 2 {
		return nil, false
	}
	if v.Len() == 0 {
		return nil, true
	}
	return unsafe.Slice((*uint16)(v.UnsafePointer()), v.Len()), true
}

// roundBF16Attr marks a ConvertDType node float32 → float32 that rounds
// each value to bfloat16 precision, to nearest even, and keeps it in
// float32: ConvertDType(ConvertDType(x, bfloat16), float32) in one op.
// The builder records it where an op widens a bfloat16 value that the op
// before it narrowed (roundTripBF16), so a chain of bfloat16 element-wise
// ops keeps its rounding after every op yet fuses into one region
// (fuse.go), with no pass through memory between the ops.
type roundBF16Attr struct{}

// isRoundBF16 reports whether n is such a rounding.
func isRoundBF16(n *node) bool {
	_, ok := n.attr.(roundBF16Attr)
	return ok
}

// roundTripWindow is how many ops after a narrowing to bfloat16 a
// widening of it may be recorded and still read the float32 value before
// the narrowing (roundTripBF16): that value then stays live until the
// widening runs, so a bfloat16 activation kept for the backward pass,
// widened far later, keeps its 2-byte form rather than 4 bytes.
const roundTripWindow = 64

// roundTripBF16 returns, for a widening of bfloat16 x to float32 where x
// is the narrowing of a float32 value y recorded at most roundTripWindow
// ops before, the rounding of y (ok true); otherwise ok is false.
func (b *Builder) roundTripBF16(x *value, to dtypes.DType) (backends.Op, bool, error) {
	n := x.n
	if to != dtypes.Float32 || x.shape().DType != dtypes.BFloat16 || n.op != backends.OpTypeConvertDType ||
		len(n.in) != 1 || n.in[0].shape().DType != dtypes.Float32 || len(b.nodes)-n.id > roundTripWindow {
		return nil, false, nil
	}
	o, err := b.recordShaped(backends.OpTypeConvertDType, n.in[0].shape(), func(t backends.Builder, in []backends.Op) ([]backends.Op, error) {
		return nil, fmt.Errorf("ConvertDType rounding to bfloat16 runs natively only")
	}, n.in[0])
	if err != nil {
		return nil, true, err
	}
	o.(*value).n.attr = roundBF16Attr{}
	return o, true, nil
}

// roundBF16Reg rounds each value of a to bfloat16 precision into d.
func roundBF16Reg(d, a []float32) {
	a = a[:len(d)]
	k := roundBF16Arch(d, a)
	for i, x := range a[k:] {
		i += k
		d[i] = math.Float32frombits(uint32(precision.BFloat16(x)) << 16)
	}
}

// roundBF16Kernel returns the native kernel of a rounding node when the
// engine does not fuse (a fused region runs it otherwise: fusable), else
// nil.
func roundBF16Kernel(e *Engine, n *node) kernel {
	if e.fuse {
		return nil
	}
	out := n.shapes[0]
	return func(r *run, ins []backends.Buffer) ([]backends.Buffer, error) {
		src, err := r.f32(ins[0])
		if err != nil {
			return nil, err
		}
		ob, flat, err := r.alloc(out)
		if err != nil {
			return nil, err
		}
		dst := flat.([]float32)
		if err := parallel.For(len(dst), 1<<14, r.threads, func(lo, hi int) { roundBF16Reg(dst[lo:hi], src[lo:hi]) }); err != nil {
			_ = r.x.e.inner.BufferFinalize(ob)
			return nil, err
		}
		return r.one(ob), nil
	}
}
