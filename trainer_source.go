package tensorbridge

// Trainers for models that are not ONNX files: a Trainable says what is
// trained and builds the loss; the Trainer does the rest (the step
// program, optimizer state, checkpoints, non-finite guard) exactly as for
// an ONNX Model, through the same train.BuildStep.

import (
	"context"
	"fmt"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
	"github.com/tensorbridge/tensorbridge/train"
)

// Trainable is a model a Trainer trains other than an ONNX Model: package
// llm implements it for Hugging Face checkpoints (LoRA adapters or every
// weight). It is the small interface a model implements; the Trainer
// holds the trained tensors' device copies and their optimizer state.
type Trainable interface {
	// TrainName names the model in program names and errors; TrainDigest
	// identifies it (and what is trained) in checkpoints.
	TrainName() string
	TrainDigest() string
	// TrainParams are the trained tensors, in the order the loss takes
	// them: names (as checkpoints record them) and shapes.
	TrainParams() []onnx.Param
	// TrainInitial returns trained tensor i's starting value (host).
	TrainInitial(ctx context.Context, i int) (*ir.Tensor, error)
	// TrainConstants are device tensors the loss reads but nothing trains
	// (frozen base weights), owned by the Trainable: passed to every
	// program after the trained tensors, never donated or freed.
	TrainConstants() []*ir.Tensor
	// TrainInputs names a micro-batch's tensors, in the order the
	// programs take them.
	TrainInputs() []string
	// TrainLoss builds one micro-batch's mean loss (a float32 scalar) on
	// g from the trained tensors, the constants and the batch by name;
	// training is false for an evaluation (no dropout).
	TrainLoss(g *ir.Graph, trained, constants []*ir.Node, batch map[string]*ir.Node, training bool) (*ir.Node, error)
	// TrainCheckBatch refuses a micro-batch the loss cannot take (a label
	// outside the vocabulary), naming it, before anything runs.
	TrainCheckBatch(batch map[string]*ir.Tensor) error
}

// NewTrainer prepares to train src with cfg on device dev of the backend
// (TrainOnDevice; default 0), as Model.NewTrainer does for an ONNX model:
// cfg.Loss names the loss only (src builds it), and src applies
// cfg.Freeze (it says what is trained). A mesh (Config.Mesh data=D) trains data-parallel
// (Strategy dp) or with the trained tensors and their optimizer state
// split over the data axis (fsdp); the constants are copied to every
// device of the mesh (the Trainer owns the copies); tp is not done yet.
func (b *Backend) NewTrainer(ctx context.Context, src Trainable, cfg train.Config, opts ...TrainerOption) (*Trainer, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Strategy == "tp" {
		return nil, &errs.UnsupportedError{What: "feature", Name: "--strategy tp for " + src.TrainName(),
			Detail: "not yet: train data-parallel (dp) or fsdp"}
	}
	var o trainerOptions
	for _, opt := range opts {
		opt(&o)
	}
	dev := 0
	if o.device != nil {
		dev = *o.device
	}
	tm, err := trainerMesh(b, cfg)
	if err != nil {
		return nil, err
	}
	if tm != nil {
		dev = 0
	}
	if dev < 0 || dev >= len(b.devices) {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Backend: b.Name(), Op: "new trainer",
			Err: fmt.Errorf("device %d out of range: the backend has %d device(s)", dev, len(b.devices))}
	}
	params := src.TrainParams()
	if len(params) == 0 {
		return nil, &errs.InputError{Name: src.TrainName(), Problem: "value", Expected: "at least one trained tensor", Got: "none"}
	}
	t := &Trainer{src: src, b: b, cfg: cfg, dev: dev, params: params, slots: train.StateSlots(cfg.Optimizer),
		execs: map[string]*trainExec{}, modelDigest: src.TrainDigest(), consts: src.TrainConstants(), mesh: tm}
	t.frozen = len(t.consts)
	for _, c := range t.consts {
		t.frozenElems += int64(c.Shape().Size())
	}
	if fz, ok := src.(interface{ TrainFrozen() (int, int64) }); ok { // the model's own count
		t.frozen, t.frozenElems = fz.TrainFrozen()
	}
	if err := t.place(ctx); err != nil {
		t.release()
		return nil, err
	}
	if tm != nil {
		if err := t.replicate(); err != nil {
			t.release()
			return nil, err
		}
		if err := t.replicateConstants(ctx); err != nil {
			t.release()
			return nil, err
		}
	}
	return t, nil
}

// replicateConstants copies a Trainable's constants (on device 0) to the
// other devices of the mesh.
func (t *Trainer) replicateConstants(ctx context.Context) error {
	tm := t.mesh
	for d := 1; d < tm.devices(); d++ {
		var on []*ir.Tensor
		for _, c := range t.consts {
			if err := ctx.Err(); err != nil {
				freeAll(on)
				return err
			}
			h, err := hostCopy(c)
			if err == nil {
				var x *ir.Tensor
				if x, err = ir.ToDevice(h, t.b.drv.Engine(), d); err == nil {
					on = append(on, x)
				}
			}
			if err != nil {
				freeAll(on)
				return &errs.Error{Kind: errs.Internal, Backend: t.b.Name(), Op: "replicate constants", Err: err}
			}
		}
		tm.consts = append(tm.consts, on)
	}
	return nil
}

// sourceMeshExec is meshExec for a Trainable.
func (t *Trainer) sourceMeshExec(ctx context.Context, mb map[string]*ir.Tensor, k int) (*meshExec, error) {
	key := fmt.Sprintf("k=%d", k)
	ex := &trainExec{}
	for _, name := range t.src.TrainInputs() {
		s := mb[name].Shape()
		ex.params = append(ex.params, onnx.Param{Name: name, Shape: s})
		key += " " + name + "=" + s.String()
	}
	if e, ok := t.mesh.execs[key]; ok {
		return e, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	e := &meshExec{trainExec: ex}
	if err := t.compileMesh(e, k); err != nil {
		return nil, err
	}
	t.mesh.execs[key] = e
	return e, nil
}

// name is the trained model's name in program names and errors.
func (t *Trainer) name() string {
	if t.src != nil {
		return t.src.TrainName()
	}
	return t.m.path
}

// inputNames are the batch's tensors: the model's inputs and, for the
// cross_entropy and mse losses of an ONNX model, the labels or targets.
func (t *Trainer) inputNames() ([]string, error) {
	if t.src != nil {
		return t.src.TrainInputs(), nil
	}
	var names []string
	for _, s := range t.m.m.Inputs() {
		names = append(names, s.Name)
	}
	if l := t.cfg.Loss; l.Kind != train.LossOutput {
		for _, n := range names {
			if n == l.Target {
				return nil, &errs.InputError{Name: l.Target, Problem: "name", Expected: "labels or targets that are not a model input", Got: "a model input"}
			}
		}
		names = append(names, l.Target)
	}
	return names, nil
}

// sourceExec returns the compiled program of a Trainable for this
// micro-batch's shapes, compiling it the first time.
func (t *Trainer) sourceExec(ctx context.Context, mb map[string]*ir.Tensor, k int, eval bool) (*trainExec, error) {
	ex := &trainExec{}
	key := fmt.Sprintf("eval=%v k=%d", eval, k)
	for _, name := range t.src.TrainInputs() {
		s := mb[name].Shape()
		ex.params = append(ex.params, onnx.Param{Name: name, Shape: s})
		key += " " + name + "=" + s.String()
	}
	if e, ok := t.execs[key]; ok {
		return e, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var err error
	if ex.exe, err = t.compile(ex, k, eval); err != nil {
		return nil, err
	}
	t.execs[key] = ex
	return ex, nil
}

// sourceLoss builds a Trainable's loss for buildProgram: trained are the
// weight nodes, constants the frozen ones.
func (t *Trainer) sourceForward(constants []*ir.Node) func(g *ir.Graph, trained []*ir.Node, batch map[string]*ir.Node) (*ir.Node, error) {
	return func(g *ir.Graph, trained []*ir.Node, batch map[string]*ir.Node) (*ir.Node, error) {
		return t.src.TrainLoss(g, trained, constants, batch, true)
	}
}

// sourceArgs are a Trainable's micro-batch arguments, checked against the
// compiled shapes.
func (t *Trainer) sourceArgs(ex *trainExec, mb map[string]*ir.Tensor) ([]*ir.Tensor, error) {
	if err := t.src.TrainCheckBatch(mb); err != nil {
		return nil, err
	}
	out := make([]*ir.Tensor, 0, len(ex.params))
	for _, p := range ex.params {
		v := mb[p.Name]
		if !v.Shape().Equal(p.Shape) {
			return nil, &errs.InputError{Name: p.Name, Problem: "shape", Expected: p.Shape.String(), Got: v.Shape().String()}
		}
		out = append(out, v)
	}
	return out, nil
}
