package tensorbridge

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
	"github.com/tensorbridge/tensorbridge/shard"
	"github.com/tensorbridge/tensorbridge/train"
)

// Training.
//
// A Trainer fine-tunes a loaded Model: every floating-point initializer not
// matched by Config.Freeze is trained (the others stay constants folded
// into the program). One training step is one compiled program per input
// shape: the forward pass, the loss, the gradients (GoMLX's reverse-mode
// autodiff), optional global-norm clipping and the optimizer update
// (train.BuildStep), with the scheduled learning rate and the bias
// corrections passed as a small parameter so that the program compiles
// once. The weights and the optimizer state stay on the device between
// steps, as buffers the Trainer owns; each step's results replace them and
// the old ones are freed.
//
// The step goes through the path Model.Run takes: the importer's
// specialisation (onnx.Model.SpecializeStrings, Plan.Build), the precision
// options, the backend's compile (compileSync, so the compile cache
// applies) and a memory fit check (weights, gradients and optimizer state
// against the device's budget).
//
// Precision bfloat16 specialises with Compute BFloat16 and Mixed: the
// master weights and the optimizer state are float32 graph parameters,
// contractions take their operands rounded to bfloat16 and accumulate in
// float32, and the update runs in float32.
//
// Gradient accumulation: with Config.GradAccum K, the batch given to Step
// holds K micro-batches back to back (K*B samples on the first axis); the
// program builds the forward pass once per micro-batch and averages the
// losses, so the gradient is the mean of the micro-batches' gradients.

// TrainerOption configures NewTrainer.
type TrainerOption func(*trainerOptions)

type trainerOptions struct {
	device *int
}

// TrainOnDevice trains on device n of the backend (an index into
// Backend.Devices) instead of the model's device.
func TrainOnDevice(n int) TrainerOption { return func(o *trainerOptions) { o.device = &n } }

// Trainer trains a Model's weights. Its methods are safe for concurrent
// use; steps run one at a time.
type Trainer struct {
	m           *Model       // the ONNX model trained, or nil with src
	src         Trainable    // the model trained when it is not an ONNX Model
	consts      []*ir.Tensor // a Trainable's constants, device 0's (ConstantReleaser may have freed split ones)
	constShapes []ir.Shape   // their shapes, kept when they are freed
	b           *Backend
	cfg         train.Config
	dev         int
	spec        onnx.SpecializeOptions
	params      []onnx.Param // trainable weights, as the graph takes them
	frozen      int          // floating-point initializers not trained
	frozenElems int64
	slots       []string // optimizer state per weight (train.StateSlots)
	modelDigest string

	mu      sync.Mutex
	weights []*ir.Tensor   // on the device, one per params; nil once closed
	state   [][]*ir.Tensor // per slot, per weight
	updates int            // optimizer updates done
	execs   map[string]*trainExec
	// mesh: data-parallel training (trainer_mesh.go); nil on one device.
	mesh *trainMesh
	// lost is the error of a step that failed after its run consumed the
	// weights and state donated to it; only Restore makes the Trainer
	// usable again.
	lost error
}

// trainExec is a compiled training step or evaluation for one input shape.
type trainExec struct {
	exe     *Executable
	plan    *onnx.Plan
	params  []onnx.Param // the plan's inputs, per micro-batch
	target  *onnx.Param  // labels or targets, nil for a loss output
	classes int          // cross_entropy: the class count
}

// StepResult is what one training step did.
type StepResult struct {
	// Step is the optimizer update this was, from 1.
	Step int
	// Loss is the mean loss over the step's samples, before the update.
	Loss float64
	// GradNorm is the global 2-norm of the gradients, before clipping.
	GradNorm float64
	// LR is the learning rate the update used (after the schedule).
	LR float64
	// Duration is the whole step; Outside the part spent outside the
	// compiled program (checking and preparing the batch, transfers,
	// reading the loss back).
	Duration, Outside time.Duration
	// Skipped is set when the loss or the gradient norm was NaN or
	// infinite: the update was not applied, Step is the update it would
	// have been, and Trainer.Step returns a *train.NonFiniteError too.
	Skipped bool
}

// TrainStats counts a Trainer's weights.
type TrainStats struct {
	Trained, Frozen                 int   // tensors
	TrainedElements, FrozenElements int64 // parameters
	// Whole: with --strategy tp, the tensors the model axis divides none
	// of the dimensions of, kept whole on every device, each with why.
	Whole []string
}

// NewTrainer prepares to train m with cfg: it selects the trainable
// weights, checks that weights, gradients and optimizer state fit the
// device, and places the weights and the (zero) optimizer state there.
// Nothing is compiled until the first Step or Eval.
func (m *Model) NewTrainer(ctx context.Context, cfg train.Config, opts ...TrainerOption) (*Trainer, error) {
	if err := m.b.check(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var o trainerOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkTrainSupported(m, cfg); err != nil {
		return nil, err
	}
	dev := m.device
	if o.device != nil {
		dev = *o.device
	}
	tm, err := trainerMesh(m.b, cfg)
	if err != nil {
		return nil, err
	}
	if tm != nil {
		dev = 0 // the mesh is devices 0..D-1; device 0 holds Trainer.weights
	}
	if dev < 0 || dev >= len(m.b.devices) {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Backend: m.b.Name(), Op: "new trainer",
			Err: fmt.Errorf("device %d out of range: the backend has %d device(s)", dev, len(m.b.devices))}
	}
	spec := onnx.SpecializeOptions{Compute: ir.Float32, WeightsAsParams: true}
	if cfg.Precision == "bfloat16" {
		spec.Compute, spec.Mixed = ir.BFloat16, true
	}
	names, frozen, frozenElems, err := trainableNames(m.m, cfg.Freeze)
	if err != nil {
		return nil, err
	}
	spec.Weights = names
	params, err := m.m.WeightParams(spec)
	if err != nil {
		var ie *errs.InputError
		if errors.As(err, &ie) {
			return nil, fmt.Errorf("train: weight %q cannot be trained: the importer needs its value when it builds the graph; freeze it (--freeze): %w", ie.Name, err)
		}
		return nil, err
	}
	if len(params) == 0 {
		return nil, &errs.InputError{Name: "--freeze", Problem: "value", Expected: "at least one trainable floating-point initializer",
			Got: fmt.Sprintf("none left (freeze %q; %d frozen)", cfg.Freeze, frozen)}
	}
	t := &Trainer{m: m, b: m.b, cfg: cfg, dev: dev, spec: spec, params: params, frozen: frozen + len(names) - len(params),
		frozenElems: frozenElems, slots: train.StateSlots(cfg.Optimizer), execs: map[string]*trainExec{}, mesh: tm}
	if d, ok := m.m.SourceDigest(); ok {
		t.modelDigest = hex.EncodeToString(d[:])
	} else {
		t.modelDigest = "unread:" + m.path
	}
	if err := t.checkFits(ctx); err != nil {
		return nil, err
	}
	if err := t.place(ctx); err != nil {
		t.release()
		return nil, err
	}
	if err := t.checkGradientsEarly(); err != nil {
		t.release()
		return nil, err
	}
	if tm != nil {
		if err := t.replicate(); err != nil {
			t.release()
			return nil, err
		}
	}
	return t, nil
}

// checkTrainSupported refuses what the Trainer does not do (yet), by name.
func checkTrainSupported(m *Model, cfg train.Config) error {
	if err := m.hot.runErr; err != nil {
		return err
	}
	if m.sharded != nil {
		return &errs.UnsupportedError{What: "feature", Name: "training a model loaded on a mesh",
			Detail: "load the model on one device; Config.Mesh says how training spreads"}
	}
	if cfg.Strategy == "tp" && cfg.Mesh == "" {
		return &errs.InputError{Name: "--strategy", Problem: "value", Expected: "tp with --mesh data=D,model=M, M > 1", Got: "no --mesh"}
	}
	if cfg.Strategy == "fsdp" && (cfg.Mesh == "" || strings.HasPrefix(cfg.Mesh, "data=1,") || cfg.Mesh == "data=1") {
		return &errs.InputError{Name: "--strategy", Problem: "value", Expected: "fsdp with --mesh data=D, D > 1", Got: "no data axis to shard over (--mesh " + cfg.Mesh + ")"}
	}
	return nil
}

// trainerMesh parses Config.Mesh: nil for one device.
func trainerMesh(b *Backend, cfg train.Config) (*trainMesh, error) {
	if cfg.Mesh == "" {
		return nil, nil
	}
	mesh, err := shard.ParseMesh(cfg.Mesh)
	if err != nil {
		return nil, &errs.InputError{Name: "--mesh", Problem: "value", Expected: "data=D[,model=M]", Got: err.Error()}
	}
	if mesh.Devices() <= 1 {
		return nil, nil
	}
	return newTrainMesh(b, mesh, cfg.Batch, cfg.Strategy)
}

// trainableNames is train.TrainableNames: the Trainer's and plan
// --train's one rule for what is trained.
func trainableNames(m *onnx.Model, freeze string) ([]string, int, int64, error) {
	return train.TrainableNames(m, freeze)
}

// checkFits compares weights, gradients and optimizer state (each the
// size of the trainable weights) plus the frozen weights against the
// device's budget. A device without memory figures is not checked.
func (t *Trainer) checkFits(ctx context.Context) error {
	var trainable uint64
	for _, p := range t.params {
		trainable += uint64(p.Shape.Memory())
	}
	need := trainable*uint64(2+len(t.slots)) + uint64(t.m.m.Parameters().Bytes) - trainable
	bud, err := t.b.BudgetOf(ctx, t.dev)
	if err != nil {
		return nil
	}
	if need > bud.Available {
		return &errs.OutOfMemoryError{Device: bud.Device, Needed: need, Available: bud.Available,
			Detail: fmt.Sprintf("training %s: weights, gradients and %d optimizer state tensors per weight (%s trainable)",
				t.m.path, len(t.slots), errs.Bytes(trainable))}
	}
	return nil
}

// place puts the initial weights and zero optimizer state on the device.
func (t *Trainer) place(ctx context.Context) error {
	eng := t.b.drv.Engine()
	t.state = make([][]*ir.Tensor, len(t.slots))
	for _, p := range t.params {
		if err := ctx.Err(); err != nil {
			return err
		}
		var host *ir.Tensor
		var err error
		if t.src != nil {
			host, err = t.src.TrainInitial(ctx, len(t.weights))
		} else {
			host, err = t.m.m.WeightValue(p.Name, t.spec)
		}
		if err != nil {
			return err
		}
		d, err := ir.ToDevice(host, eng, t.dev)
		if err != nil {
			return t.deviceErr("place weights", p, err)
		}
		t.weights = append(t.weights, d)
		for s := range t.slots {
			z, err := ir.NewHostTensor(p.Shape.DType, p.Shape.Dimensions...)
			if err == nil {
				z, err = ir.ToDevice(z, eng, t.dev)
			}
			if err != nil {
				return t.deviceErr("place optimizer state", p, err)
			}
			t.state[s] = append(t.state[s], z)
		}
	}
	return nil
}

func (t *Trainer) deviceErr(op string, p onnx.Param, err error) error {
	return &errs.Error{Kind: errs.Internal, Backend: t.b.Name(), Op: op, Err: fmt.Errorf("weight %q (%s): %w", p.Name, p.Shape, err)}
}

// checkGradients refuses, naming the ONNX op and node, a plan whose loss
// reverse-mode autodiff cannot differentiate with respect to the trainable
// weights (onnx.Plan.CheckGradients), before the step is built.
func (t *Trainer) checkGradients(plan *onnx.Plan) error {
	if err := plan.CheckEngine(t.b.drv.Engine()); err != nil {
		return err
	}
	names := make([]string, len(t.params))
	for i, p := range t.params {
		names[i] = p.Name
	}
	return plan.CheckGradients(t.b.drv.Engine(), names)
}

// checkGradientsEarly runs checkGradients when the trainer is created, for
// models whose input shapes the batch size settles (every symbolic
// dimension leads its input); others are checked when their first step
// compiles.
func (t *Trainer) checkGradientsEarly() error {
	shapes := map[string][]int{}
	for _, in := range t.m.m.Inputs() {
		if !in.RankKnown {
			return nil
		}
		dims := make([]int, len(in.Dims))
		for i, d := range in.Dims {
			switch {
			case d.Param == "" && d.Value >= 0:
				dims[i] = d.Value
			case i == 0:
				dims[i] = t.cfg.Batch
			default:
				return nil
			}
		}
		shapes[in.Name] = dims
	}
	if len(t.m.m.ValueInputs()) > 0 {
		return nil
	}
	plan, err := t.m.m.SpecializeStrings(shapes, nil, nil, t.spec)
	if err != nil {
		return err
	}
	return t.checkGradients(plan)
}

// Stats counts the trained and frozen weights.
func (t *Trainer) Stats() TrainStats {
	s := TrainStats{Trained: len(t.params), Frozen: t.frozen, FrozenElements: t.frozenElems}
	if t.mesh != nil {
		s.Whole = t.mesh.whole
	}
	for _, p := range t.params {
		s.TrainedElements += int64(p.Shape.Size())
	}
	return s
}

// BytesPerDevice is the bytes of trained weights and optimizer state the
// first device holds: all of them on one device or with data parallelism
// (every device holds a replica), about 1/D of them with fsdp over D devices,
// and with tp the model axis' share of each weight shard.Weight splits
// (1/M of it) plus the weights it replicates.
func (t *Trainer) BytesPerDevice() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var n int64
	for _, x := range t.deviceZero() {
		n += int64(x.Shape().Memory())
	}
	return n
}

// Config returns the training configuration.
func (t *Trainer) Config() train.Config { return t.cfg }

// ModelDigest identifies the model's file (what checkpoints record).
func (t *Trainer) ModelDigest() string { return t.modelDigest }

// Updates returns how many optimizer updates were done (restored ones
// included).
func (t *Trainer) Updates() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.updates
}

// Step runs one training step on batch: the model inputs by name and, for
// the cross_entropy and mse losses, the labels or targets under
// Config.Loss.Target. With GradAccum K the batch holds K micro-batches
// (K*B samples on the first axis of every tensor). Bad data (a missing or
// unknown name, a dtype or shape the model does not take, labels outside
// the classes) is an error wrapping ErrInvalidInput, found before anything
// runs. A step whose loss or gradient norm is NaN or infinite is not
// applied: the result has Skipped set, the error is a *train.NonFiniteError
// (errors.Is train.ErrNonFinite), and the weights, optimizer state and
// Updates stay as they were, so the Trainer can go on with the next batch.
func (t *Trainer) Step(ctx context.Context, batch map[string]*ir.Tensor) (StepResult, error) {
	start := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.usable(ctx); err != nil {
		return StepResult{}, err
	}
	k := max(1, t.cfg.GradAccum)
	micro, err := t.split(batch, k)
	if err != nil {
		return StepResult{}, err
	}
	var ex *trainExec
	var mex *meshExec
	if t.mesh != nil {
		mex, err = t.meshExec(ctx, micro[0], k)
		if mex != nil {
			ex = mex.trainExec
		}
	} else {
		ex, err = t.exec(ctx, micro[0], k, false)
	}
	if err != nil {
		return StepResult{}, err
	}
	lr := t.cfg.Optimizer.LR * t.cfg.Schedule.Factor(t.updates)
	hyper, err := ir.TensorFromFlat(train.Hyper(t.cfg.Optimizer, lr, t.updates), train.NumHyper)
	if err != nil {
		return StepResult{}, err
	}
	args := append([]*ir.Tensor(nil), t.weights...)
	for _, s := range t.state {
		args = append(args, s...)
	}
	args = append(args, t.consts...)
	for _, mb := range micro {
		a, err := t.args(ex, mb)
		if err != nil {
			return StepResult{}, err
		}
		args = append(args, a...)
	}
	args = append(args, hyper)
	if mex != nil {
		return t.finishMeshStep(mex, args, start, lr)
	}
	runStart := time.Now()
	outs, err := ex.exe.RunOnDevice(ctx, t.dev, args...)
	ran := time.Since(runStart)
	if err != nil {
		if len(t.weights) > 0 && t.weights[0].CheckValid() != nil { // donated to the failed run
			t.lost = err
		}
		return StepResult{}, err
	}
	// The old weights and state were donated to the run, which wrote their
	// updates (or, for a non-finite step, their old values) into the same
	// device memory.
	n := len(t.params)
	t.weights = outs[:n]
	for s := range t.state {
		t.state[s] = outs[n*(1+s) : n*(2+s)]
	}
	return t.readStep(lr, outs[len(outs)-2], outs[len(outs)-1], start, ran)
}

// readStep reads (and frees) a step's loss and gradient norm and counts
// the update, unless either is NaN or infinite: the program then kept the
// weights and optimizer state as they were (train.StepSpec.GuardNonFinite),
// so the count stays and the error is a *train.NonFiniteError.
func (t *Trainer) readStep(lr float64, loss, norm *ir.Tensor, start time.Time, ran time.Duration) (StepResult, error) {
	res := StepResult{Step: t.updates + 1, LR: lr}
	var err error
	if res.Loss, err = hostScalar(loss); err == nil {
		res.GradNorm, err = hostScalar(norm)
	} else {
		_ = norm.FinalizeAll()
	}
	res.Duration = time.Since(start)
	res.Outside = res.Duration - ran
	if err != nil {
		t.updates++ // the program ran; whether it applied the update is unknown
		return res, &errs.Error{Kind: errs.Internal, Backend: t.b.Name(), Op: "train step", Err: err}
	}
	if !train.IsFinite(res.Loss) || !train.IsFinite(res.GradNorm) {
		res.Skipped = true
		return res, &train.NonFiniteError{Step: res.Step, Loss: res.Loss, GradNorm: res.GradNorm}
	}
	t.updates++
	return res, nil
}

// finishMeshStep runs a data-parallel step and reads its results.
func (t *Trainer) finishMeshStep(e *meshExec, args []*ir.Tensor, start time.Time, lr float64) (StepResult, error) {
	loss, norm, ran, err := t.stepMesh(e, args)
	if err != nil {
		return StepResult{}, err
	}
	return t.readStep(lr, loss, norm, start, ran)
}

// Eval returns the mean loss on batch with the current weights (no
// update). The batch is one micro-batch of any size.
func (t *Trainer) Eval(ctx context.Context, batch map[string]*ir.Tensor) (float64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.usable(ctx); err != nil {
		return 0, err
	}
	micro, err := t.split(batch, 1)
	if err != nil {
		return 0, err
	}
	if t.mesh != nil && t.src != nil && len(t.mesh.ownConstants()) > 0 {
		return t.evalMesh(ctx, micro[0])
	}
	ex, err := t.exec(ctx, micro[0], 1, true)
	if err != nil {
		return 0, err
	}
	args, err := t.args(ex, micro[0])
	if err != nil {
		return 0, err
	}
	ws, done, err := t.evalWeights()
	if err != nil {
		return 0, err
	}
	defer done()
	all := append(append(append([]*ir.Tensor(nil), ws...), t.consts...), args...)
	outs, err := ex.exe.RunOnDevice(ctx, t.dev, all...)
	if err != nil {
		return 0, err
	}
	l, err := hostScalar(outs[0])
	if err != nil {
		return 0, &errs.Error{Kind: errs.Internal, Backend: t.b.Name(), Op: "eval", Err: err}
	}
	return l, nil
}

func (t *Trainer) usable(ctx context.Context) error {
	if err := t.b.check(); err != nil {
		return err
	}
	if t.weights == nil {
		return &errs.Error{Kind: errs.FailedPrecondition, Backend: t.b.Name(), Op: "train", Err: ErrClosed}
	}
	if t.lost != nil {
		return &errs.Error{Kind: errs.FailedPrecondition, Backend: t.b.Name(), Op: "train",
			Err: fmt.Errorf("a failed step consumed the weights and optimizer state donated to it (%v); Restore a checkpoint: %w", t.lost, ErrClosed)}
	}
	return ctx.Err()
}
