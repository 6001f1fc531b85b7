package train

// The gradient of a matrix product. GoMLX v0.26.0 differentiates
// DotGeneral by broadcasting the incoming gradient against the other
// operand and summing (ops_helpers.go, dotGeneralVJP): mathematically the
// product's gradient, but the cpu engine materialises the broadcast (a
// [1024, 16000, 768] float32 product for a 100M Llama's output layer:
// 50 GB) and XLA runs it as a loop reduction instead of a matrix multiply
// (all 88.9 G multiply-adds of that model's backward pass; BENCHMARKS.md,
// fine-tuning). This package replaces it, once, at init, with the
// textbook rule: each operand's gradient is itself a DotGeneral of the
// incoming gradient with the other operand, transposed back to the
// operand's axis order. Every GoMLX gradient in the process then uses it
// (graph.VJPRegistration is GoMLX's table for that); a node whose
// parameters cannot be read falls back to GoMLX's rule.

import (
	"reflect"
	"slices"
	"sync/atomic"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

func init() {
	gomlxDot = graph.VJPRegistration[graph.NodeTypeDotGeneral]
	graph.VJPRegistration[graph.NodeTypeDotGeneral] = dotGeneralVJP
}

// gomlxDot is GoMLX's own rule, the fallback; dotFallbacks counts its uses.
var (
	gomlxDot     graph.VJP
	dotFallbacks atomic.Int64
)

// dotAxes are a DotGeneral node's contracting and batch axes.
type dotAxes struct {
	lhsContract, lhsBatch, rhsContract, rhsBatch []int
}

// readDotAxes reads node's axes from GoMLX's unexported node parameters
// (v0.26.0's nodeInputsDotGeneral); ok is false when they are not there.
func readDotAxes(node *graph.Node) (a dotAxes, ok bool) {
	v := reflect.ValueOf(node).Elem().FieldByName("inputs")
	if !v.IsValid() || v.Kind() != reflect.Interface || v.IsNil() {
		return a, false
	}
	v = v.Elem()
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return a, false
	}
	v = v.Elem()
	ints := func(name string) ([]int, bool) {
		f := v.FieldByName(name)
		if !f.IsValid() || f.Kind() != reflect.Slice || f.Type().Elem().Kind() != reflect.Int {
			return nil, false
		}
		out := make([]int, f.Len())
		for i := range out {
			out[i] = int(f.Index(i).Int())
		}
		return out, true
	}
	var ok1, ok2, ok3, ok4 bool
	a.lhsContract, ok1 = ints("lhsContractingAxes")
	a.lhsBatch, ok2 = ints("lhsBatchAxes")
	a.rhsContract, ok3 = ints("rhsContractingAxes")
	a.rhsBatch, ok4 = ints("rhsBatchAxes")
	return a, ok1 && ok2 && ok3 && ok4 && len(a.lhsContract) == len(a.rhsContract) && len(a.lhsBatch) == len(a.rhsBatch)
}

// crossAxes are the axes of a rank-r operand neither contracted nor
// batch, in increasing order: they follow the batch axes in the product.
func crossAxes(r int, contract, batch []int) []int {
	var out []int
	for a := range r {
		if !slices.Contains(contract, a) && !slices.Contains(batch, a) {
			out = append(out, a)
		}
	}
	return out
}

// dotGeneralVJP: the product p = DotGeneral(l, r) has axes [batch...,
// lCross..., rCross...]. dl = DotGeneral(v, r) contracting v's rCross axes
// with r's cross axes, batch with batch: axes [batch..., lCross...,
// r's contracting axes in increasing order], transposed to l's order (r's
// contracting axis k pairs with l's); dr likewise.
func dotGeneralVJP(node *graph.Node, vs []*graph.Node, shape shapes.Shape) []*graph.Node {
	ax, ok := readDotAxes(node)
	in := node.Inputs()
	if !ok || len(in) != 2 || len(vs) != 1 {
		dotFallbacks.Add(1)
		return gomlxDot(node, vs, shape)
	}
	l, r, v := in[0], in[1], vs[0]
	nb := len(ax.lhsBatch)
	lCross := crossAxes(l.Rank(), ax.lhsContract, ax.lhsBatch)
	rCross := crossAxes(r.Rank(), ax.rhsContract, ax.rhsBatch)
	vBatch := make([]int, nb)
	for i := range vBatch {
		vBatch[i] = i
	}
	vAxes := func(from, n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = from + i
		}
		return out
	}
	grad := func(other *graph.Node, vContract, otherCross, otherBatch, thisBatch, thisCross, thisContract, otherContract []int, rank int) *graph.Node {
		vv := v
		if vv.DType() != other.DType() {
			vv = graph.ConvertDType(vv, other.DType())
		}
		g := graph.DotGeneral(vv, vContract, vBatch, other, otherCross, otherBatch)
		// g's axes: batch, this operand's cross axes, other's contracting
		// axes in increasing order.
		sorted := slices.Sorted(slices.Values(otherContract))
		perm := make([]int, rank)
		for i, a := range thisBatch {
			perm[a] = i
		}
		for j, a := range thisCross {
			perm[a] = nb + j
		}
		for k, a := range thisContract {
			perm[a] = nb + len(thisCross) + slices.Index(sorted, otherContract[k])
		}
		if !isIdentity(perm) {
			g = graph.TransposeAllAxes(g, perm...)
		}
		return g
	}
	dl := grad(r, vAxes(nb+len(lCross), len(rCross)), rCross, ax.rhsBatch, ax.lhsBatch, lCross, ax.lhsContract, ax.rhsContract, l.Rank())
	dr := grad(l, vAxes(nb, len(lCross)), lCross, ax.lhsBatch, ax.rhsBatch, rCross, ax.rhsContract, ax.lhsContract, r.Rank())
	if dl.DType() != l.DType() {
		dl = graph.ConvertDType(dl, l.DType())
	}
	if dr.DType() != r.DType() {
		dr = graph.ConvertDType(dr, r.DType())
	}
	return []*graph.Node{dl, dr}
}

func isIdentity(perm []int) bool {
	for i, p := range perm {
		if i != p {
			return false
		}
	}
	return true
}
