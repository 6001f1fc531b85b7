package tensorbridge

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
	"github.com/tensorbridge/tensorbridge/shard"
	"github.com/tensorbridge/tensorbridge/train"
)

// tpToy is a Trainable of two matrices, Megatron's MLP pair in miniature:
// the loss is mean over the batch of |x F V - y|^2 with F [4, 8] frozen (a
// constant, column-parallel: split over its 8 columns) and V [8, 2] trained
// (row-parallel: split over its 8 rows). Small integers keep every value
// of a few SGD steps exact in float32, so the test's float64 arithmetic is
// the reference.
type tpToy struct {
	f *ir.Tensor // on device 0
	v []float32  // starting V
}

var (
	toyF = []float32{1, 0, -1, 2, 0, 1, 1, -1, 0, 1, 2, 0, -1, 0, 1, 1, 1, 1, 0, 0, 2, -1, 0, 1, -1, 0, 1, 1, 0, 2, -1, 0}
	toyV = []float32{0.5, 0, -0.5, 1, 0, 0.25, 1, -1, 0.25, 0, 0, 0.5, -1, 0.5, 0.5, 0}
	toyX = []float32{1, 0, 1, 0, 0, 1, 0, -1, 1, 1, 0, 0, 0, 0, 1, 1}
	toyY = []float32{1, 0, 0, 1, -1, 1, 0, 0}
)

func (p *tpToy) TrainName() string   { return "tp-toy" }
func (p *tpToy) TrainDigest() string { return "tp-toy" }
func (p *tpToy) TrainParams() []onnx.Param {
	return []onnx.Param{{Name: "v", Shape: ir.MakeShape(ir.Float32, 8, 2)}}
}
func (p *tpToy) TrainInitial(ctx context.Context, i int) (*ir.Tensor, error) {
	return ir.TensorFromFlat(slices.Clone(p.v), 8, 2)
}
func (p *tpToy) TrainConstants() []*ir.Tensor { return []*ir.Tensor{p.f} }
func (p *tpToy) TrainInputs() []string        { return []string{"x", "y"} }
func (p *tpToy) TrainCheckBatch(map[string]*ir.Tensor) error {
	return nil
}
func (p *tpToy) TrainLoss(g *ir.Graph, trained, constants []*ir.Node, batch map[string]*ir.Node, training bool) (*ir.Node, error) {
	out := graph.MatMul(graph.MatMul(batch["x"], constants[0]), trained[0])
	d := graph.Sub(out, batch["y"])
	n := d.Shape().Dimensions[0]
	return graph.DivScalar(graph.ReduceAllSum(graph.Mul(d, d)), float64(n)), nil
}
func (p *tpToy) TrainSplits(model int) (trained, constants []shard.Plan, notes []string) {
	return []shard.Plan{{shard.Model, ""}}, []shard.Plan{{"", shard.Model}}, nil
}

// toyReference runs the SGD steps in float64: the loss before each step
// and V after the last.
func toyReference(steps int, lr float64) (losses []float64, v []float64) {
	const B, I, H, O = 4, 4, 8, 2
	v = make([]float64, H*O)
	for i, x := range toyV {
		v[i] = float64(x)
	}
	h := make([]float64, B*H) // x F
	for b := range B {
		for j := range H {
			for i := range I {
				h[b*H+j] += float64(toyX[b*I+i] * toyF[i*H+j])
			}
		}
	}
	for range steps {
		grad, loss := make([]float64, H*O), 0.0
		for b := range B {
			for o := range O {
				d := -float64(toyY[b*O+o])
				for j := range H {
					d += h[b*H+j] * v[j*O+o]
				}
				loss += d * d / B
				for j := range H {
					grad[j*O+o] += 2 * d * h[b*H+j] / B
				}
			}
		}
		losses = append(losses, loss)
		for i := range v {
			v[i] -= lr * grad[i]
		}
	}
	return losses, v
}

// TestTrainerTensorParallelConstants: with --strategy tp a Trainable's
// constant is split over the model axis as its TrainSplits says (device 0
// and device 1 each hold their 4 of F's 8 columns, not the whole), the
// trained tensor likewise, and the steps' losses and the gathered weights
// are the exact arithmetic's (float64 reference; the values are exact in
// float32), for data=1,model=2 and data=2,model=2.
func TestTrainerTensorParallelConstants(t *testing.T) {
	ctx := context.Background()
	b, err := Open(ctx, "xla-cpu:devices=4")
	if err != nil {
		testreq.Skipf(t, "xla-cpu: %v", err)
	}
	defer b.Close()
	const lr, steps = 0.0625, 3
	wantLoss, wantV := toyReference(steps, lr)
	for _, mesh := range []string{"data=1,model=2", "data=2,model=2"} {
		t.Run(mesh, func(t *testing.T) {
			hf, _ := ir.TensorFromFlat(slices.Clone(toyF), 4, 8)
			f, err := ir.ToDevice(hf, b.drv.Engine(), 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.FinalizeAll()
			cfg := train.Config{Loss: train.Loss{Kind: train.LossOutput, Output: "loss"}, Batch: 4,
				Optimizer: train.Optimizer{Kind: train.SGD, LR: lr}, Mesh: mesh, Strategy: "tp"}
			tr, err := b.NewTrainer(ctx, &tpToy{f: f, v: toyV}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			checkToyParts(t, tr)
			x, _ := ir.TensorFromFlat(slices.Clone(toyX), 4, 4)
			y, _ := ir.TensorFromFlat(slices.Clone(toyY), 4, 2)
			for s := range steps {
				r, err := tr.Step(ctx, map[string]*ir.Tensor{"x": x, "y": y})
				if err != nil {
					t.Fatal(err)
				}
				if math.Abs(r.Loss-wantLoss[s]) > 1e-6*wantLoss[s] {
					t.Errorf("step %d: loss %.9g, exact %.9g", s+1, r.Loss, wantLoss[s])
				}
			}
			w, err := tr.Weights()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(w["v"].Shape().Dimensions, []int{8, 2}) {
				t.Fatalf("V gathered as %v, want [8 2]", w["v"].Shape())
			}
			got := w["v"].Value().([][]float32)
			for i, want := range wantV {
				if g := float64(got[i/2][i%2]); math.Abs(g-want) > 1e-6 {
					t.Errorf("V[%d][%d] = %.9g after %d steps, exact %.9g", i/2, i%2, g, steps, want)
				}
			}
		})
	}
}

// releasingToy is a tpToy that frees its constant when the Trainer
// says every device holds its part (ConstantReleaser).
type releasingToy struct {
	tpToy
	released []int
}

func (p *releasingToy) ReleaseConstants(idx []int) {
	p.released = append(p.released, idx...)
	for _, i := range idx {
		if i == 0 {
			_ = p.f.FinalizeAll()
		}
	}
}

// TestTrainerTensorParallelRelease: with tp the Trainer releases the
// Trainable's whole copy of the constant it split (device 0 then holds
// only its part), and both the steps and Eval, which then runs as one
// SPMD program over the parts, give the exact arithmetic's losses: Eval
// before the first step is the first step's loss, and after the steps the
// loss of the updated V. The Trainable's F lies on device 0 or in host
// memory (llm.LoadOptions.OnHost: then no device ever holds it whole).
// Fault injected once: Eval through the one-device program (reading the
// released tensor) fails.
func TestTrainerTensorParallelRelease(t *testing.T) {
	ctx := context.Background()
	b, err := Open(ctx, "xla-cpu:devices=4")
	if err != nil {
		testreq.Skipf(t, "xla-cpu: %v", err)
	}
	defer b.Close()
	const lr, steps = 0.0625, 3
	wantLoss, _ := toyReference(steps+1, lr)
	for _, row := range []struct {
		mesh string
		host bool
	}{{"data=1,model=2", false}, {"data=2,model=2", false}, {"data=1,model=2", true}, {"data=2,model=2", true}} {
		mesh := row.mesh
		t.Run(fmt.Sprintf("%s/host=%v", mesh, row.host), func(t *testing.T) {
			f, _ := ir.TensorFromFlat(slices.Clone(toyF), 4, 8)
			if !row.host {
				var err error
				if f, err = ir.ToDevice(f, b.drv.Engine(), 0); err != nil {
					t.Fatal(err)
				}
			}
			toy := &releasingToy{tpToy: tpToy{f: f, v: toyV}}
			cfg := train.Config{Loss: train.Loss{Kind: train.LossOutput, Output: "loss"}, Batch: 4,
				Optimizer: train.Optimizer{Kind: train.SGD, LR: lr}, Mesh: mesh, Strategy: "tp"}
			tr, err := b.NewTrainer(ctx, toy, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			if !slices.Equal(toy.released, []int{0}) {
				t.Fatalf("released constants %v, want [0] (F, split over the model axis)", toy.released)
			}
			checkToyParts(t, tr)
			x, _ := ir.TensorFromFlat(slices.Clone(toyX), 4, 4)
			y, _ := ir.TensorFromFlat(slices.Clone(toyY), 4, 2)
			batch := map[string]*ir.Tensor{"x": x, "y": y}
			check := func(what string, got, want float64) {
				t.Helper()
				if math.Abs(got-want) > 1e-6*want {
					t.Errorf("%s: loss %.9g, exact %.9g", what, got, want)
				}
			}
			l, err := tr.Eval(ctx, batch)
			if err != nil {
				t.Fatalf("eval before the steps: %v", err)
			}
			check("eval before the steps", l, wantLoss[0])
			for s := range steps {
				r, err := tr.Step(ctx, batch)
				if err != nil {
					t.Fatal(err)
				}
				check(fmt.Sprintf("step %d", s+1), r.Loss, wantLoss[s])
			}
			if l, err = tr.Eval(ctx, batch); err != nil {
				t.Fatalf("eval after the steps: %v", err)
			}
			check("eval after the steps", l, wantLoss[steps])
		})
	}
}

// checkToyParts checks that each device holds its half of F's columns
// (model index d%2 holds columns 4(d%2) ... 4(d%2)+3) and its half of V.
func checkToyParts(t *testing.T, tr *Trainer) {
	t.Helper()
	tm := tr.mesh
	if !slices.Equal(tm.constSplits[0], shard.Plan{"", shard.Model}) || !slices.Equal(tm.splits[0], shard.Plan{shard.Model, ""}) {
		t.Fatalf("plans: F %v, V %v; want [-,model] and [model,-]", tm.constSplits[0], tm.splits[0])
	}
	for d := range tm.devices() {
		part, v := tm.constZero[0], tr.weights[0]
		if d > 0 {
			part, v = tm.consts[d-1][0], tm.replicas[d-1][0]
		}
		if !slices.Equal(v.Shape().Dimensions, []int{4, 2}) {
			t.Errorf("device %d holds V as %v, want its [4 2] rows", d, v.Shape())
		}
		h, err := hostCopy(part)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := h.Value().([][]float32)
		if !ok || len(got) != 4 || len(got[0]) != 4 {
			t.Fatalf("device %d holds F as %v, want its [4 4] columns", d, h.Shape())
		}
		m := d % 2
		for i := range 4 {
			if want := toyF[i*8+4*m : i*8+4*m+4]; !slices.Equal(got[i], want) {
				t.Errorf("device %d: F row %d part %v, want %v", d, i, got[i], want)
			}
		}
	}
}

// badSplits is a tpToy whose TrainSplits leaves out its constant's plan.
type badSplits struct{ tpToy }

func (p *badSplits) TrainSplits(model int) (trained, constants []shard.Plan, notes []string) {
	return []shard.Plan{{shard.Model, ""}}, nil, nil
}

// TestTrainerTensorParallelRefuses: a Trainable's tp without a mesh, on a
// mesh of one device or without a model axis is invalid input, and TrainSplits plans that do
// not match its tensors are an internal error, before anything runs.
func TestTrainerTensorParallelRefuses(t *testing.T) {
	ctx := context.Background()
	b, err := Open(ctx, "xla-cpu:devices=2")
	if err != nil {
		testreq.Skipf(t, "xla-cpu: %v", err)
	}
	defer b.Close()
	hf, _ := ir.TensorFromFlat(slices.Clone(toyF), 4, 8)
	f, err := ir.ToDevice(hf, b.drv.Engine(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.FinalizeAll()
	for _, tc := range []struct {
		name, mesh string
		src        Trainable
		invalid    bool // else internal
	}{
		{"no mesh", "", &tpToy{f: f, v: toyV}, true},
		{"no model axis", "data=2", &tpToy{f: f, v: toyV}, true},
		{"a mesh of one device", "data=1", &tpToy{f: f, v: toyV}, true},
		{"plans of other tensors", "data=1,model=2", &badSplits{tpToy{f: f, v: toyV}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := train.Config{Loss: train.Loss{Kind: train.LossOutput, Output: "loss"}, Batch: 4,
				Optimizer: train.Optimizer{Kind: train.SGD, LR: 0.1}, Mesh: tc.mesh, Strategy: "tp"}
			tr, err := b.NewTrainer(ctx, tc.src, cfg)
			if err == nil {
				tr.Close()
				t.Fatal("trainer made, want an error")
			}
			if tc.invalid != errors.Is(err, errs.ErrInvalidInput) || (!tc.invalid && errs.KindOf(err) != errs.Internal) {
				t.Errorf("%v: want invalid input %v (else an internal error)", err, tc.invalid)
			}
		})
	}
}
