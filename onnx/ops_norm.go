package onnx

import (
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// Normalisation ops (BatchNormalization, InstanceNormalization,
// LayerNormalization, GroupNormalization, LRN, MeanVarianceNormalization),
// registered in ops_nn.go.

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
