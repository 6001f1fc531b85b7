package train

import (
	"math"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/graph"
)

// The optimizer updates (the one update of the Trainer and plan --train)
// against closed forms, on the pure-Go engine: with a constant gradient g,
// Adam's bias-corrected moments are exactly g and g*g at every step, so
// each AdamW step is w*(1-lr*wd) - lr*g/(|g|+eps) (torch.optim.AdamW's
// algorithm); Adam adds wd*w to g first; SGD with momentum mu moves by
// lr*g, then lr*(1+mu)*g (torch's first-step buffer is the gradient).
func TestUpdateClosedForm(t *testing.T) {
	eng, err := simplego.New("ops_sequential")
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Finalize()
	w0 := []float32{0.5, -1.25, 2}
	gr := []float32{0.1, -3, 0.002}
	adamw := Optimizer{Kind: AdamW, LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-3, WeightDecay: 0.1}
	adam := adamw
	adam.Kind = Adam
	sgd := Optimizer{Kind: SGD, LR: 0.1, Momentum: 0.5}
	type ref func(w, g float64, step int) float64 // w after this step from w before
	cases := []struct {
		name string
		o    Optimizer
		want ref
	}{
		{"adamw", adamw, func(w, g float64, _ int) float64 {
			return w*(1-0.01*0.1) - 0.01*g/(math.Abs(g)+1e-3)
		}},
		{"sgd momentum", sgd, func(w, g float64, step int) float64 { return w - 0.1*g*[]float64{1, 1.5}[step-1] }},
	}
	for _, tc := range cases {
		slots := len(StateSlots(tc.o))
		exec := graph.MustNewExec(eng, func(w, g, m, v, hyper *graph.Node) []*graph.Node {
			st := [][]*graph.Node{{m}, {v}}[:slots]
			nw, ns := update(tc.o, []*graph.Node{w}, st, []*graph.Node{g}, hyper)
			outs := []*graph.Node{nw[0], m, v}
			for k := range ns {
				outs[1+k] = ns[k][0]
			}
			return outs
		})
		w, m, v := slices.Clone(w0), make([]float32, 3), make([]float32, 3)
		want := make([]float64, 3)
		for i := range want {
			want[i] = float64(w0[i])
		}
		for step := 1; step <= 2; step++ {
			out := exec.MustExec(w, gr, m, v, Hyper(tc.o, tc.o.LR, step-1))
			w, m, v = out[0].Value().([]float32), out[1].Value().([]float32), out[2].Value().([]float32)
			for i := range want {
				want[i] = tc.want(want[i], float64(gr[i]), step)
				if d := math.Abs(float64(w[i]) - want[i]); d > 1e-6*math.Max(1, math.Abs(want[i])) {
					t.Errorf("%s step %d: w[%d] = %v, want %v", tc.name, step, i, w[i], want[i])
				}
			}
		}
		exec.Finalize()
	}
	// Adam's L2 decay enters the gradient, so the gradient is no longer
	// constant; its first step is still lr*sign-like: w - lr*g'/(|g'|+eps)
	// with g' = g + wd*w.
	exec := graph.MustNewExec(eng, func(w, g, m, v, hyper *graph.Node) []*graph.Node {
		nw, _ := update(adam, []*graph.Node{w}, [][]*graph.Node{{m}, {v}}, []*graph.Node{g}, hyper)
		return nw
	})
	defer exec.Finalize()
	got := exec.MustExec(w0, gr, make([]float32, 3), make([]float32, 3), Hyper(adam, adam.LR, 0))[0].Value().([]float32)
	for i := range w0 {
		g := float64(gr[i]) + 0.1*float64(w0[i])
		want := float64(w0[i]) - 0.01*g/(math.Abs(g)+1e-3)
		if math.Abs(float64(got[i])-want) > 1e-6 {
			t.Errorf("adam step 1: w[%d] = %v, want %v", i, got[i], want)
		}
	}
}

// Cross entropy against closed forms: equal logits give log(classes);
// logits (0, ln 3, 0, 0) with label 1 give -ln(3/6); the mean runs over
// every leading position; int32 labels (plan --train's option) give the
// same.
func TestCrossEntropyClosedForm(t *testing.T) {
	eng, err := simplego.New("ops_sequential")
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Finalize()
	exec := graph.MustNewExec(eng, func(logits, labels *graph.Node) *graph.Node {
		l, _, err := crossEntropy(logits, labels, Loss{Kind: LossCrossEntropy, Output: "logits", Target: "labels"})
		if err != nil {
			panic(err)
		}
		return l
	})
	defer exec.Finalize()
	ln3 := float32(math.Log(3))
	logits := [][][]float32{{{0, 0, 0, 0}, {0, ln3, 0, 0}}}
	want := (math.Log(4) + -math.Log(3.0/6)) / 2 // second row: p = 3/(3+1+1+1)
	for _, labels := range []any{[][]int64{{2, 1}}, [][]int32{{2, 1}}} {
		got := exec.MustExec(logits, labels)[0].Value().(float32)
		if math.Abs(float64(got)-want) > 1e-6 {
			t.Errorf("cross entropy (%T labels) %v, want %v", labels, got, want)
		}
	}
}
