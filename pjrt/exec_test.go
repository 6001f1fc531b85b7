package pjrt

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

type op = backends.Op

func bin(f func(b *Builder, x, y op) (op, error)) buildFn {
	return one(func(b *Builder, p []op) (op, error) { return f(b, p[0], p[1]) })
}

func un(f func(b *Builder, x op) (op, error)) buildFn {
	return one(func(b *Builder, p []op) (op, error) { return f(b, p[0]) })
}

// execCase runs build on inputs and compares with want. Expected values
// are exact arithmetic on exactly representable inputs, worked out by hand
// from the op's definition (the StableHLO specification, GoMLX's backend
// documentation); tol > 0 only where the reference is Go's math package.
type execCase struct {
	name   string
	inputs []in
	build  buildFn
	want   []in
	tol    float64
}

func f32s(v ...float32) []float32 { return v }

var execCases = []execCase{
	// Element-wise arithmetic.
	{"AddF32", []in{vec(f32s(1.5, -2, 3)), vec(f32s(0.25, 4, -8))}, bin((*Builder).Add), []in{vec(f32s(1.75, 2, -5))}, 0},
	{"SubF64", []in{vec([]float64{1, 0.5}), vec([]float64{0.25, 2})}, bin((*Builder).Sub), []in{vec([]float64{0.75, -1.5})}, 0},
	{"MulF32", []in{vec(f32s(1.5, -2, 3)), vec(f32s(0.25, 4, -8))}, bin((*Builder).Mul), []in{vec(f32s(0.375, -8, -24))}, 0},
	{"DivF32", []in{vec(f32s(1.5, -2, 3)), vec(f32s(0.25, 4, -8))}, bin((*Builder).Div), []in{vec(f32s(6, -0.5, -0.375))}, 0},
	{"DivInt32Truncates", []in{vec([]int32{7, -7, 7}), vec([]int32{2, 2, -2})}, bin((*Builder).Div), []in{vec([]int32{3, -3, -3})}, 0},
	{"RemF32SignOfDividend", []in{vec(f32s(7.5, -7.5)), vec(f32s(2, 2))}, bin((*Builder).Rem), []in{vec(f32s(1.5, -1.5))}, 0},
	{"RemInt32", []in{vec([]int32{7, -7, 7}), vec([]int32{3, 3, -3})}, bin((*Builder).Rem), []in{vec([]int32{1, -1, 1})}, 0},
	{"PowF32", []in{vec(f32s(2, 3, 4)), vec(f32s(3, 2, 0.5))}, bin((*Builder).Pow), []in{vec(f32s(8, 9, 2))}, 0},
	{"PowInt32", []in{vec([]int32{2, -3}), vec([]int32{10, 3})}, bin((*Builder).Pow), []in{vec([]int32{1024, -27})}, 0},
	{"MaxMin", []in{vec([]int64{1, -5, 3}), vec([]int64{2, -6, 3})},
		func(b *Builder, p []op) ([]op, error) {
			x, err := b.Max(p[0], p[1])
			if err != nil {
				return nil, err
			}
			y, err := b.Min(p[0], p[1])
			return []op{x, y}, err
		}, []in{vec([]int64{2, -5, 3}), vec([]int64{1, -6, 3})}, 0},
	{"AddScalarBroadcast", []in{mat(f32s(1, 2, 3, 4, 5, 6), 2, 3), scalar(float32(10))}, bin((*Builder).Add),
		[]in{mat(f32s(11, 12, 13, 14, 15, 16), 2, 3)}, 0},
	{"AddDimOneBroadcast", []in{mat(f32s(1, 2), 2, 1), mat(f32s(10, 20, 30), 1, 3)}, bin((*Builder).Add),
		[]in{mat(f32s(11, 21, 31, 12, 22, 32), 2, 3)}, 0},
	{"NegUnsignedWraps", []in{vec([]uint8{0, 1, 200})}, un((*Builder).Neg), []in{vec([]uint8{0, 255, 56})}, 0},
	{"NegF32", []in{vec(f32s(1, -2, 0))}, un((*Builder).Neg), []in{vec(f32s(-1, 2, negZ))}, 0},
	{"AbsInt", []in{vec([]int32{-3, 0, 4})}, un((*Builder).Abs), []in{vec([]int32{3, 0, 4})}, 0},
	{"AbsUnsigned", []in{vec([]uint16{0, 65535})}, un((*Builder).Abs), []in{vec([]uint16{0, 65535})}, 0},
	{"SignF32", []in{vec(f32s(-2, 0, 3, nan32))}, un((*Builder).Sign), []in{vec(f32s(-1, 0, 1, nan32))}, 0},
	{"SignInt", []in{vec([]int8{-7, 0, 9})}, un((*Builder).Sign), []in{vec([]int8{-1, 0, 1})}, 0},
	{"SignUnsigned", []in{vec([]uint32{0, 7})}, un((*Builder).Sign), []in{vec([]uint32{0, 1})}, 0},

	// Rounding: round half to even (GoMLX's Round, StableHLO round_nearest_even).
	{"Round", []in{vec(f32s(-1.5, -0.5, 0.5, 1.5, 2.5, 2.6))}, un((*Builder).Round), []in{vec(f32s(-2, negZ, 0, 2, 2, 3))}, 0},
	{"Ceil", []in{vec(f32s(-1.5, 0.2, 2))}, un((*Builder).Ceil), []in{vec(f32s(-1, 1, 2))}, 0},
	{"Floor", []in{vec(f32s(-1.5, 0.2, 2))}, un((*Builder).Floor), []in{vec(f32s(-2, 0, 2))}, 0},
	{"Sqrt", []in{vec(f32s(4, 0.25, 0))}, un((*Builder).Sqrt), []in{vec(f32s(2, 0.5, 0))}, 0},
	{"Rsqrt", []in{vec(f32s(4, 0.25))}, un((*Builder).Rsqrt), []in{vec(f32s(0.5, 2))}, 1e-6},

	// Transcendental functions against Go's math package.
	{"Exp", []in{vec([]float64{0, 1, -2.5})}, un((*Builder).Exp), []in{vec([]float64{1, math.E, math.Exp(-2.5)})}, 1e-12},
	{"Expm1", []in{vec([]float64{1e-10, 1})}, un((*Builder).Expm1), []in{vec([]float64{math.Expm1(1e-10), math.Expm1(1)})}, 1e-12},
	{"Log", []in{vec([]float64{1, math.E, 10})}, un((*Builder).Log), []in{vec([]float64{0, 1, math.Log(10)})}, 1e-12},
	{"Log1p", []in{vec([]float64{1e-10, 1})}, un((*Builder).Log1p), []in{vec([]float64{math.Log1p(1e-10), math.Ln2})}, 1e-12},
	{"Sin", []in{vec([]float64{0, math.Pi / 2, 1})}, un((*Builder).Sin), []in{vec([]float64{0, 1, math.Sin(1)})}, 1e-12},
	{"Cos", []in{vec([]float64{0, math.Pi, 1})}, un((*Builder).Cos), []in{vec([]float64{1, -1, math.Cos(1)})}, 1e-12},
	{"Tanh", []in{vec([]float64{0, 0.5, -3})}, un((*Builder).Tanh), []in{vec([]float64{0, math.Tanh(0.5), math.Tanh(-3)})}, 1e-12},
	{"Logistic", []in{vec([]float64{0, 2, -2})}, un((*Builder).Logistic), []in{vec([]float64{0.5, 1 / (1 + math.Exp(-2)), 1 / (1 + math.Exp(2))})}, 1e-12},
	{"ErfF32", []in{vec(f32s(0, 0.5, -1, 3))}, un((*Builder).Erf),
		[]in{vec(f32s(0, float32(math.Erf(0.5)), float32(math.Erf(-1)), float32(math.Erf(3))))}, 1e-6},
	{"ErfF64", []in{vec([]float64{0.25, -2})}, un((*Builder).Erf), []in{vec([]float64{math.Erf(0.25), math.Erf(-2)})}, 1e-12},

	// Bit operations.
	{"BitwiseAndOrXor", []in{vec([]uint8{0xF0, 0x0F}), vec([]uint8{0xFF, 0x3C})},
		func(b *Builder, p []op) ([]op, error) {
			a, _ := b.BitwiseAnd(p[0], p[1])
			o, _ := b.BitwiseOr(p[0], p[1])
			x, err := b.BitwiseXor(p[0], p[1])
			return []op{a, o, x}, err
		}, []in{vec([]uint8{0xF0, 0x0C}), vec([]uint8{0xFF, 0x3F}), vec([]uint8{0x0F, 0x33})}, 0},
	{"BitwiseNot", []in{vec([]int16{0, -1, 5})}, un((*Builder).BitwiseNot), []in{vec([]int16{-1, 0, -6})}, 0},
	{"ShiftLeft", []in{vec([]int32{1, -1}), vec([]int32{3, 1})}, bin((*Builder).ShiftLeft), []in{vec([]int32{8, -2})}, 0},
	{"ShiftRightArithmetic", []in{vec([]int32{-16, 16}), vec([]int32{2, 2})}, bin((*Builder).ShiftRightArithmetic), []in{vec([]int32{-4, 4})}, 0},
	{"ShiftRightLogical", []in{vec([]int32{-16, 16}), vec([]int32{28, 2})}, bin((*Builder).ShiftRightLogical), []in{vec([]int32{15, 4})}, 0},
	{"BitCount", []in{vec([]int32{0, 1, -1, 255})}, un((*Builder).BitCount), []in{vec([]int32{0, 1, 32, 8})}, 0},
	{"Clz", []in{vec([]uint32{1, 0x80000000, 0})}, un((*Builder).Clz), []in{vec([]uint32{31, 0, 32})}, 0},

	// Comparisons and predicates.
	{"LessThanWithNaN", []in{vec(f32s(1, 2, nan32)), vec(f32s(2, 2, 1))}, bin((*Builder).LessThan), []in{vec([]bool{true, false, false})}, 0},
	{"EqualSignedZeros", []in{vec(f32s(negZ, 1)), vec(f32s(0, 1))}, bin((*Builder).Equal), []in{vec([]bool{true, true})}, 0},
	// Total order: -0 < +0, NaN above +Inf, NaN equal to itself.
	{"EqualTotalOrder", []in{vec(f32s(negZ, nan32)), vec(f32s(0, nan32))}, bin((*Builder).EqualTotalOrder), []in{vec([]bool{false, true})}, 0},
	{"LessThanTotalOrder", []in{vec(f32s(negZ, inf32, -inf32)), vec(f32s(0, nan32, 1))}, bin((*Builder).LessThanTotalOrder), []in{vec([]bool{true, true, true})}, 0},
	{"GreaterThanTotalOrder", []in{vec(f32s(nan32, 0)), vec(f32s(inf32, negZ))}, bin((*Builder).GreaterThanTotalOrder), []in{vec([]bool{true, true})}, 0},
	{"GreaterOrEqualTotalOrder", []in{vec(f32s(negZ, 1)), vec(f32s(0, 1))}, bin((*Builder).GreaterOrEqualTotalOrder), []in{vec([]bool{false, true})}, 0},
	{"LessOrEqualTotalOrder", []in{vec(f32s(0, 2)), vec(f32s(negZ, 2))}, bin((*Builder).LessOrEqualTotalOrder), []in{vec([]bool{false, true})}, 0},
	{"NotEqualTotalOrder", []in{vec(f32s(negZ, 3)), vec(f32s(0, 3))}, bin((*Builder).NotEqualTotalOrder), []in{vec([]bool{true, false})}, 0},
	{"TotalOrderInt", []in{vec([]int32{-1, 5}), vec([]int32{1, 5})}, bin((*Builder).LessThanTotalOrder), []in{vec([]bool{true, false})}, 0},
	{"LessThanUnsigned", []in{vec([]uint32{0xFFFFFFFF, 1}), vec([]uint32{1, 2})}, bin((*Builder).LessThan), []in{vec([]bool{false, true})}, 0},
	{"GreaterOrEqualInt", []in{vec([]int8{-128, 3}), vec([]int8{127, 3})}, bin((*Builder).GreaterOrEqual), []in{vec([]bool{false, true})}, 0},
	{"NotEqualBool", []in{vec([]bool{true, false}), vec([]bool{true, true})}, bin((*Builder).NotEqual), []in{vec([]bool{false, true})}, 0},
	{"GreaterThanLessOrEqual", []in{vec([]float64{1, 2}), vec([]float64{1, 1})},
		func(b *Builder, p []op) ([]op, error) {
			g, _ := b.GreaterThan(p[0], p[1])
			l, err := b.LessOrEqual(p[0], p[1])
			return []op{g, l}, err
		}, []in{vec([]bool{false, true}), vec([]bool{true, false})}, 0},
	{"IsFiniteIsNaN", []in{vec(f32s(1, inf32, -inf32, nan32))},
		func(b *Builder, p []op) ([]op, error) {
			f, _ := b.IsFinite(p[0])
			n, err := b.IsNaN(p[0])
			return []op{f, n}, err
		}, []in{vec([]bool{true, false, false, false}), vec([]bool{false, false, false, true})}, 0},
	{"IsFiniteIsNaNInt", []in{vec([]int32{1, -1})},
		func(b *Builder, p []op) ([]op, error) {
			f, _ := b.IsFinite(p[0])
			n, err := b.IsNaN(p[0])
			return []op{f, n}, err
		}, []in{vec([]bool{true, true}), vec([]bool{false, false})}, 0},
	{"Logical", []in{vec([]bool{true, true, false, false}), vec([]bool{true, false, true, false})},
		func(b *Builder, p []op) ([]op, error) {
			a, _ := b.LogicalAnd(p[0], p[1])
			o, _ := b.LogicalOr(p[0], p[1])
			x, _ := b.LogicalXor(p[0], p[1])
			n, err := b.LogicalNot(p[0])
			return []op{a, o, x, n}, err
		}, []in{vec([]bool{true, false, false, false}), vec([]bool{true, true, true, false}),
			vec([]bool{false, true, true, false}), vec([]bool{false, false, true, true})}, 0},

	// Selection.
	{"WhereScalarBranch", []in{vec([]bool{true, false, true}), vec(f32s(1, 2, 3)), scalar(float32(-1))},
		one(func(b *Builder, p []op) (op, error) { return b.Where(p[0], p[1], p[2]) }), []in{vec(f32s(1, -1, 3))}, 0},
	{"WhereScalarCondition", []in{scalar(false), vec([]int32{1, 2}), vec([]int32{3, 4})},
		one(func(b *Builder, p []op) (op, error) { return b.Where(p[0], p[1], p[2]) }), []in{vec([]int32{3, 4})}, 0},
	{"Clamp", []in{scalar(float32(0)), vec(f32s(-1, 0.5, 2)), scalar(float32(1))},
		one(func(b *Builder, p []op) (op, error) { return b.Clamp(p[0], p[1], p[2]) }), []in{vec(f32s(0, 0.5, 1))}, 0},
	{"ClampPerElement", []in{vec([]int32{0, 5}), vec([]int32{-3, 3}), vec([]int32{1, 9})},
		one(func(b *Builder, p []op) (op, error) { return b.Clamp(p[0], p[1], p[2]) }), []in{vec([]int32{0, 5})}, 0},

	// Shapes and data movement.
	{"Reshape", []in{mat(f32s(1, 2, 3, 4, 5, 6), 2, 3)}, one(func(b *Builder, p []op) (op, error) { return b.Reshape(p[0], 3, 2) }),
		[]in{mat(f32s(1, 2, 3, 4, 5, 6), 3, 2)}, 0},
	{"Transpose", []in{mat(f32s(1, 2, 3, 4, 5, 6), 2, 3)}, one(func(b *Builder, p []op) (op, error) { return b.Transpose(p[0], 1, 0) }),
		[]in{mat(f32s(1, 4, 2, 5, 3, 6), 3, 2)}, 0},
	{"BroadcastInDim", []in{vec([]int32{1, 2})}, one(func(b *Builder, p []op) (op, error) {
		return b.BroadcastInDim(p[0], shapes.Make(dtypes.Int32, 2, 3), []int{0})
	}), []in{mat([]int32{1, 1, 1, 2, 2, 2}, 2, 3)}, 0},
	{"SliceStrided", []in{vec([]int32{0, 1, 2, 3, 4})}, one(func(b *Builder, p []op) (op, error) {
		return b.Slice(p[0], []int{2}, []int{5}, []int{2})
	}), []in{vec([]int32{2, 4})}, 0},
	{"Concatenate", []in{mat([]int32{1, 2, 3, 4}, 2, 2), mat([]int32{5, 6}, 2, 1)}, one(func(b *Builder, p []op) (op, error) {
		return b.Concatenate(1, p[0], p[1])
	}), []in{mat([]int32{1, 2, 5, 3, 4, 6}, 2, 3)}, 0},
	{"PadInterior", []in{vec(f32s(1, 2, 3)), scalar(float32(0))}, one(func(b *Builder, p []op) (op, error) {
		return b.Pad(p[0], p[1], backends.PadAxis{Start: 1, End: 2, Interior: 1})
	}), []in{vec(f32s(0, 1, 0, 2, 0, 3, 0, 0))}, 0},
	{"PadNegative", []in{vec(f32s(1, 2, 3, 4)), scalar(float32(9))}, one(func(b *Builder, p []op) (op, error) {
		return b.Pad(p[0], p[1], backends.PadAxis{Start: -1, End: 1})
	}), []in{vec(f32s(2, 3, 4, 9))}, 0},
	{"Reverse", []in{mat([]int32{1, 2, 3, 4, 5, 6}, 2, 3)}, one(func(b *Builder, p []op) (op, error) { return b.Reverse(p[0], 1) }),
		[]in{mat([]int32{3, 2, 1, 6, 5, 4}, 2, 3)}, 0},
	{"Iota", []in{scalar(int32(0))}, one(func(b *Builder, p []op) (op, error) {
		io, err := b.Iota(shapes.Make(dtypes.Int32, 2, 3), 1)
		if err != nil {
			return nil, err
		}
		return b.Add(io, p[0])
	}), []in{mat([]int32{0, 1, 2, 0, 1, 2}, 2, 3)}, 0},
	{"ConvertFloatToIntTruncates", []in{vec(f32s(-1.7, 2.9, 0))}, one(func(b *Builder, p []op) (op, error) { return b.ConvertDType(p[0], dtypes.Int32) }),
		[]in{vec([]int32{-1, 2, 0})}, 0},
	{"ConvertToBool", []in{vec(f32s(0, 2, -0.5))}, one(func(b *Builder, p []op) (op, error) { return b.ConvertDType(p[0], dtypes.Bool) }),
		[]in{vec([]bool{false, true, true})}, 0},
	{"ConvertFromBool", []in{vec([]bool{false, true})}, one(func(b *Builder, p []op) (op, error) { return b.ConvertDType(p[0], dtypes.Float64) }),
		[]in{vec([]float64{0, 1})}, 0},
	{"ConvertToBFloat16AndBack", []in{vec(f32s(1, 1.5, -2))}, one(func(b *Builder, p []op) (op, error) {
		h, err := b.ConvertDType(p[0], dtypes.BFloat16)
		if err != nil {
			return nil, err
		}
		return b.ConvertDType(h, dtypes.Float32)
	}), []in{vec(f32s(1, 1.5, -2))}, 0},
	// 1.0f is 0x3F800000 (IEEE 754 binary32).
	{"BitcastFloatToInt", []in{vec(f32s(1, -2))}, one(func(b *Builder, p []op) (op, error) { return b.Bitcast(p[0], dtypes.Int32) }),
		[]in{vec([]int32{0x3F800000, -0x40000000})}, 0},
	// Little-endian: the low half comes first.
	{"BitcastNarrower", []in{vec([]uint32{0xDEADBEEF})}, one(func(b *Builder, p []op) (op, error) { return b.Bitcast(p[0], dtypes.Uint16) }),
		[]in{mat([]uint16{0xBEEF, 0xDEAD}, 1, 2)}, 0},
	// Start 8 with size 3 in a dimension of 10 is clamped to 7.
	{"DynamicSliceClamped", []in{vec([]int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}), scalar(int32(8))}, one(func(b *Builder, p []op) (op, error) {
		return b.DynamicSlice(p[0], []op{p[1]}, []int{3})
	}), []in{vec([]int32{7, 8, 9})}, 0},
	{"DynamicSlice2D", []in{mat([]int32{1, 2, 3, 4, 5, 6, 7, 8, 9}, 3, 3), scalar(int32(1)), scalar(int64(1))}, one(func(b *Builder, p []op) (op, error) {
		return b.DynamicSlice(p[0], []op{p[1], p[2]}, []int{2, 2})
	}), []in{mat([]int32{5, 6, 8, 9}, 2, 2)}, 0},
	// Start -1 is clamped to 0.
	{"DynamicUpdateSliceClamped", []in{vec([]int32{0, 0, 0, 0}), vec([]int32{7, 8}), scalar(int32(-1))}, one(func(b *Builder, p []op) (op, error) {
		return b.DynamicUpdateSlice(p[0], p[1], []op{p[2]})
	}), []in{vec([]int32{7, 8, 0, 0})}, 0},
	// Rows 2, 0 and (clamped) 3 of a 4x2 table.
	{"GatherRows", []in{mat(f32s(0, 1, 10, 11, 20, 21, 30, 31), 4, 2), mat([]int32{2, 0, 9}, 3, 1)}, one(func(b *Builder, p []op) (op, error) {
		return b.Gather(p[0], p[1], 1, []int{1}, []int{0}, []int{0}, []int{1, 2}, false)
	}), []in{mat(f32s(20, 21, 0, 1, 30, 31), 3, 2)}, 0},
	// Duplicate indices accumulate.
	{"ScatterSum", []in{vec(f32s(0, 0, 0, 0, 0)), mat([]int32{1, 1, 3}, 3, 1), vec(f32s(1, 2, 3))}, one(func(b *Builder, p []op) (op, error) {
		return b.ScatterSum(p[0], p[1], p[2], 1, nil, []int{0}, []int{0}, false, false)
	}), []in{vec(f32s(0, 3, 0, 3, 0))}, 0},
	{"ScatterMax", []in{vec([]int32{5, 5, 5}), mat([]int32{0, 1, 1}, 3, 1), vec([]int32{9, 1, 7})}, one(func(b *Builder, p []op) (op, error) {
		return b.ScatterMax(p[0], p[1], p[2], 1, nil, []int{0}, []int{0}, false, false)
	}), []in{vec([]int32{9, 7, 5})}, 0},
	{"ScatterMin", []in{vec([]int32{5, 5, 5}), mat([]int32{2, 2}, 2, 1), vec([]int32{3, 4})}, one(func(b *Builder, p []op) (op, error) {
		return b.ScatterMin(p[0], p[1], p[2], 1, nil, []int{0}, []int{0}, false, false)
	}), []in{vec([]int32{5, 5, 3})}, 0},
	// Whole rows scattered into a 3x2 matrix.
	{"ScatterRows", []in{mat(f32s(0, 0, 0, 0, 0, 0), 3, 2), mat([]int32{2}, 1, 1), mat(f32s(4, 5), 1, 2)}, one(func(b *Builder, p []op) (op, error) {
		return b.ScatterSum(p[0], p[1], p[2], 1, []int{1}, []int{0}, []int{0}, true, true)
	}), []in{mat(f32s(0, 0, 0, 0, 4, 5), 3, 2)}, 0},

	// Reductions.
	{"ReduceSumAxes", []in{mat(f32s(1, 2, 3, 4, 5, 6), 2, 3)}, func(b *Builder, p []op) ([]op, error) {
		r1, _ := b.ReduceSum(p[0], 1)
		r0, _ := b.ReduceSum(p[0], 0)
		ra, err := b.ReduceSum(p[0])
		return []op{r1, r0, ra}, err
	}, []in{vec(f32s(6, 15)), vec(f32s(5, 7, 9)), scalar(float32(21))}, 0},
	{"ReduceMaxMin", []in{mat([]int32{-1, 7, 3, -9}, 2, 2)}, func(b *Builder, p []op) ([]op, error) {
		mx, _ := b.ReduceMax(p[0], 1)
		mn, err := b.ReduceMin(p[0], 0)
		return []op{mx, mn}, err
	}, []in{vec([]int32{7, 3}), vec([]int32{-1, -9})}, 0},
	// Reducing an empty axis gives the identity: -inf for max, 0 for sum.
	{"ReduceEmptyAxis", []in{mat(f32s(), 2, 0)}, func(b *Builder, p []op) ([]op, error) {
		mx, _ := b.ReduceMax(p[0], 1)
		s, err := b.ReduceSum(p[0], 1)
		return []op{mx, s}, err
	}, []in{vec(f32s(-inf32, -inf32)), vec(f32s(0, 0))}, 0},
	{"ReduceProduct", []in{mat([]int64{1, 2, 3, 4, 5, 6}, 2, 3)}, one(func(b *Builder, p []op) (op, error) { return b.ReduceProduct(p[0], 1) }),
		[]in{vec([]int64{6, 120})}, 0},
	{"ReduceBitwise", []in{vec([]uint8{0xF3, 0x3F, 0x01})}, func(b *Builder, p []op) ([]op, error) {
		a, _ := b.ReduceBitwiseAnd(p[0])
		o, _ := b.ReduceBitwiseOr(p[0])
		x, err := b.ReduceBitwiseXor(p[0])
		return []op{a, o, x}, err
	}, []in{scalar(uint8(0x01)), scalar(uint8(0xFF)), scalar(uint8(0xCD))}, 0},
	{"ReduceBitwiseAndSigned", []in{vec([]int32{-1, -2})}, one(func(b *Builder, p []op) (op, error) { return b.ReduceBitwiseAnd(p[0]) }),
		[]in{scalar(int32(-2))}, 0},
	{"ReduceLogical", []in{mat([]bool{true, true, true, false, false, false}, 2, 3)}, func(b *Builder, p []op) ([]op, error) {
		a, _ := b.ReduceLogicalAnd(p[0], 1)
		o, _ := b.ReduceLogicalOr(p[0], 1)
		x, err := b.ReduceLogicalXor(p[0], 1)
		return []op{a, o, x}, err
	}, []in{vec([]bool{true, false}), vec([]bool{true, false}), vec([]bool{true, false})}, 0},
	// GoMLX's own examples (backends/standard_ops.go).
	{"ArgMinMaxDocExamples", []in{mat(f32s(2, 0, 7, -3, 4, 2), 2, 3)}, func(b *Builder, p []op) ([]op, error) {
		mn, _ := b.ArgMinMax(p[0], 1, dtypes.Int32, true)
		mx, err := b.ArgMinMax(p[0], 0, dtypes.Int64, false)
		return []op{mn, mx}, err
	}, []in{vec([]int32{1, 0}), vec([]int64{0, 1, 0})}, 0},
	// Ties go to the first index; a NaN wins, the first NaN if several.
	{"ArgMinMaxTiesAndNaN", []in{vec(f32s(1, 3, 3, 1)), vec(f32s(1, nan32, 5, nan32)), vec(f32s(-inf32, -inf32))}, func(b *Builder, p []op) ([]op, error) {
		tieMax, _ := b.ArgMinMax(p[0], 0, dtypes.Int32, false)
		tieMin, _ := b.ArgMinMax(p[0], 0, dtypes.Int32, true)
		nanMax, _ := b.ArgMinMax(p[1], 0, dtypes.Int32, false)
		nanMin, _ := b.ArgMinMax(p[1], 0, dtypes.Int32, true)
		inf, err := b.ArgMinMax(p[2], 0, dtypes.Int32, false)
		return []op{tieMax, tieMin, nanMax, nanMin, inf}, err
	}, []in{scalar(int32(1)), scalar(int32(0)), scalar(int32(1)), scalar(int32(1)), scalar(int32(0))}, 0},
	{"ArgMaxInt8Extremes", []in{vec([]int8{-128, -128, 5, 127, 127})}, func(b *Builder, p []op) ([]op, error) {
		mx, _ := b.ArgMinMax(p[0], 0, dtypes.Uint8, false)
		mn, err := b.ArgMinMax(p[0], 0, dtypes.Uint8, true)
		return []op{mx, mn}, err
	}, []in{scalar(uint8(3)), scalar(uint8(0))}, 0},

	// Window ops.
	{"MaxPool2x2", []in{mat(f32s(1, 2, 5, 6, 3, 4, 7, 8, 9, 10, 13, 14, 11, 12, 15, 16), 1, 4, 4, 1)}, one(func(b *Builder, p []op) (op, error) {
		return b.ReduceWindow(p[0], backends.ReduceOpMax, []int{1, 2, 2, 1}, nil, nil, nil, nil)
	}), []in{mat(f32s(4, 8, 12, 16), 1, 2, 2, 1)}, 0},
	// [1,2,3] dilated by 2 is [1,0,2,0,3]; windows of 2 sum to 1,2,2,3.
	{"ReduceWindowBaseDilation", []in{vec(f32s(1, 2, 3))}, one(func(b *Builder, p []op) (op, error) {
		return b.ReduceWindow(p[0], backends.ReduceOpSum, []int{2}, []int{1}, []int{2}, nil, nil)
	}), []in{vec(f32s(1, 2, 2, 3))}, 0},
	// Window 2 dilated by 2 covers x[i] and x[i+2].
	{"ReduceWindowDilationPadding", []in{vec([]int32{1, 2, 3, 4})}, one(func(b *Builder, p []op) (op, error) {
		return b.ReduceWindow(p[0], backends.ReduceOpProduct, []int{2}, []int{1}, nil, []int{2}, [][2]int{{1, 0}})
	}), []in{vec([]int32{2, 3, 8})}, 0},
	{"ReduceWindowMin", []in{vec([]int64{4, 2, 8, 1})}, one(func(b *Builder, p []op) (op, error) {
		return b.ReduceWindow(p[0], backends.ReduceOpMin, []int{2}, []int{2}, nil, nil, nil)
	}), []in{vec([]int64{2, 1})}, 0},
	// Windows {1,3} and {2,4}: the maxima are at 1 and 3.
	{"SelectAndScatterMax", []in{vec(f32s(1, 3, 2, 4)), vec(f32s(10, 20))}, one(func(b *Builder, p []op) (op, error) {
		return b.SelectAndScatterMax(p[0], p[1], []int{2}, []int{2}, nil)
	}), []in{vec(f32s(0, 10, 0, 20))}, 0},
	// Overlapping windows {5,1},{1,7} both pick the 1.
	{"SelectAndScatterMinOverlap", []in{vec(f32s(5, 1, 7)), vec(f32s(10, 20))}, one(func(b *Builder, p []op) (op, error) {
		return b.SelectAndScatterMin(p[0], p[1], []int{2}, []int{1}, nil)
	}), []in{vec(f32s(0, 30, 0))}, 0},

	// Linear algebra.
	{"DotMatrix", []in{mat(f32s(1, 2, 3, 4), 2, 2), mat(f32s(5, 6, 7, 8), 2, 2)}, bin((*Builder).Dot), []in{mat(f32s(19, 22, 43, 50), 2, 2)}, 0},
	{"DotVector", []in{vec([]int32{1, 2, 3}), vec([]int32{4, 5, 6})}, bin((*Builder).Dot), []in{scalar(int32(32))}, 0},
	{"DotMatrixVector", []in{mat([]float64{1, 2, 3, 4, 5, 6}, 2, 3), vec([]float64{1, 0, -1})}, bin((*Builder).Dot), []in{vec([]float64{-2, -2})}, 0},
	// Batch of 2: [1 2]·[[1],[1]] = 3 and [3 4]·[[2],[0]] = 6.
	{"DotGeneralBatched", []in{mat(f32s(1, 2, 3, 4), 2, 1, 2), mat(f32s(1, 1, 2, 0), 2, 2, 1)}, one(func(b *Builder, p []op) (op, error) {
		return b.DotGeneral(p[0], []int{2}, []int{0}, p[1], []int{1}, []int{0})
	}), []in{mat(f32s(3, 6), 2, 1, 1)}, 0},
	// Contracting the first axes: xᵀ·y.
	{"DotGeneralTransposed", []in{mat(f32s(1, 2, 3, 4), 2, 2), mat(f32s(1, 0, 0, 1), 2, 2)}, one(func(b *Builder, p []op) (op, error) {
		return b.DotGeneral(p[0], []int{0}, nil, p[1], []int{0}, nil)
	}), []in{mat(f32s(1, 3, 2, 4), 2, 2)}, 0},
	// Convolution is a cross-correlation (no kernel flip): [1,2,3,4,5] ⋆ [1,0,-1] = -2, -2, -2.
	{"Conv1D", []in{mat(f32s(1, 2, 3, 4, 5), 1, 5, 1), mat(f32s(1, 0, -1), 3, 1, 1)}, one(func(b *Builder, p []op) (op, error) {
		axes := backends.ConvolveAxesConfig{InputBatch: 0, InputChannels: 2, InputSpatial: []int{1},
			KernelInputChannels: 1, KernelOutputChannels: 2, KernelSpatial: []int{0},
			OutputBatch: 0, OutputChannels: 2, OutputSpatial: []int{1}}
		return b.ConvGeneral(p[0], p[1], axes, nil, nil, nil, nil, 1, 1)
	}), []in{mat(f32s(-2, -2, -2), 1, 3, 1)}, 0},
	// 3x3 ones kernel, padding 1, stride 2 over 1..9: sums of the 2x2
	// corner blocks 1+2+4+5, 2+3+5+6, 4+5+7+8, 5+6+8+9.
	{"Conv2DStridePad", []in{mat(f32s(1, 2, 3, 4, 5, 6, 7, 8, 9), 1, 1, 3, 3), mat(f32s(1, 1, 1, 1, 1, 1, 1, 1, 1), 1, 1, 3, 3)}, one(func(b *Builder, p []op) (op, error) {
		axes := backends.ConvolveAxesConfig{InputBatch: 0, InputChannels: 1, InputSpatial: []int{2, 3},
			KernelInputChannels: 1, KernelOutputChannels: 0, KernelSpatial: []int{2, 3},
			OutputBatch: 0, OutputChannels: 1, OutputSpatial: []int{2, 3}}
		return b.ConvGeneral(p[0], p[1], axes, []int{2, 2}, [][2]int{{1, 1}, {1, 1}}, nil, nil, 1, 1)
	}), []in{mat(f32s(12, 16, 24, 28), 1, 1, 2, 2)}, 0},
	// Two input channels in two groups: each output channel sees one input channel.
	{"ConvGrouped", []in{mat(f32s(1, 10, 2, 20), 1, 2, 2), mat(f32s(1, 2), 1, 1, 2)}, one(func(b *Builder, p []op) (op, error) {
		axes := backends.ConvolveAxesConfig{InputBatch: 0, InputChannels: 2, InputSpatial: []int{1},
			KernelInputChannels: 1, KernelOutputChannels: 2, KernelSpatial: []int{0},
			OutputBatch: 0, OutputChannels: 2, OutputSpatial: []int{1}}
		return b.ConvGeneral(p[0], p[1], axes, nil, nil, nil, nil, 2, 1)
	}), []in{mat(f32s(1, 20, 2, 40), 1, 2, 2)}, 0},
	// DFT of an impulse is flat; of a constant, an impulse.
	{"FFT", []in{vec([]complex64{1, 0, 0, 0}), vec([]complex64{1, 1, 1, 1})}, func(b *Builder, p []op) ([]op, error) {
		x, _ := b.FFT(p[0], backends.FFTForward, []int{4})
		y, err := b.FFT(p[1], backends.FFTForward, []int{4})
		return []op{x, y}, err
	}, []in{vec([]complex64{1, 1, 1, 1}), vec([]complex64{4, 0, 0, 0})}, 1e-6},
	// RFFT [1,2,3,4] = [10, -2+2i, -2]; IFFT undoes FFT.
	{"RFFTAndInverse", []in{vec(f32s(1, 2, 3, 4)), vec([]complex64{complex(1, 1), 2, 3, complex(0, -4)})}, func(b *Builder, p []op) ([]op, error) {
		r, _ := b.FFT(p[0], backends.FFTForwardReal, []int{4})
		back, _ := b.FFT(r, backends.FFTInverseReal, []int{4})
		f, _ := b.FFT(p[1], backends.FFTForward, []int{4})
		i, err := b.FFT(f, backends.FFTInverse, []int{4})
		return []op{r, back, i}, err
	}, []in{vec([]complex64{10, complex(-2, 2), -2}), vec(f32s(1, 2, 3, 4)), vec([]complex64{complex(1, 1), 2, 3, complex(0, -4)})}, 1e-5},

	// Complex numbers.
	{"ComplexParts", []in{vec(f32s(3, -1)), vec(f32s(4, 2))}, func(b *Builder, p []op) ([]op, error) {
		c, _ := b.Complex(p[0], p[1])
		re, _ := b.Real(c)
		im, _ := b.Imag(c)
		cj, _ := b.Conj(c)
		ab, err := b.Abs(c)
		return []op{c, re, im, cj, ab}, err
	}, []in{vec([]complex64{complex(3, 4), complex(-1, 2)}), vec(f32s(3, -1)), vec(f32s(4, 2)),
		vec([]complex64{complex(3, -4), complex(-1, -2)}), vec(f32s(5, float32(math.Sqrt(5))))}, 1e-6},
	// (1+2i)(3+4i) = -5+10i.
	{"ComplexMul", []in{vec([]complex128{complex(1, 2)}), vec([]complex128{complex(3, 4)})}, bin((*Builder).Mul), []in{vec([]complex128{complex(-5, 10)})}, 0},
	{"RealImagOfReal", []in{vec(f32s(3, -1))}, func(b *Builder, p []op) ([]op, error) {
		re, _ := b.Real(p[0])
		im, _ := b.Imag(p[0])
		cj, err := b.Conj(p[0])
		return []op{re, im, cj}, err
	}, []in{vec(f32s(3, -1)), vec(f32s(0, 0)), vec(f32s(3, -1))}, 0},

	// Batch normalisation: (x - mean) / sqrt(var + eps) * scale + offset.
	// Feature 0: mean 1, var 3, eps 1 -> divide by 2; feature 1: mean 2, var 0 -> divide by 1.
	{"BatchNormForInference", []in{mat(f32s(1, 2, 3, 4), 2, 2), vec(f32s(2, 1)), vec(f32s(1, 0)), vec(f32s(1, 2)), vec(f32s(3, 0))},
		one(func(b *Builder, p []op) (op, error) {
			return b.BatchNormForInference(p[0], p[1], p[2], p[3], p[4], 1, 1)
		}),
		[]in{mat(f32s(1, 0, 3, 2), 2, 2)}, 1e-6},
	// Columns [1,3] and [2,6]: means 2 and 4, biased variances 1 and 4.
	{"BatchNormForTraining", []in{mat(f32s(1, 2, 3, 6), 2, 2), vec(f32s(1, 1)), vec(f32s(0, 0))},
		func(b *Builder, p []op) ([]op, error) {
			n, m, v, err := b.BatchNormForTraining(p[0], p[1], p[2], 1e-6, 1)
			return []op{n, m, v}, err
		}, []in{mat(f32s(-1, -1, 1, 1), 2, 2), vec(f32s(2, 4)), vec(f32s(1, 4))}, 1e-5},
	// The offset gradient is the sum of the output gradient over the batch;
	// with unit variance and scale, the scale gradient is sum(g * (x - mean)).
	{"BatchNormGradient", []in{mat(f32s(1, 2, 3, 6), 2, 2), vec(f32s(1, 1)), vec(f32s(2, 4)), vec(f32s(1, 1)), mat(f32s(1, 2, 3, 4), 2, 2)},
		func(b *Builder, p []op) ([]op, error) {
			_, s, o, err := b.BatchNormGradient(p[0], p[1], p[2], p[3], p[4], 1e-9, 1)
			return []op{s, o}, err
		}, []in{vec(f32s(1*-1+3*1, 2*-2+4*2)), vec(f32s(4, 6))}, 1e-5},
}

func TestExecOps(t *testing.T) {
	eng := cpuEngine(t)
	names := map[string]bool{}
	for _, tc := range execCases {
		t.Run(tc.name, func(t *testing.T) {
			if names[tc.name] {
				t.Fatalf("duplicate case")
			}
			names[tc.name] = true
			outs := run(t, eng, tc.name, tc.build, tc.inputs...)
			if len(outs) != len(tc.want) {
				t.Fatalf("%d outputs, want %d", len(outs), len(tc.want))
			}
			for i, w := range tc.want {
				checkOut(t, outs[i], w, tc.tol)
			}
		})
	}
}

// TestExecRNG checks the Philox generator is a function of its state: the
// same state gives the same bits and the returned state moves on.
func TestExecRNG(t *testing.T) {
	eng := cpuEngine(t)
	state := vec([]uint64{42, 0, 7})
	build := func(b *Builder, p []op) ([]op, error) {
		s1, v1, err := b.RNGBitGenerator(p[0], shapes.Make(dtypes.Uint32, 64))
		if err != nil {
			return nil, err
		}
		_, v2, err := b.RNGBitGenerator(s1, shapes.Make(dtypes.Uint32, 64))
		return []op{s1, v1, v2}, err
	}
	a := run(t, eng, "rng", build, state)
	b := run(t, eng, "rng", build, state)
	for i := range a {
		if err := sameValues(a[i].flat, b[i].flat, 0); err != nil {
			t.Errorf("output %d differs between runs from the same state: %v", i, err)
		}
	}
	if err := sameValues(a[0].flat, state.flat, 0); err == nil {
		t.Error("the state did not advance")
	}
	if err := sameValues(a[1].flat, a[2].flat, 0); err == nil {
		t.Error("two draws from successive states are equal")
	}
	distinct := map[uint32]bool{}
	for _, v := range a[1].flat.([]uint32) {
		distinct[v] = true
	}
	if len(distinct) < 60 {
		t.Errorf("only %d distinct values among 64 random uint32", len(distinct))
	}
}
