package onnx

import (
	"errors"
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
)

// Element-wise unary, binary, variadic and comparison ops, with host
// evaluators for those that appear in shape computations.

// errNoHost is returned by a host evaluator that declines (for example an
// integer op asked to work on floats it has no rule for): the builder then
// falls back to the graph converter.
var errNoHost = errors.New("no host evaluation for these inputs")

func unaryOp(fn func(*graph.Node) *graph.Node) converterFunc {
	return func(c *opCtx) error {
		c.set(0, fn(c.in(0)))
		return nil
	}
}

func binaryOp(fn func(a, b *graph.Node) *graph.Node) converterFunc {
	return func(c *opCtx) error {
		c.set(0, binaryBroadcast(c.in(0), c.in(1), fn))
		return nil
	}
}

// hostUnary evaluates a unary op on the host; ff handles float dtypes and
// fi integer ones (nil: decline).
func hostUnary(ff func(float64) float64, fi func(int64) int64) converterFunc {
	return func(c *opCtx) error {
		x := c.hostIn(0)
		if err := x.decode(); err != nil {
			return err
		}
		if x.isFloat() {
			if ff == nil {
				return errNoHost
			}
			out := make([]float64, len(x.f))
			for k, v := range x.f {
				out[k] = ff(v)
			}
			c.setHost(0, newHostFloats(x.dt, x.dims, out))
			return nil
		}
		if fi == nil {
			return errNoHost
		}
		out := make([]int64, len(x.i))
		for k, v := range x.i {
			out[k] = fi(v)
		}
		c.setHost(0, newHostInts(x.dt, x.dims, out))
		return nil
	}
}

// hostBroadcast2 broadcasts two host tensors.
func hostBroadcast2(a, b *hostTensor) (*hostTensor, *hostTensor, error) {
	dims, err := broadcastDims(a.dims, b.dims)
	if err != nil {
		return nil, nil, err
	}
	if a, err = a.broadcastTo(dims); err != nil {
		return nil, nil, err
	}
	if b, err = b.broadcastTo(dims); err != nil {
		return nil, nil, err
	}
	if err := a.decode(); err != nil {
		return nil, nil, err
	}
	if err := b.decode(); err != nil {
		return nil, nil, err
	}
	return a, b, nil
}

// hostBinary evaluates a binary arithmetic op on the host; the result has
// the first input's dtype.
func hostBinary(ff func(a, b float64) float64, fi func(a, b int64) int64) converterFunc {
	return func(c *opCtx) error {
		a, b, err := hostBroadcast2(c.hostIn(0), c.hostIn(1))
		if err != nil {
			return err
		}
		if a.isFloat() {
			if ff == nil {
				return errNoHost
			}
			bf, err := b.floats()
			if err != nil {
				return err
			}
			out := make([]float64, len(a.f))
			for k := range out {
				out[k] = ff(a.f[k], bf[k])
			}
			c.setHost(0, newHostFloats(a.dt, a.dims, out))
			return nil
		}
		if fi == nil {
			return errNoHost
		}
		bi, err := b.ints()
		if err != nil {
			return err
		}
		out := make([]int64, len(a.i))
		for k := range out {
			out[k] = fi(a.i[k], bi[k])
		}
		c.setHost(0, newHostInts(a.dt, a.dims, out))
		return nil
	}
}

// hostCompare evaluates a comparison on the host, giving a Bool tensor.
func hostCompare(ff func(a, b float64) bool, fi func(a, b int64) bool) converterFunc {
	return func(c *opCtx) error {
		a, b, err := hostBroadcast2(c.hostIn(0), c.hostIn(1))
		if err != nil {
			return err
		}
		out := make([]int64, a.size())
		if a.isFloat() {
			bf, err := b.floats()
			if err != nil {
				return err
			}
			for k := range out {
				if ff(a.f[k], bf[k]) {
					out[k] = 1
				}
			}
		} else {
			bi, err := b.ints()
			if err != nil {
				return err
			}
			for k := range out {
				if fi(a.i[k], bi[k]) {
					out[k] = 1
				}
			}
		}
		c.setHost(0, newHostInts(ir.Bool, a.dims, out))
		return nil
	}
}

func init() {
	// Unary math.
	register("Abs", 6, unaryOp(graph.Abs)).withHost(hostUnary(math.Abs, func(v int64) int64 {
		if v < 0 {
			return -v
		}
		return v
	}))
	register("Neg", 6, unaryOp(graph.Neg)).withHost(hostUnary(func(v float64) float64 { return -v }, func(v int64) int64 { return -v }))
	register("Exp", 6, unaryOp(graph.Exp))
	register("Log", 6, unaryOp(graph.Log))
	register("Sqrt", 6, unaryOp(graph.Sqrt)).withHost(hostUnary(math.Sqrt, nil))
	register("Reciprocal", 6, unaryOp(func(x *graph.Node) *graph.Node { return graph.Div(scalarLikeB(x, 1), x) }))
	register("Floor", 6, unaryOp(graph.Floor)).withHost(hostUnary(math.Floor, nil))
	register("Ceil", 6, unaryOp(graph.Ceil)).withHost(hostUnary(math.Ceil, nil))
	register("Round", 11, unaryOp(roundHalfEven)).withHost(hostUnary(math.RoundToEven, nil))
	register("Sign", 9, unaryOp(graph.Sign)).withHost(hostUnary(func(v float64) float64 {
		switch {
		case v > 0:
			return 1
		case v < 0:
			return -1
		}
		return v
	}, func(v int64) int64 {
		switch {
		case v > 0:
			return 1
		case v < 0:
			return -1
		}
		return 0
	}))
	register("Sin", 7, unaryOp(graph.Sin))
	register("Cos", 7, unaryOp(graph.Cos))
	register("Tan", 7, unaryOp(func(x *graph.Node) *graph.Node { return graph.Div(graph.Sin(x), graph.Cos(x)) }))
	register("Tanh", 6, unaryOp(graph.Tanh))
	register("Sinh", 9, unaryOp(func(x *graph.Node) *graph.Node {
		return graph.MulScalar(graph.Sub(graph.Exp(x), graph.Exp(graph.Neg(x))), 0.5)
	}))
	register("Cosh", 9, unaryOp(func(x *graph.Node) *graph.Node {
		return graph.MulScalar(graph.Add(graph.Exp(x), graph.Exp(graph.Neg(x))), 0.5)
	}))
	register("Asinh", 9, unaryOp(func(x *graph.Node) *graph.Node {
		return graph.Log(graph.Add(x, graph.Sqrt(graph.AddScalar(graph.Mul(x, x), 1))))
	}))
	register("Acosh", 9, unaryOp(func(x *graph.Node) *graph.Node {
		return graph.Log(graph.Add(x, graph.Sqrt(graph.AddScalar(graph.Mul(x, x), -1))))
	}))
	register("Atanh", 9, unaryOp(func(x *graph.Node) *graph.Node {
		return graph.MulScalar(graph.Log(graph.Div(graph.OnePlus(x), graph.OneMinus(x))), 0.5)
	}))
	register("Atan", 7, unaryOp(atan))
	register("Asin", 7, unaryOp(func(x *graph.Node) *graph.Node {
		// asin x = atan(x / sqrt(1 - x²))
		return atan(graph.Div(x, graph.Sqrt(graph.OneMinus(graph.Mul(x, x)))))
	}))
	register("Acos", 7, unaryOp(func(x *graph.Node) *graph.Node {
		// acos x = π/2 - asin x
		asin := atan(graph.Div(x, graph.Sqrt(graph.OneMinus(graph.Mul(x, x)))))
		return graph.Sub(scalarLikeB(x, math.Pi/2), asin)
	}))
	register("Erf", 9, unaryOp(graph.Erf))
	register("Sigmoid", 6, unaryOp(graph.Logistic))
	register("Not", 1, unaryOp(graph.LogicalNot)).withHost(hostUnary(nil, func(v int64) int64 {
		if v == 0 {
			return 1
		}
		return 0
	}))
	register("IsNaN", 9, func(c *opCtx) error {
		c.setDT(0, graph.IsNaN(c.in(0)), ir.Bool)
		return nil
	})
	register("IsInf", 10, func(c *opCtx) error {
		x := c.in(0)
		neg, pos := c.attrInt("detect_negative", 1) != 0, c.attrInt("detect_positive", 1) != 0
		inf := graph.And(graph.LogicalNot(graph.IsFinite(x)), graph.LogicalNot(graph.IsNaN(x)))
		zero := graph.BroadcastToDims(scalarLike(x, 0), x.Shape().Dimensions...)
		switch {
		case neg && !pos:
			inf = graph.And(inf, graph.LessThan(x, zero))
		case pos && !neg:
			inf = graph.And(inf, graph.GreaterThan(x, zero))
		case !pos && !neg:
			inf = graph.BroadcastToDims(graph.Const(c.g, false), x.Shape().Dimensions...)
		}
		c.setDT(0, inf, ir.Bool)
		return nil
	})
	// Padding: positions stay apart; Neg and Not carry a constant fill.
	registerPadRules(padUnary, "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round",
		"Sign", "Sin", "Cos", "Tan", "Tanh", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Atan", "Asin",
		"Acos", "Erf", "Sigmoid", "IsNaN", "IsInf")
	registerPadRule("Neg", padNeg)
	registerPadRule("Not", padNot)

	// Binary arithmetic.
	register("Add", 7, binaryOp(graph.Add)).withHost(hostBinary(func(a, b float64) float64 { return a + b }, func(a, b int64) int64 { return a + b }))
	register("Sub", 7, binaryOp(graph.Sub)).withHost(hostBinary(func(a, b float64) float64 { return a - b }, func(a, b int64) int64 { return a - b }))
	register("Mul", 7, binaryOp(graph.Mul)).withHost(hostBinary(func(a, b float64) float64 { return a * b }, func(a, b int64) int64 { return a * b }))
	register("Div", 7, binaryOp(graph.Div)).withHost(hostBinary(func(a, b float64) float64 { return a / b }, func(a, b int64) int64 {
		if b == 0 {
			panic(fmt.Errorf("integer division by zero"))
		}
		return a / b
	}))
	register("Pow", 7, convPow)
	register("Mod", 10, convMod).withHost(hostMod)
	register("BitShift", 11, convBitShift)
	register("BitShift", 28, convBitShift28)
	register("BitwiseAnd", 18, binaryOp(graph.BitwiseAnd))
	register("BitwiseOr", 18, binaryOp(graph.BitwiseOr))
	register("BitwiseXor", 18, binaryOp(graph.BitwiseXor))
	register("BitwiseNot", 18, unaryOp(graph.BitwiseNot))
	registerPadRules(padElementwise, "Add", "Sub", "Mul", "Div", "Pow", "Mod", "BitShift", "BitwiseAnd",
		"BitwiseOr", "BitwiseXor")
	registerPadRule("BitwiseNot", padUnary)

	// Logic and comparisons.
	register("And", 7, binaryOp(graph.LogicalAnd)).withHost(hostBinary(nil, func(a, b int64) int64 { return b2i(a != 0 && b != 0) }))
	register("Or", 7, binaryOp(graph.LogicalOr)).withHost(hostBinary(nil, func(a, b int64) int64 { return b2i(a != 0 || b != 0) }))
	register("Xor", 7, binaryOp(graph.LogicalXor)).withHost(hostBinary(nil, func(a, b int64) int64 { return b2i((a != 0) != (b != 0)) }))
	register("Equal", 7, binaryOp(graph.Equal)).withHost(hostCompare(func(a, b float64) bool { return a == b }, func(a, b int64) bool { return a == b }))
	register("Less", 7, binaryOp(graph.LessThan)).withHost(hostCompare(func(a, b float64) bool { return a < b }, func(a, b int64) bool { return a < b }))
	register("Greater", 7, binaryOp(graph.GreaterThan)).withHost(hostCompare(func(a, b float64) bool { return a > b }, func(a, b int64) bool { return a > b }))
	register("LessOrEqual", 12, binaryOp(graph.LessOrEqual)).withHost(hostCompare(func(a, b float64) bool { return a <= b }, func(a, b int64) bool { return a <= b }))
	register("GreaterOrEqual", 12, binaryOp(graph.GreaterOrEqual)).withHost(hostCompare(func(a, b float64) bool { return a >= b }, func(a, b int64) bool { return a >= b }))
	register("Where", 9, convWhere).withHost(hostWhere)
	registerPadRules(padElementwise, "And", "Or", "Xor", "Equal", "Less", "Greater", "LessOrEqual",
		"GreaterOrEqual", "Where")

	// Variadic.
	register("Max", 6, variadic(graph.Max)).withHost(hostVariadic(math.Max, func(a, b int64) int64 { return max(a, b) }))
	register("Min", 6, variadic(graph.Min)).withHost(hostVariadic(math.Min, func(a, b int64) int64 { return min(a, b) }))
	register("Sum", 6, variadic(graph.Add)).withHost(hostVariadic(func(a, b float64) float64 { return a + b }, func(a, b int64) int64 { return a + b }))
	register("Mean", 6, func(c *opCtx) error {
		if err := variadic(graph.Add)(c); err != nil {
			return err
		}
		n := c.outs[0].node
		c.set(0, graph.Div(n, scalarLikeB(n, float64(c.numPresent()))))
		return nil
	})
	register("Clip", 6, convClip).withHost(hostClip)
	registerPadRules(padElementwise, "Max", "Min", "Sum", "Mean", "Clip")
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// scalarLikeB returns a scalar of x's dtype broadcast to x's shape.
func scalarLikeB(x *graph.Node, v float64) *graph.Node {
	return filled(x.Graph(), x.DType(), x.Shape().Dimensions, v)
}

// roundHalfEven is ONNX Round (ties to even); GoMLX's Round on the pure-Go
// backend rounds ties away from zero.
func roundHalfEven(x *graph.Node) *graph.Node {
	r := graph.Round(x)
	frac := graph.Sub(x, graph.Floor(x))
	tie := graph.Equal(frac, scalarLikeB(x, 0.5))
	even := graph.Mul(graph.Round(graph.Mul(x, scalarLikeB(x, 0.5))), scalarLikeB(x, 2))
	return graph.Where(tie, even, r)
}

// atan is computed with range reduction and a polynomial (there is no
// arctangent primitive): for |x| > 1, atan x = ±π/2 - atan(1/x); on [0, 1]
// a second reduction around tan(π/8) and a degree-9 odd Taylor series
// around 0 of the reduced argument (|t| <= tan(π/8) ≈ 0.414) give an error
// below 2e-7 after ten terms.
func atan(x *graph.Node) *graph.Node {
	dims := x.Shape().Dimensions
	k := func(v float64) *graph.Node { return scalarLikeB(x, v) }
	ax := graph.Abs(x)
	big := graph.GreaterThan(ax, k(1))
	a := graph.Where(big, graph.Div(k(1), ax), ax) // in [0, 1]
	// atan a = π/8 + atan((a - t8)/(1 + a·t8)), t8 = tan(π/8)
	t8 := math.Tan(math.Pi / 8)
	shift := graph.GreaterThan(a, k(t8))
	ar := graph.Where(shift, graph.Div(graph.Sub(a, k(t8)), graph.Add(k(1), graph.Mul(a, k(t8)))), a)
	// Taylor series: t - t³/3 + t⁵/5 - ...
	t2 := graph.Mul(ar, ar)
	poly := k(0)
	for n := 19; n >= 1; n -= 2 {
		sign := 1.0
		if (n/2)%2 == 1 {
			sign = -1
		}
		poly = graph.Add(graph.Mul(poly, t2), k(sign/float64(n)))
	}
	r := graph.Mul(poly, ar)
	r = graph.Where(shift, graph.Add(r, k(math.Pi/8)), r)
	r = graph.Where(big, graph.Sub(k(math.Pi/2), r), r)
	_ = dims
	return graph.Mul(graph.Sign(x), r)
}

// convPow is Pow; since opset 12 the exponent may have another dtype. The
// result has the base's dtype; integer bases are computed in float64.
func convPow(c *opCtx) error {
	x, y := c.in(0), c.in(1)
	dt := x.DType()
	if dt.IsFloat() {
		if y.DType() != dt {
			y = graph.ConvertDType(y, dt)
		}
		c.set(0, binaryBroadcast(x, y, graph.Pow))
		return nil
	}
	xf, yf := graph.ConvertDType(x, ir.Float64), y
	if yf.DType() != ir.Float64 {
		yf = graph.ConvertDType(yf, ir.Float64)
	}
	r := binaryBroadcast(xf, yf, graph.Pow)
	c.setDT(0, graph.ConvertDType(graph.Round(r), dt), c.dtype(0))
	return nil
}

// convMod: fmod=1 takes the dividend's sign (C fmod), fmod=0 the divisor's
// (Python %).
func convMod(c *opCtx) error {
	ab := broadcastNodes(c.in(0), c.in(1))
	a, b := ab[0], ab[1]
	r := graph.Rem(a, b)
	if c.attrInt("fmod", 0) == 0 && !a.DType().IsUnsigned() {
		zero := scalarLikeB(r, 0)
		fix := graph.And(graph.NotEqual(r, zero), graph.LogicalXor(graph.LessThan(r, zero), graph.LessThan(b, zero)))
		r = graph.Where(fix, graph.Add(r, b), r)
		if a.DType().IsFloat() {
			// A zero result takes the divisor's sign (A - floor(A/B)·B).
			negZero := graph.Neg(zero) // not a -0 constant: GoMLX may share it with +0
			r = graph.Where(graph.And(graph.Equal(r, zero), graph.LessThan(b, zero)), negZero, graph.Where(graph.Equal(r, zero), zero, r))
		}
	}
	c.set(0, r)
	return nil
}

func hostMod(c *opCtx) error {
	fmod := c.attrInt("fmod", 0) != 0
	return hostBinary(func(a, b float64) float64 {
		r := math.Mod(a, b)
		if !fmod && r != 0 && (r < 0) != (b < 0) {
			r += b
		}
		if !fmod && r == 0 {
			r = math.Copysign(0, b)
		}
		return r
	}, func(a, b int64) int64 {
		if b == 0 {
			panic(fmt.Errorf("integer modulo by zero"))
		}
		r := a % b
		if !fmod && r != 0 && (r < 0) != (b < 0) {
			r += b
		}
		return r
	})(c)
}

// convBitShift shifts unsigned integers by multiplying or dividing by
// powers of two (the pure-Go backend has no shift ops).
func convBitShift(c *opCtx) error {
	ab := broadcastNodes(c.in(0), c.in(1))
	x, n := ab[0], ab[1]
	p := graph.ConvertDType(graph.Pow(scalarOf(c.g, ir.Float64, 2), graph.ConvertDType(n, ir.Float64)), x.DType())
	if c.attrString("direction", "") == "LEFT" {
		c.set(0, graph.Mul(x, p))
	} else {
		c.set(0, graph.Div(x, p))
	}
	return nil
}

// convBitShift28 is BitShift from opset 28 (https://onnx.ai/onnx/operators/onnx__BitShift.html):
// signed types too, a right shift of a signed value is arithmetic
// (sign-extending), a left shift wraps in two's complement, and a shift
// amount that is negative or at least the bit width gives what sign
// extension alone gives: -1 for a right shift of a negative value, else 0.
// Shifts are products and floor divisions by 2^n taken from a table (the
// pure-Go backend has no shift ops).
func convBitShift28(c *opCtx) error {
	ab := broadcastNodes(c.in(0), c.in(1))
	x, n := ab[0], ab[1]
	dt := x.DType()
	width := 8 * dt.Size()
	if !dt.IsInt() || width == 0 {
		c.fail("X must be an integer tensor, got %s", dt)
	}
	g := x.Graph()
	pow := make([]int64, width)
	for k := range pow {
		pow[k] = int64(uint64(1) << uint(k)) // 2^63 wraps to the int64 minimum; converted below
	}
	table := graph.ConvertDType(graph.Const(g, pow), dt)
	n64 := graph.ConvertDType(n, ir.Int64)
	inRange := graph.LogicalAnd(graph.GreaterOrEqual(n64, scalarOf(g, ir.Int64, 0)),
		graph.LessThan(n64, scalarOf(g, ir.Int64, float64(width))))
	idx := graph.Where(inRange, n64, graph.ZerosLike(n64))
	p := gatherAxis(table, idx, 0)
	zero := graph.ZerosLike(x)
	signed := !dt.IsUnsigned()
	if c.attrString("direction", "") == "LEFT" {
		c.set(0, graph.Where(inRange, graph.Mul(x, p), zero))
		return nil
	}
	// Right: floor(x / 2^n); for signed types 2^(width-1) is not
	// representable, so n = width-1 joins the out-of-range case (both give
	// the sign fill).
	ok := inRange
	if signed {
		ok = graph.LogicalAnd(ok, graph.LessThan(n64, scalarOf(g, ir.Int64, float64(width-1))))
		p = graph.Where(ok, p, graph.OnesLike(p))
	}
	q := graph.Div(x, p)
	fill := zero
	if signed {
		r := graph.Sub(x, graph.Mul(q, p))
		q = graph.Where(graph.LessThan(r, zero), graph.Sub(q, graph.OnesLike(q)), q)
		fill = graph.Where(graph.LessThan(x, zero), graph.Neg(graph.OnesLike(x)), zero)
	}
	c.set(0, graph.Where(ok, q, fill))
	return nil
}

func convWhere(c *opCtx) error {
	n := broadcastNodes(c.in(0), c.in(1), c.in(2))
	c.set(0, graph.Where(n[0], n[1], n[2]))
	return nil
}

func hostWhere(c *opCtx) error {
	cond, x, y := c.hostIn(0), c.hostIn(1), c.hostIn(2)
	dims, err := broadcastDims(cond.dims, x.dims, y.dims)
	if err != nil {
		return err
	}
	if cond, err = cond.broadcastTo(dims); err != nil {
		return err
	}
	ci, err := cond.ints()
	if err != nil {
		return err
	}
	idx := make([]int, len(ci))
	xi, yi := broadcastIndex(x.dims, dims), broadcastIndex(y.dims, dims)
	// Build the result by gathering from the concatenation [x, y].
	if err := x.decode(); err != nil {
		return err
	}
	if err := y.decode(); err != nil {
		return err
	}
	both := &hostTensor{dt: x.dt, dims: []int{x.size() + y.size()}}
	if x.isFloat() {
		both.f = append(append([]float64{}, x.f...), y.f...)
	} else {
		both.i = append(append([]int64{}, x.i...), y.i...)
	}
	for k := range idx {
		if ci[k] != 0 {
			idx[k] = xi[k]
		} else {
			idx[k] = x.size() + yi[k]
		}
	}
	out, err := both.gatherFlat(dims, idx)
	if err != nil {
		return err
	}
	c.setHost(0, out)
	return nil
}

// numPresent counts present inputs.
func (c *opCtx) numPresent() int {
	n := 0
	for _, in := range c.inputs {
		if in != nil {
			n++
		}
	}
	return n
}

// variadic folds fn over every present input with broadcasting.
func variadic(fn func(a, b *graph.Node) *graph.Node) converterFunc {
	return func(c *opCtx) error {
		var acc *graph.Node
		for k := range c.inputs {
			if !c.has(k) {
				continue
			}
			if acc == nil {
				acc = c.in(k)
				continue
			}
			acc = binaryBroadcast(acc, c.in(k), fn)
		}
		if acc == nil {
			c.fail("needs at least one input")
		}
		c.set(0, acc)
		return nil
	}
}

func hostVariadic(ff func(a, b float64) float64, fi func(a, b int64) int64) converterFunc {
	return func(c *opCtx) error {
		var acc *hostTensor
		for k := range c.inputs {
			if !c.has(k) {
				continue
			}
			x := c.hostIn(k)
			if acc == nil {
				acc = x
				continue
			}
			a, b, err := hostBroadcast2(acc, x)
			if err != nil {
				return err
			}
			if a.isFloat() {
				out := make([]float64, len(a.f))
				for j := range out {
					out[j] = ff(a.f[j], b.f[j])
				}
				acc = newHostFloats(a.dt, a.dims, out)
			} else {
				out := make([]int64, len(a.i))
				for j := range out {
					out[j] = fi(a.i[j], b.i[j])
				}
				acc = newHostInts(a.dt, a.dims, out)
			}
		}
		if acc == nil {
			return fmt.Errorf("needs at least one input")
		}
		c.setHost(0, acc)
		return nil
	}
}

// clipBounds returns Clip's bounds: attributes before opset 11, optional
// inputs since.
func clipBounds(c *opCtx, x *graph.Node) (lo, hi *graph.Node) {
	if c.opset < 11 {
		if c.hasAttr("min") {
			lo = scalarLike(x, c.attrFloat("min", 0))
		}
		if c.hasAttr("max") {
			hi = scalarLike(x, c.attrFloat("max", 0))
		}
		return lo, hi
	}
	if c.has(1) {
		lo = graph.Reshape(c.in(1))
	}
	if c.has(2) {
		hi = graph.Reshape(c.in(2))
	}
	return lo, hi
}

func convClip(c *opCtx) error {
	x := c.in(0)
	lo, hi := clipBounds(c, x)
	dims := x.Shape().Dimensions
	if lo != nil {
		x = graph.Max(x, graph.BroadcastToDims(lo, dims...))
	}
	if hi != nil {
		x = graph.Min(x, graph.BroadcastToDims(hi, dims...))
	}
	c.set(0, x)
	return nil
}

func hostClip(c *opCtx) error {
	x := c.hostIn(0)
	lo, hi := math.Inf(-1), math.Inf(1)
	if c.opset < 11 {
		lo = c.attrFloat("min", lo)
		hi = c.attrFloat("max", hi)
	} else {
		if c.has(1) {
			v, err := c.hostIn(1).scalarFloat()
			if err != nil {
				return err
			}
			lo = v
		}
		if c.has(2) {
			v, err := c.hostIn(2).scalarFloat()
			if err != nil {
				return err
			}
			hi = v
		}
	}
	f, err := x.floats()
	if err != nil {
		return err
	}
	out := make([]float64, len(f))
	for k, v := range f {
		out[k] = math.Min(math.Max(v, lo), hi)
	}
	if x.isFloat() {
		c.setHost(0, newHostFloats(x.dt, x.dims, out))
		return nil
	}
	h := newHostFloats(ir.Float64, x.dims, out)
	r, err := h.castTo(x.dt)
	if err != nil {
		return err
	}
	c.setHost(0, r)
	return nil
}

// padNeg negates a constant fill at padded positions (a mask's 0/1 stays
// a known value).
var padNeg = padPointwise(func(x, out *pval) {
	out.padc, out.orig, out.idiom = mapPadc(x.padc, func(f float64) float64 { return -f }), x.orig, x.idiom
})

// padNot inverts a constant boolean fill at padded positions.
var padNot = padPointwise(func(x, out *pval) {
	out.padc, out.orig = mapPadc(x.padc, func(f float64) float64 { return b2f(f == 0) }), x.orig
})
