package onnx

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// BitCast (opset 26, https://onnx.ai/onnx/operators/onnx__BitCast.html)
// reinterprets each element's bits as another dtype of the same width.
//
// A build-time input is reinterpreted on the host, byte for byte. In the
// graph: integer to integer of one width is a wrapping conversion, which is
// the same bits; Bool to an 8-bit integer is 0 or 1. Other pairs use the
// backend's Bitcast where it has one (the pjrt backends), and otherwise,
// for IEEE float32/float64 against 32/64-bit integers, exact arithmetic:
// sign, exponent and mantissa are taken apart and put together with
// integer and power-of-two operations, every step exact, for integers to
// floats (a NaN pattern becomes the canonical quiet NaN, still a NaN). The
// other way a NaN's payload and sign cannot be recovered by arithmetic, so
// floats to integers at run time are refused there rather than answered
// wrongly for NaNs.

func init() {
	register("BitCast", 26, convBitCast).withHost(hostBitCast)
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("BitCast")
}

func bitcastTarget(c *opCtx) ir.DType {
	to, err := dtypeFromONNX(onnxpb.DataType(c.attrInt("to", 0)))
	if err != nil {
		panic(err)
	}
	from := c.dtype(0)
	if isNarrow(from) || isNarrow(to) {
		c.fail("BitCast between %s and %s is not supported (sub-byte or float8 types are held widened)", from, to)
	}
	if from.Size() != to.Size() {
		c.fail("BitCast needs dtypes of the same width: %s is %d bits, %s is %d", from, 8*from.Size(), to, 8*to.Size())
	}
	return to
}

func hostBitCast(c *opCtx) error {
	to := bitcastTarget(c)
	h := c.hostIn(0)
	t, err := h.toIR()
	if err != nil {
		return err
	}
	raw, err := ir.TensorBytes(t)
	if err != nil {
		return err
	}
	if to == ir.Bool {
		for _, b := range raw {
			if b > 1 {
				c.fail("byte %d is not a valid Bool", b)
			}
		}
	}
	out, err := ir.TensorFromBytes(to, h.dims, raw)
	if err != nil {
		return err
	}
	c.setHost(0, hostFromIR(out, to))
	return nil
}

func convBitCast(c *opCtx) error {
	to := bitcastTarget(c)
	from := c.dtype(0)
	x := c.in(0)
	g := x.Graph()
	intLike := func(dt ir.DType) bool { return dt.IsInt() }
	switch {
	case from == to:
		c.setDT(0, x, to)
		return nil
	case intLike(from) && intLike(to), from == ir.Bool && intLike(to):
		c.setDT(0, graph.ConvertDType(x, to), to)
		return nil
	case intLike(from) && to == ir.Bool:
		c.fail("BitCast of a run-time integer to Bool is not supported (bytes other than 0 and 1 are not Bools)")
	}
	if caps := g.Backend().Capabilities(); caps.Operations[backends.OpTypeBitcast] && caps.DTypes[from] && caps.DTypes[to] {
		if x.DType() != from {
			x = graph.ConvertDType(x, from) // Float16/BFloat16 carried as Float32
		}
		y := graph.Bitcast(x, to)
		if gd := graphDType(to); gd != to {
			y = graph.ConvertDType(y, gd)
		}
		c.setDT(0, y, to)
		return nil
	}
	switch {
	case from == ir.Float32 && (to == ir.Int32 || to == ir.Uint32), from == ir.Float64 && (to == ir.Int64 || to == ir.Uint64):
		// Arithmetic recovers every bit pattern but a NaN's payload and
		// sign: a NaN input would give wrong integers, silently. Refuse.
		return &errs.UnsupportedError{Backend: g.Backend().Name(), What: "op", Name: "BitCast",
			Detail: fmt.Sprintf("node %s: BitCast from %s to %s of a run-time value needs the backend's Bitcast (without it a NaN's payload and sign are lost); use xla-cpu, or make the input a build-time value", c.name, from, to)}
	case (from == ir.Int32 || from == ir.Uint32) && to == ir.Float32, (from == ir.Int64 || from == ir.Uint64) && to == ir.Float64:
		c.setDT(0, graph.ConvertDType(bitsFloat(x, to == ir.Float64), to), to)
	default:
		return &errs.UnsupportedError{Backend: g.Backend().Name(), What: "op", Name: "BitCast",
			Detail: fmt.Sprintf("node %s: BitCast from %s to %s of a run-time value needs the backend's Bitcast, which it lacks", c.name, from, to)}
	}
	return nil
}

// ieee describes a binary floating-point format.
type ieee struct{ ebits, mbits, bias int }

func ieeeOf(f64 bool) ieee {
	if f64 {
		return ieee{11, 52, 1023}
	}
	return ieee{8, 23, 127}
}

// pow2Table is 2^(k-bias) for biased exponents k of the normal range
// (1 .. 2^ebits-2; the two ends hold 1), a Float64 constant.
func pow2Table(g *graph.Graph, f ieee) *graph.Node {
	n := 1 << f.ebits
	v := make([]float64, n)
	for k := range v {
		v[k] = 1
		if k > 0 && k < n-1 {
			v[k] = math.Ldexp(1, k-f.bias)
		}
	}
	return constNode(g, newHostFloats(ir.Float64, []int{n}, v))
}

// bitsFloat returns the Float64 value whose IEEE float32 (f64 false) or
// float64 bits are x's (any 32- or 64-bit integer dtype).
func bitsFloat(x *graph.Node, f64 bool) *graph.Node {
	f := ieeeOf(f64)
	g := x.Graph()
	dims := x.Shape().Dimensions
	c64 := func(v float64) *graph.Node { return filled(g, ir.Float64, dims, v) }
	i64 := func(v int64) *graph.Node { return graph.BroadcastToDims(graph.Const(g, v), dims...) }
	if len(dims) == 0 {
		i64 = func(v int64) *graph.Node { return graph.Const(g, v) }
	}
	xi := graph.ConvertDType(x, ir.Int64) // uint64 wraps to its pattern; int32 sign-extends
	var neg, rest *graph.Node
	if f64 {
		neg = graph.LessThan(xi, i64(0))
		rest = graph.Where(neg, graph.Sub(xi, i64(math.MinInt64)), xi) // sign bit cleared
	} else {
		u := graph.Where(graph.LessThan(xi, i64(0)), graph.Add(xi, i64(1<<32)), xi) // 0 .. 2^32-1
		neg = graph.GreaterOrEqual(u, i64(1<<31))
		rest = graph.Where(neg, graph.Sub(u, i64(1<<31)), u)
	}
	expField := graph.Div(rest, i64(int64(1)<<f.mbits))
	mant := graph.ConvertDType(graph.Sub(rest, graph.Mul(expField, i64(int64(1)<<f.mbits))), ir.Float64) // < 2^52: exact
	top := int64(1)<<f.ebits - 1
	table := pow2Table(g, f)
	p := gatherAxis(table, graph.ClipScalar(expField, 0, float64(top)), 0)
	normal := graph.Mul(graph.Add(c64(1), graph.Mul(mant, c64(math.Ldexp(1, -f.mbits)))), p)
	subnormal := graph.Mul(graph.Mul(mant, c64(math.Ldexp(1, -f.mbits))), c64(math.Ldexp(1, 1-f.bias)))
	v := graph.Where(graph.Equal(expField, i64(0)), subnormal, normal)
	special := graph.Where(graph.Equal(mant, c64(0)), c64(math.Inf(1)), c64(math.NaN()))
	v = graph.Where(graph.Equal(expField, i64(top)), special, v)
	return graph.Where(neg, graph.Neg(v), v)
}
