package llm

import (
	"context"
	"math"
	"testing"

	"github.com/tensorbridge/tensorbridge/ir"
)

// TestLoRADropout: the adapters' dropout is torch.nn.Dropout(p) in
// training: each element is zeroed with probability p and the others are
// scaled by exactly 1/(1-p); masks drawn one after another differ.
func TestLoRADropout(t *testing.T) {
	b := testBackend(t)
	ctx := context.Background()
	const n, p = 200000, 0.3
	fn := func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		d := &loraDropout{p: p, state: in[1]}
		return []*ir.Node{d.apply(in[0]), d.apply(in[0])}, nil
	}
	exe, err := b.Compile(ctx, "dropout", fn, ir.MakeShape(ir.Float32, n), ir.MakeShape(ir.Uint64, 3))
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	ones := make([]float32, n)
	for i := range ones {
		ones[i] = 1
	}
	x, _ := ir.TensorFromFlat(ones, n)
	st, _ := ir.TensorFromFlat([]uint64{1, 2, 3}, 3)
	outs, err := exe.Run(ctx, x, st)
	if err != nil {
		t.Fatal(err)
	}
	var masks [2][]float32
	for k, o := range outs {
		if err := o.ConstFlatData(func(flat any) { masks[k] = append([]float32(nil), flat.([]float32)...) }); err != nil {
			t.Fatal(err)
		}
	}
	kept := float32(1 / (1 - p))
	zeros, same := 0, 0
	for i, v := range masks[0] {
		switch v {
		case 0:
			zeros++
		case kept:
		default:
			t.Fatalf("element %d is %v, want 0 or %v", i, v, kept)
		}
		if v == masks[1][i] {
			same++
		}
	}
	// Binomial(n, p): the standard deviation of the fraction is ~0.001; 5 of them.
	if frac := float64(zeros) / n; math.Abs(frac-p) > 0.005 {
		t.Errorf("%.4f of the elements dropped, want %v", frac, p)
	}
	if want := 1 - 2*p*(1-p); math.Abs(float64(same)/n-want) > 0.005 {
		t.Errorf("the two masks agree on %.4f of the elements, want %.4f (independent draws)", float64(same)/n, want)
	}
}
