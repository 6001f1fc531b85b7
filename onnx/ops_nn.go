package onnx

import (
	"math"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// Neural-network ops: activations, the softmax family, convolutions,
// pooling and normalisations. Tensors are NCHW-style (batch, channels,
// spatial...), as ONNX defines them.

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

// poolGeometry resolves a pooling op's window, strides, dilations and
// padding (ceil_mode included) for input x.
type poolGeometry struct {
	window, strides, dilations []int
	pads                       [][2]int // full-rank, ceil-mode extra included
	explicit                   [][2]int // full-rank, without the ceil-mode extra
}

func poolGeom(c *opCtx, x *graph.Node) poolGeometry {
	r := x.Rank()
	n := r - 2
	if n < 1 {
		c.fail("input must have rank >= 3, got %s", x.Shape())
	}
	in := x.Shape().Dimensions[2:]
	k := toInts(c.attrInts("kernel_shape", nil))
	if len(k) != n {
		c.fail("kernel_shape %v does not match %d spatial axes", k, n)
	}
	s := intsAttrOr(c, "strides", n, 1)
	d := intsAttrOr(c, "dilations", n, 1)
	before, after := spatialPads(c, in, k, s, d)
	ceil := c.attrInt("ceil_mode", 0) != 0
	g := poolGeometry{
		window: append([]int{1, 1}, k...), strides: append([]int{1, 1}, s...),
		dilations: append([]int{1, 1}, d...),
		pads:      make([][2]int, r), explicit: make([][2]int, r),
	}
	for a := range n {
		g.explicit[2+a] = [2]int{before[a], after[a]}
		extra := 0
		if ceil {
			span := (k[a]-1)*d[a] + 1
			total := in[a] + before[a] + after[a]
			out := (total-span+s[a]-1)/s[a] + 1
			// A window must start inside the input or the left padding.
			if (out-1)*s[a] >= in[a]+before[a] {
				out--
			}
			extra = max(0, (out-1)*s[a]+span-total)
		}
		g.pads[2+a] = [2]int{before[a], after[a] + extra}
	}
	return g
}

// dilateAxis puts s-1 zeros between consecutive elements of x along axis
// (XLA's input dilation), with ops every backend has and that reverse-mode
// autodiff can differentiate: x reshaped to [..., n, 1, ...] is
// concatenated with zeros [..., n, s-1, ...], flattened and the trailing
// zeros cut.
func dilateAxis(x *graph.Node, axis, s int) *graph.Node {
	dims := x.Shape().Dimensions
	n := dims[axis]
	if s <= 1 || n <= 1 {
		return x
	}
	split := append(append(append([]int{}, dims[:axis+1]...), 1), dims[axis+1:]...)
	zeros := append([]int{}, split...)
	zeros[axis+1] = s - 1
	y := graph.Concatenate([]*graph.Node{graph.Reshape(x, split...), graph.Zeros(x.Graph(), ir.MakeShape(x.DType(), zeros...))}, axis+1)
	flat := append([]int{}, dims...)
	flat[axis] = n * s
	return sliceAxis(graph.Reshape(y, flat...), axis, 0, n*s-(s-1), 1)
}

// windowDilations is the dilations argument of the pooling's ReduceWindow:
// nil when every dilation is 1, because GoMLX v0.26.0 has no gradient for
// a ReduceWindow given any window dilations, ones included
// (ops_pool.go, reduceWindowVJP).
func (g poolGeometry) windowDilations() []int {
	for _, d := range g.dilations {
		if d != 1 {
			return g.dilations
		}
	}
	return nil
}

func convPool(kind string) converterFunc {
	return func(c *opCtx) error {
		x := c.in(0)
		g := poolGeom(c, x)
		if kind == "max" && c.wantsOutput(1) {
			v, idx := maxPoolWithIndices(c, x, g)
			c.set(0, v)
			c.setDT(1, idx, ir.Int64)
			return nil
		}
		switch kind {
		case "max":
			c.set(0, graph.BackendReduceWindow(x, backends.ReduceOpMax, g.window, g.strides, nil, g.windowDilations(), g.pads))
		case "lp":
			p := c.attrFloat("p", 2)
			ax := graph.Abs(x)
			xp := graph.Pow(ax, scalarLikeB(ax, p))
			sum := graph.BackendReduceWindow(xp, backends.ReduceOpSum, g.window, g.strides, nil, g.windowDilations(), g.pads)
			c.set(0, graph.Pow(sum, scalarLikeB(sum, 1/p)))
		default: // avg
			sum := graph.BackendReduceWindow(x, backends.ReduceOpSum, g.window, g.strides, nil, g.windowDilations(), g.pads)
			// Count the elements each window averages: the real ones, plus
			// the explicit padding when count_include_pad is set (never the
			// ceil-mode extra).
			dims := x.Shape().Dimensions
			maskDims := []int{1, 1}
			maskPads := [][2]int{{0, 0}, {0, 0}}
			includePad := c.attrInt("count_include_pad", 0) != 0
			for a := 2; a < len(dims); a++ {
				if includePad {
					maskDims = append(maskDims, dims[a]+g.explicit[a][0]+g.explicit[a][1])
					maskPads = append(maskPads, [2]int{0, g.pads[a][1] - g.explicit[a][1]})
				} else {
					maskDims = append(maskDims, dims[a])
					maskPads = append(maskPads, g.pads[a])
				}
			}
			ones := filled(c.g, x.DType(), maskDims, 1)
			counts := graph.BackendReduceWindow(ones, backends.ReduceOpSum, g.window, g.strides, nil, g.windowDilations(), maskPads)
			c.set(0, graph.Div(sum, broadcastNodeTo(counts, sum.Shape().Dimensions)))
		}
		return nil
	}
}

func convGlobalPool(kind string) converterFunc {
	return func(c *opCtx) error {
		x := c.in(0)
		axes := make([]int, 0, x.Rank()-2)
		for a := 2; a < x.Rank(); a++ {
			axes = append(axes, a)
		}
		kd := keptDims(x.Shape().Dimensions, axes)
		if kind == "avg" { // ReduceMean over the spatial axes, undefined when they are empty
			if err := emptySetUndefined(c, "GlobalAveragePool", c.dtype(0), x.Shape().Dimensions, axes); err != nil {
				return err
			}
		}
		var y *graph.Node
		switch kind {
		case "max":
			y = graph.ReduceMax(x, axes...)
		case "lp":
			p := c.attrFloat("p", 2)
			ax := graph.Abs(x)
			s := graph.ReduceSum(graph.Pow(ax, scalarLikeB(ax, p)), axes...)
			y = graph.Pow(s, scalarLikeB(s, 1/p))
		default:
			y = reduceMean(x, axes)
		}
		c.set(0, graph.Reshape(y, kd...))
		return nil
	}
}

// channelShape returns [1, C, 1, ...] for an input of the given rank.
func channelShape(rank, ch int) []int {
	s := make([]int, rank)
	for k := range s {
		s[k] = 1
	}
	if rank > 1 {
		s[1] = ch
	}
	return s
}

// perChannel reshapes a [C] vector to broadcast over x's channel axis.
func perChannel(v, x *graph.Node) *graph.Node {
	return broadcastNodeTo(graph.Reshape(v, channelShape(x.Rank(), v.Shape().Size())...), x.Shape().Dimensions)
}

func convBatchNorm(c *opCtx) error {
	x := c.in(0)
	scale, bias, mean, variance := c.in(1), c.in(2), c.in(3), c.in(4)
	eps := c.attrFloat("epsilon", 1e-5)
	training := c.opset >= 14 && c.attrInt("training_mode", 0) != 0
	if c.opset < 14 && c.wantsOutput(1) {
		training = true // opsets before 14 compute statistics when the extra outputs are asked for
	}
	if training {
		axes := []int{0}
		for a := 2; a < x.Rank(); a++ {
			axes = append(axes, a)
		}
		bm := reduceMean(x, axes)
		diff := graph.Sub(x, perChannel(bm, x))
		bv := reduceMean(graph.Mul(diff, diff), axes)
		mom := c.attrFloat("momentum", 0.9)
		inv := graph.Rsqrt(graph.Add(bv, scalarLikeB(bv, eps)))
		y := graph.Add(graph.Mul(diff, perChannel(graph.Mul(inv, scale), x)), perChannel(bias, x))
		c.set(0, y)
		if c.wantsOutput(1) {
			c.set(1, graph.Add(graph.Mul(mean, scalarLikeB(mean, mom)), graph.Mul(bm, scalarLikeB(bm, 1-mom))))
		}
		if c.wantsOutput(2) {
			c.set(2, graph.Add(graph.Mul(variance, scalarLikeB(variance, mom)), graph.Mul(bv, scalarLikeB(bv, 1-mom))))
		}
		return nil
	}
	factor := graph.Mul(scale, graph.Rsqrt(graph.Add(variance, scalarLikeB(variance, eps))))
	shift := graph.Sub(bias, graph.Mul(mean, factor))
	c.set(0, graph.Add(graph.Mul(x, perChannel(factor, x)), perChannel(shift, x)))
	return nil
}

// normalize returns (x - mean) / sqrt(var + eps) over axes, with the mean
// and inverse standard deviation (reduced axes kept).
func normalize(x *graph.Node, axes []int, eps float64) (y, mean, invStd *graph.Node) {
	kd := keptDims(x.Shape().Dimensions, axes)
	mean = graph.Reshape(reduceMean(x, axes), kd...)
	diff := graph.Sub(x, broadcastNodeTo(mean, x.Shape().Dimensions))
	variance := graph.Reshape(reduceMean(graph.Mul(diff, diff), axes), kd...)
	invStd = graph.Rsqrt(graph.Add(variance, scalarLikeB(variance, eps)))
	return graph.Mul(diff, broadcastNodeTo(invStd, x.Shape().Dimensions)), mean, invStd
}

func convInstanceNorm(c *opCtx) error {
	x := c.in(0)
	axes := []int{}
	for a := 2; a < x.Rank(); a++ {
		axes = append(axes, a)
	}
	y, _, _ := normalize(x, axes, c.attrFloat("epsilon", 1e-5))
	y = graph.Add(graph.Mul(y, perChannel(c.in(1), x)), perChannel(c.in(2), x))
	c.set(0, y)
	return nil
}

// padLayerNorm is LayerNormalization's padding rule (padsafe.go): it
// normalises over the axes from axis on, so padding is exact only along
// an earlier axis, with scale and bias not carrying the padded dimension.
// Its mean and inverse-deviation outputs keep the earlier axes.
func padLayerNorm(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, _ bool, fail func(string, ...any) []*pval) []*pval {
	x := ins[0]
	if x.rank < 0 {
		return fail("has a rank the analysis does not know")
	}
	a, ok := normAxis(attrI(attrs, "axis", -1), x.rank)
	if !ok {
		return fail("has an axis out of range")
	}
	for i := a; i < x.rank; i++ {
		if r.isD(x.dims[i]) {
			return fail("normalises over it")
		}
	}
	for _, p := range ins[1:] {
		if r.involved(p) {
			return fail("takes a scale or bias along it")
		}
	}
	outs := []*pval{{rank: x.rank, dims: x.dims}}
	stat := &pval{rank: x.rank, dims: append([]sdim{}, x.dims...)}
	for i := a; i < x.rank; i++ {
		stat.dims[i] = cdim(1)
	}
	return append(outs, stat, stat)
}

func convLayerNorm(c *opCtx) error {
	x := c.in(0)
	r := x.Rank()
	axis := c.normAxis(c.attrInt("axis", -1), r)
	axes := []int{}
	for a := axis; a < r; a++ {
		axes = append(axes, a)
	}
	// stash_type 1 (the default) asks for FLOAT statistics: widen
	// narrower floats to the dtype FLOAT is computed in (Float32, or the
	// compute dtype of a 16-bit plan, which then needs no widening).
	xc := x
	if sdt := c.b.prec.nodeDT(ir.Float32); c.attrInt("stash_type", 1) == 1 && x.DType() != sdt &&
		(x.DType() == ir.BFloat16 || x.DType() == ir.Float16) {
		xc = graph.ConvertDType(x, sdt)
	}
	y, mean, inv := normalize(xc, axes, c.attrFloat("epsilon", 1e-5))
	if xc != x {
		y = graph.ConvertDType(y, x.DType())
	}
	y = graph.Mul(y, broadcastNodeTo(c.in(1), x.Shape().Dimensions))
	if c.has(2) {
		y = graph.Add(y, broadcastNodeTo(c.in(2), x.Shape().Dimensions))
	}
	c.set(0, y)
	if c.wantsOutput(1) {
		c.set(1, mean)
	}
	if c.wantsOutput(2) {
		c.set(2, inv)
	}
	return nil
}

// convGroupNorm normalises each group of channels; scale and bias are per
// group before opset 21 and per channel since.
func convGroupNorm(c *opCtx) error {
	x := c.in(0)
	dims := x.Shape().Dimensions
	if len(dims) < 2 {
		c.fail("input must have rank >= 2")
	}
	groups := int(c.attrInt("num_groups", 0))
	ch := dims[1]
	if groups <= 0 || ch%groups != 0 {
		c.fail("num_groups %d does not divide %d channels", groups, ch)
	}
	g := graph.Reshape(x, dims[0], groups, numElems(dims[1:])/groups)
	y, _, _ := normalize(g, []int{2}, c.attrFloat("epsilon", 1e-5))
	y = graph.Reshape(y, dims...)
	scale, bias := c.in(1), c.in(2)
	if scale.Shape().Size() == groups && groups != ch {
		rep := ch / groups
		scale = graph.Reshape(broadcastNodeTo(graph.Reshape(scale, groups, 1), []int{groups, rep}), ch)
		bias = graph.Reshape(broadcastNodeTo(graph.Reshape(bias, groups, 1), []int{groups, rep}), ch)
	}
	c.set(0, graph.Add(graph.Mul(y, perChannel(scale, y)), perChannel(bias, y)))
	return nil
}

// convLRN normalises across channels with a window sum of squares.
func convLRN(c *opCtx) error {
	x := c.in(0)
	size := int(c.attrInt("size", 0))
	if size <= 0 {
		c.fail("size must be positive")
	}
	if hasZeroDim(x) { // an empty result, where ReduceWindow refuses an empty axis (zerosize.go)
		c.set(0, x)
		return nil
	}
	alpha, beta, bias := c.attrFloat("alpha", 1e-4), c.attrFloat("beta", 0.75), c.attrFloat("bias", 1)
	r := x.Rank()
	window := make([]int, r)
	strides := make([]int, r)
	pads := make([][2]int, r)
	for k := range window {
		window[k], strides[k] = 1, 1
	}
	window[1] = size
	pads[1] = [2]int{(size - 1) / 2, size - 1 - (size-1)/2}
	sq := graph.BackendReduceWindow(graph.Mul(x, x), backends.ReduceOpSum, window, strides, nil, nil, pads)
	den := graph.Add(scalarLikeB(sq, bias), graph.Mul(sq, scalarLikeB(sq, alpha/float64(size))))
	c.set(0, graph.Div(x, graph.Pow(den, scalarLikeB(den, beta))))
	return nil
}

// convMVN is (x - mean) / (std + 1e-9) over axes (default 0, 2, 3), as the
// ONNX function body defines it.
func convMVN(c *opCtx) error {
	x := c.in(0)
	axes := c.normAxes(c.attrInts("axes", []int64{0, 2, 3}), x.Rank())
	kd := keptDims(x.Shape().Dimensions, axes)
	mean := broadcastNodeTo(graph.Reshape(reduceMean(x, axes), kd...), x.Shape().Dimensions)
	meanSq := broadcastNodeTo(graph.Reshape(reduceMean(graph.Mul(x, x), axes), kd...), x.Shape().Dimensions)
	std := graph.Sqrt(graph.Sub(meanSq, graph.Mul(mean, mean)))
	c.set(0, graph.Div(graph.Sub(x, mean), graph.Add(std, scalarLikeB(std, 1e-9))))
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

func init() {
	register("MaxUnpool", 9, convMaxUnpool).needs(2)
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("MaxUnpool")
}

// convMaxUnpool scatters X's values to the flat positions I gives (as
// MaxPool's Indices output defines them) in a zero tensor.
func convMaxUnpool(c *opCtx) error {
	x, idx := c.in(0), c.in(1)
	dims := x.Shape().Dimensions
	n := len(dims) - 2
	if n < 1 {
		c.fail("input must have rank >= 3, got %v", dims)
	}
	// The indices are flat positions in the pooled op's input, whose shape
	// is the default output shape below.
	k := toInts(c.attrInts("kernel_shape", nil))
	if len(k) != n {
		c.fail("kernel_shape %v does not match %d spatial axes", k, n)
	}
	s := intsAttrOr(c, "strides", n, 1)
	pads := c.attrInts("pads", nil)
	def := append([]int{}, dims[:2]...)
	for a := range n {
		pb, pe := 0, 0
		if pads != nil {
			pb, pe = int(pads[a]), int(pads[a+n])
		}
		def = append(def, (dims[2+a]-1)*s[a]-pb-pe+k[a])
	}
	out := def
	if idx.DType() != ir.Int64 {
		idx = graph.ConvertDType(idx, ir.Int64)
	}
	if c.has(2) {
		out = toInts(c.constInts(2))
		if len(out) != len(dims) {
			c.fail("output_shape %v does not match rank %d", out, len(dims))
		}
		if !equalInts(out, def) {
			// Re-linearise each index from the default shape into out.
			ds, os := strides(def), strides(out)
			id := idx.Shape().Dimensions
			var acc *graph.Node
			for a := range def {
				coord := graph.Rem(graph.Div(idx, filled(c.g, ir.Int64, id, float64(ds[a]))), filled(c.g, ir.Int64, id, float64(def[a])))
				term := graph.Mul(coord, filled(c.g, ir.Int64, id, float64(os[a])))
				if acc == nil {
					acc = term
				} else {
					acc = graph.Add(acc, term)
				}
			}
			idx = acc
		}
	}
	total := numElems(out)
	flatIdx := graph.Reshape(idx, x.Shape().Size(), 1)
	flatX := graph.Reshape(x, x.Shape().Size())
	zeros := filled(c.g, x.DType(), []int{total}, 0)
	c.set(0, graph.Reshape(graph.ScatterSum(zeros, flatIdx, flatX, false, false), out...))
	return nil
}

// maxPoolWithIndices computes MaxPool and its Indices output by gathering
// every window into a trailing axis of size K (the window's element count):
// the value is the maximum over that axis and the index the input position
// of its first maximum, flattened over the whole input (row-major, or
// column-major over the spatial axes when storage_order is 1).
func maxPoolWithIndices(c *opCtx, x *graph.Node, g poolGeometry) (*graph.Node, *graph.Node) {
	dims := x.Shape().Dimensions
	n := len(dims) - 2
	in := dims[2:]
	before, after := make([]int, len(dims)), make([]int, len(dims))
	padded := make([]int, n)
	outDims := make([]int, n)
	for a := range n {
		before[2+a], after[2+a] = g.pads[2+a][0], g.pads[2+a][1]
		padded[a] = in[a] + before[2+a] + after[2+a]
		span := (g.window[2+a]-1)*g.dilations[2+a] + 1
		outDims[a] = (padded[a]-span)/g.strides[2+a] + 1
	}
	lowest := scalarLike(x, math.Inf(-1))
	if !x.DType().IsFloat() {
		lowest = graph.ReduceAllMin(x)
	}
	xp := padConstant(x, before, after, lowest)
	xp = graph.Reshape(xp, dims[0], dims[1], numElems(padded))
	win := g.window[2:]
	K := numElems(win)
	P := numElems(outDims)
	gatherIdx := make([]int64, 0, P*K)
	srcIdx := make([]int64, 0, P*K)
	colMajor := c.attrInt("storage_order", 0) != 0
	pst, ist := strides(padded), strides(in)
	forEachIndex(outDims, func(_ int, o []int) {
		forEachIndex(win, func(_ int, w []int) {
			gi, si, colStride := 0, 0, 1
			inside := true
			for a := range n {
				p := o[a]*g.strides[2+a] + w[a]*g.dilations[2+a]
				gi += p * pst[a]
				q := p - before[2+a]
				if q < 0 || q >= in[a] {
					inside = false
				}
				if colMajor {
					si += q * colStride
					colStride *= in[a]
				} else {
					si += q * ist[a]
				}
			}
			if !inside {
				si = 0
			}
			gatherIdx = append(gatherIdx, int64(gi))
			srcIdx = append(srcIdx, int64(si))
		})
	})
	patches := gatherAxis(xp, constNode(c.g, hostInt64s(gatherIdx, P, K)), 2) // [N, C, P, K]
	values := graph.ReduceMax(patches, 3)
	am := graph.ArgMax(patches, 3, ir.Int64)
	full := []int{dims[0], dims[1], P, K}
	amB := broadcastNodeTo(graph.Reshape(am, dims[0], dims[1], P, 1), full)
	kIota := graph.Iota(c.g, ir.MakeShape(ir.Int64, full...), 3)
	src := broadcastNodeTo(graph.Reshape(constNode(c.g, hostInt64s(srcIdx, P, K)), 1, 1, P, K), full)
	spatial := graph.ReduceSum(graph.Where(graph.Equal(amB, kIota), src, filled(c.g, ir.Int64, full, 0)), 3)
	nc := graph.Iota(c.g, ir.MakeShape(ir.Int64, dims[0], dims[1], P), 0)
	cc := graph.Iota(c.g, ir.MakeShape(ir.Int64, dims[0], dims[1], P), 1)
	plane := filled(c.g, ir.Int64, []int{dims[0], dims[1], P}, float64(numElems(in)))
	chans := filled(c.g, ir.Int64, []int{dims[0], dims[1], P}, float64(dims[1]))
	base := graph.Mul(graph.Add(graph.Mul(nc, chans), cc), plane)
	idx := graph.Add(base, spatial)
	shape := append([]int{dims[0], dims[1]}, outDims...)
	return graph.Reshape(values, shape...), graph.Reshape(idx, shape...)
}
