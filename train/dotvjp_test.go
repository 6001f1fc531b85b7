package train

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// TestDotGeneralVJP: the matrix-product gradient (dotvjp.go) equals
// GoMLX's own broadcast-and-sum rule, an independent derivation, for
// products with batch axes, several contracting axes and operands whose
// axes are not in product order (the einsums of the LLM decoder and of the
// ONNX importer's MatMul and Gemm among them), and reads every node's axes
// (no fallback).
func TestDotGeneralVJP(t *testing.T) {
	eng, err := simplego.New("ops_sequential")
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Finalize()
	cases := []struct {
		eq     string
		ld, rd []int
	}{
		{"ij,jk->ik", []int{3, 4}, []int{4, 5}},
		{"ni,oi->no", []int{6, 4}, []int{5, 4}},
		{"bij,bjk->bik", []int{2, 3, 4}, []int{2, 4, 5}},
		{"btkgd,bskd->bkgts", []int{2, 3, 2, 2, 4}, []int{2, 5, 2, 4}},
		{"bkgts,bskd->btkgd", []int{2, 2, 2, 3, 5}, []int{2, 5, 2, 4}},
		{"abc,cb->a", []int{3, 4, 5}, []int{5, 4}},
		{"jbi,bkj->bik", []int{4, 2, 3}, []int{2, 5, 4}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	fill := func(dims []int) *tensors.Tensor {
		n := 1
		for _, d := range dims {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return tensors.FromFlatDataAndDimensions(v, dims...)
	}
	for _, tc := range cases {
		t.Run(tc.eq, func(t *testing.T) {
			l, r := fill(tc.ld), fill(tc.rd)
			grads := func(vjp graph.VJP) [][]float32 {
				graph.VJPRegistration[graph.NodeTypeDotGeneral] = vjp
				defer func() { graph.VJPRegistration[graph.NodeTypeDotGeneral] = dotGeneralVJP }()
				exec := graph.MustNewExec(eng, func(a, b *graph.Node) []*graph.Node {
					p := graph.Einsum(tc.eq, a, b)
					// A weighting so that every output element's gradient differs.
					w := graph.Iota(a.Graph(), shapes.Make(p.DType(), p.Shape().Dimensions...), p.Rank()-1)
					loss := graph.ReduceAllSum(graph.Mul(graph.Sin(p), graph.AddScalar(w, 1)))
					return graph.Gradient(loss, a, b)
				})
				var res [][]float32
				for _, o := range exec.MustExec(l, r) {
					o.ConstFlatData(func(flat any) { res = append(res, append([]float32(nil), flat.([]float32)...)) })
				}
				return res
			}
			want, got := grads(gomlxDot), grads(dotGeneralVJP)
			for k := range want {
				for i := range want[k] {
					if d := math.Abs(float64(got[k][i] - want[k][i])); d > 1e-4*(1+math.Abs(float64(want[k][i]))) {
						t.Fatalf("operand %d, element %d: %v, GoMLX's rule %v", k, i, got[k][i], want[k][i])
					}
				}
			}
		})
	}
	if n := dotFallbacks.Load(); n != 0 {
		t.Errorf("%d DotGeneral nodes fell back to GoMLX's rule: their axes could not be read", n)
	}
}
