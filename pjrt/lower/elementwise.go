package lower

import (
	"fmt"

	"github.com/gomlx/go-xla/pkg/stablehlo"
	"github.com/gomlx/go-xla/pkg/types"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// broadcastShape returns the shape two operands broadcast to under GoMLX's
// rules: equal shapes, a scalar against anything, or equal ranks whose
// dimensions are equal or 1.
func broadcastShape(a, b shapes.Shape) (shapes.Shape, error) {
	switch {
	case a.Equal(b):
		return a, nil
	case a.IsScalar():
		return shapes.Make(a.DType, b.Dimensions...), nil
	case b.IsScalar():
		return shapes.Make(b.DType, a.Dimensions...), nil
	case a.Rank() != b.Rank():
		return shapes.Invalid(), fmt.Errorf("shapes %s and %s have different ranks and neither is a scalar", a, b)
	}
	dims := make([]int, a.Rank())
	for i := range dims {
		da, db := a.Dimensions[i], b.Dimensions[i]
		switch {
		case da == db, db == 1:
			dims[i] = da
		case da == 1:
			dims[i] = db
		default:
			return shapes.Invalid(), fmt.Errorf("shapes %s and %s do not broadcast: axis %d has %d against %d", a, b, i, da, db)
		}
	}
	return shapes.Make(a.DType, dims...), nil
}

// broadcastTo returns n's value broadcast to dims (n's dtype kept).
func (b *Builder) broadcastTo(n *Node, dims []int) (*stablehlo.Value, error) {
	if slicesEqual(n.shape.Dimensions, dims) {
		return n.value, nil
	}
	target := shapes.Make(n.shape.DType, dims...)
	var axes []int
	if !n.shape.IsScalar() {
		axes = make([]int, n.shape.Rank())
		for i := range axes {
			axes[i] = i
		}
	}
	return stablehlo.BroadcastInDim(n.value, toXShape(target), axes)
}

func slicesEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// binaryOperands validates and broadcasts the two operands of a binary op.
func (b *Builder) binaryOperands(op string, lhs, rhs backends.Op) (*Node, *Node, error) {
	ns, err := b.nodes(op, lhs, rhs)
	if err != nil {
		return nil, nil, err
	}
	l, r := ns[0], ns[1]
	if l.shape.DType != r.shape.DType {
		return nil, nil, b.opError(op, fmt.Errorf("operands have different dtypes: %s and %s", l.shape, r.shape))
	}
	out, err := broadcastShape(l.shape, r.shape)
	if err != nil {
		return nil, nil, b.opError(op, err)
	}
	lv, err := b.broadcastTo(l, out.Dimensions)
	if err != nil {
		return nil, nil, b.opError(op, err)
	}
	rv, err := b.broadcastTo(r, out.Dimensions)
	if err != nil {
		return nil, nil, b.opError(op, err)
	}
	return b.node(lv), b.node(rv), nil
}

type binaryFn func(lhs, rhs *stablehlo.Value) (*stablehlo.Value, error)

// dtypeClass restricts the dtypes an op accepts.
type dtypeClass int

const (
	anyNumber   dtypeClass = iota // integers, floats, complex
	realNumber                    // integers and floats
	integers                      // integers only
	boolOrInt                     // booleans and integers
	booleans                      // booleans only
	floats                        // floats only
	floatsOrCpx                   // floats and complex
	anyDType                      // anything, bool included
)

func (c dtypeClass) accepts(dt dtypes.DType) bool {
	isInt := dt.IsInt()
	switch c {
	case anyNumber:
		return isInt || dt.IsFloat() || dt.IsComplex()
	case realNumber:
		return isInt || dt.IsFloat()
	case integers:
		return isInt
	case boolOrInt:
		return isInt || dt == dtypes.Bool
	case booleans:
		return dt == dtypes.Bool
	case floats:
		return dt.IsFloat()
	case floatsOrCpx:
		return dt.IsFloat() || dt.IsComplex()
	}
	return true
}

func (c dtypeClass) String() string {
	return [...]string{"a number", "an integer or float", "an integer", "a boolean or integer",
		"a boolean", "a float", "a float or complex", "any dtype"}[c]
}

func (b *Builder) binary(op string, class dtypeClass, f binaryFn, lhs, rhs backends.Op) (out backends.Op, err error) {
	defer b.guard(op, &err)
	l, r, err := b.binaryOperands(op, lhs, rhs)
	if err != nil {
		return nil, err
	}
	if dt := l.shape.DType; !class.accepts(dt) {
		return nil, b.unsupported(op, fmt.Sprintf("operands are %s, the op needs %s", dt, class))
	}
	v, err := f(l.value, r.value)
	if err != nil {
		return nil, b.opError(op, err)
	}
	return b.node(v), nil
}

// Add returns lhs + rhs, element-wise with broadcasting.
func (b *Builder) Add(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary("Add", anyNumber, stablehlo.Add, lhs, rhs)
}

// Sub returns lhs - rhs.
func (b *Builder) Sub(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary("Sub", anyNumber, stablehlo.Subtract, lhs, rhs)
}

// Mul returns lhs * rhs.
func (b *Builder) Mul(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary("Mul", anyNumber, stablehlo.Multiply, lhs, rhs)
}

// Div returns lhs / rhs (truncating for integers).
func (b *Builder) Div(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary("Div", anyNumber, stablehlo.Divide, lhs, rhs)
}

// Rem returns the remainder of lhs / rhs with the sign of lhs (C fmod).
func (b *Builder) Rem(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary("Rem", realNumber, stablehlo.Remainder, lhs, rhs)
}

// Pow returns lhs raised to rhs.
func (b *Builder) Pow(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary("Pow", anyNumber, stablehlo.Power, lhs, rhs)
}

// Max returns the element-wise maximum.
func (b *Builder) Max(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary("Max", realNumber, stablehlo.Maximum, lhs, rhs)
}

// Min returns the element-wise minimum.
func (b *Builder) Min(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary("Min", realNumber, stablehlo.Minimum, lhs, rhs)
}

// BitwiseAnd returns lhs & rhs for integers.
func (b *Builder) BitwiseAnd(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary("BitwiseAnd", integers, stablehlo.And, lhs, rhs)
}

// BitwiseOr returns lhs | rhs for integers.
func (b *Builder) BitwiseOr(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary("BitwiseOr", integers, stablehlo.Or, lhs, rhs)
}

// BitwiseXor returns lhs ^ rhs for integers.
func (b *Builder) BitwiseXor(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary("BitwiseXor", integers, stablehlo.Xor, lhs, rhs)
}

// LogicalAnd returns lhs && rhs for booleans.
func (b *Builder) LogicalAnd(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary("LogicalAnd", booleans, stablehlo.And, lhs, rhs)
}

// LogicalOr returns lhs || rhs for booleans.
func (b *Builder) LogicalOr(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary("LogicalOr", booleans, stablehlo.Or, lhs, rhs)
}

// LogicalXor returns lhs != rhs for booleans.
func (b *Builder) LogicalXor(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary("LogicalXor", booleans, stablehlo.Xor, lhs, rhs)
}

// ShiftLeft shifts lhs left by rhs bits.
func (b *Builder) ShiftLeft(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary("ShiftLeft", integers, stablehlo.ShiftLeft, lhs, rhs)
}

// ShiftRightArithmetic shifts lhs right by rhs bits, copying the sign bit.
func (b *Builder) ShiftRightArithmetic(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary("ShiftRightArithmetic", integers, stablehlo.ShiftRightArithmetic, lhs, rhs)
}

// ShiftRightLogical shifts lhs right by rhs bits, filling with zeros.
func (b *Builder) ShiftRightLogical(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary("ShiftRightLogical", integers, stablehlo.ShiftRightLogical, lhs, rhs)
}

// compareType picks StableHLO's comparison type for dt. Total order only
// exists for floats; for other dtypes the ordinary order is already total.
func compareType(dt dtypes.DType, totalOrder bool) types.ComparisonType {
	switch {
	case dt.IsFloat() && totalOrder:
		return types.CompareTotalOrder
	case dt.IsFloat() || dt.IsComplex():
		return types.CompareFloat
	case dt.IsUnsigned() || dt == dtypes.Bool:
		return types.CompareUnsigned
	}
	return types.CompareSigned
}

func (b *Builder) compare(op string, dir types.ComparisonDirection, totalOrder bool, lhs, rhs backends.Op) (out backends.Op, err error) {
	defer b.guard(op, &err)
	l, r, err := b.binaryOperands(op, lhs, rhs)
	if err != nil {
		return nil, err
	}
	dt := l.shape.DType
	if dt.IsComplex() && dir != types.CompareEQ && dir != types.CompareNE {
		return nil, b.unsupported(op, fmt.Sprintf("complex operands (%s) have no order", dt))
	}
	v, err := stablehlo.Compare(l.value, r.value, dir, compareType(dt, totalOrder))
	if err != nil {
		return nil, b.opError(op, err)
	}
	return b.node(v), nil
}

// Equal returns lhs == rhs.
func (b *Builder) Equal(lhs, rhs backends.Op) (backends.Op, error) {
	return b.compare("Equal", types.CompareEQ, false, lhs, rhs)
}

// NotEqual returns lhs != rhs.
func (b *Builder) NotEqual(lhs, rhs backends.Op) (backends.Op, error) {
	return b.compare("NotEqual", types.CompareNE, false, lhs, rhs)
}

// GreaterThan returns lhs > rhs.
func (b *Builder) GreaterThan(lhs, rhs backends.Op) (backends.Op, error) {
	return b.compare("GreaterThan", types.CompareGT, false, lhs, rhs)
}

// GreaterOrEqual returns lhs >= rhs.
func (b *Builder) GreaterOrEqual(lhs, rhs backends.Op) (backends.Op, error) {
	return b.compare("GreaterOrEqual", types.CompareGE, false, lhs, rhs)
}

// LessThan returns lhs < rhs.
func (b *Builder) LessThan(lhs, rhs backends.Op) (backends.Op, error) {
	return b.compare("LessThan", types.CompareLT, false, lhs, rhs)
}

// LessOrEqual returns lhs <= rhs.
func (b *Builder) LessOrEqual(lhs, rhs backends.Op) (backends.Op, error) {
	return b.compare("LessOrEqual", types.CompareLE, false, lhs, rhs)
}

// EqualTotalOrder compares under -NaN < -Inf < ... < -0 < +0 < ... < +NaN.
func (b *Builder) EqualTotalOrder(lhs, rhs backends.Op) (backends.Op, error) {
	return b.compare("EqualTotalOrder", types.CompareEQ, true, lhs, rhs)
}

// NotEqualTotalOrder is NotEqual under the total order.
func (b *Builder) NotEqualTotalOrder(lhs, rhs backends.Op) (backends.Op, error) {
	return b.compare("NotEqualTotalOrder", types.CompareNE, true, lhs, rhs)
}

// GreaterThanTotalOrder is GreaterThan under the total order.
func (b *Builder) GreaterThanTotalOrder(lhs, rhs backends.Op) (backends.Op, error) {
	return b.compare("GreaterThanTotalOrder", types.CompareGT, true, lhs, rhs)
}

// GreaterOrEqualTotalOrder is GreaterOrEqual under the total order.
func (b *Builder) GreaterOrEqualTotalOrder(lhs, rhs backends.Op) (backends.Op, error) {
	return b.compare("GreaterOrEqualTotalOrder", types.CompareGE, true, lhs, rhs)
}

// LessThanTotalOrder is LessThan under the total order.
func (b *Builder) LessThanTotalOrder(lhs, rhs backends.Op) (backends.Op, error) {
	return b.compare("LessThanTotalOrder", types.CompareLT, true, lhs, rhs)
}

// LessOrEqualTotalOrder is LessOrEqual under the total order.
func (b *Builder) LessOrEqualTotalOrder(lhs, rhs backends.Op) (backends.Op, error) {
	return b.compare("LessOrEqualTotalOrder", types.CompareLE, true, lhs, rhs)
}

type unaryFn func(x *stablehlo.Value) (*stablehlo.Value, error)

func (b *Builder) unary(op string, class dtypeClass, f unaryFn, x backends.Op) (out backends.Op, err error) {
	defer b.guard(op, &err)
	ns, err := b.nodes(op, x)
	if err != nil {
		return nil, err
	}
	if dt := ns[0].shape.DType; !class.accepts(dt) {
		return nil, b.unsupported(op, fmt.Sprintf("operand is %s, the op needs %s", dt, class))
	}
	v, err := f(ns[0].value)
	if err != nil {
		return nil, b.opError(op, err)
	}
	return b.node(v), nil
}

// Exp returns e**x.
func (b *Builder) Exp(x backends.Op) (backends.Op, error) {
	return b.unary("Exp", floatsOrCpx, stablehlo.Exponential, x)
}

// Expm1 returns e**x - 1, accurate near 0.
func (b *Builder) Expm1(x backends.Op) (backends.Op, error) {
	return b.unary("Expm1", floatsOrCpx, stablehlo.ExponentialMinusOne, x)
}

// Log returns the natural logarithm.
func (b *Builder) Log(x backends.Op) (backends.Op, error) {
	return b.unary("Log", floatsOrCpx, stablehlo.Log, x)
}

// Log1p returns log(1 + x), accurate near 0.
func (b *Builder) Log1p(x backends.Op) (backends.Op, error) {
	return b.unary("Log1p", floatsOrCpx, stablehlo.LogPlusOne, x)
}

// Sqrt returns the square root.
func (b *Builder) Sqrt(x backends.Op) (backends.Op, error) {
	return b.unary("Sqrt", floatsOrCpx, stablehlo.Sqrt, x)
}

// Rsqrt returns 1 / sqrt(x).
func (b *Builder) Rsqrt(x backends.Op) (backends.Op, error) {
	return b.unary("Rsqrt", floatsOrCpx, stablehlo.Rsqrt, x)
}

// Ceil rounds up.
func (b *Builder) Ceil(x backends.Op) (backends.Op, error) {
	return b.unary("Ceil", floats, stablehlo.Ceil, x)
}

// Floor rounds down.
func (b *Builder) Floor(x backends.Op) (backends.Op, error) {
	return b.unary("Floor", floats, stablehlo.Floor, x)
}

// Round rounds to the nearest integer, ties to even.
func (b *Builder) Round(x backends.Op) (backends.Op, error) {
	return b.unary("Round", floats, stablehlo.RoundNearestEven, x)
}

// Cos returns the cosine.
func (b *Builder) Cos(x backends.Op) (backends.Op, error) {
	return b.unary("Cos", floats, stablehlo.Cosine, x)
}

// Sin returns the sine.
func (b *Builder) Sin(x backends.Op) (backends.Op, error) {
	return b.unary("Sin", floats, stablehlo.Sine, x)
}

// Tanh returns the hyperbolic tangent.
func (b *Builder) Tanh(x backends.Op) (backends.Op, error) {
	return b.unary("Tanh", floats, stablehlo.Tanh, x)
}

// Logistic returns 1 / (1 + e**-x).
func (b *Builder) Logistic(x backends.Op) (backends.Op, error) {
	return b.unary("Logistic", floats, stablehlo.Logistic, x)
}

// Erf returns the error function (lowered to chlo.erf, which XLA expands).
func (b *Builder) Erf(x backends.Op) (backends.Op, error) {
	return b.unary("Erf", floats, stablehlo.Erf, x)
}

// BitCount returns the number of set bits.
func (b *Builder) BitCount(x backends.Op) (backends.Op, error) {
	return b.unary("BitCount", integers, stablehlo.Popcnt, x)
}

// Clz returns the number of leading zero bits.
func (b *Builder) Clz(x backends.Op) (backends.Op, error) {
	return b.unary("Clz", integers, stablehlo.CountLeadingZeros, x)
}

// BitwiseNot returns ^x for integers.
func (b *Builder) BitwiseNot(x backends.Op) (backends.Op, error) {
	return b.unary("BitwiseNot", integers, stablehlo.Not, x)
}

// LogicalNot returns !x for booleans.
func (b *Builder) LogicalNot(x backends.Op) (backends.Op, error) {
	return b.unary("LogicalNot", booleans, stablehlo.Not, x)
}

// IsFinite reports whether x is neither infinite nor NaN; integers are
// always finite.
func (b *Builder) IsFinite(x backends.Op) (out backends.Op, err error) {
	defer b.guard("IsFinite", &err)
	ns, err := b.nodes("IsFinite", x)
	if err != nil {
		return nil, err
	}
	n := ns[0]
	switch {
	case n.shape.DType.IsFloat():
		v, err := stablehlo.IsFinite(n.value)
		if err != nil {
			return nil, b.opError("IsFinite", err)
		}
		return b.node(v), nil
	case n.shape.DType.IsInt():
		v, err := b.filled(shapes.Make(dtypes.Bool, n.shape.Dimensions...), oneScalar)
		if err != nil {
			return nil, b.opError("IsFinite", err)
		}
		return b.node(v), nil
	}
	return nil, b.unsupported("IsFinite", fmt.Sprintf("operand is %s, the op needs a float or integer", n.shape.DType))
}

// IsNaN reports whether x is NaN (x != x); integers are never NaN.
func (b *Builder) IsNaN(x backends.Op) (out backends.Op, err error) {
	defer b.guard("IsNaN", &err)
	ns, err := b.nodes("IsNaN", x)
	if err != nil {
		return nil, err
	}
	n := ns[0]
	switch {
	case n.shape.DType.IsFloat() || n.shape.DType.IsComplex():
		v, err := stablehlo.Compare(n.value, n.value, types.CompareNE, types.CompareFloat)
		if err != nil {
			return nil, b.opError("IsNaN", err)
		}
		return b.node(v), nil
	case n.shape.DType.IsInt():
		v, err := b.filled(shapes.Make(dtypes.Bool, n.shape.Dimensions...), zeroScalar)
		if err != nil {
			return nil, b.opError("IsNaN", err)
		}
		return b.node(v), nil
	}
	return nil, b.unsupported("IsNaN", fmt.Sprintf("operand is %s, the op needs a float", n.shape.DType))
}

// Abs returns |x|: the magnitude (a real value) for complex x, x itself for
// unsigned integers, which StableHLO's abs does not accept.
func (b *Builder) Abs(x backends.Op) (out backends.Op, err error) {
	defer b.guard("Abs", &err)
	ns, err := b.nodes("Abs", x)
	if err != nil {
		return nil, err
	}
	if ns[0].shape.DType.IsUnsigned() {
		return ns[0], nil
	}
	return b.unary("Abs", anyNumber, stablehlo.Abs, x)
}

// Neg returns -x; for unsigned integers, 0 - x modulo 2**bits.
func (b *Builder) Neg(x backends.Op) (out backends.Op, err error) {
	defer b.guard("Neg", &err)
	ns, err := b.nodes("Neg", x)
	if err != nil {
		return nil, err
	}
	n := ns[0]
	if n.shape.DType.IsUnsigned() {
		zero, err := b.filled(n.shape, zeroScalar)
		if err != nil {
			return nil, b.opError("Neg", err)
		}
		v, err := stablehlo.Subtract(zero, n.value)
		if err != nil {
			return nil, b.opError("Neg", err)
		}
		return b.node(v), nil
	}
	return b.unary("Neg", anyNumber, stablehlo.Negate, x)
}

// Sign returns -1, 0 or 1 (NaN for NaN); for unsigned integers min(x, 1).
func (b *Builder) Sign(x backends.Op) (out backends.Op, err error) {
	defer b.guard("Sign", &err)
	ns, err := b.nodes("Sign", x)
	if err != nil {
		return nil, err
	}
	n := ns[0]
	if n.shape.DType.IsUnsigned() {
		one, err := b.filled(n.shape, oneScalar)
		if err != nil {
			return nil, b.opError("Sign", err)
		}
		v, err := stablehlo.Minimum(n.value, one)
		if err != nil {
			return nil, b.opError("Sign", err)
		}
		return b.node(v), nil
	}
	return b.unary("Sign", anyNumber, stablehlo.Sign, x)
}

// Identity returns x.
func (b *Builder) Identity(x backends.Op) (backends.Op, error) {
	ns, err := b.nodes("Identity", x)
	if err != nil {
		return nil, err
	}
	return ns[0], nil
}

// Where selects onTrue where condition holds, else onFalse. Any of the
// three may be a scalar, broadcast to the others' shape.
func (b *Builder) Where(condition, onTrue, onFalse backends.Op) (out backends.Op, err error) {
	defer b.guard("Where", &err)
	ns, err := b.nodes("Where", condition, onTrue, onFalse)
	if err != nil {
		return nil, err
	}
	c, t, f := ns[0], ns[1], ns[2]
	if c.shape.DType != dtypes.Bool {
		return nil, b.opError("Where", fmt.Errorf("condition must be boolean, got %s", c.shape))
	}
	if t.shape.DType != f.shape.DType {
		return nil, b.opError("Where", fmt.Errorf("onTrue and onFalse have different dtypes: %s and %s", t.shape, f.shape))
	}
	var dims []int
	for _, n := range ns {
		if n.shape.IsScalar() {
			continue
		}
		if dims != nil && !slicesEqual(dims, n.shape.Dimensions) {
			return nil, b.opError("Where", fmt.Errorf("shapes do not match: condition %s, onTrue %s, onFalse %s", c.shape, t.shape, f.shape))
		}
		dims = n.shape.Dimensions
	}
	tv, err := b.broadcastTo(t, dims)
	if err != nil {
		return nil, b.opError("Where", err)
	}
	fv, err := b.broadcastTo(f, dims)
	if err != nil {
		return nil, b.opError("Where", err)
	}
	v, err := stablehlo.Select(c.value, tv, fv)
	if err != nil {
		return nil, b.opError("Where", err)
	}
	return b.node(v), nil
}

// Clamp returns min(max(x, lo), hi); lo and hi may be scalars.
func (b *Builder) Clamp(lo, x, hi backends.Op) (out backends.Op, err error) {
	defer b.guard("Clamp", &err)
	ns, err := b.nodes("Clamp", lo, x, hi)
	if err != nil {
		return nil, err
	}
	l, xn, h := ns[0], ns[1], ns[2]
	if !realNumber.accepts(xn.shape.DType) {
		return nil, b.unsupported("Clamp", fmt.Sprintf("operand is %s, the op needs an integer or float", xn.shape.DType))
	}
	dims := xn.shape.Dimensions
	for _, n := range []*Node{l, h} {
		if !n.shape.IsScalar() {
			s, err := broadcastShape(shapes.Make(xn.shape.DType, dims...), n.shape)
			if err != nil {
				return nil, b.opError("Clamp", err)
			}
			dims = s.Dimensions
		}
	}
	vals := make([]*stablehlo.Value, 3)
	for i, n := range ns {
		if n.shape.IsScalar() && i != 1 {
			vals[i] = n.value
			continue
		}
		if vals[i], err = b.broadcastTo(n, dims); err != nil {
			return nil, b.opError("Clamp", err)
		}
	}
	v, err := stablehlo.Clamp(vals[0], vals[1], vals[2])
	if err != nil {
		return nil, b.opError("Clamp", err)
	}
	return b.node(v), nil
}

// Complex returns re + i*im from two float32 or float64 operands.
func (b *Builder) Complex(re, im backends.Op) (out backends.Op, err error) {
	defer b.guard("Complex", &err)
	l, r, err := b.binaryOperands("Complex", re, im)
	if err != nil {
		return nil, err
	}
	if dt := l.shape.DType; dt != dtypes.Float32 && dt != dtypes.Float64 {
		return nil, b.unsupported("Complex", fmt.Sprintf("parts are %s, the op needs Float32 or Float64", dt))
	}
	v, err := stablehlo.Complex(l.value, r.value)
	if err != nil {
		return nil, b.opError("Complex", err)
	}
	return b.node(v), nil
}

// Real returns the real part; x itself for real numbers.
func (b *Builder) Real(x backends.Op) (out backends.Op, err error) {
	defer b.guard("Real", &err)
	ns, err := b.nodes("Real", x)
	if err != nil {
		return nil, err
	}
	if !ns[0].shape.DType.IsComplex() {
		return ns[0], nil
	}
	v, err := stablehlo.Real(ns[0].value)
	if err != nil {
		return nil, b.opError("Real", err)
	}
	return b.node(v), nil
}

// Imag returns the imaginary part; zeros for real numbers.
func (b *Builder) Imag(x backends.Op) (out backends.Op, err error) {
	defer b.guard("Imag", &err)
	ns, err := b.nodes("Imag", x)
	if err != nil {
		return nil, err
	}
	if !ns[0].shape.DType.IsComplex() {
		v, err := b.filled(ns[0].shape, zeroScalar)
		if err != nil {
			return nil, b.opError("Imag", err)
		}
		return b.node(v), nil
	}
	v, err := stablehlo.Imag(ns[0].value)
	if err != nil {
		return nil, b.opError("Imag", err)
	}
	return b.node(v), nil
}

// Conj returns the complex conjugate; x itself for real numbers.
func (b *Builder) Conj(x backends.Op) (out backends.Op, err error) {
	defer b.guard("Conj", &err)
	ns, err := b.nodes("Conj", x)
	if err != nil {
		return nil, err
	}
	n := ns[0]
	if !n.shape.DType.IsComplex() {
		return n, nil
	}
	re, err := stablehlo.Real(n.value)
	if err != nil {
		return nil, b.opError("Conj", err)
	}
	im, err := stablehlo.Imag(n.value)
	if err != nil {
		return nil, b.opError("Conj", err)
	}
	if im, err = stablehlo.Negate(im); err != nil {
		return nil, b.opError("Conj", err)
	}
	v, err := stablehlo.Complex(re, im)
	if err != nil {
		return nil, b.opError("Conj", err)
	}
	return b.node(v), nil
}
