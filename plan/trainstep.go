package plan

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/distributed"
	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
	"github.com/tensorbridge/tensorbridge/shard"
	"github.com/tensorbridge/tensorbridge/train"
)

// Training strategies plan --train compiles.
const (
	// StrategyDP replicates weights, gradients and optimizer state on every
	// device and splits the batch over all of them (XLA all-reduces the
	// gradients).
	StrategyDP = "dp"
	// StrategyTP splits weights, gradients and optimizer state over the
	// model axis by the tensor-parallel rules of package shard (as the
	// inference plan does); every device sees the whole batch.
	StrategyTP = "tp"
	// StrategyFSDP splits weights, gradients and optimizer state over the
	// data axis (ZeRO-3) and the batch too: XLA gathers each weight where
	// it is used and reduce-scatters its gradient.
	StrategyFSDP = "fsdp"
)

// optimizerSlots is how many float32 tensors of each weight's size the
// optimizer keeps (train.StateSlots): 2 for Adam and AdamW, 1 for SGD with
// momentum, none for plain SGD.
func optimizerSlots(o train.Optimizer) int { return len(train.StateSlots(o)) }

// stepLayout is how a training step was laid out over the mesh, with the
// per-device bytes the arithmetic gives for it.
type stepLayout struct {
	Trainable     int                   // tensors trained
	Params        int64                 // parameters trained
	Frozen        int                   // weight parameters not trained (frozen, or not floating point)
	WeightsPerDev int64                 // float32 master weights on one device
	OptimPerDev   int64                 // optimizer state on one device
	BatchPerDev   int64                 // inputs and labels on one device
	WeightsTotal  int64                 // float32 master weights, unsplit
	Notes         []string              // weights that could not be split, and why
	Splits        map[string]shard.Plan // per trained weight
	// Donated maps a parameter's position to the output that updates it
	// (the weights and optimizer state): the step donates their buffers,
	// as a training loop does, so the compiler aliases them.
	Donated map[int]int
}

// fsdpSplit returns the split of a weight over the data axis for FSDP:
// its largest dimension that n divides (the first such on a tie), or
// none (replicated) with the reason.
func fsdpSplit(name string, dims []int, n int) (shard.Plan, string) {
	p := make(shard.Plan, len(dims))
	if n <= 1 {
		return p, ""
	}
	best := -1
	for d, size := range dims {
		if size%n == 0 && (best < 0 || size > dims[best]) {
			best = d
		}
	}
	if best < 0 {
		return p, fmt.Sprintf("%s: no dimension of %v is a multiple of %d; replicated", name, dims, n)
	}
	p[best] = shard.Data
	return p, ""
}

// shardsOf is how many ways a split divides a tensor on mesh.
func shardsOf(p shard.Plan, mesh shard.Mesh) int {
	n := 1
	for _, a := range p {
		switch a {
		case shard.Data:
			n *= max(1, mesh.Data)
		case shard.Model:
			n *= max(1, mesh.Model)
		}
	}
	return n
}

// stepSpec is what buildStep needs besides the graph and the plan.
type stepSpec struct {
	Mesh      shard.Mesh
	Strategy  string // StrategyDP, StrategyTP or StrategyFSDP
	Shard     shard.Options
	Optimizer train.Optimizer
	Loss      train.Loss
	// LabelsDType is the labels' dtype for a cross-entropy loss (Int32 or
	// Int64; Int64 when unset).
	LabelsDType ir.DType
	// Frozen names the plan's weight parameters that are not trained
	// (train.StepSpec.Frozen): the --freeze matches and the non-floating-
	// point initializers, which a model loaded by shape only cannot fold.
	Frozen map[string]bool
}

// buildStep builds one whole training step of plan p (specialised with
// WeightsAsParams) on the fresh graph g with the Trainer's step
// (train.BuildStep) and compiles it for the mesh:
//
//	parameters: the weights (float32 master copies of the trained ones,
//	  the frozen ones as the plan holds them), the optimizer state
//	  (train.StateSlots, per slot one per trained weight), the
//	  hyper-parameter vector (train.NumHyper float32), the model's inputs,
//	  then the labels or targets of the loss;
//	outputs: the loss, the new trained weights, the new optimizer state.
//
// Weights, their optimizer state and the updated values share one split:
// replicated (dp), over the model axis by shard.Weight (tp) or over the
// data axis (fsdp). Inputs and labels are split by batch over the data
// axis. XLA's SPMD partitioner (Shardy) adds the collectives. The trained
// weights and the state are donated to their updates (lower.Program's
// Donated), as a training loop donates them.
func buildStep(g *ir.Graph, p *onnx.Plan, s stepSpec) (l *stepLayout, err error) {
	defer func() {
		if r := recover(); r != nil {
			l, err = nil, fmt.Errorf("plan: building the training step: %v", r)
		}
	}()
	lay := &shard.Layout{}
	if s.Mesh.Devices() > 1 {
		if lay.Mesh, err = distributed.NewDeviceMesh([]int{s.Mesh.Data, s.Mesh.Model}, []string{shard.Data, shard.Model}); err != nil {
			return nil, err
		}
		if err := g.SetAutoSharding(lay.Mesh); err != nil {
			return nil, err
		}
	}
	spec := func(pl shard.Plan) *distributed.ShardingSpec {
		sp, err := lay.Spec(pl)
		if err != nil {
			panic(err)
		}
		return sp
	}
	l = &stepLayout{Splits: map[string]shard.Plan{}, Donated: map[int]int{}}
	nparams := 0 // parameters declared so far: the next one's position
	param := func(name string, sh ir.Shape, sp *distributed.ShardingSpec) *ir.Node {
		nparams++
		return graph.ShardedParameter(g, name, sh, sp)
	}
	slots := train.StateSlots(s.Optimizer)
	type trained struct {
		name   string
		master ir.Shape
		pos    []int // parameter positions of master and state
		spec   *distributed.ShardingSpec
	}
	var ws []*trained
	var weights []*ir.Node
	for _, w := range p.Weights() {
		if s.Frozen[w.Name] {
			l.Frozen++
			weights = append(weights, param(w.Name, w.Shape, spec(make(shard.Plan, w.Shape.Rank()))))
			continue
		}
		pl, note := weightSplit(w.Name, w.Shape.Dimensions, s)
		if note != "" {
			l.Notes = append(l.Notes, note)
		}
		ways := shardsOf(pl, s.Mesh)
		l.Splits[w.Name] = pl
		master := ir.MakeShape(ir.Float32, w.Shape.Dimensions...)
		bytes := int64(master.Memory())
		l.WeightsTotal += bytes
		l.WeightsPerDev += bytes / int64(ways)
		l.OptimPerDev += int64(len(slots)) * bytes / int64(ways)
		l.Trainable++
		l.Params += int64(master.Size())
		t := &trained{name: w.Name, master: master, spec: spec(pl), pos: []int{nparams}}
		weights = append(weights, param(w.Name, master, t.spec))
		ws = append(ws, t)
	}
	if len(ws) == 0 {
		return nil, fmt.Errorf("plan: the model has no floating-point weights to train")
	}
	state := make([][]*ir.Node, len(slots))
	for k, slot := range slots {
		for _, t := range ws {
			t.pos = append(t.pos, nparams)
			state[k] = append(state[k], param(t.name+"."+slot, t.master, t.spec))
		}
	}
	hyper := param("hyper", ir.MakeShape(ir.Float32, train.NumHyper), nil)
	dataN := s.Mesh.Data
	batch := map[string]*ir.Node{}
	for _, in := range p.Params() {
		batch[in.Name] = param(in.Name, in.Shape, spec(shard.Batch(in.Shape.Dimensions, dataN)))
		l.BatchPerDev += perDevice(in.Shape, dataN)
	}
	newTarget := func(kind train.LossKind, dims []int) *ir.Node {
		dt := ir.Float32
		if kind == train.LossCrossEntropy {
			dt = s.LabelsDType
			if dt == ir.InvalidDType {
				dt = ir.Int64
			}
		}
		sh := ir.MakeShape(dt, dims...)
		l.BatchPerDev += perDevice(sh, dataN)
		return graph.ShardedParameter(g, s.Loss.Target, sh, spec(shard.Batch(dims, dataN)))
	}
	out, err := train.BuildStep(g, train.StepSpec{Plan: p, Loss: s.Loss, Optimizer: s.Optimizer, Frozen: s.Frozen},
		train.StepNodes{Weights: weights, State: state, Batches: []map[string]*ir.Node{batch}, Hyper: hyper, NewTarget: newTarget})
	if err != nil {
		return nil, err
	}
	outs := []*ir.Node{out.Loss}
	specs := []*distributed.ShardingSpec{spec(nil)}
	emit := func(pos int, x *ir.Node, sp *distributed.ShardingSpec) {
		l.Donated[pos] = len(outs)
		outs = append(outs, x)
		specs = append(specs, sp)
	}
	for i, t := range ws {
		emit(t.pos[0], out.Weights[i], t.spec)
	}
	for k := range slots {
		for i, t := range ws {
			emit(t.pos[1+k], out.State[k][i], t.spec)
		}
	}
	if lay.Mesh == nil {
		specs = nil
	}
	g.CompileWithSharding(outs, specs)
	return l, nil
}

// weightSplit is a trained weight's split under the step's strategy.
func weightSplit(name string, dims []int, s stepSpec) (shard.Plan, string) {
	switch s.Strategy {
	case StrategyTP:
		return shard.Weight(name, dims, s.Mesh.Model, s.Shard)
	case StrategyFSDP:
		return fsdpSplit(name, dims, s.Mesh.Data)
	}
	return make(shard.Plan, len(dims)), ""
}

// perDevice is the bytes of a tensor split by batch over n devices.
func perDevice(sh ir.Shape, n int) int64 {
	b := int64(sh.Memory())
	if shard.Batch(sh.Dimensions, n).Split() {
		b /= int64(n)
	}
	return b
}
