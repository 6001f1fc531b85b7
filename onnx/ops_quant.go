package onnx

import (
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// Quantization ops: QuantizeLinear, DequantizeLinear and
// DynamicQuantizeLinear, and the integer kernels MatMulInteger,
// ConvInteger, QLinearMatMul and QLinearConv.
//
// Integer products accumulate in Int32 after subtracting the zero points,
// as the operator specifications require ("accumulation may overflow if
// and only if in 32 bits"), so results are exact. Requantisation computes
// acc·(scale_a·scale_b/scale_y) in Float32, rounds half to even, then adds
// the output zero point and saturates (the order QuantizeLinear defines:
// saturate(round(x/y_scale) + y_zero_point)).
//
// Supported quantized types are int8, uint8, int16 and uint16 (and int32
// as a DequantizeLinear input), and the narrow types held in carriers (see
// narrow.go): int4, uint4, int2 and uint2 (saturated like the others), and
// the FLOAT8 formats but E8M0, and FLOAT4E2M1, which QuantizeLinear rounds
// as Cast does (with its saturate attribute for FLOAT8; a zero point is
// added for FLOAT4E2M1 only, FLOAT8 zero points being zero by the
// specification, as the reference implementation reads it).

func init() {
	// 23 (https://onnx.ai/onnx/operators/onnx__QuantizeLinear.html,
	// onnx__DequantizeLinear.html): QuantizeLinear's y_scale may differ
	// from x in type and sets the division's precision unless the precision
	// attribute does; DequantizeLinear's output_dtype attribute sets the
	// output type (else x_scale's).
	for _, v := range []int{10, 13, 19, 21, 23} {
		register("QuantizeLinear", v, quantizeLinearConv(v))
		register("DequantizeLinear", v, dequantizeLinearConv(v))
	}
	register("DynamicQuantizeLinear", 11, convDynamicQuantizeLinear)
	register("MatMulInteger", 10, convMatMulInteger)
	register("ConvInteger", 10, convConvInteger)
	registerPadRule("ConvInteger", padSpatial)
	register("QLinearMatMul", 10, convQLinearMatMul)
	register("QLinearConv", 10, convQLinearConv)
	registerPadRule("QLinearConv", padSpatial)
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger",
		"QLinearMatMul", "QuantizeLinear")
}

// quantRange returns the saturation bounds of an integer quantized dtype.
func quantRange(dt ir.DType) (lo, hi float64, ok bool) {
	switch dt {
	case ir.Int8:
		return -128, 127, true
	case ir.Uint8:
		return 0, 255, true
	case ir.Int16:
		return -32768, 32767, true
	case ir.Uint16:
		return 0, 65535, true
	case s4, u4, s2, u2:
		lo, hi := narrowIntRange(dt)
		return lo, hi, true
	}
	return 0, 0, false
}

// quantAxisParam broadcasts a scale or zero point p onto dims: a one
// element tensor is per-tensor; a vector is per-axis along axis; a tensor
// of x's rank is blocked along axis with block elements per value (block
// > 0). what names the input for errors.
func quantAxisParam(c *opCtx, p *graph.Node, dims []int, axis, block int, what string) *graph.Node {
	pd := p.Shape().Dimensions
	if numElems(pd) == 1 && (len(pd) <= 1 || block == 0) {
		return broadcastNodeTo(graph.Reshape(p), dims)
	}
	if block > 0 {
		if len(pd) != len(dims) {
			c.fail("%s: blocked quantization needs rank %d like the input, got %s", what, len(dims), p.Shape())
		}
		for k := range dims {
			if k == axis {
				continue
			}
			if pd[k] != dims[k] {
				c.fail("%s: shape %v must match the input %v except on axis %d", what, pd, dims, axis)
			}
		}
		if want := (dims[axis] + block - 1) / block; pd[axis] != want {
			c.fail("%s: %d blocks on axis %d, expected ceil(%d/block_size %d) = %d", what, pd[axis], axis, dims[axis], block, want)
		}
		idx := make([]int, dims[axis])
		for k := range idx {
			idx[k] = k / block
		}
		return gatherConst(p, axis, idx)
	}
	if len(pd) != 1 {
		c.fail("%s: expected a scalar or a 1-D tensor (or block_size for blocked quantization), got %s", what, p.Shape())
	}
	if pd[0] != dims[axis] {
		c.fail("%s: %d values for axis %d of size %d", what, pd[0], axis, dims[axis])
	}
	shape := make([]int, len(dims))
	for k := range shape {
		shape[k] = 1
	}
	shape[axis] = pd[0]
	return broadcastNodeTo(graph.Reshape(p, shape...), dims)
}

// quantAxisBlock reads axis and block_size for the opset: axis from 13,
// block_size from 21. A rank-1 input always uses axis 0.
func quantAxisBlock(c *opCtx, opset, rank int) (axis, block int) {
	if rank == 0 {
		return 0, 0
	}
	if opset >= 13 && rank > 1 {
		axis = c.normAxis(c.attrInt("axis", 1), rank)
	}
	if opset >= 21 {
		block = int(c.attrInt("block_size", 0))
		if block < 0 {
			c.fail("block_size must be positive, got %d", block)
		}
	}
	return axis, block
}

// quantizeTo rounds v (Float32, already divided by the scale) half to even,
// adds the zero point zp (Float32, or nil) and saturates to dt's range,
// returning a dt node.
func quantizeTo(v, zp *graph.Node, dt ir.DType) *graph.Node {
	lo, hi, _ := quantRange(dt)
	v = roundHalfEven(v)
	if zp != nil {
		v = graph.Add(v, zp)
	}
	v = graph.Min(graph.Max(v, scalarLikeB(v, lo)), scalarLikeB(v, hi))
	return graph.ConvertDType(v, graphDType(dt))
}

// quantF32 converts n to Float32 (Float16 values already are).
func quantF32(n *graph.Node) *graph.Node {
	if n.DType() == ir.Float32 {
		return n
	}
	return graph.ConvertDType(n, ir.Float32)
}

func quantizeLinearConv(opset int) converterFunc {
	return func(c *opCtx) error {
		x := c.in(0)
		dims := x.Shape().Dimensions
		axis, block := quantAxisBlock(c, opset, len(dims))
		out := ir.Uint8
		if c.has(2) {
			out = c.dtype(2)
		}
		if opset >= 21 {
			if od := c.attrInt("output_dtype", 0); od != 0 {
				dt, err := dtypeFromONNX(onnxpb.DataType(od))
				if err != nil {
					c.fail("output_dtype %d: %v", od, err)
				}
				if c.has(2) && dt != out {
					c.fail("output_dtype %s does not match y_zero_point's dtype %s", dt, out)
				}
				out = dt
			}
		}
		_, _, isInt := quantRange(out)
		if !isInt && (!isNarrowFloat(out) || out == f8E8M0) {
			c.fail("quantizing to %s is not supported (int8, uint8, int16, uint16, int4, uint4, int2, uint2, float8 but e8m0, float4e2m1)", out)
		}
		if dt := c.dtype(0); dt != ir.Float32 && dt != ir.Float16 && dt != ir.BFloat16 && dt != ir.Float64 && dt != ir.Int32 {
			c.fail("input x: expected a float or int32 tensor, got %s", dt)
		}
		scale := quantAxisParam(c, quantF32(c.in(1)), dims, axis, block, "y_scale")
		var zp *graph.Node
		if c.has(2) {
			zp = quantAxisParam(c, graph.ConvertDType(c.in(2), ir.Float32), dims, axis, block, "y_zero_point")
		}
		q := graph.Div(quantF32(x), scale)
		if opset >= 23 {
			// The quotient in the precision asked for (the attribute, else
			// y_scale's type): Float32's quotient rounded once more to a
			// 16-bit float is that float's correctly rounded quotient
			// (24 >= 2·11+2 bits).
			pdt := c.dtype(1)
			if p := c.attrInt("precision", 0); p != 0 {
				dt, err := dtypeFromONNX(onnxpb.DataType(p))
				if err != nil || !isFloatDT(dt) {
					c.fail("precision %d: expected a float type", p)
				}
				pdt = dt
			}
			switch pdt {
			case ir.Float16:
				q = graph.ConvertDType(graph.ConvertDType(q, ir.Float16), ir.Float32)
			case ir.BFloat16:
				q = graph.ConvertDType(c.b.roundNode(q, ir.BFloat16), ir.Float32)
			}
		}
		if !isInt {
			if out == f4E2M1 && zp != nil {
				q = graph.Add(q, zp)
			}
			c.setDT(0, roundToMinifloat(q, out, c.attrInt("saturate", 1) != 0), out)
			return nil
		}
		c.setDT(0, quantizeTo(q, zp, out), out)
		return nil
	}
}

func dequantizeLinearConv(opset int) converterFunc {
	return func(c *opCtx) error {
		x := c.in(0)
		dims := x.Shape().Dimensions
		axis, block := quantAxisBlock(c, opset, len(dims))
		xdt := c.dtype(0)
		narrowFloat := isNarrowFloat(xdt) && xdt != f8E8M0
		if _, _, ok := quantRange(xdt); !ok && xdt != ir.Int32 && !narrowFloat {
			c.fail("input x: dequantizing %s is not supported (int8, uint8, int16, uint16, int32, int4, uint4, int2, uint2, float8 but e8m0, float4e2m1)", xdt)
		}
		sdt := c.dtype(1)
		if !isFloatDT(sdt) {
			c.fail("input x_scale: expected a float tensor, got %s", sdt)
		}
		if narrowFloat {
			// The float formats have no zero point: the specification
			// requires it to be zero, and the reference ignores it.
			if c.isHost(2) {
				zf, err := c.hostIn(2).floats()
				if err != nil {
					return err
				}
				for _, z := range zf {
					if z != 0 {
						c.fail("x_zero_point must be zero for %s, got %v", xdt, z)
					}
				}
			}
			c.inputs = c.inputs[:2]
		}
		// x - zero point is exact in Int64 (Int32 inputs) or Int32.
		acc := ir.Int32
		if xdt == ir.Int32 {
			acc = ir.Int64
		}
		v := x
		if !narrowFloat {
			v = graph.ConvertDType(x, acc)
		}
		if c.has(2) {
			if c.dtype(2) != xdt {
				c.fail("x_zero_point's dtype %s differs from x's %s", c.dtype(2), xdt)
			}
			zp := quantAxisParam(c, graph.ConvertDType(c.in(2), acc), dims, axis, block, "x_zero_point")
			v = graph.Sub(v, zp)
		}
		scale := c.in(1)
		y := graph.Mul(graph.ConvertDType(v, ir.Float32), quantAxisParam(c, quantF32(scale), dims, axis, block, "x_scale"))
		if opset >= 23 {
			if od := c.attrInt("output_dtype", 0); od != 0 {
				dt, err := dtypeFromONNX(onnxpb.DataType(od))
				if err != nil || !isFloatDT(dt) {
					c.fail("output_dtype %d: expected a float type", od)
				}
				sdt = dt
			}
		}
		if gdt := graphDType(sdt); gdt != ir.Float32 {
			y = c.b.roundNode(y, gdt)
		}
		c.setDT(0, y, sdt)
		return nil
	}
}

// convDynamicQuantizeLinear quantizes a Float32 tensor to uint8 with a
// scale and zero point computed from its range (extended to include 0), as
// ONNX Runtime computes them (GetQuantizationParameter and
// MlasQuantizeLinear in onnxruntime/core, the implementation the ONNX
// reference mirrors):
//
//	scale = (max(x_max, 0) - min(x_min, 0)) / 255, in Float32; 1 when the
//	        range is empty (ONNX Runtime's choice; the reference's code gives
//	        1/255 though its comment quotes ONNX Runtime: y is 0 either way)
//	zero point = round_half_even(clamp(0 - min(x_min, 0)/scale, 0, 255))
//	y = clamp(round_half_even(x/scale) + zero point, 0, 255)
//
// See https://onnx.ai/onnx/operators/onnx__DynamicQuantizeLinear.html.
// The scale must be the correctly rounded Float32 quotient: a one-ulp error
// moves every x/scale that lies near a half and flips those quantized
// values, and the Mul that quantize_dynamic puts after each ConvInteger
// carries it to the output. XLA rewrites a division by the constant 255
// into a multiplication by its rounded reciprocal and refolds
// (span/255)·w_scale into span·(w_scale/255), both one ulp off for many
// spans (measured on xla-cpu with testdata/models/quant_unet.onnx, see
// quant_test.go). So the quotient is taken in Float64 from the Float32
// span and rounded once to Float32: even as a multiplication by Float64's
// 1/255 it rounds to the correctly rounded Float32 quotient, because
// span/255 is never within 2^-33 (relative) of a Float32 rounding boundary
// (255 is odd, so the quotient's significand is at least 1/510 of an ulp
// away from a half) while the Float64 product errs by at most 2^-52.
func convDynamicQuantizeLinear(c *opCtx) error {
	x := quantF32(c.in(0))
	g := c.g
	zero := graph.Scalar(g, ir.Float32, 0)
	hi := graph.Max(graph.ReduceAllMax(x), zero)
	lo := graph.Min(graph.ReduceAllMin(x), zero)
	span := graph.Sub(hi, lo)
	scale := graph.ConvertDType(graph.Div(graph.ConvertDType(span, ir.Float64), graph.Scalar(g, ir.Float64, 255)), ir.Float32)
	scale = graph.Where(graph.Equal(span, zero), graph.Scalar(g, ir.Float32, 1), scale)
	zpf := graph.Sub(zero, graph.Div(lo, scale))
	zpf = roundHalfEven(graph.Min(graph.Max(zpf, zero), graph.Scalar(g, ir.Float32, 255)))
	dims := x.Shape().Dimensions
	y := quantizeTo(graph.Div(x, broadcastNodeTo(scale, dims)), broadcastNodeTo(zpf, dims), ir.Uint8)
	c.setDT(0, y, ir.Uint8)
	c.setDT(1, scale, ir.Float32)
	c.setDT(2, graph.ConvertDType(zpf, ir.Uint8), ir.Uint8)
	return nil
}

// quantInt32 converts an 8-bit quantized operand to Int32 and subtracts
// its zero point (input zpIdx, optional), which prepare shapes for the
// operand's dims.
func quantInt32(c *opCtx, k, zpIdx int, prepare func(zp *graph.Node) *graph.Node) *graph.Node {
	dt := c.dtype(k)
	if dt != ir.Int8 && dt != ir.Uint8 {
		c.fail("input %d: expected int8 or uint8, got %s", k, dt)
	}
	v := graph.ConvertDType(c.in(k), ir.Int32)
	if !c.has(zpIdx) {
		return v
	}
	if c.dtype(zpIdx) != dt {
		c.fail("input %d (zero point): dtype %s differs from input %d's %s", zpIdx, c.dtype(zpIdx), k, dt)
	}
	zp := prepare(graph.ConvertDType(c.in(zpIdx), ir.Int32))
	return binaryBroadcast(v, zp, graph.Sub)
}

// quantRowParam shapes a per-row parameter of the left matmul operand a: a
// vector of a's row count becomes a column [M, 1]; one element is a
// scalar; anything else is used as given (numpy broadcasting).
func quantRowParam(c *opCtx, p *graph.Node, aDims []int, what string) *graph.Node {
	pd := p.Shape().Dimensions
	if numElems(pd) == 1 {
		return graph.Reshape(p)
	}
	if len(pd) == 1 && len(aDims) >= 2 {
		if pd[0] != aDims[len(aDims)-2] {
			c.fail("%s: %d values for %d rows", what, pd[0], aDims[len(aDims)-2])
		}
		return graph.Reshape(p, pd[0], 1)
	}
	return p
}

// quantColParam shapes a per-column parameter of the right operand b: a vector
// broadcasts along the last axis; one element is a scalar.
func quantColParam(c *opCtx, p *graph.Node, bDims []int, what string) *graph.Node {
	pd := p.Shape().Dimensions
	if numElems(pd) == 1 {
		return graph.Reshape(p)
	}
	if len(pd) == 1 && pd[0] != bDims[len(bDims)-1] {
		c.fail("%s: %d values for %d columns", what, pd[0], bDims[len(bDims)-1])
	}
	return p
}

func convMatMulInteger(c *opCtx) error {
	ad, bd := c.dims(0), c.dims(1)
	a := quantInt32(c, 0, 2, func(zp *graph.Node) *graph.Node { return quantRowParam(c, zp, ad, "a_zero_point") })
	b := quantInt32(c, 1, 3, func(zp *graph.Node) *graph.Node { return quantColParam(c, zp, bd, "b_zero_point") })
	c.setDT(0, matMul(a, b), ir.Int32)
	return nil
}

// quantChannelParam shapes a per-output-channel parameter (scalar or [M]) for
// a tensor of rank r whose channels are on axis: [M, 1, ...] for weights
// (axis 0), [1, M, 1, ...] for NC... outputs (axis 1).
func quantChannelParam(c *opCtx, p *graph.Node, m, rank, axis int, what string) *graph.Node {
	pd := p.Shape().Dimensions
	if numElems(pd) == 1 {
		return graph.Reshape(p)
	}
	if len(pd) != 1 || pd[0] != m {
		c.fail("%s: expected a scalar or %d values (one per output channel), got %s", what, m, p.Shape())
	}
	shape := make([]int, rank)
	for k := range shape {
		shape[k] = 1
	}
	shape[axis] = m
	return graph.Reshape(p, shape...)
}

// quantIntConv convolves the Int32 operands x and w with the Conv attributes
// of the node (padding with zeros, which is the zero point once it has
// been subtracted).
func quantIntConv(c *opCtx, x, w *graph.Node) *graph.Node {
	if x.Rank() < 3 || w.Rank() != x.Rank() {
		c.fail("x and w must have the same rank >= 3, got %s and %s", x.Shape(), w.Shape())
	}
	n := x.Rank() - 2
	in := x.Shape().Dimensions[2:]
	k := append([]int{}, w.Shape().Dimensions[2:]...)
	if c.hasAttr("kernel_shape") {
		if ks := intsAttrOr(c, "kernel_shape", n, 0); !equalInts(ks, k) {
			c.fail("kernel_shape %v does not match w %s", ks, w.Shape())
		}
	}
	s := intsAttrOr(c, "strides", n, 1)
	d := intsAttrOr(c, "dilations", n, 1)
	before, after := spatialPads(c, in, k, s, d)
	pads := make([][2]int, n)
	for a := range n {
		pads[a] = [2]int{before[a], after[a]}
	}
	group := int(c.attrInt("group", 1))
	if group < 1 || x.Shape().Dimensions[1] != w.Shape().Dimensions[1]*group {
		c.fail("x has %d channels, w expects %d per group with group %d", x.Shape().Dimensions[1], w.Shape().Dimensions[1], group)
	}
	conv := func(x, w *graph.Node) *graph.Node {
		return graph.ConvGeneral(x, w, nchwAxes(n), s, pads, nil, d, group, 1)
	}
	if _, pureGo := x.Graph().Backend().(*simplego.Backend); pureGo {
		// The pure-Go backend convolves Int32 as fast as Float32 (quant_unet
		// at 256x256: 3.16 s against 3.02 s), so splitting would only add
		// convolutions.
		return conv(x, w)
	}
	terms := numElems(w.Shape().Dimensions[1:]) // products summed per output
	return exactIntConv(x, w, terms, conv)
}

// float32Exact is the largest magnitude below which every integer is a
// Float32 value.
const float32Exact = 1 << 24

// exactIntConv computes conv(x, w) of Int32 operands that are differences
// of 8-bit values (|x|, |w| <= 255), each output a sum of terms products,
// exactly, and in Float32 where that is exact: XLA's CPU convolution of
// Int32 operands runs about 14 times slower than this (one 64 -> 64 channel
// 3x3 layer on a 256x256 image, BENCHMARKS.md). A Float32 sum of
// integer products is exact in any order and any blocking when the sum of
// their magnitudes, at most terms·max|x|·max|w|, stays within 2^24: every
// partial sum is then an integer that Float32 holds. Past that, x is split
// into x = 16·hi + lo (lo in [0, 15], |hi| <= 16), and if need be w too,
// each part convolved in Float32 within that bound, and the partial
// results, exact integers, recombined in Int32: 16·conv(hi, w) +
// conv(lo, w). Beyond 65,536 terms per output the Int32 convolution is
// used as it is.
func exactIntConv(x, w *graph.Node, terms int, conv func(x, w *graph.Node) *graph.Node) *graph.Node {
	const full, part = 255, 16
	var splitX, splitW bool
	switch {
	case terms*full*full <= float32Exact:
	case terms*part*full <= float32Exact:
		splitX = true
	case terms*part*part <= float32Exact:
		splitX, splitW = true, true
	default:
		return conv(x, w)
	}
	xs, ws := splitNibbles(x, splitX), splitNibbles(w, splitW)
	var acc *graph.Node
	for _, xp := range xs {
		for _, wp := range ws {
			y := graph.ConvertDType(conv(xp.v, wp.v), ir.Int32)
			if f := xp.factor * wp.factor; f != 1 {
				y = graph.Mul(y, graph.Scalar(y.Graph(), ir.Int32, f))
			}
			if acc == nil {
				acc = y
			} else {
				acc = graph.Add(acc, y)
			}
		}
	}
	return acc
}

// nibblePart is one Float32 part of an integer operand and its weight.
type nibblePart struct {
	v      *graph.Node
	factor int
}

// splitNibbles converts the Int32 operand v (|v| <= 255) to Float32, whole
// or, with split, as v = 16·floor(v/16) + (v mod 16): both parts are exact
// in Float32 (a division by 16 and a floor of small integers).
func splitNibbles(v *graph.Node, split bool) []nibblePart {
	f := graph.ConvertDType(v, ir.Float32)
	if !split {
		return []nibblePart{{f, 1}}
	}
	hi := graph.Floor(graph.Div(f, graph.Scalar(f.Graph(), ir.Float32, 16)))
	lo := graph.Sub(f, graph.Mul(hi, graph.Scalar(f.Graph(), ir.Float32, 16)))
	return []nibblePart{{hi, 16}, {lo, 1}}
}

func convConvInteger(c *opCtx) error {
	wd := c.dims(1)
	if len(wd) < 3 {
		c.fail("w must have rank >= 3, got %v", wd)
	}
	x := quantInt32(c, 0, 2, func(zp *graph.Node) *graph.Node {
		if numElems(zp.Shape().Dimensions) != 1 {
			c.fail("x_zero_point must be a scalar, got %s", zp.Shape())
		}
		return graph.Reshape(zp)
	})
	w := quantInt32(c, 1, 3, func(zp *graph.Node) *graph.Node { return quantChannelParam(c, zp, wd[0], len(wd), 0, "w_zero_point") })
	c.setDT(0, quantIntConv(c, x, w), ir.Int32)
	return nil
}

// quantRequantize maps the Int32 accumulator acc to the output type of
// y_zero_point (input yzpIdx): round(acc·mult) + y_zero_point, saturated.
func quantRequantize(c *opCtx, acc, mult *graph.Node, yzpIdx int) *graph.Node {
	out := c.dtype(yzpIdx)
	if out != ir.Int8 && out != ir.Uint8 {
		c.fail("y_zero_point: expected int8 or uint8, got %s", out)
	}
	zp := c.in(yzpIdx)
	if numElems(zp.Shape().Dimensions) != 1 {
		c.fail("y_zero_point must be a scalar, got %s", zp.Shape())
	}
	v := binaryBroadcast(graph.ConvertDType(acc, ir.Float32), mult, graph.Mul)
	zpf := broadcastNodeTo(graph.ConvertDType(graph.Reshape(zp), ir.Float32), v.Shape().Dimensions)
	return quantizeTo(v, zpf, out)
}

// quantScalar reads a one-element scale as a Float32 scalar.
func quantScalar(c *opCtx, k int, what string) *graph.Node {
	p := c.in(k)
	if numElems(p.Shape().Dimensions) != 1 {
		c.fail("%s must be a scalar, got %s", what, p.Shape())
	}
	return quantF32(graph.Reshape(p))
}

func convQLinearMatMul(c *opCtx) error {
	ad, bd := c.dims(0), c.dims(3)
	if len(ad) == 0 || len(bd) == 0 {
		c.fail("a and b must have rank >= 1, got %v and %v", ad, bd)
	}
	a := quantInt32(c, 0, 2, func(zp *graph.Node) *graph.Node { return quantRowParam(c, zp, ad, "a_zero_point") })
	b := quantInt32(c, 3, 5, func(zp *graph.Node) *graph.Node { return quantColParam(c, zp, bd, "b_zero_point") })
	acc := matMul(a, b)
	as := quantRowParam(c, quantF32(c.in(1)), ad, "a_scale")
	bs := quantColParam(c, quantF32(c.in(4)), bd, "b_scale")
	mult := binaryBroadcast(as, bs, graph.Mul)
	mult = binaryBroadcast(mult, quantScalar(c, 6, "y_scale"), graph.Div)
	y := quantRequantize(c, acc, mult, 7)
	c.setDT(0, y, c.dtype(7))
	return nil
}

func convQLinearConv(c *opCtx) error {
	wd := c.dims(3)
	if len(wd) < 3 {
		c.fail("w must have rank >= 3, got %v", wd)
	}
	m := wd[0]
	x := quantInt32(c, 0, 2, func(zp *graph.Node) *graph.Node {
		if numElems(zp.Shape().Dimensions) != 1 {
			c.fail("x_zero_point must be a scalar, got %s", zp.Shape())
		}
		return graph.Reshape(zp)
	})
	w := quantInt32(c, 3, 5, func(zp *graph.Node) *graph.Node { return quantChannelParam(c, zp, m, len(wd), 0, "w_zero_point") })
	acc := quantIntConv(c, x, w)
	if c.has(8) {
		bias := c.in(8)
		if bias.DType() != ir.Int32 || !equalInts(bias.Shape().Dimensions, []int{m}) {
			c.fail("input B: expected int32 of shape [%d], got %s", m, bias.Shape())
		}
		acc = addChannelBias(acc, bias)
	}
	ws := quantChannelParam(c, quantF32(c.in(4)), m, acc.Rank(), 1, "w_scale")
	mult := binaryBroadcast(quantScalar(c, 1, "x_scale"), ws, graph.Mul)
	mult = binaryBroadcast(mult, quantScalar(c, 6, "y_scale"), graph.Div)
	y := quantRequantize(c, acc, mult, 7)
	c.setDT(0, y, c.dtype(7))
	return nil
}
