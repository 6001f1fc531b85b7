package onnx

import (
	"math"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
)

// Narrow element types: the 8- and 4-bit floats (FLOAT8E4M3FN,
// FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ, FLOAT8E8M0, FLOAT4E2M1) and
// the 4- and 2-bit integers (INT4, UINT4, INT2, UINT2). Neither backend
// computes in them, so the importer names them with the ir dtypes XLA
// gives them (logical dtypes only: no graph node ever has one) and holds
// their values widened in a carrier dtype that represents every value
// exactly: Float32 for the floats, Int8 or Uint8 for the integers. Model
// inputs and outputs of these types are exchanged in the carrier, as
// onnxpb.Tensor.ToIR decodes them (ValueSpec.Narrow names the type).
//
// Conversions into them follow the ONNX specification:
//   - FLOAT8 (https://onnx.ai/onnx/technical/float8.html, and the Cast table
//     at https://onnx.ai/onnx/operators/onnx__Cast.html): round to nearest
//     even; with saturate (the default) values beyond the largest finite
//     value, infinities included, become it (signed); without, they become
//     NaN, or infinity for E5M2, the one format that has infinities. NaN
//     stays NaN. The FNUZ formats have no negative zero and one NaN (0x80,
//     the code of -0 elsewhere): a negative value that rounds to zero, -0
//     included, becomes +0, and every NaN the one NaN (the carrier's
//     positive quiet NaN, what onnxpb decodes 0x80 to). The other formats
//     keep the sign of zero: -0 and negative values that round to zero
//     give -0.
//   - FLOAT4E2M1 (https://onnx.ai/onnx/technical/float4.html): round to
//     nearest even, always saturating at ±6; ±0 as the FN formats. NaN has
//     no encoding and becomes -0, as the reference implementation's
//     ml_dtypes conversion gives for a NaN without its sign bit (numpy's
//     nan, the ONNX test data's); for one with the sign bit ml_dtypes gives
//     +0, a sign the graph cannot read on the pure-Go backend (no bitcast),
//     so both paths give -0 for every NaN.
//   - FLOAT8E8M0 (Cast 24, https://onnx.ai/onnx/operators/onnx__Cast.html):
//     a power of two 2^(e-127) from float32's biased exponent e, with
//     round_mode "up" (default), "down" or "nearest"; 0xFF is NaN (NaN and
//     infinities); saturate keeps 2^127 from rounding up to NaN.
//   - INT4/UINT4 (https://onnx.ai/onnx/technical/int4.html) and INT2/UINT2
//     (onnx.proto, https://github.com/onnx/onnx/blob/v1.23.2/onnx/onnx.proto):
//     Cast truncates toward zero and wraps modulo 16 or 4, as Cast does for
//     every integer type; QuantizeLinear rounds half to even and saturates
//     to the type's range.

// minifloat describes a narrow float format for rounding: m mantissa bits,
// emin the exponent of the smallest normal value (subnormals have quantum
// 2^(emin-m)), max the largest finite value.
type minifloat struct {
	m, emin, emax int
	max           float64
	inf           bool // has infinities (E5M2): non-saturating overflow gives ±Inf
	noNaN         bool // no NaN encoding (E2M1): NaN becomes -0, overflow always saturates
	fnuz          bool // no negative zero, one NaN (the FNUZ formats): zeros are +0
}

var minifloats = map[ir.DType]minifloat{
	ir.DType(dtF8E4M3FN):   {m: 3, emin: -6, emax: 8, max: 448},
	ir.DType(dtF8E4M3FNUZ): {m: 3, emin: -7, emax: 7, max: 240, fnuz: true},
	ir.DType(dtF8E5M2):     {m: 2, emin: -14, emax: 15, max: 57344, inf: true},
	ir.DType(dtF8E5M2FNUZ): {m: 2, emin: -15, emax: 15, max: 57344, fnuz: true},
	ir.DType(dtF4E2M1):     {m: 1, emin: 0, emax: 2, max: 6, noNaN: true},
}

// The ir dtypes (XLA's numbering) that name the narrow ONNX types.
const (
	dtF8E5M2     = 16
	dtF8E4M3FN   = 17
	dtF8E5M2FNUZ = 19
	dtF8E4M3FNUZ = 20
	dtS4         = 21
	dtU4         = 22
	dtS2         = 24
	dtU2         = 25
	dtF8E8M0     = 28
	dtF4E2M1     = 29
)

var (
	f8E4M3FN   = ir.DType(dtF8E4M3FN)
	f8E4M3FNUZ = ir.DType(dtF8E4M3FNUZ)
	f8E5M2     = ir.DType(dtF8E5M2)
	f8E5M2FNUZ = ir.DType(dtF8E5M2FNUZ)
	f8E8M0     = ir.DType(dtF8E8M0)
	f4E2M1     = ir.DType(dtF4E2M1)
	s4         = ir.DType(dtS4)
	u4         = ir.DType(dtU4)
	s2         = ir.DType(dtS2)
	u2         = ir.DType(dtU2)
)

// isNarrowFloat says whether dt is one of the 8- or 4-bit float types.
func isNarrowFloat(dt ir.DType) bool {
	_, ok := minifloats[dt]
	return ok || dt == f8E8M0
}

// isNarrowInt says whether dt is INT4, UINT4, INT2 or UINT2.
func isNarrowInt(dt ir.DType) bool { return dt == s4 || dt == u4 || dt == s2 || dt == u2 }

// isNarrow says whether dt is a narrow type held in a carrier.
func isNarrow(dt ir.DType) bool { return isNarrowFloat(dt) || isNarrowInt(dt) }

// carrierDType is the dtype that holds a narrow type's values exactly.
func carrierDType(dt ir.DType) ir.DType {
	switch {
	case isNarrowFloat(dt):
		return ir.Float32
	case dt == s4 || dt == s2:
		return ir.Int8
	case dt == u4 || dt == u2:
		return ir.Uint8
	}
	return dt
}

// narrowIntBits is the width of a narrow integer type and whether it is signed.
func narrowIntBits(dt ir.DType) (bits int, signed bool) {
	switch dt {
	case s4:
		return 4, true
	case u4:
		return 4, false
	case s2:
		return 2, true
	case u2:
		return 2, false
	}
	return 0, false
}

// narrowIntRange is the saturation range of a narrow integer type.
func narrowIntRange(dt ir.DType) (lo, hi float64) {
	bits, signed := narrowIntBits(dt)
	if signed {
		return -float64(int(1) << (bits - 1)), float64(int(1)<<(bits-1) - 1)
	}
	return 0, float64(int(1)<<bits - 1)
}

// wrapInt wraps v to a narrow integer type (two's complement, as Cast).
func wrapInt(v int64, dt ir.DType) int64 {
	bits, signed := narrowIntBits(dt)
	u := v & (1<<bits - 1)
	if signed && u >= 1<<(bits-1) {
		u -= 1 << bits
	}
	return u
}

// encodeFloat returns v rounded to the narrow float format dt (its value,
// as a float64), with ONNX's saturate semantics for FLOAT8 (see above).
func encodeFloat(v float64, dt ir.DType, saturate bool) float64 {
	if dt == f8E8M0 {
		return encodeE8M0(float32(v), saturate, "up")
	}
	f := minifloats[dt]
	if math.IsNaN(v) {
		switch {
		case f.noNaN:
			return math.Copysign(0, -1)
		case f.fnuz:
			return math.NaN()
		}
		return v
	}
	a := math.Abs(v)
	q := math.Ldexp(1, f.emin-f.m)
	if a >= math.Ldexp(1, f.emin+1) && !math.IsInf(a, 0) {
		_, e := math.Frexp(a) // a = frac·2^e, frac in [0.5, 1)
		q = math.Ldexp(1, e-1-f.m)
	}
	r := math.RoundToEven(a/q) * q
	if math.IsInf(a, 0) {
		r = a
	}
	if r > f.max {
		switch {
		case saturate || f.noNaN:
			r = f.max
		case f.inf:
			r = math.Inf(1)
		default:
			return math.NaN()
		}
	}
	if math.Signbit(v) && !(f.fnuz && r == 0) {
		r = -r
	}
	return r
}

// encodeE8M0 converts a float32 to FLOAT8E8M0 (see above), returning the
// value 2^(e-127) or NaN.
func encodeE8M0(x float32, saturate bool, mode string) float64 {
	bits := math.Float32bits(x)
	e := int(bits>>23) & 0xFF
	frac := bits & 0x7FFFFF
	if e == 0xFF {
		return math.NaN()
	}
	up := false
	switch mode {
	case "nearest":
		g, r, s := bits&0x400000 != 0, bits&0x200000 != 0, bits&0x1FFFFF != 0
		up = g && (r || s || e > 0)
	case "up":
		up = frac != 0
	}
	if up && !(saturate && e == 0xFE) {
		e++
	}
	if e == 0xFF {
		return math.NaN()
	}
	return math.Ldexp(1, e-127)
}

// roundToMinifloat rounds a Float32 node to the narrow float format dt in
// the graph, returning a Float32 node of representable values. It works in
// Float64 with only comparisons and exact arithmetic: the quantum
// 2^(e-m) of each element's binade comes from a binary search over the
// format's exponent range with exact power-of-two thresholds.
func roundToMinifloat(x *graph.Node, dt ir.DType, saturate bool) *graph.Node {
	g := x.Graph()
	x64 := graph.ConvertDType(x, ir.Float64)
	a := graph.Abs(x64)
	f := minifloats[dt]
	c := func(v float64) *graph.Node { return graph.Scalar(g, ir.Float64, v) }
	// p = 2^e for the largest e in [emin, emax] with 2^e <= a (emin when
	// a is smaller).
	p := graph.BroadcastToDims(c(math.Ldexp(1, f.emin)), a.Shape().Dimensions...)
	span := f.emax - f.emin
	for step := 1 << 6; step >= 1; step >>= 1 {
		if step > span {
			continue
		}
		t := graph.Mul(p, c(math.Ldexp(1, step)))
		p = graph.Where(graph.LessOrEqual(t, a), t, p)
	}
	q := graph.Mul(p, c(math.Ldexp(1, -f.m)))
	r := graph.Mul(roundHalfEven(graph.Div(a, q)), q)
	isInf := graph.Equal(a, c(math.Inf(1)))
	r = graph.Where(isInf, a, r)
	over := graph.GreaterThan(r, c(f.max))
	switch {
	case saturate || f.noNaN:
		r = graph.Where(over, c(f.max), r)
	case f.inf:
		r = graph.Where(over, c(math.Inf(1)), r)
	default:
		r = graph.Where(over, c(math.NaN()), r)
	}
	neg := signBit(x64)
	r = graph.Where(neg, graph.Neg(r), r)
	// Zeros from explicit constants: the pure-Go backend's Abs keeps -0's
	// sign, so Neg above may have flipped a zero the wrong way. -0 is a
	// Const of its own: graph.Scalar caches constants by value, where -0
	// is 0.
	negZero := graph.Const(g, math.Copysign(0, -1))
	zeroSign := graph.Where(neg, negZero, c(0))
	switch {
	case f.noNaN:
		r = graph.Where(graph.Equal(r, c(0)), zeroSign, r)
		r = graph.Where(graph.IsNaN(x64), negZero, r)
	case f.fnuz: // no -0, one NaN
		r = graph.Where(graph.Equal(r, c(0)), c(0), r)
		r = graph.Where(graph.LogicalOr(graph.IsNaN(x64), graph.IsNaN(r)), c(math.NaN()), r)
	default:
		r = graph.Where(graph.Equal(r, c(0)), zeroSign, r)
		r = graph.Where(graph.IsNaN(x64), x64, r)
	}
	return graph.ConvertDType(r, ir.Float32)
}

// signBit is x's sign bit for every x but NaN (false there): x < 0, or x
// is -0 (1/-0 is -Inf). Comparisons alone see -0 as 0, and the pure-Go
// backend has no bitcast to read the bit.
func signBit(x *graph.Node) *graph.Node {
	zero := graph.ScalarZero(x.Graph(), x.DType())
	negZero := graph.LogicalAnd(graph.Equal(x, zero), graph.LessThan(graph.Reciprocal(x), zero))
	return graph.LogicalOr(graph.LessThan(x, zero), negZero)
}

// roundToE8M0 is encodeE8M0 in the graph, in Float64: the biased exponent
// e of float32 |x| (0 for zeros and subnormals) by binary search, then the
// rounding mode's increment.
func roundToE8M0(x *graph.Node, saturate bool, mode string) *graph.Node {
	g := x.Graph()
	x64 := graph.ConvertDType(x, ir.Float64)
	a := graph.Abs(x64)
	c := func(v float64) *graph.Node { return graph.Scalar(g, ir.Float64, v) }
	dims := a.Shape().Dimensions
	// p = 2^(e-127) for normal |x| (e >= 1), from 2^-126 up.
	p := graph.BroadcastToDims(c(0x1p-126), dims...)
	for step := 1 << 7; step >= 1; step >>= 1 {
		t := graph.Mul(p, c(math.Ldexp(1, step)))
		p = graph.Where(graph.LessOrEqual(t, a), t, p)
	}
	normal := graph.GreaterOrEqual(a, c(0x1p-126))
	var up *graph.Node
	switch mode {
	case "nearest":
		// Normal: the dropped fraction is at least one half (ties round up,
		// the reference's lsb being the nonzero exponent). Subnormal (code
		// 0, value 2^-127): up when above 2^-127.
		up = graph.Where(normal, graph.GreaterOrEqual(a, graph.Mul(p, c(1.5))), graph.GreaterThan(a, c(0x1p-127)))
	case "up":
		up = graph.Where(normal, graph.GreaterThan(a, p), graph.GreaterThan(a, c(0)))
	default:
		up = graph.Equal(a, c(-1)) // never
	}
	base := graph.Where(normal, p, graph.BroadcastToDims(c(0x1p-127), dims...))
	if saturate {
		up = graph.LogicalAnd(up, graph.LessThan(base, c(0x1p127)))
	}
	r := graph.Where(up, graph.Mul(base, c(2)), base)
	r = graph.Where(graph.GreaterThan(r, c(0x1p127)), c(math.NaN()), r)
	r = graph.Where(graph.IsFinite(x64), r, c(math.NaN()))
	return graph.ConvertDType(r, ir.Float32)
}

// wrapIntNode wraps an integer node to a narrow integer type (two's
// complement), returning a node of its carrier dtype.
func wrapIntNode(x *graph.Node, dt ir.DType) *graph.Node {
	bits, signed := narrowIntBits(dt)
	v := x
	if v.DType() != ir.Int64 {
		v = graph.ConvertDType(v, ir.Int64)
	}
	g := v.Graph()
	m := int64(1) << bits
	u := graph.BitwiseAnd(v, graph.Scalar(g, ir.Int64, m-1))
	if signed {
		u = graph.Where(graph.GreaterOrEqual(u, graph.Scalar(g, ir.Int64, m/2)), graph.Sub(u, graph.Scalar(g, ir.Int64, m)), u)
	}
	return graph.ConvertDType(u, carrierDType(dt))
}
