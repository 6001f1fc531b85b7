package llm

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:staticcheck // graph-building code reads as math
	"github.com/tensorbridge/tensorbridge/ir"
)

// TestRematLoss: a LoRA fine-tune's loss and gradients with the layers
// and the head rematerialised (the head in chunks of 16 rows, so that a
// batch of 2 x 48 tokens takes 6 chunks) equal those of the plain graph
// within float rounding, with and without dropout; the plain graph is
// GoMLX's autodiff of the same loss (the reference transformers + PEFT
// agree with: TestTrainLLMMatchesPEFT). The guard was proved by injecting
// a fault: with every chunk reading the first chunk's labels the loss
// differs.
func TestRematLoss(t *testing.T) {
	b := testBackend(t)
	ctx := context.Background()
	m, err := Load(ctx, b, filepath.Join(fixtureDir(t), "llama"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rng := rand.New(rand.NewPCG(5, 6))
	var mods []LoRAModule
	for _, mod := range m.Config.Modules() {
		if l := mod.Name; filepath.Ext(l) == ".q_proj" || filepath.Ext(l) == ".down_proj" {
			a, bb := make([]float32, 4*mod.In), make([]float32, mod.Out*4)
			for i := range a {
				a[i] = float32(rng.NormFloat64() * 0.1)
			}
			for i := range bb {
				bb[i] = float32(rng.NormFloat64() * 0.1)
			}
			mods = append(mods, LoRAModule{Module: mod, A: a, B: bb})
		}
	}
	const batch, tokens = 2, 48
	ids, labels := make([]int32, batch*tokens), make([]int32, batch*tokens)
	for i := range ids {
		ids[i] = int32(rng.IntN(m.Config.Vocab))
		labels[i] = int32(rng.IntN(m.Config.Vocab))
		if i%7 == 0 {
			labels[i] = -1
		}
	}
	defer func(r int) { rematLogitRows = r }(rematLogitRows)
	rematLogitRows = 16 * m.Config.Vocab
	for _, dropout := range []float64{0, 0.2} {
		run := func(remat bool) [][]float32 {
			f, err := NewFineTune(m, &LoRA{Rank: 4, Scale: 2, Modules: mods, Dropout: dropout}, nil)
			if err != nil {
				t.Fatal(err)
			}
			f.Remat = remat
			var args []*ir.Tensor
			var shapes []ir.Shape
			for i := range f.TrainParams() {
				x, err := f.TrainInitial(ctx, i)
				if err != nil {
					t.Fatal(err)
				}
				args = append(args, x)
			}
			np, nc := len(args), len(f.TrainConstants())
			args = append(args, f.TrainConstants()...)
			idT, _ := ir.TensorFromFlat(ids, batch, tokens)
			labT, _ := ir.TensorFromFlat(labels, batch, tokens)
			seed, _ := ir.TensorFromFlat([]uint64{1, 2, 3, 4, 5, 6}, batch, 3)
			args = append(args, idT, labT, seed)
			for _, a := range args {
				shapes = append(shapes, a.Shape())
			}
			exe, err := m.b.Compile(ctx, "remat-loss", func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
				trained := in[:np]
				loss, err := f.TrainLoss(g, trained, in[np:np+nc], map[string]*ir.Node{InputIDs: in[np+nc], Labels: in[np+nc+1], DropoutSeed: in[np+nc+2]}, true)
				if err != nil {
					return nil, err
				}
				return append([]*ir.Node{loss}, Gradient(loss, trained...)...), nil
			}, shapes...)
			if err != nil {
				t.Fatal(err)
			}
			defer exe.Close()
			outs, err := exe.Run(ctx, args...)
			if err != nil {
				t.Fatal(err)
			}
			var res [][]float32
			for _, o := range outs {
				if err := o.ConstFlatData(func(flat any) { res = append(res, append([]float32(nil), flat.([]float32)...)) }); err != nil {
					t.Fatal(err)
				}
			}
			return res
		}
		want, got := run(false), run(true)
		for k := range want {
			var scale, worst float64
			for i := range want[k] {
				scale = max(scale, math.Abs(float64(want[k][i])))
				worst = max(worst, math.Abs(float64(got[k][i]-want[k][i])))
			}
			if worst > 5e-6*scale { // measured 5.7e-7 on cpu
				t.Errorf("dropout %v, output %d (the loss, then the gradients): off by %.3g of %.3g under remat", dropout, k, worst, scale)
			}
		}
	}
}
