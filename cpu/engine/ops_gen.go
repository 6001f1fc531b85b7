package engine

// Code generated from GoMLX v0.26.0's backends.StandardOps: the one- and two-operand ops. DO NOT EDIT by hand; see ops.go for the rest.

import "github.com/gomlx/gomlx/backends"

// Abs records GoMLX's Abs.
func (b *Builder) Abs(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeAbs, backends.Builder.Abs, x)
}

// BitCount records GoMLX's BitCount.
func (b *Builder) BitCount(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeBitCount, backends.Builder.BitCount, x)
}

// BitwiseNot records GoMLX's BitwiseNot.
func (b *Builder) BitwiseNot(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeBitwiseNot, backends.Builder.BitwiseNot, x)
}

// Ceil records GoMLX's Ceil.
func (b *Builder) Ceil(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeCeil, backends.Builder.Ceil, x)
}

// Clz records GoMLX's Clz.
func (b *Builder) Clz(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeClz, backends.Builder.Clz, x)
}

// Conj records GoMLX's Conj.
func (b *Builder) Conj(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeConj, backends.Builder.Conj, x)
}

// Cos records GoMLX's Cos.
func (b *Builder) Cos(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeCos, backends.Builder.Cos, x)
}

// Erf records GoMLX's Erf.
func (b *Builder) Erf(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeErf, backends.Builder.Erf, x)
}

// Exp records GoMLX's Exp.
func (b *Builder) Exp(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeExp, backends.Builder.Exp, x)
}

// Expm1 records GoMLX's Expm1.
func (b *Builder) Expm1(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeExpm1, backends.Builder.Expm1, x)
}

// Floor records GoMLX's Floor.
func (b *Builder) Floor(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeFloor, backends.Builder.Floor, x)
}

// Identity records GoMLX's Identity.
func (b *Builder) Identity(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeIdentity, backends.Builder.Identity, x)
}

// Imag records GoMLX's Imag.
func (b *Builder) Imag(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeImag, backends.Builder.Imag, x)
}

// IsFinite records GoMLX's IsFinite.
func (b *Builder) IsFinite(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeIsFinite, backends.Builder.IsFinite, x)
}

// IsNaN records GoMLX's IsNaN.
func (b *Builder) IsNaN(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeIsNaN, backends.Builder.IsNaN, x)
}

// Log records GoMLX's Log.
func (b *Builder) Log(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeLog, backends.Builder.Log, x)
}

// Log1p records GoMLX's Log1p.
func (b *Builder) Log1p(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeLog1p, backends.Builder.Log1p, x)
}

// LogicalNot records GoMLX's LogicalNot.
func (b *Builder) LogicalNot(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeLogicalNot, backends.Builder.LogicalNot, x)
}

// Logistic records GoMLX's Logistic.
func (b *Builder) Logistic(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeLogistic, backends.Builder.Logistic, x)
}

// Neg records GoMLX's Neg.
func (b *Builder) Neg(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeNeg, backends.Builder.Neg, x)
}

// Real records GoMLX's Real.
func (b *Builder) Real(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeReal, backends.Builder.Real, x)
}

// Round records GoMLX's Round.
func (b *Builder) Round(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeRound, backends.Builder.Round, x)
}

// Rsqrt records GoMLX's Rsqrt.
func (b *Builder) Rsqrt(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeRsqrt, backends.Builder.Rsqrt, x)
}

// Sign records GoMLX's Sign.
func (b *Builder) Sign(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeSign, backends.Builder.Sign, x)
}

// Sin records GoMLX's Sin.
func (b *Builder) Sin(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeSin, backends.Builder.Sin, x)
}

// Sqrt records GoMLX's Sqrt.
func (b *Builder) Sqrt(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeSqrt, backends.Builder.Sqrt, x)
}

// Tanh records GoMLX's Tanh.
func (b *Builder) Tanh(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeTanh, backends.Builder.Tanh, x)
}

// Add records GoMLX's Add.
func (b *Builder) Add(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeAdd, backends.Builder.Add, x, y)
}

// BitwiseAnd records GoMLX's BitwiseAnd.
func (b *Builder) BitwiseAnd(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeBitwiseAnd, backends.Builder.BitwiseAnd, x, y)
}

// BitwiseOr records GoMLX's BitwiseOr.
func (b *Builder) BitwiseOr(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeBitwiseOr, backends.Builder.BitwiseOr, x, y)
}

// BitwiseXor records GoMLX's BitwiseXor.
func (b *Builder) BitwiseXor(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeBitwiseXor, backends.Builder.BitwiseXor, x, y)
}

// Complex records GoMLX's Complex.
func (b *Builder) Complex(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeComplex, backends.Builder.Complex, x, y)
}

// Div records GoMLX's Div.
func (b *Builder) Div(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeDiv, backends.Builder.Div, x, y)
}

// Equal records GoMLX's Equal.
func (b *Builder) Equal(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeEqual, backends.Builder.Equal, x, y)
}

// EqualTotalOrder records GoMLX's EqualTotalOrder.
func (b *Builder) EqualTotalOrder(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeEqualTotalOrder, backends.Builder.EqualTotalOrder, x, y)
}

// GreaterOrEqual records GoMLX's GreaterOrEqual.
func (b *Builder) GreaterOrEqual(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeGreaterOrEqual, backends.Builder.GreaterOrEqual, x, y)
}

// GreaterOrEqualTotalOrder records GoMLX's GreaterOrEqualTotalOrder.
func (b *Builder) GreaterOrEqualTotalOrder(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeGreaterOrEqualTotalOrder, backends.Builder.GreaterOrEqualTotalOrder, x, y)
}

// GreaterThan records GoMLX's GreaterThan.
func (b *Builder) GreaterThan(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeGreaterThan, backends.Builder.GreaterThan, x, y)
}

// GreaterThanTotalOrder records GoMLX's GreaterThanTotalOrder.
func (b *Builder) GreaterThanTotalOrder(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeGreaterThanTotalOrder, backends.Builder.GreaterThanTotalOrder, x, y)
}

// LessOrEqual records GoMLX's LessOrEqual.
func (b *Builder) LessOrEqual(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeLessOrEqual, backends.Builder.LessOrEqual, x, y)
}

// LessOrEqualTotalOrder records GoMLX's LessOrEqualTotalOrder.
func (b *Builder) LessOrEqualTotalOrder(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeLessOrEqualTotalOrder, backends.Builder.LessOrEqualTotalOrder, x, y)
}

// LessThan records GoMLX's LessThan.
func (b *Builder) LessThan(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeLessThan, backends.Builder.LessThan, x, y)
}

// LessThanTotalOrder records GoMLX's LessThanTotalOrder.
func (b *Builder) LessThanTotalOrder(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeLessThanTotalOrder, backends.Builder.LessThanTotalOrder, x, y)
}

// LogicalAnd records GoMLX's LogicalAnd.
func (b *Builder) LogicalAnd(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeLogicalAnd, backends.Builder.LogicalAnd, x, y)
}

// LogicalOr records GoMLX's LogicalOr.
func (b *Builder) LogicalOr(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeLogicalOr, backends.Builder.LogicalOr, x, y)
}

// LogicalXor records GoMLX's LogicalXor.
func (b *Builder) LogicalXor(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeLogicalXor, backends.Builder.LogicalXor, x, y)
}

// Max records GoMLX's Max.
func (b *Builder) Max(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeMax, backends.Builder.Max, x, y)
}

// Min records GoMLX's Min.
func (b *Builder) Min(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeMin, backends.Builder.Min, x, y)
}

// Mul records GoMLX's Mul.
func (b *Builder) Mul(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeMul, backends.Builder.Mul, x, y)
}

// NotEqual records GoMLX's NotEqual.
func (b *Builder) NotEqual(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeNotEqual, backends.Builder.NotEqual, x, y)
}

// NotEqualTotalOrder records GoMLX's NotEqualTotalOrder.
func (b *Builder) NotEqualTotalOrder(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeNotEqualTotalOrder, backends.Builder.NotEqualTotalOrder, x, y)
}

// Pow records GoMLX's Pow.
func (b *Builder) Pow(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypePow, backends.Builder.Pow, x, y)
}

// Rem records GoMLX's Rem.
func (b *Builder) Rem(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeRem, backends.Builder.Rem, x, y)
}

// ShiftLeft records GoMLX's ShiftLeft.
func (b *Builder) ShiftLeft(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeShiftLeft, backends.Builder.ShiftLeft, x, y)
}

// ShiftRightArithmetic records GoMLX's ShiftRightArithmetic.
func (b *Builder) ShiftRightArithmetic(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeShiftRightArithmetic, backends.Builder.ShiftRightArithmetic, x, y)
}

// ShiftRightLogical records GoMLX's ShiftRightLogical.
func (b *Builder) ShiftRightLogical(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeShiftRightLogical, backends.Builder.ShiftRightLogical, x, y)
}

// Sub records GoMLX's Sub.
func (b *Builder) Sub(x, y backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeSub, backends.Builder.Sub, x, y)
}
