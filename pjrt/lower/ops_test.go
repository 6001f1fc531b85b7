package lower

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tensorbridge/tensorbridge/errs"
)

var (
	f32, f64, i32, i64, u8, u32, u64, c64, bl = dtypes.Float32, dtypes.Float64, dtypes.Int32, dtypes.Int64,
		dtypes.Uint8, dtypes.Uint32, dtypes.Uint64, dtypes.Complex64, dtypes.Bool
)

func sh(dt dtypes.DType, dims ...int) shapes.Shape { return shapes.Make(dt, dims...) }

type op = backends.Op

// opCase builds one op on parameters of the given shapes. want is the
// output shape computed by hand from the StableHLO specification's shape
// rules; hlo is the StableHLO op that must produce a value of that type,
// and attr, if set, must appear among its attributes.
type opCase struct {
	name   string
	params []shapes.Shape
	build  func(b *Builder, p []op) (op, error)
	want   shapes.Shape
	hlo    string
	attr   string
}

func unary(f func(*Builder, op) (op, error)) func(*Builder, []op) (op, error) {
	return func(b *Builder, p []op) (op, error) { return f(b, p[0]) }
}

func binary(f func(*Builder, op, op) (op, error)) func(*Builder, []op) (op, error) {
	return func(b *Builder, p []op) (op, error) { return f(b, p[0], p[1]) }
}

var opCases = []opCase{
	// Element-wise binary, with GoMLX's implicit broadcasting.
	{"Add", []shapes.Shape{sh(f32, 2, 3), sh(f32, 2, 3)}, binary((*Builder).Add), sh(f32, 2, 3), "stablehlo.add", ""},
	{"AddScalar", []shapes.Shape{sh(f32, 2, 3), sh(f32)}, binary((*Builder).Add), sh(f32, 2, 3), "stablehlo.add", ""},
	{"AddDimOne", []shapes.Shape{sh(f32, 2, 1), sh(f32, 1, 3)}, binary((*Builder).Add), sh(f32, 2, 3), "stablehlo.add", ""},
	{"Sub", []shapes.Shape{sh(i64, 4), sh(i64, 4)}, binary((*Builder).Sub), sh(i64, 4), "stablehlo.subtract", ""},
	{"Mul", []shapes.Shape{sh(c64, 4), sh(c64, 4)}, binary((*Builder).Mul), sh(c64, 4), "stablehlo.multiply", ""},
	{"Div", []shapes.Shape{sh(f64, 4), sh(f64)}, binary((*Builder).Div), sh(f64, 4), "stablehlo.divide", ""},
	{"Rem", []shapes.Shape{sh(i32, 4), sh(i32, 4)}, binary((*Builder).Rem), sh(i32, 4), "stablehlo.remainder", ""},
	{"Pow", []shapes.Shape{sh(f32, 4), sh(f32, 4)}, binary((*Builder).Pow), sh(f32, 4), "stablehlo.power", ""},
	{"Max", []shapes.Shape{sh(u8, 4), sh(u8, 4)}, binary((*Builder).Max), sh(u8, 4), "stablehlo.maximum", ""},
	{"Min", []shapes.Shape{sh(f32, 4), sh(f32, 4)}, binary((*Builder).Min), sh(f32, 4), "stablehlo.minimum", ""},
	{"BitwiseAnd", []shapes.Shape{sh(i32, 4), sh(i32, 4)}, binary((*Builder).BitwiseAnd), sh(i32, 4), "stablehlo.and", ""},
	{"BitwiseOr", []shapes.Shape{sh(u32, 4), sh(u32, 4)}, binary((*Builder).BitwiseOr), sh(u32, 4), "stablehlo.or", ""},
	{"BitwiseXor", []shapes.Shape{sh(u8, 4), sh(u8, 4)}, binary((*Builder).BitwiseXor), sh(u8, 4), "stablehlo.xor", ""},
	{"LogicalAnd", []shapes.Shape{sh(bl, 4), sh(bl, 4)}, binary((*Builder).LogicalAnd), sh(bl, 4), "stablehlo.and", ""},
	{"LogicalOr", []shapes.Shape{sh(bl, 4), sh(bl)}, binary((*Builder).LogicalOr), sh(bl, 4), "stablehlo.or", ""},
	{"LogicalXor", []shapes.Shape{sh(bl, 4), sh(bl, 4)}, binary((*Builder).LogicalXor), sh(bl, 4), "stablehlo.xor", ""},
	{"ShiftLeft", []shapes.Shape{sh(u8, 4), sh(u8, 4)}, binary((*Builder).ShiftLeft), sh(u8, 4), "stablehlo.shift_left", ""},
	{"ShiftRightArithmetic", []shapes.Shape{sh(i32, 4), sh(i32, 4)}, binary((*Builder).ShiftRightArithmetic), sh(i32, 4), "stablehlo.shift_right_arithmetic", ""},
	{"ShiftRightLogical", []shapes.Shape{sh(i64, 4), sh(i64, 4)}, binary((*Builder).ShiftRightLogical), sh(i64, 4), "stablehlo.shift_right_logical", ""},

	// Comparisons.
	{"Equal", []shapes.Shape{sh(f32, 2, 3), sh(f32, 2, 3)}, binary((*Builder).Equal), sh(bl, 2, 3), "stablehlo.compare", "comparison_type FLOAT"},
	{"NotEqualBool", []shapes.Shape{sh(bl, 3), sh(bl, 3)}, binary((*Builder).NotEqual), sh(bl, 3), "stablehlo.compare", "comparison_type UNSIGNED"},
	{"LessOrEqualUnsigned", []shapes.Shape{sh(u32, 3), sh(u32, 3)}, binary((*Builder).LessOrEqual), sh(bl, 3), "stablehlo.compare", "comparison_direction LE"},
	{"GreaterThan", []shapes.Shape{sh(i32, 3), sh(i32)}, binary((*Builder).GreaterThan), sh(bl, 3), "stablehlo.compare", "comparison_type SIGNED"},
	{"GreaterOrEqual", []shapes.Shape{sh(f64, 3), sh(f64, 3)}, binary((*Builder).GreaterOrEqual), sh(bl, 3), "stablehlo.compare", "comparison_direction GE"},
	{"LessThan", []shapes.Shape{sh(i64, 3), sh(i64, 3)}, binary((*Builder).LessThan), sh(bl, 3), "stablehlo.compare", "comparison_direction LT"},
	{"LessThanTotalOrder", []shapes.Shape{sh(f32, 3), sh(f32, 3)}, binary((*Builder).LessThanTotalOrder), sh(bl, 3), "stablehlo.compare", "comparison_type TOTALORDER"},
	{"EqualTotalOrder", []shapes.Shape{sh(f64, 3), sh(f64, 3)}, binary((*Builder).EqualTotalOrder), sh(bl, 3), "stablehlo.compare", "comparison_type TOTALORDER"},
	{"NotEqualTotalOrder", []shapes.Shape{sh(f32, 3), sh(f32, 3)}, binary((*Builder).NotEqualTotalOrder), sh(bl, 3), "stablehlo.compare", "comparison_direction NE"},
	{"GreaterOrEqualTotalOrder", []shapes.Shape{sh(f32, 3), sh(f32, 3)}, binary((*Builder).GreaterOrEqualTotalOrder), sh(bl, 3), "stablehlo.compare", "comparison_direction GE"},
	{"LessOrEqualTotalOrder", []shapes.Shape{sh(f32, 3), sh(f32, 3)}, binary((*Builder).LessOrEqualTotalOrder), sh(bl, 3), "stablehlo.compare", "comparison_direction LE"},
	// Integers have no TOTALORDER comparison type: their order is total already.
	{"GreaterThanTotalOrderInt", []shapes.Shape{sh(i32, 3), sh(i32, 3)}, binary((*Builder).GreaterThanTotalOrder), sh(bl, 3), "stablehlo.compare", "comparison_type SIGNED"},

	// Element-wise unary.
	{"Exp", []shapes.Shape{sh(f32, 3)}, unary((*Builder).Exp), sh(f32, 3), "stablehlo.exponential", ""},
	{"Expm1", []shapes.Shape{sh(f64, 3)}, unary((*Builder).Expm1), sh(f64, 3), "stablehlo.exponential_minus_one", ""},
	{"Log", []shapes.Shape{sh(f32, 3)}, unary((*Builder).Log), sh(f32, 3), "stablehlo.log", ""},
	{"Log1p", []shapes.Shape{sh(f32, 3)}, unary((*Builder).Log1p), sh(f32, 3), "stablehlo.log_plus_one", ""},
	{"Sqrt", []shapes.Shape{sh(f32, 3)}, unary((*Builder).Sqrt), sh(f32, 3), "stablehlo.sqrt", ""},
	{"Rsqrt", []shapes.Shape{sh(dtypes.BFloat16, 3)}, unary((*Builder).Rsqrt), sh(dtypes.BFloat16, 3), "stablehlo.rsqrt", ""},
	{"Ceil", []shapes.Shape{sh(f32, 3)}, unary((*Builder).Ceil), sh(f32, 3), "stablehlo.ceil", ""},
	{"Floor", []shapes.Shape{sh(dtypes.Float16, 3)}, unary((*Builder).Floor), sh(dtypes.Float16, 3), "stablehlo.floor", ""},
	{"Round", []shapes.Shape{sh(f32, 3)}, unary((*Builder).Round), sh(f32, 3), "stablehlo.round_nearest_even", ""},
	{"Cos", []shapes.Shape{sh(f32, 3)}, unary((*Builder).Cos), sh(f32, 3), "stablehlo.cosine", ""},
	{"Sin", []shapes.Shape{sh(f32, 3)}, unary((*Builder).Sin), sh(f32, 3), "stablehlo.sine", ""},
	{"Tanh", []shapes.Shape{sh(f32, 3)}, unary((*Builder).Tanh), sh(f32, 3), "stablehlo.tanh", ""},
	{"Logistic", []shapes.Shape{sh(f32, 3)}, unary((*Builder).Logistic), sh(f32, 3), "stablehlo.logistic", ""},
	{"Erf", []shapes.Shape{sh(f32, 3)}, unary((*Builder).Erf), sh(f32, 3), "chlo.erf", ""},
	{"BitCount", []shapes.Shape{sh(i32, 3)}, unary((*Builder).BitCount), sh(i32, 3), "stablehlo.popcnt", ""},
	{"Clz", []shapes.Shape{sh(u32, 3)}, unary((*Builder).Clz), sh(u32, 3), "stablehlo.count_leading_zeros", ""},
	{"BitwiseNot", []shapes.Shape{sh(u8, 3)}, unary((*Builder).BitwiseNot), sh(u8, 3), "stablehlo.not", ""},
	{"LogicalNot", []shapes.Shape{sh(bl, 3)}, unary((*Builder).LogicalNot), sh(bl, 3), "stablehlo.not", ""},
	{"IsFinite", []shapes.Shape{sh(f64, 3)}, unary((*Builder).IsFinite), sh(bl, 3), "stablehlo.is_finite", ""},
	{"IsNaN", []shapes.Shape{sh(f32, 3)}, unary((*Builder).IsNaN), sh(bl, 3), "stablehlo.compare", "comparison_direction NE"},
	{"Abs", []shapes.Shape{sh(i32, 3)}, unary((*Builder).Abs), sh(i32, 3), "stablehlo.abs", ""},
	{"AbsComplex", []shapes.Shape{sh(c64, 3)}, unary((*Builder).Abs), sh(f32, 3), "stablehlo.abs", ""},
	{"Neg", []shapes.Shape{sh(f32, 3)}, unary((*Builder).Neg), sh(f32, 3), "stablehlo.negate", ""},
	{"NegUnsigned", []shapes.Shape{sh(u32, 3)}, unary((*Builder).Neg), sh(u32, 3), "stablehlo.subtract", ""},
	{"Sign", []shapes.Shape{sh(f32, 3)}, unary((*Builder).Sign), sh(f32, 3), "stablehlo.sign", ""},
	{"SignUnsigned", []shapes.Shape{sh(u8, 3)}, unary((*Builder).Sign), sh(u8, 3), "stablehlo.minimum", ""},

	// Complex numbers.
	{"Complex", []shapes.Shape{sh(f32, 3), sh(f32, 3)}, binary((*Builder).Complex), sh(c64, 3), "stablehlo.complex", ""},
	{"Real", []shapes.Shape{sh(dtypes.Complex128, 3)}, unary((*Builder).Real), sh(f64, 3), "stablehlo.real", ""},
	{"Imag", []shapes.Shape{sh(c64, 3)}, unary((*Builder).Imag), sh(f32, 3), "stablehlo.imag", ""},
	{"ImagOfReal", []shapes.Shape{sh(f32, 3)}, unary((*Builder).Imag), sh(f32, 3), "stablehlo.broadcast_in_dim", ""},
	{"Conj", []shapes.Shape{sh(c64, 3)}, unary((*Builder).Conj), sh(c64, 3), "stablehlo.complex", ""},

	// Selection.
	{"Where", []shapes.Shape{sh(bl, 2, 3), sh(f32, 2, 3), sh(f32)}, func(b *Builder, p []op) (op, error) { return b.Where(p[0], p[1], p[2]) },
		sh(f32, 2, 3), "stablehlo.select", ""},
	{"WhereScalarCondition", []shapes.Shape{sh(bl), sh(i32, 4), sh(i32, 4)}, func(b *Builder, p []op) (op, error) { return b.Where(p[0], p[1], p[2]) },
		sh(i32, 4), "stablehlo.select", ""},
	{"Clamp", []shapes.Shape{sh(f32), sh(f32, 2, 3), sh(f32)}, func(b *Builder, p []op) (op, error) { return b.Clamp(p[0], p[1], p[2]) },
		sh(f32, 2, 3), "stablehlo.clamp", ""},

	// Shapes and data movement.
	{"Reshape", []shapes.Shape{sh(f32, 2, 3)}, func(b *Builder, p []op) (op, error) { return b.Reshape(p[0], 3, 2) }, sh(f32, 3, 2), "stablehlo.reshape", ""},
	{"Transpose", []shapes.Shape{sh(f32, 2, 3, 4)}, func(b *Builder, p []op) (op, error) { return b.Transpose(p[0], 2, 0, 1) },
		sh(f32, 4, 2, 3), "stablehlo.transpose", "array<i64: 2, 0, 1>"},
	{"BroadcastInDim", []shapes.Shape{sh(f32, 3)}, func(b *Builder, p []op) (op, error) { return b.BroadcastInDim(p[0], sh(f32, 2, 3), []int{1}) },
		sh(f32, 2, 3), "stablehlo.broadcast_in_dim", "broadcast_dimensions = array<i64: 1>"},
	{"Slice", []shapes.Shape{sh(f32, 5)}, func(b *Builder, p []op) (op, error) { return b.Slice(p[0], []int{1}, []int{5}, []int{2}) },
		sh(f32, 2), "stablehlo.slice", ""},
	{"Concatenate", []shapes.Shape{sh(f32, 2, 3), sh(f32, 2, 2)}, func(b *Builder, p []op) (op, error) { return b.Concatenate(1, p[0], p[1]) },
		sh(f32, 2, 5), "stablehlo.concatenate", ""},
	// dims: 1 + 2 + (2-1)*1 + 0 = 4 and 0 + 3 + 0 + 2 = 5 (spec, "pad").
	{"Pad", []shapes.Shape{sh(f32, 2, 3), sh(f32)}, func(b *Builder, p []op) (op, error) {
		return b.Pad(p[0], p[1], backends.PadAxis{Start: 1, Interior: 1}, backends.PadAxis{End: 2})
	}, sh(f32, 4, 5), "stablehlo.pad", "interior_padding = array<i64: 1, 0>"},
	{"Reverse", []shapes.Shape{sh(i32, 2, 3)}, func(b *Builder, p []op) (op, error) { return b.Reverse(p[0], 1) }, sh(i32, 2, 3), "stablehlo.reverse", ""},
	{"Iota", nil, func(b *Builder, p []op) (op, error) { return b.Iota(sh(i32, 2, 3), 1) }, sh(i32, 2, 3), "stablehlo.iota", "iota_dimension = 1"},
	{"ConvertDType", []shapes.Shape{sh(f32, 3)}, func(b *Builder, p []op) (op, error) { return b.ConvertDType(p[0], i32) }, sh(i32, 3), "stablehlo.convert", ""},
	{"BitcastSameSize", []shapes.Shape{sh(f32, 2)}, func(b *Builder, p []op) (op, error) { return b.Bitcast(p[0], i32) }, sh(i32, 2), "stablehlo.bitcast_convert", ""},
	{"BitcastNarrower", []shapes.Shape{sh(u32, 2)}, func(b *Builder, p []op) (op, error) { return b.Bitcast(p[0], dtypes.Uint16) },
		sh(dtypes.Uint16, 2, 2), "stablehlo.bitcast_convert", ""},
	{"BitcastWider", []shapes.Shape{sh(u8, 2, 4)}, func(b *Builder, p []op) (op, error) { return b.Bitcast(p[0], u32) }, sh(u32, 2), "stablehlo.bitcast_convert", ""},
	{"DynamicSlice", []shapes.Shape{sh(f32, 5, 4), sh(i32), sh(i32)}, func(b *Builder, p []op) (op, error) {
		return b.DynamicSlice(p[0], []op{p[1], p[2]}, []int{2, 4})
	}, sh(f32, 2, 4), "stablehlo.dynamic_slice", "slice_sizes = array<i64: 2, 4>"},
	{"DynamicSliceVectorIndices", []shapes.Shape{sh(f32, 5, 4), sh(i32, 2)}, func(b *Builder, p []op) (op, error) {
		return b.DynamicSlice(p[0], []op{p[1]}, []int{2, 1})
	}, sh(f32, 2, 1), "stablehlo.dynamic_slice", ""},
	{"DynamicSliceMixedIndices", []shapes.Shape{sh(f32, 5, 4), sh(i32), sh(i64)}, func(b *Builder, p []op) (op, error) {
		return b.DynamicSlice(p[0], []op{p[1], p[2]}, []int{1, 1})
	}, sh(f32, 1, 1), "stablehlo.dynamic_slice", ""},
	{"DynamicUpdateSlice", []shapes.Shape{sh(f32, 5, 4), sh(f32, 2, 4), sh(i32), sh(i32)}, func(b *Builder, p []op) (op, error) {
		return b.DynamicUpdateSlice(p[0], p[1], []op{p[2], p[3]})
	}, sh(f32, 5, 4), "stablehlo.dynamic_update_slice", ""},
	// Rows of a [5,3] table picked by 4 indices: batch dims [4] then the offset dim 3.
	{"Gather", []shapes.Shape{sh(f32, 5, 3), sh(i32, 4, 1)}, func(b *Builder, p []op) (op, error) {
		return b.Gather(p[0], p[1], 1, []int{1}, []int{0}, []int{0}, []int{1, 3}, false)
	}, sh(f32, 4, 3), "stablehlo.gather", "collapsed_slice_dims = [0]"},
	{"ScatterSum", []shapes.Shape{sh(f32, 5, 3), sh(i32, 2, 1), sh(f32, 2, 3)}, func(b *Builder, p []op) (op, error) {
		return b.ScatterSum(p[0], p[1], p[2], 1, []int{1}, []int{0}, []int{0}, false, false)
	}, sh(f32, 5, 3), "stablehlo.scatter", "inserted_window_dims = [0]"},
	{"ScatterMax", []shapes.Shape{sh(i32, 5), sh(i32, 2, 1), sh(i32, 2)}, func(b *Builder, p []op) (op, error) {
		return b.ScatterMax(p[0], p[1], p[2], 1, nil, []int{0}, []int{0}, true, true)
	}, sh(i32, 5), "stablehlo.scatter", "unique_indices = true"},
	{"ScatterMin", []shapes.Shape{sh(f32, 5), sh(i32, 2, 1), sh(f32, 2)}, func(b *Builder, p []op) (op, error) {
		return b.ScatterMin(p[0], p[1], p[2], 1, nil, []int{0}, []int{0}, false, false)
	}, sh(f32, 5), "stablehlo.scatter", ""},

	// Reductions.
	{"ReduceSum", []shapes.Shape{sh(f32, 2, 3)}, func(b *Builder, p []op) (op, error) { return b.ReduceSum(p[0], 1) }, sh(f32, 2), "stablehlo.reduce", "dimensions = array<i64: 1>"},
	{"ReduceSumNegativeAxis", []shapes.Shape{sh(f32, 2, 3)}, func(b *Builder, p []op) (op, error) { return b.ReduceSum(p[0], -2) }, sh(f32, 3), "stablehlo.reduce", "dimensions = array<i64: 0>"},
	{"ReduceMaxAll", []shapes.Shape{sh(f32, 2, 3)}, func(b *Builder, p []op) (op, error) { return b.ReduceMax(p[0]) }, sh(f32), "stablehlo.reduce", "dimensions = array<i64: 0, 1>"},
	{"ReduceMin", []shapes.Shape{sh(i64, 2, 3)}, func(b *Builder, p []op) (op, error) { return b.ReduceMin(p[0], 0) }, sh(i64, 3), "stablehlo.reduce", ""},
	{"ReduceProduct", []shapes.Shape{sh(i32, 2, 3)}, func(b *Builder, p []op) (op, error) { return b.ReduceProduct(p[0], 1) }, sh(i32, 2), "stablehlo.reduce", ""},
	{"ReduceBitwiseAnd", []shapes.Shape{sh(u32, 4)}, func(b *Builder, p []op) (op, error) { return b.ReduceBitwiseAnd(p[0]) }, sh(u32), "stablehlo.reduce", ""},
	{"ReduceBitwiseOr", []shapes.Shape{sh(i32, 4)}, func(b *Builder, p []op) (op, error) { return b.ReduceBitwiseOr(p[0]) }, sh(i32), "stablehlo.reduce", ""},
	{"ReduceBitwiseXor", []shapes.Shape{sh(u8, 4)}, func(b *Builder, p []op) (op, error) { return b.ReduceBitwiseXor(p[0]) }, sh(u8), "stablehlo.reduce", ""},
	{"ReduceLogicalAnd", []shapes.Shape{sh(bl, 2, 4)}, func(b *Builder, p []op) (op, error) { return b.ReduceLogicalAnd(p[0], 1) }, sh(bl, 2), "stablehlo.reduce", ""},
	{"ReduceLogicalOr", []shapes.Shape{sh(bl, 4)}, func(b *Builder, p []op) (op, error) { return b.ReduceLogicalOr(p[0]) }, sh(bl), "stablehlo.reduce", ""},
	{"ReduceLogicalXor", []shapes.Shape{sh(bl, 4)}, func(b *Builder, p []op) (op, error) { return b.ReduceLogicalXor(p[0]) }, sh(bl), "stablehlo.reduce", ""},
	{"ArgMin", []shapes.Shape{sh(f32, 2, 3)}, func(b *Builder, p []op) (op, error) { return b.ArgMinMax(p[0], 0, i64, true) }, sh(i64, 3), "stablehlo.reduce", ""},
	{"ArgMaxInt", []shapes.Shape{sh(i32, 2, 3)}, func(b *Builder, p []op) (op, error) { return b.ArgMinMax(p[0], -1, i32, false) }, sh(i32, 2), "stablehlo.reduce", ""},
	// Pooling: 4x4 with a 2x2 window and strides defaulting to the window: 2x2.
	{"ReduceWindowMax", []shapes.Shape{sh(f32, 1, 4, 4, 1)}, func(b *Builder, p []op) (op, error) {
		return b.ReduceWindow(p[0], backends.ReduceOpMax, []int{1, 2, 2, 1}, nil, nil, nil, nil)
	}, sh(f32, 1, 2, 2, 1), "stablehlo.reduce_window", "window_strides = array<i64: 1, 2, 2, 1>"},
	// Base dilation 2 makes 3 elements span 5; a window of 2 with stride 1 gives 4.
	{"ReduceWindowBaseDilation", []shapes.Shape{sh(f32, 3)}, func(b *Builder, p []op) (op, error) {
		return b.ReduceWindow(p[0], backends.ReduceOpSum, []int{2}, []int{1}, []int{2}, nil, nil)
	}, sh(f32, 4), "stablehlo.reduce_window", "base_dilations = array<i64: 2>"},
	// Padding 1 on each side: (4+2-3)/1+1 = 4.
	{"ReduceWindowPadded", []shapes.Shape{sh(i32, 4)}, func(b *Builder, p []op) (op, error) {
		return b.ReduceWindow(p[0], backends.ReduceOpProduct, []int{3}, []int{1}, nil, []int{1}, [][2]int{{1, 1}})
	}, sh(i32, 4), "stablehlo.reduce_window", "padding = dense<[[1, 1]]>"},
	{"SelectAndScatterMax", []shapes.Shape{sh(f32, 1, 4, 4, 1), sh(f32, 1, 2, 2, 1)}, func(b *Builder, p []op) (op, error) {
		return b.SelectAndScatterMax(p[0], p[1], []int{1, 2, 2, 1}, []int{1, 2, 2, 1}, nil)
	}, sh(f32, 1, 4, 4, 1), "stablehlo.select_and_scatter", ""},
	{"SelectAndScatterMin", []shapes.Shape{sh(f32, 4), sh(f32, 2)}, func(b *Builder, p []op) (op, error) {
		return b.SelectAndScatterMin(p[0], p[1], []int{2}, nil, nil)
	}, sh(f32, 4), "stablehlo.select_and_scatter", ""},

	// Linear algebra.
	{"DotGeneralBatched", []shapes.Shape{sh(f32, 2, 3, 4), sh(f32, 2, 4, 5)}, func(b *Builder, p []op) (op, error) {
		return b.DotGeneral(p[0], []int{2}, []int{0}, p[1], []int{1}, []int{0})
	}, sh(f32, 2, 3, 5), "stablehlo.dot_general", "lhs_batching_dimensions = [0]"},
	{"DotVectorVector", []shapes.Shape{sh(f32, 3), sh(f32, 3)}, binary((*Builder).Dot), sh(f32), "stablehlo.dot_general", ""},
	{"DotMatrixVector", []shapes.Shape{sh(f32, 2, 3), sh(f32, 3)}, binary((*Builder).Dot), sh(f32, 2), "stablehlo.dot_general", ""},
	{"DotMatrixMatrix", []shapes.Shape{sh(f64, 2, 3), sh(f64, 3, 4)}, binary((*Builder).Dot), sh(f64, 2, 4), "stablehlo.dot_general", ""},
	// NHWC input 5x5, HWIO kernel 3x3, stride 2, padding 1: (5+2-3)/2+1 = 3.
	{"ConvGeneral", []shapes.Shape{sh(f32, 1, 5, 5, 2), sh(f32, 3, 3, 2, 4)}, func(b *Builder, p []op) (op, error) {
		axes := backends.ConvolveAxesConfig{InputBatch: 0, InputChannels: 3, InputSpatial: []int{1, 2},
			KernelInputChannels: 2, KernelOutputChannels: 3, KernelSpatial: []int{0, 1},
			OutputBatch: 0, OutputChannels: 3, OutputSpatial: []int{1, 2}}
		return b.ConvGeneral(p[0], p[1], axes, []int{2, 2}, [][2]int{{1, 1}, {1, 1}}, nil, nil, 1, 1)
	}, sh(f32, 1, 3, 3, 4), "stablehlo.convolution", "[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]"},
	// NCHW with kernel dilation 2: effective kernel 5, (7-5)/1+1 = 3.
	{"ConvGeneralDilated", []shapes.Shape{sh(f32, 2, 3, 7, 7), sh(f32, 6, 3, 3, 3)}, func(b *Builder, p []op) (op, error) {
		axes := backends.ConvolveAxesConfig{InputBatch: 0, InputChannels: 1, InputSpatial: []int{2, 3},
			KernelInputChannels: 1, KernelOutputChannels: 0, KernelSpatial: []int{2, 3},
			OutputBatch: 0, OutputChannels: 1, OutputSpatial: []int{2, 3}}
		return b.ConvGeneral(p[0], p[1], axes, nil, nil, nil, []int{2, 2}, 0, 0)
	}, sh(f32, 2, 6, 3, 3), "stablehlo.convolution", "rhs_dilation = array<i64: 2, 2>"},
	{"FFT", []shapes.Shape{sh(c64, 8)}, func(b *Builder, p []op) (op, error) { return b.FFT(p[0], backends.FFTForward, []int{8}) },
		sh(c64, 8), "stablehlo.fft", "fft_type FFT"},
	// A real FFT of length 8 keeps 8/2+1 = 5 frequencies.
	{"RFFT", []shapes.Shape{sh(f32, 8)}, func(b *Builder, p []op) (op, error) { return b.FFT(p[0], backends.FFTForwardReal, []int{8}) },
		sh(c64, 5), "stablehlo.fft", "fft_type RFFT"},
	{"IRFFT", []shapes.Shape{sh(c64, 5)}, func(b *Builder, p []op) (op, error) { return b.FFT(p[0], backends.FFTInverseReal, []int{8}) },
		sh(f32, 8), "stablehlo.fft", "fft_type IRFFT"},
	{"RNGBitGenerator", []shapes.Shape{sh(u64, 3)}, func(b *Builder, p []op) (op, error) {
		_, v, err := b.RNGBitGenerator(p[0], sh(u32, 2, 3))
		return v, err
	}, sh(u32, 2, 3), "stablehlo.rng_bit_generator", "rng_algorithm PHILOX"},
	{"BatchNormForInference", []shapes.Shape{sh(f32, 2, 3), sh(f32, 3), sh(f32, 3), sh(f32, 3), sh(f32, 3)}, func(b *Builder, p []op) (op, error) {
		return b.BatchNormForInference(p[0], p[1], p[2], p[3], p[4], 1e-3, -1)
	}, sh(f32, 2, 3), "stablehlo.batch_norm_inference", "feature_index = 1"},
	{"BatchNormForTraining", []shapes.Shape{sh(f32, 4, 2), sh(f32, 2), sh(f32, 2)}, func(b *Builder, p []op) (op, error) {
		_, m, _, err := b.BatchNormForTraining(p[0], p[1], p[2], 1e-3, 1)
		return m, err
	}, sh(f32, 2), "stablehlo.batch_norm_training", ""},
	{"BatchNormGradient", []shapes.Shape{sh(f32, 4, 2), sh(f32, 2), sh(f32, 2), sh(f32, 2), sh(f32, 4, 2)}, func(b *Builder, p []op) (op, error) {
		g, _, _, err := b.BatchNormGradient(p[0], p[1], p[2], p[3], p[4], 1e-3, 1)
		return g, err
	}, sh(f32, 4, 2), "stablehlo.batch_norm_grad", ""},
}

func TestOpLowering(t *testing.T) {
	seen := map[string]bool{}
	for _, tc := range opCases {
		t.Run(tc.name, func(t *testing.T) {
			if seen[tc.name] {
				t.Fatalf("duplicate case %q", tc.name)
			}
			seen[tc.name] = true
			b := New("op_"+tc.name, 4)
			var params []op
			for i, s := range tc.params {
				p, err := b.Parameter("p"+string(rune('a'+i)), s, nil)
				if err != nil {
					t.Fatalf("Parameter(%s): %v", s, err)
				}
				params = append(params, p)
			}
			out, err := tc.build(b, params)
			if err != nil {
				t.Fatalf("build: %v", err)
			}
			got, err := b.OpShape(out)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(tc.want) {
				t.Fatalf("OpShape = %s, want %s", got, tc.want)
			}
			prog, err := b.Finish([]op{out}, nil)
			if err != nil {
				t.Fatalf("Finish: %v", err)
			}
			if len(prog.OutputShapes) != 1 || !prog.OutputShapes[0].Equal(tc.want) {
				t.Errorf("program outputs %v, want [%s]", prog.OutputShapes, tc.want)
			}
			if len(prog.ParamShapes) != len(tc.params) {
				t.Errorf("program has %d parameters, want %d", len(prog.ParamShapes), len(tc.params))
			}
			text := string(prog.Text)
			stmts, err := parseStatements(text)
			if err != nil {
				t.Fatalf("parse: %v\n%s", err, text)
			}
			wantType := tensorType(tc.want)
			found := false
			for _, s := range findOp(stmts, tc.hlo) {
				if slices.Contains(s.results, wantType) && (tc.attr == "" || strings.Contains(s.attrs, tc.attr)) {
					found = true
				}
			}
			if !found {
				t.Errorf("no %s producing %s (attribute %q) in:\n%s", tc.hlo, wantType, tc.attr, text)
			}
			// The function returns exactly the output type.
			rets := findOp(stmts, "stablehlo.return")
			if last := rets[len(rets)-1]; len(last.operands) != 1 || last.operands[0] != wantType {
				t.Errorf("main returns %v, want [%s]", last.operands, wantType)
			}
		})
	}
}

// TestIdentityOps checks ops that lower to their operand unchanged.
func TestIdentityOps(t *testing.T) {
	for _, tc := range []struct {
		name  string
		shape shapes.Shape
		f     func(*Builder, op) (op, error)
	}{
		{"AbsUnsigned", sh(u8, 3), (*Builder).Abs},
		{"RealOfReal", sh(f32, 3), (*Builder).Real},
		{"ConjOfReal", sh(f64, 3), (*Builder).Conj},
		{"Identity", sh(i32, 3), (*Builder).Identity},
		{"ConvertSameDType", sh(f32, 3), func(b *Builder, x op) (op, error) { return b.ConvertDType(x, f32) }},
		{"ConcatenateOne", sh(f32, 3), func(b *Builder, x op) (op, error) { return b.Concatenate(0, x) }},
		{"PadScalar", sh(f32), func(b *Builder, x op) (op, error) { return b.Pad(x, x) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(tc.name, 1)
			x, err := b.Parameter("x", tc.shape, nil)
			if err != nil {
				t.Fatal(err)
			}
			y, err := tc.f(b, x)
			if err != nil {
				t.Fatal(err)
			}
			if y != x {
				t.Errorf("got a new op, want the operand itself")
			}
		})
	}
}

// TestOpErrors checks that malformed calls return errors naming the op,
// and that what StableHLO cannot express is an *errs.UnsupportedError.
func TestOpErrors(t *testing.T) {
	for _, tc := range []struct {
		name        string
		params      []shapes.Shape
		build       func(b *Builder, p []op) (op, error)
		unsupported bool
	}{
		{"AddDTypeMismatch", []shapes.Shape{sh(f32, 3), sh(i32, 3)}, binary((*Builder).Add), false},
		{"AddShapeMismatch", []shapes.Shape{sh(f32, 3), sh(f32, 4)}, binary((*Builder).Add), false},
		{"AddRankMismatch", []shapes.Shape{sh(f32, 3), sh(f32, 1, 3)}, binary((*Builder).Add), false},
		{"AddBool", []shapes.Shape{sh(bl, 3), sh(bl, 3)}, binary((*Builder).Add), true},
		{"LessThanComplex", []shapes.Shape{sh(c64, 3), sh(c64, 3)}, binary((*Builder).LessThan), true},
		{"ExpInt", []shapes.Shape{sh(i32, 3)}, unary((*Builder).Exp), true},
		{"LogicalNotInt", []shapes.Shape{sh(i32, 3)}, unary((*Builder).LogicalNot), true},
		{"BitwiseAndFloat", []shapes.Shape{sh(f32, 3), sh(f32, 3)}, binary((*Builder).BitwiseAnd), true},
		{"ArgMaxComplex", []shapes.Shape{sh(c64, 3)}, func(b *Builder, p []op) (op, error) { return b.ArgMinMax(p[0], 0, i32, false) }, true},
		{"ArgMaxFloatOutput", []shapes.Shape{sh(f32, 3)}, func(b *Builder, p []op) (op, error) { return b.ArgMinMax(p[0], 0, f32, false) }, false},
		{"ArgMaxBadAxis", []shapes.Shape{sh(f32, 3)}, func(b *Builder, p []op) (op, error) { return b.ArgMinMax(p[0], 1, i32, false) }, false},
		{"ReduceSumBadAxis", []shapes.Shape{sh(f32, 3)}, func(b *Builder, p []op) (op, error) { return b.ReduceSum(p[0], 2) }, false},
		{"ReduceSumRepeatedAxis", []shapes.Shape{sh(f32, 3, 2)}, func(b *Builder, p []op) (op, error) { return b.ReduceSum(p[0], 0, 0) }, false},
		{"ReshapeSize", []shapes.Shape{sh(f32, 2, 3)}, func(b *Builder, p []op) (op, error) { return b.Reshape(p[0], 4) }, false},
		{"ReshapeNegative", []shapes.Shape{sh(f32, 2, 3)}, func(b *Builder, p []op) (op, error) { return b.Reshape(p[0], -1, -6) }, false},
		{"TransposeShortPermutation", []shapes.Shape{sh(f32, 2, 3)}, func(b *Builder, p []op) (op, error) { return b.Transpose(p[0], 0) }, false},
		{"TransposeBadPermutation", []shapes.Shape{sh(f32, 2, 3)}, func(b *Builder, p []op) (op, error) { return b.Transpose(p[0], 0, 5) }, false},
		{"SliceOutOfRange", []shapes.Shape{sh(f32, 3)}, func(b *Builder, p []op) (op, error) { return b.Slice(p[0], []int{0}, []int{9}, nil) }, false},
		{"SliceWrongRank", []shapes.Shape{sh(f32, 3)}, func(b *Builder, p []op) (op, error) { return b.Slice(p[0], []int{0, 0}, []int{1}, nil) }, false},
		{"PadTooManyAxes", []shapes.Shape{sh(f32, 3), sh(f32)}, func(b *Builder, p []op) (op, error) {
			return b.Pad(p[0], p[1], backends.PadAxis{}, backends.PadAxis{})
		}, false},
		{"PadFillNotScalar", []shapes.Shape{sh(f32, 3), sh(f32, 1)}, func(b *Builder, p []op) (op, error) { return b.Pad(p[0], p[1]) }, false},
		{"ConcatenateMismatch", []shapes.Shape{sh(f32, 3, 2), sh(f32, 3, 4)}, func(b *Builder, p []op) (op, error) { return b.Concatenate(0, p[0], p[1]) }, false},
		{"IotaScalar", nil, func(b *Builder, p []op) (op, error) { return b.Iota(sh(f32), 0) }, false},
		{"IotaBadAxis", nil, func(b *Builder, p []op) (op, error) { return b.Iota(sh(f32, 3), 2) }, false},
		{"DynamicSliceTooBig", []shapes.Shape{sh(f32, 3), sh(i32)}, func(b *Builder, p []op) (op, error) { return b.DynamicSlice(p[0], []op{p[1]}, []int{4}) }, false},
		{"DynamicSliceFloatIndex", []shapes.Shape{sh(f32, 3), sh(f32)}, func(b *Builder, p []op) (op, error) { return b.DynamicSlice(p[0], []op{p[1]}, []int{1}) }, false},
		{"DynamicSliceIndexCount", []shapes.Shape{sh(f32, 3, 3), sh(i32)}, func(b *Builder, p []op) (op, error) {
			return b.DynamicSlice(p[0], []op{p[1]}, []int{1, 1})
		}, false},
		{"GatherFloatIndices", []shapes.Shape{sh(f32, 5, 3), sh(f32, 4, 1)}, func(b *Builder, p []op) (op, error) {
			return b.Gather(p[0], p[1], 1, []int{1}, []int{0}, []int{0}, []int{1, 3}, false)
		}, false},
		{"GatherBadAxes", []shapes.Shape{sh(f32, 5, 3), sh(i32, 4, 1)}, func(b *Builder, p []op) (op, error) {
			return b.Gather(p[0], p[1], 7, []int{9}, []int{8}, []int{0}, []int{1, 3}, false)
		}, false},
		{"ScatterBadAxes", []shapes.Shape{sh(f32, 5, 3), sh(i32, 2, 1), sh(f32, 2, 3)}, func(b *Builder, p []op) (op, error) {
			return b.ScatterSum(p[0], p[1], p[2], 5, []int{7}, []int{0}, []int{3}, false, false)
		}, false},
		{"DotGeneralMismatch", []shapes.Shape{sh(f32, 2, 3), sh(f32, 4, 5)}, func(b *Builder, p []op) (op, error) {
			return b.DotGeneral(p[0], []int{1}, nil, p[1], []int{0}, nil)
		}, false},
		{"DotGeneralAxisOutOfRange", []shapes.Shape{sh(f32, 2, 3), sh(f32, 3, 5)}, func(b *Builder, p []op) (op, error) {
			return b.DotGeneral(p[0], []int{4}, nil, p[1], []int{0}, nil)
		}, false},
		{"DotRank3", []shapes.Shape{sh(f32, 2, 3, 4), sh(f32, 4)}, binary((*Builder).Dot), false},
		{"ConvBadAxes", []shapes.Shape{sh(f32, 1, 5, 5, 2), sh(f32, 3, 3, 2, 4)}, func(b *Builder, p []op) (op, error) {
			axes := backends.ConvolveAxesConfig{InputBatch: 0, InputChannels: 0, InputSpatial: []int{1, 2},
				KernelInputChannels: 2, KernelOutputChannels: 3, KernelSpatial: []int{0, 1},
				OutputBatch: 0, OutputChannels: 3, OutputSpatial: []int{1, 2}}
			return b.ConvGeneral(p[0], p[1], axes, nil, nil, nil, nil, 1, 1)
		}, false},
		{"ConvSpatialMismatch", []shapes.Shape{sh(f32, 1, 5, 5, 2), sh(f32, 3, 3, 2, 4)}, func(b *Builder, p []op) (op, error) {
			return b.ConvGeneral(p[0], p[1], backends.ConvolveAxesConfig{InputSpatial: []int{1}}, nil, nil, nil, nil, 1, 1)
		}, false},
		{"ConvChannelMismatch", []shapes.Shape{sh(f32, 1, 5, 5, 3), sh(f32, 3, 3, 2, 4)}, func(b *Builder, p []op) (op, error) {
			axes := backends.ConvolveAxesConfig{InputBatch: 0, InputChannels: 3, InputSpatial: []int{1, 2},
				KernelInputChannels: 2, KernelOutputChannels: 3, KernelSpatial: []int{0, 1},
				OutputBatch: 0, OutputChannels: 3, OutputSpatial: []int{1, 2}}
			return b.ConvGeneral(p[0], p[1], axes, nil, nil, nil, nil, 1, 1)
		}, false},
		{"ReduceWindowWrongRank", []shapes.Shape{sh(f32, 4, 4)}, func(b *Builder, p []op) (op, error) {
			return b.ReduceWindow(p[0], backends.ReduceOpMax, []int{2}, nil, nil, nil, nil)
		}, false},
		{"ReduceWindowZeroStride", []shapes.Shape{sh(f32, 4)}, func(b *Builder, p []op) (op, error) {
			return b.ReduceWindow(p[0], backends.ReduceOpMax, []int{2}, []int{0}, nil, nil, nil)
		}, false},
		{"ReduceWindowUndefinedType", []shapes.Shape{sh(f32, 4)}, func(b *Builder, p []op) (op, error) {
			return b.ReduceWindow(p[0], backends.ReduceOpUndefined, []int{2}, nil, nil, nil, nil)
		}, false},
		{"RNGBadState", []shapes.Shape{sh(u32, 3)}, func(b *Builder, p []op) (op, error) {
			_, v, err := b.RNGBitGenerator(p[0], sh(u32, 2))
			return v, err
		}, false},
		{"BatchNormIntOperand", []shapes.Shape{sh(i32, 2, 3), sh(i32, 3), sh(i32, 3), sh(i32, 3), sh(i32, 3)}, func(b *Builder, p []op) (op, error) {
			return b.BatchNormForInference(p[0], p[1], p[2], p[3], p[4], 1e-3, 1)
		}, true},
		{"BatchNormScaleShape", []shapes.Shape{sh(f32, 2, 3), sh(f32, 2), sh(f32, 3), sh(f32, 3), sh(f32, 3)}, func(b *Builder, p []op) (op, error) {
			return b.BatchNormForInference(p[0], p[1], p[2], p[3], p[4], 1e-3, 1)
		}, false},
		{"WhereNotBool", []shapes.Shape{sh(i32, 3), sh(f32, 3), sh(f32, 3)}, func(b *Builder, p []op) (op, error) { return b.Where(p[0], p[1], p[2]) }, false},
		{"WhereShapes", []shapes.Shape{sh(bl, 3), sh(f32, 3), sh(f32, 4)}, func(b *Builder, p []op) (op, error) { return b.Where(p[0], p[1], p[2]) }, false},
		{"ClampBool", []shapes.Shape{sh(bl), sh(bl, 3), sh(bl)}, func(b *Builder, p []op) (op, error) { return b.Clamp(p[0], p[1], p[2]) }, true},
		{"ComplexOfInt", []shapes.Shape{sh(i32, 3), sh(i32, 3)}, binary((*Builder).Complex), true},
		{"FFTBadType", []shapes.Shape{sh(c64, 4)}, func(b *Builder, p []op) (op, error) { return b.FFT(p[0], backends.FFTType(9), []int{4}) }, false},
		{"FFTRealOfInt", []shapes.Shape{sh(i32, 4)}, func(b *Builder, p []op) (op, error) { return b.FFT(p[0], backends.FFTForwardReal, []int{4}) }, false},
		{"BroadcastInDimDType", []shapes.Shape{sh(f32, 3)}, func(b *Builder, p []op) (op, error) { return b.BroadcastInDim(p[0], sh(i32, 2, 3), []int{1}) }, false},
		{"BroadcastInDimAxes", []shapes.Shape{sh(f32, 3)}, func(b *Builder, p []op) (op, error) { return b.BroadcastInDim(p[0], sh(f32, 2, 3), []int{0}) }, false},
		{"ConvertInvalid", []shapes.Shape{sh(f32, 3)}, func(b *Builder, p []op) (op, error) { return b.ConvertDType(p[0], dtypes.InvalidDType) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(tc.name, 2)
			var params []op
			for i, s := range tc.params {
				p, err := b.Parameter("p"+string(rune('a'+i)), s, nil)
				if err != nil {
					t.Fatal(err)
				}
				params = append(params, p)
			}
			out, err := tc.build(b, params)
			if err == nil {
				s, _ := b.OpShape(out)
				t.Fatalf("no error; built %s", s)
			}
			var ue *errs.UnsupportedError
			if isU := errors.As(err, &ue); isU != tc.unsupported {
				t.Errorf("UnsupportedError = %v, want %v: %v", isU, tc.unsupported, err)
			}
			if !errors.Is(err, errs.ErrUnsupported) && !strings.Contains(err.Error(), "op ") {
				t.Errorf("error does not name the op: %v", err)
			}
		})
	}
}

// TestForeignOps checks inputs that are not ops of the builder.
func TestForeignOps(t *testing.T) {
	b1, b2 := New("one", 1), New("two", 1)
	x1, _ := b1.Parameter("x", sh(f32, 2), nil)
	x2, _ := b2.Parameter("x", sh(f32, 2), nil)
	for name, f := range map[string]func() (op, error){
		"other builder": func() (op, error) { return b1.Add(x1, x2) },
		"nil":           func() (op, error) { return b1.Neg(nil) },
		"wrong type":    func() (op, error) { return b1.Neg("x") },
		"typed nil":     func() (op, error) { return b1.Neg((*Node)(nil)) },
	} {
		if _, err := f(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := b1.OpShape(x2); err == nil {
		t.Error("OpShape of another builder's op: no error")
	}
}

func TestParameterAndConstant(t *testing.T) {
	b := New("params", 1)
	if _, err := b.Parameter("x", sh(f32, 2), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Parameter("x", sh(f32, 2), nil); err == nil {
		t.Error("duplicate parameter accepted")
	}
	// "x.y" and "x_y" normalise to the same StableHLO name.
	if _, err := b.Parameter("a.b", sh(f32, 2), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Parameter("a_b", sh(f32, 2), nil); err == nil {
		t.Error("parameters normalising to one name accepted")
	}
	// Names go-xla reserves for its own values are renamed.
	p, err := b.Parameter("arg0", sh(i32), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Parameter("x", shapes.Shape{DType: f32, Dimensions: []int{-1}}, nil); err == nil {
		t.Error("negative dimension accepted")
	}
	if _, err := b.Parameter("y", shapes.Make(dtypes.InvalidDType), nil); err == nil {
		t.Error("invalid dtype accepted")
	}
	for _, tc := range []struct {
		flat any
		dims []int
		want shapes.Shape
		lit  string
	}{
		{[]float32{1.5, -2}, []int{2}, sh(f32, 2), "dense<[1.5, -2.0]> : tensor<2xf32>"},
		{[]int{7}, nil, sh(i64), "dense<7> : tensor<i64>"},
		{[]bool{true, false, true, true}, []int{2, 2}, sh(bl, 2, 2), "dense<[[true, false], [true, true]]> : tensor<2x2xi1>"},
		{[]uint8{}, []int{0}, sh(u8, 0), "tensor<0xui8>"},
		{[]complex64{complex(1, 2)}, nil, sh(c64), "dense<(1.0, 2.0)> : tensor<complex<f32>>"},
	} {
		c, err := b.Constant(tc.flat, tc.dims...)
		if err != nil {
			t.Errorf("Constant(%v): %v", tc.flat, err)
			continue
		}
		if s, _ := b.OpShape(c); !s.Equal(tc.want) {
			t.Errorf("Constant(%v) shape %s, want %s", tc.flat, s, tc.want)
		}
	}
	for _, bad := range []struct {
		flat any
		dims []int
	}{
		{nil, nil}, {[]float32{1, 2}, []int{3}}, {[]string{"a"}, []int{1}}, {float32(1), nil}, {[]float32{1}, []int{-1}},
	} {
		if _, err := b.Constant(bad.flat, bad.dims...); err == nil {
			t.Errorf("Constant(%#v, %v): no error", bad.flat, bad.dims)
		}
	}
	prog, err := b.Finish([]op{p}, nil)
	if err != nil {
		t.Fatal(err)
	}
	text := string(prog.Text)
	for _, want := range []string{"%param_arg0: tensor<i32>", "%x: tensor<2xf32>", "%a_b: tensor<2xf32>",
		"dense<[1.5, -2.0]> : tensor<2xf32>", "dense<[[true, false], [true, true]]> : tensor<2x2xi1>"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	if want := []string{"x", "a.b", "arg0"}; !slices.Equal(prog.ParamNames, want) {
		t.Errorf("ParamNames = %q, want %q", prog.ParamNames, want)
	}
	if !prog.Portable() || prog.NumDevices() != 1 {
		t.Errorf("single-device program: Portable %v, NumDevices %d", prog.Portable(), prog.NumDevices())
	}
	// The builder is closed after Finish.
	if _, err := b.Neg(p); err == nil {
		t.Error("op accepted after Finish")
	}
	if _, err := b.Finish([]op{p}, nil); err == nil {
		t.Error("second Finish accepted")
	}
}

func TestFinishErrors(t *testing.T) {
	b := New("f", 1)
	if _, err := b.Finish(nil, nil); err == nil {
		t.Error("no outputs accepted")
	}
	x, _ := b.Parameter("x", sh(f32, 2), nil)
	if _, err := b.Finish([]op{x}, []*backends.ShardingSpec{{Mesh: "m"}}); err == nil {
		t.Error("output sharding without auto-sharding accepted")
	}
}

// TestTextDeterministic checks that building the same graph twice gives
// the same text: a compile cache keys on it.
func TestTextDeterministic(t *testing.T) {
	build := func() string {
		b := New("det", 1)
		x, _ := b.Parameter("x", sh(f32, 4, 3), nil)
		y, _ := b.ReduceMax(x, 1)
		z, _ := b.ArgMinMax(x, 1, i32, false)
		w, _ := b.ReduceWindow(x, backends.ReduceOpSum, []int{2, 1}, nil, nil, nil, nil)
		p, err := b.Finish([]op{y, z, w}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return string(p.Text)
	}
	if a, b := build(), build(); a != b {
		t.Errorf("two builds differ:\n%s\n---\n%s", a, b)
	}
}

// TestDTypeNumbering checks GoMLX's and go-xla's dtype numbering agree, by
// the StableHLO type names go-xla writes for GoMLX dtypes.
func TestDTypeNumbering(t *testing.T) {
	for dt, name := range hloTypeNames {
		got := toXShape(sh(dt, 2)).ToStableHLO()
		if want := "tensor<2x" + name + ">"; got != want {
			t.Errorf("%s: go-xla writes %s, want %s", dt, got, want)
		}
		if back := fromXShape(toXShape(sh(dt, 2))); !back.Equal(sh(dt, 2)) {
			t.Errorf("%s: round trip gives %s", dt, back)
		}
	}
}
