package onnx

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
)

// Loss functions: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
// The class picked by each target is selected with a one-hot mask (a
// comparison with an iota along the class axis), which also makes targets
// outside [0, C) contribute nothing.

func init() {
	register("NegativeLogLikelihoodLoss", 12, func(c *opCtx) error {
		var w *graph.Node
		if c.has(2) {
			w = c.in(2)
		}
		c.set(0, nllLoss(c, c.in(0), c.in(1), w))
		return nil
	})
	register("SoftmaxCrossEntropyLoss", 12, func(c *opCtx) error {
		logp := graph.LogSoftmax(c.in(0), 1)
		var w *graph.Node
		if c.has(2) {
			w = c.in(2)
		}
		c.set(0, nllLoss(c, logp, c.in(1), w))
		if c.wantsOutput(1) {
			c.set(1, logp)
		}
		return nil
	})
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss")
}

// nllLoss computes -input[n, target[n, d...], d...]·weight[target] with the
// reduction and ignore_index attributes.
func nllLoss(c *opCtx, input, target, weight *graph.Node) *graph.Node {
	dims := input.Shape().Dimensions
	if len(dims) < 2 {
		c.fail("input must have rank >= 2, got %v", dims)
	}
	td := target.Shape().Dimensions
	if len(td) != len(dims)-1 {
		c.fail("target shape %v does not match input %v", td, dims)
	}
	if target.DType() != ir.Int64 {
		target = graph.ConvertDType(target, ir.Int64)
	}
	exp := append([]int{td[0], 1}, td[1:]...)
	tgt := broadcastNodeTo(graph.Reshape(target, exp...), dims)
	iota := graph.Iota(c.g, ir.MakeShape(ir.Int64, dims...), 1)
	mask := graph.Equal(tgt, iota)
	zero := scalarLikeB(input, 0)
	picked := graph.ReduceSum(graph.Where(mask, input, zero), 1)
	var wt *graph.Node
	if weight != nil {
		wb := broadcastNodeTo(graph.Reshape(weight, channelShape(len(dims), dims[1])...), dims)
		wt = graph.ReduceSum(graph.Where(mask, wb, zero), 1)
	} else {
		wt = scalarLikeB(picked, 1)
	}
	if c.hasAttr("ignore_index") {
		ign := filled(c.g, ir.Int64, td, float64(c.attrInt("ignore_index", 0)))
		valid := graph.NotEqual(target, ign)
		wt = graph.Where(valid, wt, scalarLikeB(wt, 0))
	}
	loss := graph.Neg(graph.Mul(picked, wt))
	switch c.attrString("reduction", "mean") {
	case "none":
		return loss
	case "sum":
		return graph.ReduceAllSum(loss)
	case "mean":
		return graph.Div(graph.ReduceAllSum(loss), graph.ReduceAllSum(wt))
	default:
		c.fail("unknown reduction %q", c.attrString("reduction", ""))
	}
	return nil
}
