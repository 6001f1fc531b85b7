package tensorbridge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gomlx/gomlx/pkg/core/distributed"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
	"github.com/tensorbridge/tensorbridge/shard"
)

// Training over a mesh (Config.Mesh "data=D[,model=M]").
//
// The step program is the one-device program (Trainer.buildProgram) built
// as one SPMD program over the D x M devices with XLA's partitioner
// (Shardy; built by Backend.CompileSharded, as tensor-parallel generation
// in package llm is, and run by Executable.RunSharded): the batch inputs are split
// over the data axis on their first dimension, the hyper-parameters
// replicated, and each weight with its optimizer state stored as the
// strategy says (planStorage): replicated (dp), split over the data axis
// (fsdp), or split over the model axis as shard.Weight splits it for
// inference (tp; a Trainable's own plans where it has them, its constants
// split likewise, TrainSplitter). The program's semantics are the global batch's and the
// whole weights', so the loss is the mean over all data shards and the
// partitioner inserts the collectives (the gradients' all-reduce, tp's
// partial-sum reductions, fsdp's gathers and reduce-scatters); each device
// then updates the part of the weights and state it holds. Device 0's
// parts are Trainer.weights and Trainer.state, the other devices'
// trainMesh.replicas, kept on the devices between steps. Devices are
// numbered in mesh order: device d is data index d/M, model index d%M.

// trainMesh is a mesh trainer's state.
type trainMesh struct {
	mesh shard.Mesh
	dm   *distributed.DeviceMesh
	// replicas[d-1] are device d's weights then optimizer state (argument
	// order: weights, then per slot per weight), d = 1..N-1 for the mesh's
	// N devices.
	replicas [][]*ir.Tensor
	execs    map[string]*meshExec
	// consts[d-1] are device d's copies (or tp parts) of a Trainable's
	// constants; constZero[i] is device 0's part of constant i where it
	// is split (tp) or its copy where the Trainable holds it on the host,
	// nil where device 0 reads the Trainable's own tensor.
	consts    [][]*ir.Tensor
	constZero []*ir.Tensor
	// constSplits (per constant) is how a Trainable's constants lie over
	// the mesh: replicated, or with tp as TrainSplitter says.
	constSplits []shard.Plan
	// whole: a TrainSplitter's notes on the tensors tp keeps whole.
	whole []string
	// strategy is "dp" (also ""), "fsdp" or "tp"; splits (per stored
	// argument) is how each weight and its state lie over the mesh.
	strategy string
	splits   []shard.Plan
}

// devices is the number of devices of the mesh.
func (tm *trainMesh) devices() int { return tm.mesh.Devices() }

// constSplit says whether constant i is split over the mesh.
func (tm *trainMesh) constSplit(i int) bool {
	return i < len(tm.constSplits) && tm.constSplits[i].Split()
}

// ownConstants returns the indices of the constants device 0 reads from
// the Trainer's own tensors (constZero): those tp splits, and those the
// Trainable holds on the host.
func (tm *trainMesh) ownConstants() []int {
	var idx []int
	for i, c := range tm.constZero {
		if c != nil {
			idx = append(idx, i)
		}
	}
	return idx
}

// sharded says whether some stored argument is split (fsdp, tp).
func (tm *trainMesh) sharded() bool {
	for _, p := range tm.splits {
		if p.Split() {
			return true
		}
	}
	return false
}

// meshExec is a compiled data-parallel step for one input shape.
type meshExec struct {
	*trainExec
	prog   *Executable  // from CompileSharded (exec_spmd.go)
	splits []shard.Plan // per argument
}

// newTrainMesh checks the mesh against the strategy, the backend and the
// batch: a model axis is tensor parallelism (--strategy tp), which needs
// one; dp and fsdp take a data axis only.
func newTrainMesh(b *Backend, mesh shard.Mesh, batch int, strategy string) (*trainMesh, error) {
	switch {
	case strategy == "tp" && mesh.Model <= 1:
		return nil, &errs.InputError{Name: "--strategy", Problem: "value", Expected: "tp with --mesh data=D,model=M, M > 1",
			Got: "no model axis to split the weights over (--mesh " + mesh.String() + ")"}
	case strategy != "tp" && mesh.Model > 1:
		return nil, &errs.InputError{Name: "--mesh", Problem: "value", Expected: "a model axis only with --strategy tp",
			Got: fmt.Sprintf("--mesh %s with --strategy %q", mesh, strategy)}
	}
	if n := mesh.Devices(); n > len(b.devices) {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Backend: b.Name(), Op: "new trainer",
			Err: fmt.Errorf("mesh %s needs %d devices, the backend has %d", mesh, n, len(b.devices))}
	}
	if batch%mesh.Data != 0 {
		return nil, &errs.InputError{Name: "batch", Problem: "value",
			Expected: fmt.Sprintf("a multiple of the data axis (%d)", mesh.Data), Got: fmt.Sprint(batch)}
	}
	dm, err := distributed.NewDeviceMesh([]int{mesh.Data, mesh.Model}, []string{shard.Data, shard.Model})
	if err != nil {
		return nil, err
	}
	return &trainMesh{mesh: mesh, dm: dm, execs: map[string]*meshExec{}, strategy: strategy}, nil
}

// planStorage decides how each stored argument (weights, then optimizer
// state per slot) lies over the mesh: replicated (dp); with fsdp split
// over the data axis along its first dimension the axis divides
// (replicated when none does); with tp split over the model axis as
// shard.Weight splits the weight for inference (Megatron's pattern by
// Hugging Face names, else the last dimension the axis divides; 1-D
// tensors replicated), or as a Trainable's TrainSplits says, which also
// places its constants (else replicated). A weight's optimizer state lies
// as the weight.
func (t *Trainer) planStorage() error {
	tm := t.mesh
	tm.splits, tm.constSplits = nil, make([]shard.Plan, len(t.consts))
	own, err := t.sourceSplits()
	if err != nil {
		return err
	}
	for range 1 + len(t.slots) {
		for i, p := range t.params {
			pl := make(shard.Plan, p.Shape.Rank())
			switch tm.strategy {
			case "fsdp":
				for a, d := range p.Shape.Dimensions {
					if d%tm.mesh.Data == 0 {
						pl[a] = shard.Data
						break
					}
				}
			case "tp":
				if own != nil {
					pl = own[i]
				} else {
					pl, _ = shard.Weight(p.Name, p.Shape.Dimensions, tm.mesh.Model, shard.Options{})
				}
			}
			tm.splits = append(tm.splits, pl)
		}
	}
	return nil
}

// sourceSplits reads a Trainable's tp plans (TrainSplitter) into
// constSplits and returns its trained tensors' (nil when it has none or
// the strategy is not tp), checking each plan against its tensor's rank.
func (t *Trainer) sourceSplits() ([]shard.Plan, error) {
	tm := t.mesh
	sp, ok := t.src.(TrainSplitter)
	if tm.strategy != "tp" || !ok {
		return nil, nil
	}
	trained, consts, notes := sp.TrainSplits(tm.mesh.Model)
	tm.whole = notes
	bad := len(trained) != len(t.params) || len(consts) != len(t.consts)
	for i := 0; !bad && i < len(trained); i++ {
		bad = len(trained[i]) != t.params[i].Shape.Rank()
	}
	for i := 0; !bad && i < len(consts); i++ {
		bad = len(consts[i]) != t.constShapes[i].Rank()
	}
	if bad {
		return nil, &errs.Error{Kind: errs.Internal, Backend: t.b.Name(), Op: "new trainer",
			Err: fmt.Errorf("%s: TrainSplits gave %d trained and %d constant plans for %d and %d tensors, or a plan of another rank",
				t.name(), len(trained), len(consts), len(t.params), len(t.consts))}
	}
	tm.constSplits = consts
	return trained, nil
}

// devices returns the tensors device 0 holds, in argument order.
func (t *Trainer) deviceZero() []*ir.Tensor {
	out := append([]*ir.Tensor(nil), t.weights...)
	for _, s := range t.state {
		out = append(out, s...)
	}
	return out
}

// replicate spreads device 0's weights and state, which hold the whole
// values, over the mesh: copies on every other device (dp), or with fsdp
// one shard per device (device 0's whole tensors replaced by its shards).
// The other devices' old tensors are freed. On error nothing changes.
func (t *Trainer) replicate() error {
	tm := t.mesh
	if tm.splits == nil {
		if err := t.planStorage(); err != nil {
			return err
		}
	}
	src := t.deviceZero()
	zero := make([]*ir.Tensor, len(src))
	next := make([][]*ir.Tensor, tm.devices()-1)
	fail := func(err error) error {
		for _, r := range next {
			freeAll(r)
		}
		for i, z := range zero {
			if z != nil && z != src[i] {
				_ = z.FinalizeAll()
			}
		}
		return &errs.Error{Kind: errs.Internal, Backend: t.b.Name(), Op: "replicate weights", Err: err}
	}
	l := shard.Layout{Mesh: tm.dm}
	for i, x := range src {
		h, err := hostCopy(x)
		if err != nil {
			return fail(err)
		}
		parts := make([]*ir.Tensor, tm.devices())
		for d := range parts {
			parts[d] = h
		}
		if tm.splits[i].Split() {
			spec, err := l.Spec(tm.splits[i])
			if err != nil {
				return fail(err)
			}
			dt, err := distributed.ShardTensor(spec, h)
			if err != nil {
				return fail(err)
			}
			copy(parts, dt.Shards())
		}
		zero[i] = x
		if tm.splits[i].Split() {
			if zero[i], err = ir.ToDevice(parts[0], t.b.drv.Engine(), 0); err != nil {
				return fail(err)
			}
		}
		for d := 1; d < tm.devices(); d++ {
			r, err := ir.ToDevice(parts[d], t.b.drv.Engine(), d)
			if err != nil {
				return fail(err)
			}
			next[d-1] = append(next[d-1], r)
		}
	}
	for _, r := range tm.replicas {
		freeAll(r)
	}
	tm.replicas = next
	var old []*ir.Tensor
	for i := range src {
		if zero[i] != src[i] {
			old = append(old, src[i])
		}
	}
	t.setDeviceZero(zero)
	freeAll(old)
	return nil
}

// setDeviceZero replaces device 0's weights and state (deviceZero order).
func (t *Trainer) setDeviceZero(ts []*ir.Tensor) {
	n := len(t.params)
	t.weights = ts[:n]
	for s := range t.state {
		t.state[s] = ts[n*(1+s) : n*(2+s)]
	}
}

// hostArg returns stored argument i's whole value on the host (with fsdp,
// its shards gathered from the devices).
func (t *Trainer) hostArg(i int) (*ir.Tensor, error) {
	x := t.deviceZero()[i]
	if t.mesh == nil || !t.mesh.splits[i].Split() {
		return hostCopy(x)
	}
	tm := t.mesh
	shards := make([]*ir.Tensor, tm.devices())
	var err error
	if shards[0], err = hostCopy(x); err != nil {
		return nil, err
	}
	for d := 1; d < tm.devices(); d++ {
		if shards[d], err = hostCopy(tm.replicas[d-1][i]); err != nil {
			return nil, err
		}
	}
	l := shard.Layout{Mesh: tm.dm}
	spec, err := l.Spec(tm.splits[i])
	if err != nil {
		return nil, err
	}
	dt, err := distributed.NewTensor(spec, shards)
	if err != nil {
		return nil, err
	}
	return dt.Merge()
}

// name is the strategy's name ("dp" when unset).
func (tm *trainMesh) name() string {
	if tm.strategy == "" {
		return "dp"
	}
	return tm.strategy
}

func (tm *trainMesh) release() {
	if tm == nil {
		return
	}
	for _, r := range tm.replicas {
		freeAll(r)
	}
	tm.replicas = nil
	for _, c := range tm.consts {
		freeAll(c)
	}
	tm.consts = nil
	freeAll(tm.constZero)
	tm.constZero = nil
	for k, e := range tm.execs {
		if e.prog != nil {
			_ = e.prog.Close()
		}
		delete(tm.execs, k)
	}
}

// meshExec returns the compiled data-parallel step for this micro-batch's
// shapes (per-device shapes are the global ones split on the data axis).
func (t *Trainer) meshExec(ctx context.Context, mb map[string]*ir.Tensor, k int) (*meshExec, error) {
	for name, v := range mb {
		if d := v.Shape().Dimensions[0]; d%t.mesh.mesh.Data != 0 {
			return nil, &errs.InputError{Name: name, Problem: "shape",
				Expected: fmt.Sprintf("a batch the data axis (%d devices) divides", t.mesh.mesh.Data), Got: fmt.Sprint(d)}
		}
	}
	if t.src != nil {
		return t.sourceMeshExec(ctx, mb, k)
	}
	inputs := map[string]*ir.Tensor{}
	for _, s := range t.m.m.Inputs() {
		inputs[s.Name] = mb[s.Name]
	}
	shapes, values, err := t.m.checkInputs(inputs)
	if err != nil {
		return nil, err
	}
	var target *onnx.Param
	if l := t.cfg.Loss; l.Target != "" {
		target = &onnx.Param{Name: l.Target, Shape: mb[l.Target].Shape()}
	}
	key := fmt.Sprintf("k=%d %s", k, specialisationKey(shapes, values))
	if target != nil {
		key += " target=" + target.Shape.String()
	}
	if e, ok := t.mesh.execs[key]; ok {
		return e, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	plan, err := t.m.m.SpecializeStrings(shapes, values, nil, t.spec)
	if err != nil {
		return nil, err
	}
	if err := t.checkGradients(plan); err != nil {
		return nil, err
	}
	e := &meshExec{trainExec: &trainExec{plan: plan, params: plan.Params(), target: target}}
	if err := t.compileMesh(e, k); err != nil {
		return nil, err
	}
	t.mesh.execs[key] = e
	return e, nil
}

// compileMesh builds the step as one SPMD program over the mesh
// (Backend.CompileSharded): weights and state stored as planned, batch
// inputs split over the data axis, the hyper-parameters replicated; the
// new weights and state come out stored as the old, loss and norm
// replicated.
func (t *Trainer) compileMesh(e *meshExec, k int) error {
	tm := t.mesh
	name := "train-" + tm.name() + ":" + t.name()
	devs := make([]int, tm.mesh.Devices())
	for i := range devs {
		devs[i] = i
	}
	shapes := t.argShapes(e.trainExec, k, false)
	n := len(t.params) * (1 + len(t.slots))
	c := len(t.consts) // replicated, after the state
	perBatch := len(shapes) - n - c - 1
	e.splits = nil
	for i, s := range shapes {
		pl := make(shard.Plan, s.Rank()) // replicated
		switch {
		case i < n:
			pl = tm.splits[i]
		case i < n+c:
			if tm.constSplit(i - n) {
				pl = tm.constSplits[i-n]
			}
		case i < n+c+perBatch:
			pl = shard.Batch(s.Dimensions, tm.mesh.Data)
		}
		e.splits = append(e.splits, pl)
	}
	outPlans := make([]shard.Plan, n+2) // loss and norm: replicated
	copy(outPlans, tm.splits[:n])
	prog, err := t.b.CompileSharded(context.Background(), name, tm.mesh, devs, func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		return t.buildProgram(g, in, e.trainExec, k, false)
	}, shapes, e.splits, outPlans)
	if err != nil {
		var ce *errs.CompileError
		if errors.As(err, &ce) || errs.KindOf(err) != errs.Unknown {
			return err
		}
		return &errs.CompileError{Backend: t.b.Name(), Program: name, Err: err}
	}
	e.prog = prog
	return nil
}

// stepMesh runs one data-parallel step: args are the one-device program's
// (argShapes order, device 0's weights and state); it splits the batch
// arguments over the devices, runs, and keeps every device's new weights
// and state. It returns the loss and gradient norm tensors (device 0's)
// and the time inside the program.
func (t *Trainer) stepMesh(e *meshExec, args []*ir.Tensor) (loss, norm *ir.Tensor, ran time.Duration, err error) {
	tm := t.mesh
	D := tm.devices()
	n := len(t.params) * (1 + len(t.slots))
	all, temps, err := t.meshArgs(e, args, n)
	defer func() { freeAll(temps) }()
	if err != nil {
		return nil, nil, 0, err
	}
	start := time.Now()
	outs, err := e.prog.RunSharded(context.Background(), all)
	ran = time.Since(start)
	if err != nil {
		return nil, nil, ran, err
	}
	if len(outs[0]) != n+2 {
		for _, o := range outs {
			freeAll(o)
		}
		return nil, nil, ran, &errs.Error{Kind: errs.Internal, Backend: t.b.Name(), Op: "train step",
			Err: fmt.Errorf("%d results per device, want %d", len(outs[0]), n+2)}
	}
	// Device 0's new weights and state replace Trainer's; the others the replicas.
	old := t.deviceZero()
	nw := len(t.params)
	res := outs[0]
	t.weights = res[:nw]
	for s := range t.state {
		t.state[s] = res[nw*(1+s) : nw*(2+s)]
	}
	for d := 1; d < D; d++ {
		old = append(old, tm.replicas[d-1]...)
		tm.replicas[d-1] = outs[d][:n]
		freeAll(outs[d][n:]) // their loss and norm: device 0's are read
	}
	freeAll(old)
	return res[n], res[n+1], ran, nil
}

// meshArgs spreads a one-device program's arguments (argShapes order,
// device 0's tensors) over the mesh: the first n stored ones (weights, then
// the step's optimizer state) and the constants as each device holds
// them, the batch split over the data axis (temps, for the caller to
// free), host values replicated.
func (t *Trainer) meshArgs(e *meshExec, args []*ir.Tensor, n int) (all [][]*ir.Tensor, temps []*ir.Tensor, err error) {
	tm := t.mesh
	D := tm.devices()
	all = make([][]*ir.Tensor, D)
	for d := range all {
		all[d] = make([]*ir.Tensor, len(args))
	}
	l := shard.Layout{Mesh: tm.dm}
	for i, a := range args {
		switch {
		case i < n:
			all[0][i] = a
			for d := 1; d < D; d++ {
				all[d][i] = tm.replicas[d-1][i]
			}
		case i < n+len(t.consts):
			all[0][i] = a
			if z := tm.constZero[i-n]; z != nil {
				all[0][i] = z
			}
			for d := 1; d < D; d++ {
				all[d][i] = tm.consts[d-1][i-n]
			}
		case e.splits[i].Split():
			spec, err := l.Spec(e.splits[i])
			if err != nil {
				return nil, temps, err
			}
			dt, err := distributed.ShardTensor(spec, a)
			if err != nil {
				return nil, temps, &errs.InputError{Name: fmt.Sprintf("#%d", i), Problem: "shape", Expected: "a batch the data axis divides", Got: err.Error()}
			}
			for d, sh := range dt.Shards() {
				temps = append(temps, sh)
				all[d][i] = sh
			}
		default: // replicated host values (the hyper-parameters): RunSharded copies them to each device
			for d := range D {
				all[d][i] = a
			}
		}
	}
	return all, temps, nil
}

// evalMesh is Eval of a Trainable whose constants tp splits: the
// evaluation program built as one SPMD program over the mesh, as the step
// is (compileMesh), reading each device's parts of the weights and
// constants, so that no device holds a split constant whole (the one-device
// evaluation needed device 0's whole copies, which ConstantReleaser frees).
func (t *Trainer) evalMesh(ctx context.Context, mb map[string]*ir.Tensor) (float64, error) {
	e, err := t.meshEvalExec(ctx, mb)
	if err != nil {
		return 0, err
	}
	batch, err := t.sourceArgs(e.trainExec, mb)
	if err != nil {
		return 0, err
	}
	args := append(append(append([]*ir.Tensor(nil), t.weights...), t.consts...), batch...)
	all, temps, err := t.meshArgs(e, args, len(t.params))
	defer func() { freeAll(temps) }()
	if err != nil {
		return 0, err
	}
	outs, err := e.prog.RunSharded(ctx, all)
	if err != nil {
		return 0, err
	}
	defer func() {
		for _, o := range outs {
			freeAll(o)
		}
	}()
	l, err := hostScalar(outs[0][0])
	if err != nil {
		return 0, &errs.Error{Kind: errs.Internal, Backend: t.b.Name(), Op: "eval", Err: err}
	}
	return l, nil
}

// meshEvalExec returns evalMesh's compiled program for this batch's
// shapes: the weights and constants split as they are stored, the batch
// over the data axis, the loss replicated.
func (t *Trainer) meshEvalExec(ctx context.Context, mb map[string]*ir.Tensor) (*meshExec, error) {
	tm := t.mesh
	ex := &trainExec{}
	key := "eval"
	for _, name := range t.src.TrainInputs() {
		v := mb[name]
		if d := v.Shape().Dimensions[0]; d%tm.mesh.Data != 0 {
			return nil, &errs.InputError{Name: name, Problem: "shape",
				Expected: fmt.Sprintf("a batch the data axis (%d devices) divides", tm.mesh.Data), Got: fmt.Sprint(d)}
		}
		ex.params = append(ex.params, onnx.Param{Name: name, Shape: v.Shape()})
		key += " " + name + "=" + v.Shape().String()
	}
	if e, ok := tm.execs[key]; ok {
		return e, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	shapes := t.argShapes(ex, 1, true)
	n, c := len(t.params), len(t.consts)
	e := &meshExec{trainExec: ex}
	for i, s := range shapes {
		pl := make(shard.Plan, s.Rank()) // replicated
		switch {
		case i < n:
			pl = tm.splits[i]
		case i < n+c:
			if tm.constSplit(i - n) {
				pl = tm.constSplits[i-n]
			}
		default:
			pl = shard.Batch(s.Dimensions, tm.mesh.Data)
		}
		e.splits = append(e.splits, pl)
	}
	devs := make([]int, tm.mesh.Devices())
	for i := range devs {
		devs[i] = i
	}
	name := "eval-" + tm.name() + ":" + t.name()
	prog, err := t.b.CompileSharded(ctx, name, tm.mesh, devs, func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		return t.buildProgram(g, in, ex, 1, true)
	}, shapes, e.splits, []shard.Plan{{}})
	if err != nil {
		var ce *errs.CompileError
		if errors.As(err, &ce) || errs.KindOf(err) != errs.Unknown {
			return nil, err
		}
		return nil, &errs.CompileError{Backend: t.b.Name(), Program: name, Err: err}
	}
	e.prog = prog
	tm.execs[key] = e
	return e, nil
}

// evalWeights returns device 0's whole weights for the one-device
// evaluation program, and a function freeing what it placed: with fsdp
// or tp the shards are gathered on the host and placed whole for the call.
func (t *Trainer) evalWeights() ([]*ir.Tensor, func(), error) {
	if t.mesh == nil || !t.mesh.sharded() {
		return t.weights, func() {}, nil
	}
	var placed []*ir.Tensor
	for i := range t.params {
		h, err := t.hostArg(i)
		if err == nil {
			var d *ir.Tensor
			if d, err = ir.ToDevice(h, t.b.drv.Engine(), 0); err == nil {
				placed = append(placed, d)
				continue
			}
		}
		freeAll(placed)
		return nil, nil, &errs.Error{Kind: errs.Internal, Backend: t.b.Name(), Op: "eval", Err: err}
	}
	return placed, func() { freeAll(placed) }, nil
}
