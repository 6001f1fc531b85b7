package onnx

import (
	"math"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
)

// Neural-network ops: activations, the softmax family, convolutions,
// pooling and normalisations. Tensors are NCHW-style (batch, channels,
// spatial...), as ONNX defines them. All register here; the pooling code
// is in ops_pool.go, the normalisations in ops_norm.go.

func init() {
	// Activations.
	register("Relu", 6, unaryOp(func(x *graph.Node) *graph.Node { return graph.Max(x, scalarLikeB(x, 0)) }))
	register("LeakyRelu", 6, func(c *opCtx) error {
		x := c.in(0)
		a := c.attrFloat("alpha", 0.01)
		c.set(0, graph.Where(graph.GreaterOrEqual(x, scalarLikeB(x, 0)), x, graph.Mul(x, scalarLikeB(x, a))))
		return nil
	})
	register("PRelu", 1, func(c *opCtx) error {
		x := c.in(0)
		slope := c.in(1)
		xd := x.Shape().Dimensions
		if _, err := broadcastDims(xd, slope.Shape().Dimensions); err != nil && slope.Rank() == 1 && len(xd) > 1 && slope.Shape().Dimensions[0] == xd[1] {
			// Older exporters give one slope per channel as a vector.
			slope = graph.Reshape(slope, channelShape(len(xd), xd[1])...)
		}
		slope = broadcastNodeTo(slope, xd)
		c.set(0, graph.Where(graph.GreaterOrEqual(x, scalarLikeB(x, 0)), x, graph.Mul(x, slope)))
		return nil
	})
	register("Elu", 6, func(c *opCtx) error {
		x := c.in(0)
		a := c.attrFloat("alpha", 1)
		neg := graph.Mul(scalarLikeB(x, a), graph.Expm1(x))
		c.set(0, graph.Where(graph.GreaterOrEqual(x, scalarLikeB(x, 0)), x, neg))
		return nil
	})
	register("Celu", 12, func(c *opCtx) error {
		x := c.in(0)
		a := c.attrFloat("alpha", 1)
		// max(0, x) + min(0, alpha·(exp(x/alpha) - 1))
		neg := graph.Mul(scalarLikeB(x, a), graph.Expm1(graph.Div(x, scalarLikeB(x, a))))
		c.set(0, graph.Add(graph.Max(x, scalarLikeB(x, 0)), graph.Min(neg, scalarLikeB(x, 0))))
		return nil
	})
	register("Selu", 6, func(c *opCtx) error {
		x := c.in(0)
		// Defaults from the ONNX operator specification.
		a := c.attrFloat("alpha", 1.67326319217681884765625)
		g := c.attrFloat("gamma", 1.05070102214813232421875)
		neg := graph.Mul(scalarLikeB(x, a), graph.Expm1(x))
		y := graph.Where(graph.GreaterThan(x, scalarLikeB(x, 0)), x, neg)
		c.set(0, graph.Mul(y, scalarLikeB(x, g)))
		return nil
	})
	register("ThresholdedRelu", 10, func(c *opCtx) error {
		x := c.in(0)
		a := c.attrFloat("alpha", 1)
		c.set(0, graph.Where(graph.GreaterThan(x, scalarLikeB(x, a)), x, scalarLikeB(x, 0)))
		return nil
	})
	register("HardSigmoid", 6, func(c *opCtx) error {
		x := c.in(0)
		a, b := c.attrFloat("alpha", 0.2), c.attrFloat("beta", 0.5)
		y := graph.Add(graph.Mul(x, scalarLikeB(x, a)), scalarLikeB(x, b))
		c.set(0, graph.Min(graph.Max(y, scalarLikeB(x, 0)), scalarLikeB(x, 1)))
		return nil
	})
	register("HardSwish", 14, unaryOp(func(x *graph.Node) *graph.Node {
		y := graph.Add(graph.Mul(x, scalarLikeB(x, 1.0/6)), scalarLikeB(x, 0.5))
		return graph.Mul(x, graph.Min(graph.Max(y, scalarLikeB(x, 0)), scalarLikeB(x, 1)))
	}))
	register("Softplus", 1, unaryOp(softplus))
	register("Softsign", 1, unaryOp(func(x *graph.Node) *graph.Node {
		return graph.Div(x, graph.Add(graph.Abs(x), scalarLikeB(x, 1)))
	}))
	register("Mish", 18, unaryOp(func(x *graph.Node) *graph.Node { return graph.Mul(x, graph.Tanh(softplus(x))) }))
	register("Gelu", 20, func(c *opCtx) error {
		x := c.in(0)
		var inner *graph.Node
		if c.attrString("approximate", "none") == "tanh" {
			cube := graph.Mul(graph.Mul(x, x), x)
			t := graph.Add(x, graph.Mul(cube, scalarLikeB(x, 0.044715)))
			inner = graph.Tanh(graph.Mul(t, scalarLikeB(x, math.Sqrt(2/math.Pi))))
		} else {
			inner = graph.Erf(graph.Mul(x, scalarLikeB(x, 1/math.Sqrt2)))
		}
		c.set(0, graph.Mul(graph.Mul(x, scalarLikeB(x, 0.5)), graph.Add(inner, scalarLikeB(x, 1))))
		return nil
	})
	register("Shrink", 9, func(c *opCtx) error {
		x := c.in(0)
		bias, l := c.attrFloat("bias", 0), c.attrFloat("lambd", 0.5)
		y := graph.Where(graph.LessThan(x, scalarLikeB(x, -l)), graph.Add(x, scalarLikeB(x, bias)),
			graph.Where(graph.GreaterThan(x, scalarLikeB(x, l)), graph.Sub(x, scalarLikeB(x, bias)), scalarLikeB(x, 0)))
		c.set(0, y)
		return nil
	})

	// Padding: positions stay apart (PRelu's slope broadcasts like a
	// binary operand).
	registerPadRules(padUnary, "Relu", "LeakyRelu", "Elu", "Celu", "Selu", "ThresholdedRelu",
		"HardSigmoid", "HardSwish", "Softplus", "Softsign", "Mish", "Gelu", "Shrink")
	registerPadRule("PRelu", padElementwise)

	// Softmax family: before opset 13 the input is flattened to 2-D at axis
	// (default 1); since 13 the op works along one axis (default -1).
	for _, op := range []string{"Softmax", "LogSoftmax", "Hardmax"} {
		register(op, 1, softmaxConv(op, false))
		register(op, 13, softmaxConv(op, true))
		d := registerPadRule(op, padSoftmax)
		if op == "Softmax" {
			d.boundedOutputs() // in [0, 1]
		}
	}

	register("Conv", 1, convConv)
	register("ConvTranspose", 1, convConvTranspose)
	register("MaxPool", 1, convPool("max"))
	register("AveragePool", 1, convPool("avg"))
	register("LpPool", 2, convPool("lp"))
	register("GlobalAveragePool", 1, convGlobalPool("avg"))
	register("GlobalMaxPool", 1, convGlobalPool("max"))
	register("GlobalLpPool", 2, convGlobalPool("lp"))
	register("BatchNormalization", 1, convBatchNorm)
	register("InstanceNormalization", 1, convInstanceNorm)
	registerPadRules(padSpatial, "Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool",
		"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "BatchNormalization", "InstanceNormalization")
	register("LayerNormalization", 17, convLayerNorm)
	registerPadRule("LayerNormalization", padLayerNorm)
	register("GroupNormalization", 18, convGroupNorm)
	register("LRN", 1, convLRN)
	registerPadRules(padSpatial, "GroupNormalization", "LRN")
	register("MeanVarianceNormalization", 9, convMVN)
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("MeanVarianceNormalization")
}

// softplus is log(1 + exp(x)), computed stably as max(x, 0) + log1p(exp(-|x|)).
func softplus(x *graph.Node) *graph.Node {
	return graph.Add(graph.Max(x, scalarLikeB(x, 0)), graph.Log1p(graph.Exp(graph.Neg(graph.Abs(x)))))
}

func softmaxConv(op string, singleAxis bool) converterFunc {
	return func(c *opCtx) error {
		x := c.in(0)
		dims := x.Shape().Dimensions
		if hasZeroDim(x) { // an empty result, which GoMLX's broadcasting would not give (zerosize.go)
			c.set(0, x)
			return nil
		}
		var y *graph.Node
		if singleAxis {
			axis := c.normAxis(c.attrInt("axis", -1), x.Rank())
			y = softmaxAlong(op, x, axis)
		} else {
			axis := int(c.attrInt("axis", 1))
			if axis < 0 {
				axis += len(dims)
			}
			if axis < 0 || axis > len(dims) {
				c.fail("axis %d out of range for rank %d", axis, len(dims))
			}
			flat := graph.Reshape(x, numElems(dims[:axis]), numElems(dims[axis:]))
			y = graph.Reshape(softmaxAlong(op, flat, 1), dims...)
		}
		c.set(0, y)
		return nil
	}
}

func softmaxAlong(op string, x *graph.Node, axis int) *graph.Node {
	switch op {
	case "Softmax":
		return graph.Softmax(x, axis)
	case "LogSoftmax":
		return graph.LogSoftmax(x, axis)
	}
	// Hardmax: one-hot of the first maximum.
	idx := graph.ArgMax(x, axis, ir.Int64)
	dims := x.Shape().Dimensions
	idx = broadcastNodeTo(graph.Reshape(idx, keptDims(dims, []int{axis})...), dims)
	iota := graph.Iota(x.Graph(), ir.MakeShape(ir.Int64, dims...), axis)
	return graph.Where(graph.Equal(idx, iota), scalarLikeB(x, 1), scalarLikeB(x, 0))
}

// spatialPads resolves pads for a window op over spatial sizes in with
// kernel k, strides s, dilations d: the pads attribute, or auto_pad.
func spatialPads(c *opCtx, in, k, s, d []int) (before, after []int) {
	n := len(in)
	before, after = make([]int, n), make([]int, n)
	switch autoPad := c.attrString("auto_pad", "NOTSET"); autoPad {
	case "NOTSET", "":
		pads := c.attrInts("pads", nil)
		if pads != nil {
			if len(pads) != 2*n {
				c.fail("pads %v do not match %d spatial axes", pads, n)
			}
			for a := range n {
				before[a], after[a] = int(pads[a]), int(pads[a+n])
			}
		}
	case "VALID":
	case "SAME_UPPER", "SAME_LOWER":
		for a := range n {
			out := (in[a] + s[a] - 1) / s[a]
			total := max(0, (out-1)*s[a]+(k[a]-1)*d[a]+1-in[a])
			if autoPad == "SAME_UPPER" {
				before[a] = total / 2
			} else {
				before[a] = total - total/2
			}
			after[a] = total - before[a]
		}
	default:
		c.fail("unknown auto_pad %q", autoPad)
	}
	return before, after
}

// intsAttrOr reads an ints attribute or returns n copies of def.
func intsAttrOr(c *opCtx, name string, n, def int) []int {
	v := c.attrInts(name, nil)
	if v == nil {
		out := make([]int, n)
		for k := range out {
			out[k] = def
		}
		return out
	}
	if len(v) != n {
		c.fail("attribute %s %v does not match %d spatial axes", name, v, n)
	}
	return toInts(v)
}

func nchwAxes(spatial int) graph.ConvolveAxesConfig {
	sp := make([]int, spatial)
	for k := range sp {
		sp[k] = k + 2
	}
	return graph.ConvolveAxesConfig{
		InputBatch: 0, InputChannels: 1, InputSpatial: sp,
		KernelOutputChannels: 0, KernelInputChannels: 1, KernelSpatial: append([]int{}, sp...),
		OutputBatch: 0, OutputChannels: 1, OutputSpatial: append([]int{}, sp...),
	}
}

// addChannelBias adds a per-channel vector b to y (channels on axis 1).
func addChannelBias(y, b *graph.Node) *graph.Node {
	shape := make([]int, y.Rank())
	for k := range shape {
		shape[k] = 1
	}
	shape[1] = b.Shape().Dimensions[0]
	return graph.Add(y, broadcastNodeTo(graph.Reshape(b, shape...), y.Shape().Dimensions))
}

func convConv(c *opCtx) error {
	x, w := c.in(0), c.in(1)
	if x.Rank() < 3 {
		c.fail("input must have rank >= 3, got %s", x.Shape())
	}
	n := x.Rank() - 2
	in := x.Shape().Dimensions[2:]
	k := intsAttrOr(c, "kernel_shape", n, 0)
	if c.attr("kernel_shape") == nil {
		k = append([]int{}, w.Shape().Dimensions[2:]...)
	}
	s := intsAttrOr(c, "strides", n, 1)
	d := intsAttrOr(c, "dilations", n, 1)
	before, after := spatialPads(c, in, k, s, d)
	pads := make([][2]int, n)
	for a := range n {
		pads[a] = [2]int{before[a], after[a]}
	}
	group := int(c.attrInt("group", 1))
	y := graph.ConvGeneral(x, w, nchwAxes(n), s, pads, nil, d, group, 1)
	if c.has(2) {
		y = addChannelBias(y, c.in(2))
	}
	c.set(0, y)
	return nil
}

// convConvTranspose computes the transposed convolution as a direct one:
// the input dilated by the strides, the kernel flipped spatially with its
// channel axes swapped per group, and complementary padding (negative
// padding becomes a crop of the result).
func convConvTranspose(c *opCtx) error {
	x, w := c.in(0), c.in(1)
	if x.Rank() < 3 {
		c.fail("input must have rank >= 3, got %s", x.Shape())
	}
	n := x.Rank() - 2
	in := x.Shape().Dimensions[2:]
	wd := w.Shape().Dimensions
	group := int(c.attrInt("group", 1))
	cin, coutG := wd[0], wd[1]
	k := append([]int{}, wd[2:]...)
	if c.attr("kernel_shape") != nil {
		k = intsAttrOr(c, "kernel_shape", n, 0)
	}
	s := intsAttrOr(c, "strides", n, 1)
	d := intsAttrOr(c, "dilations", n, 1)
	outPad := intsAttrOr(c, "output_padding", n, 0)
	before, after := make([]int, n), make([]int, n)
	autoPad := c.attrString("auto_pad", "NOTSET")
	var outShape []int
	if c.hasAttr("output_shape") {
		os := toInts(c.attrInts("output_shape", nil))
		if len(os) == n+2 {
			os = os[2:]
		}
		if len(os) != n {
			c.fail("output_shape %v does not match %d spatial axes", os, n)
		}
		outShape = os
	} else if autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER" {
		outShape = make([]int, n)
		for a := range n {
			outShape[a] = in[a] * s[a]
		}
	}
	if outShape != nil {
		for a := range n {
			total := s[a]*(in[a]-1) + outPad[a] + (k[a]-1)*d[a] + 1 - outShape[a]
			half := floorDiv(total, 2)
			if autoPad == "SAME_UPPER" {
				before[a], after[a] = half, total-half
			} else {
				before[a], after[a] = total-half, half
			}
		}
	} else if pads := c.attrInts("pads", nil); pads != nil {
		if len(pads) != 2*n {
			c.fail("pads %v do not match %d spatial axes", pads, n)
		}
		for a := range n {
			before[a], after[a] = int(pads[a]), int(pads[a+n])
		}
	}
	// Kernel [Cin, Cout/g, k...] -> [Cout, Cin/g, k...], flipped.
	kshape := append([]int{group, cin / group, coutG}, k...)
	kw := graph.Reshape(w, kshape...)
	perm := []int{0, 2, 1}
	for a := range n {
		perm = append(perm, 3+a)
	}
	kw = graph.TransposeAllAxes(kw, perm...)
	kw = graph.Reshape(kw, append([]int{group * coutG, cin / group}, k...)...)
	for a := range n {
		kw = reverseAxis(kw, 2+a)
	}
	pads := make([][2]int, n)
	crop := make([][2]int, n)
	for a := range n {
		full := (k[a] - 1) * d[a]
		pb, pe := full-before[a], full-after[a]+outPad[a]
		pads[a] = [2]int{max(pb, 0), max(pe, 0)}
		crop[a] = [2]int{max(-pb, 0), max(-pe, 0)}
	}
	ones := make([]int, n)
	for a := range ones {
		ones[a] = 1
	}
	// The strides are the convolution's input dilation, written out with
	// zeros between the input's elements (dilateAxis): GoMLX v0.26.0 has
	// no gradient for a convolution with input dilations (convGeneralVJP
	// refuses any, ones included).
	for a := range n {
		x = dilateAxis(x, 2+a, s[a])
	}
	// The padding is written out too: GoMLX v0.26.0's convolution
	// gradient fails for paddings this large (convVJPWrtX: "failed to set
	// up reverse Convolve() for gradient").
	before0, after0 := make([]int, n+2), make([]int, n+2)
	for a := range n {
		before0[2+a], after0[2+a] = pads[a][0], pads[a][1]
	}
	x = padConstant(x, before0, after0, graph.ScalarZero(c.g, x.DType()))
	y := graph.ConvGeneral(x, kw, nchwAxes(n), ones, nil, nil, d, group, 1)
	for a := range n {
		if crop[a][0] > 0 || crop[a][1] > 0 {
			dim := y.Shape().Dimensions[2+a]
			y = sliceAxis(y, 2+a, crop[a][0], dim-crop[a][1], 1)
		}
	}
	if c.has(2) {
		y = addChannelBias(y, c.in(2))
	}
	c.set(0, y)
	return nil
}

// floorDiv divides rounding toward negative infinity.
func floorDiv(a, b int) int {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}
