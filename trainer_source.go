package tensorbridge

// Trainers for models that are not ONNX files: a Trainable says what is
// trained and builds the loss; the Trainer does the rest (the step
// program, optimizer state, checkpoints, non-finite guard) exactly as for
// an ONNX Model, through the same train.BuildStep.

import (
	"context"
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/distributed"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
	"github.com/tensorbridge/tensorbridge/shard"
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
// split over the data axis (fsdp), the constants copied to every device
// of the mesh (the Trainer owns the copies). With tp (data=D,model=M) the
// trained tensors, their state and the constants are split over the
// model axis as src's TrainSplits says (TrainSplitter; else the trained
// tensors as shard.Weight splits them and the constants whole).
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
	if cfg.Strategy == "tp" && tm == nil { // a mesh of one device (or none)
		return nil, &errs.InputError{Name: "--strategy", Problem: "value", Expected: "tp with --mesh data=D,model=M, M > 1",
			Got: fmt.Sprintf("--mesh %q", cfg.Mesh)}
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
		t.constShapes = append(t.constShapes, c.Shape())
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
		if r, ok := src.(ConstantReleaser); ok {
			if idx := tm.ownConstants(); len(idx) > 0 {
				r.ReleaseConstants(idx)
			}
		}
	}
	return t, nil
}

// ConstantReleaser is a Trainable whose constants a mesh Trainer may
// free: once every device holds its own copy or part of a constant (with
// tp, device 0 a new tensor beside the Trainable's whole one; or a copy
// of a constant the Trainable holds on the host), NewTrainer calls
// ReleaseConstants with those constants' indices (TrainConstants order),
// so that no device holds a split constant whole; the step and Eval then
// read only the Trainer's tensors. The Trainable must not read those
// tensors again.
type ConstantReleaser interface {
	ReleaseConstants(idx []int)
}

// TrainSplitter is a Trainable that says how its tensors lie over a
// mesh's model axis for tensor parallelism (--strategy tp): per trained
// tensor (TrainParams order) and per constant (TrainConstants order) the
// split of each dimension (shard.Plan), a dimension model does not divide
// left whole; notes say which were. llm.FineTune implements it with
// Megatron's pattern for the base weights and its adapters.
type TrainSplitter interface {
	TrainSplits(model int) (trained, constants []shard.Plan, notes []string)
}

// replicateConstants places a Trainable's constants (owned by the
// Trainable, on device 0 or in host memory) on every device of the mesh:
// whole copies, or with tp each device's part of the constants planned
// split. Device 0 gets a tensor of its own (constZero) for a split
// constant and for one held on the host.
func (t *Trainer) replicateConstants(ctx context.Context) error {
	tm := t.mesh
	D := tm.devices()
	tm.consts = make([][]*ir.Tensor, D-1)
	tm.constZero = make([]*ir.Tensor, len(t.consts))
	l := shard.Layout{Mesh: tm.dm}
	for i, c := range t.consts {
		if err := ctx.Err(); err != nil {
			return err // release frees what is placed
		}
		parts, err := t.constantParts(l, i, c)
		for d := 0; err == nil && d < D; d++ {
			if d == 0 && !tm.constSplit(i) && c.IsOnDevice(0) {
				continue // the Trainable's own tensor
			}
			var x *ir.Tensor
			if x, err = ir.ToDevice(parts[d], t.b.drv.Engine(), d); err == nil {
				if d == 0 {
					tm.constZero[i] = x
				} else {
					tm.consts[d-1] = append(tm.consts[d-1], x)
				}
			}
		}
		if err != nil {
			return &errs.Error{Kind: errs.Internal, Backend: t.b.Name(), Op: "replicate constants", Err: err}
		}
	}
	return nil
}

// constantParts returns constant i's host value per mesh device: its
// shards where it is planned split, else the whole value for each.
func (t *Trainer) constantParts(l shard.Layout, i int, c *ir.Tensor) ([]*ir.Tensor, error) {
	h, err := hostCopy(c)
	if err != nil {
		return nil, err
	}
	parts := make([]*ir.Tensor, t.mesh.devices())
	if !t.mesh.constSplit(i) {
		for d := range parts {
			parts[d] = h
		}
		return parts, nil
	}
	spec, err := l.Spec(t.mesh.constSplits[i])
	if err != nil {
		return nil, err
	}
	dt, err := distributed.ShardTensor(spec, h)
	if err != nil {
		return nil, err
	}
	copy(parts, dt.Shards())
	return parts, nil
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
