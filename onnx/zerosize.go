package onnx

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
)

// Zero-size tensors.
//
// ONNX computes on tensors with a zero-length dimension as numpy does: an
// element-wise op gives an empty result, a sum over an empty set is 0 (a
// MatMul whose inner dimension is 0 gives zeros), the reductions give
// their identities (ops_reduce.go). The backends' graph builders do not all
// accept zero sizes (GoMLX's pure-Go DotGeneral refuses one, its
// ReduceWindow refuses an empty window), so the converters whose results
// are known without computing anything give them as constants here. And
// GoMLX's shape inference broadcasts an axis of size 0 against one of
// size 1 to size 1, where numpy gives 0: converters whose GoMLX helpers
// broadcast a kept-dims reduction back (Softmax) return their empty input
// as it is.

// hasZeroDim says whether a node has no elements.
func hasZeroDim(x *graph.Node) bool { return x.Shape().Size() == 0 }

// dotGeneral is graph.DotGeneral, except that an operand without elements
// gives zeros of the product's shape: a sum over an empty contraction is 0
// (numpy's matmul, which ONNX's MatMul, Gemm and Einsum follow), and an
// empty product is empty. The result has GoMLX's layout: the batch axes,
// then a's free axes, then b's.
func dotGeneral(a *graph.Node, aCon, aBatch []int, b *graph.Node, bCon, bBatch []int) *graph.Node {
	if !hasZeroDim(a) && !hasZeroDim(b) {
		return graph.DotGeneral(a, aCon, aBatch, b, bCon, bBatch)
	}
	ad, bd := a.Shape().Dimensions, b.Shape().Dimensions
	var dims []int
	for _, k := range aBatch {
		dims = append(dims, ad[k])
	}
	free := func(d []int, con, batch []int) {
		for k, v := range d {
			if !containsInt(con, k) && !containsInt(batch, k) {
				dims = append(dims, v)
			}
		}
	}
	free(ad, aCon, aBatch)
	free(bd, bCon, bBatch)
	return graph.Zeros(a.Graph(), ir.MakeShape(a.DType(), dims...))
}
