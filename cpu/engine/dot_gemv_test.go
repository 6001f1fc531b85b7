package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tensorbridge/tensorbridge/cpu/gemv"
)

// attentionDot is a DotGeneral of LLM decode attention over a KV cache:
// the shapes and axes GoMLX's Einsum gives llm/graph.go's
// "btkgd,bskd->bkgts" (scores) and "bkgts,bskd->btkgd" (values), for b
// rows, t query positions, k KV heads of g query heads, head dim d and s
// cached keys.
type attentionDot struct {
	values           bool
	b, t, k, g, d, s int
}

// dotCase returns the DotGeneral operands' shapes and axes.
func (a attentionDot) dotCase() dotCase {
	if a.values { // probs [b,k,g,t,s] · v [b,s,k,d]
		return dotCase{fmt.Sprintf("values %+v", a), []int{a.b, a.k, a.g, a.t, a.s}, []int{a.b, a.s, a.k, a.d},
			[]int{4}, []int{0, 1}, []int{1}, []int{0, 2}}
	}
	// q [b,t,k,g,d] · k [b,s,k,d]
	return dotCase{fmt.Sprintf("scores %+v", a), []int{a.b, a.t, a.k, a.g, a.d}, []int{a.b, a.s, a.k, a.d},
		[]int{4}, []int{0, 2}, []int{3}, []int{0, 2}}
}

// planFor builds the dotPlan dotKernel makes for c.
func planFor(c dotCase) *dotPlan {
	ls, rs := shapes.Make(dtypes.Float32, c.ls...), shapes.Make(dtypes.Float32, c.rs...)
	p := &dotPlan{
		lhs: viewOf(ls, c.lb, freeAxes(ls.Rank(), c.lb, c.lc), c.lc),
		rhs: viewOf(rs, c.rb, c.rc, freeAxes(rs.Rank(), c.rb, c.rc)),
	}
	p.batch, p.m, p.k, p.n = p.lhs.batch, p.lhs.rows, p.lhs.cols, p.rhs.cols
	return p
}

// TestAttentionDotsInPlace runs decode attention products (one query
// position, a grouped-query group of 1 to 17 rows, caches of 1 to 300
// keys, one and several batch elements) on the engine against simplego,
// and checks that those with at most gemvRows rows take gemvBatched, with
// the layout expected: the scores' keys read as rows of the cache, the
// values as its K×N rows (where F32KN has an assembly kernel).
func TestAttentionDotsInPlace(t *testing.T) {
	e, oracle := newPair(t)
	rng := rand.New(rand.NewPCG(31, 32))
	var cases []attentionDot
	for _, values := range []bool{false, true} {
		for _, s := range []int{1, 5, 64, 300} {
			cases = append(cases,
				attentionDot{values, 2, 1, 4, 3, 64, s}, // the 100M Llama: 4 KV heads of 3, d 64
				attentionDot{values, 1, 1, 1, 1, 16, s}, // one batch element: threads inside the call
				attentionDot{values, 3, 1, 2, 16, 8, s}, // 16 rows
				attentionDot{values, 1, 2, 2, 9, 24, s}, // 18 rows: the GEMM path
				attentionDot{values, 2, 1, 2, 5, 72, s}) // d past one 64-column panel
		}
	}
	for _, a := range cases {
		c := a.dotCase()
		p := planFor(c)
		if p.m <= gemvRows { // else runPacked does not ask: the GEMM path
			want := formRows
			if a.values && a.s > 1 { // one key: formRows reads it too
				want = formKN
				if !gemv.KNAccelerated() {
					want = formNone
				}
			}
			if got := p.inPlaceForm(); got != want || p.weightsView() && p.batch > 1 {
				t.Errorf("%s: inPlaceForm %d, want %d (weightsView %v)", c.name, got, want, p.weightsView())
			}
		}
		ls, rs := shapes.Make(dtypes.Float32, c.ls...), shapes.Make(dtypes.Float32, c.rs...)
		ins, vals := []shapes.Shape{ls, rs}, []any{randF32(rng, ls.Size()), randF32(rng, rs.Size())}
		fn := func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
			o, err := b.DotGeneral(p[0], c.lc, c.lb, p[1], c.rc, c.rb)
			return []backends.Op{o}, err
		}
		got := runGraph(t, e, ins, vals, fn)
		ref := runGraph(t, oracle, ins, vals, fn)
		closeF32(t, c.name, got[0].([]float32), ref[0].([]float32), dotTol, math.Sqrt(float64(c.contracted())))
	}
}
