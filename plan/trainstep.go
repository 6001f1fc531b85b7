package plan

import (
	"bytes"
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
// optimizer keeps: torch.optim.AdamW and Adam keep exp_avg and exp_avg_sq,
// SGD with momentum its momentum_buffer, plain SGD nothing.
func optimizerSlots(o train.Optimizer) int {
	switch o.Kind {
	case train.AdamW, train.Adam:
		return 2
	case train.SGD:
		if o.Momentum != 0 {
			return 1
		}
	}
	return 0
}

// stepLayout is how a training step was laid out over the mesh, with the
// per-device bytes the arithmetic gives for it.
type stepLayout struct {
	Trainable     int                   // tensors trained
	Params        int64                 // parameters trained
	Frozen        int                   // weight parameters not trained (not floating point)
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
}

// buildStep builds one whole training step of plan p (specialised with
// WeightsAsParams) on the fresh graph g and compiles it for the mesh:
//
//	parameters: float32 master weights, optimizer state (per torch.optim:
//	  exp_avg and exp_avg_sq for Adam/AdamW, momentum_buffer for SGD with
//	  momentum), the step number t (float32 scalar, from 1), the model's
//	  inputs, then the labels or targets of the loss;
//	body: weights cast to the compute dtype, the forward pass, the loss
//	  (in float32), graph.Gradient of it with respect to the float32 master
//	  weights, the optimizer update;
//	outputs: the loss, the new weights, the new optimizer state.
//
// Weights, their optimizer state and the updated values share one split:
// replicated (dp), over the model axis by shard.Weight (tp) or over the
// data axis (fsdp). Inputs and labels are split by batch over the data
// axis. XLA's SPMD partitioner (Shardy) adds the collectives.
//
// The update mirrors the trainer's (the train package's Optimizer, which
// follows torch.optim exactly); see adamUpdate and sgdUpdate.
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
	slots := optimizerSlots(s.Optimizer)
	nodes := map[string]*ir.Node{}
	type trained struct {
		name   string
		master *ir.Node
		state  []*ir.Node
		pos    []int // parameter positions of master and state
		spec   *distributed.ShardingSpec
	}
	var ws []trained
	for _, w := range p.Weights() {
		if !w.Shape.DType.IsFloat() {
			l.Frozen++
			nodes[w.Name] = param(w.Name, w.Shape, spec(make(shard.Plan, w.Shape.Rank())))
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
		l.OptimPerDev += int64(slots) * bytes / int64(ways)
		l.Trainable++
		l.Params += int64(master.Size())
		t := trained{name: w.Name, spec: spec(pl)}
		t.pos = append(t.pos, nparams)
		t.master = param(w.Name, master, t.spec)
		for k := 0; k < slots; k++ {
			t.pos = append(t.pos, nparams)
			t.state = append(t.state, param(fmt.Sprintf("%s.%s", w.Name, slotNames(s.Optimizer)[k]), master, t.spec))
		}
		nodes[w.Name] = graph.ConvertDType(t.master, w.Shape.DType)
		ws = append(ws, t)
	}
	step := param("step", ir.MakeShape(ir.Float32), nil)
	dataN := s.Mesh.Data
	for _, in := range p.Params() {
		nodes[in.Name] = param(in.Name, in.Shape, spec(shard.Batch(in.Shape.Dimensions, dataN)))
		l.BatchPerDev += perDevice(in.Shape, dataN)
	}
	built, err := p.Build(g, nodes)
	if err != nil {
		return nil, err
	}
	loss, target, err := lossOf(g, built, s)
	if err != nil {
		return nil, err
	}
	if target != nil {
		l.BatchPerDev += perDevice(target.Shape(), dataN)
	}
	masters := make([]*ir.Node, len(ws))
	for i, t := range ws {
		masters[i] = t.master
	}
	if len(masters) == 0 {
		return nil, fmt.Errorf("plan: the model has no floating-point weights to train")
	}
	grads := graph.Gradient(loss, masters...)
	outs := []*ir.Node{loss}
	specs := []*distributed.ShardingSpec{spec(nil)}
	for i, t := range ws {
		nw, ns := update(s.Optimizer, t.master, grads[i], t.state, step)
		for k, x := range append([]*ir.Node{nw}, ns...) {
			l.Donated[t.pos[k]] = len(outs)
			outs = append(outs, x)
			specs = append(specs, t.spec)
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

// slotNames names the optimizer state tensors as torch.optim's state
// dicts do.
func slotNames(o train.Optimizer) []string {
	if o.Kind == train.SGD {
		return []string{"momentum_buffer"}
	}
	return []string{"exp_avg", "exp_avg_sq"}
}

// lossOf builds the scalar float32 loss from the forward pass's outputs.
// It returns the labels or targets parameter it declared, if any.
func lossOf(g *ir.Graph, built map[string]*ir.Node, s stepSpec) (loss, target *ir.Node, err error) {
	out := built[s.Loss.Output]
	if out == nil {
		names := make([]string, 0, len(built))
		for k := range built {
			names = append(names, k)
		}
		return nil, nil, fmt.Errorf("plan: --loss names output %q; the model's outputs are %v", s.Loss.Output, names)
	}
	if !out.DType().IsFloat() {
		return nil, nil, fmt.Errorf("plan: loss output %q is %s, not floating point", s.Loss.Output, out.DType())
	}
	x := graph.ConvertDType(out, ir.Float32)
	switch s.Loss.Kind {
	case train.LossOutput:
		if out.Shape().Size() != 1 {
			return nil, nil, fmt.Errorf("plan: loss output %q has shape %s, not a scalar", s.Loss.Output, out.Shape())
		}
		return graph.Reshape(x), nil, nil
	case train.LossCrossEntropy:
		dims := out.Shape().Dimensions
		if len(dims) < 1 {
			return nil, nil, fmt.Errorf("plan: cross-entropy logits %q are a scalar: want classes on the last axis", s.Loss.Output)
		}
		dt := s.LabelsDType
		if dt == ir.InvalidDType {
			dt = ir.Int64
		}
		target = labelsParam(g, s, dt, dims[:len(dims)-1])
		return crossEntropy(x, target), target, nil
	case train.LossMSE:
		target = labelsParam(g, s, ir.Float32, out.Shape().Dimensions)
		d := graph.Sub(x, target)
		return graph.ReduceAllMean(graph.Mul(d, d)), target, nil
	}
	return nil, nil, fmt.Errorf("plan: loss kind %q", s.Loss.Kind)
}

func labelsParam(g *ir.Graph, s stepSpec, dt ir.DType, dims []int) *ir.Node {
	sh := ir.MakeShape(dt, dims...)
	var sp *distributed.ShardingSpec
	if s.Mesh.Devices() > 1 {
		sp = mustSpec(g, shard.Batch(dims, s.Mesh.Data))
	}
	return graph.ShardedParameter(g, s.Loss.Target, sh, sp)
}

// mustSpec builds a sharding spec on the graph's (single) mesh.
func mustSpec(g *ir.Graph, pl shard.Plan) *distributed.ShardingSpec {
	meshes := g.DeviceMeshes()
	if len(meshes) == 0 {
		return nil
	}
	lay := shard.Layout{Mesh: meshes[0]}
	sp, err := lay.Spec(pl)
	if err != nil {
		panic(err)
	}
	return sp
}

// crossEntropy is the mean over every leading position of
// logsumexp(logits) - logits[label] (torch.nn.functional.cross_entropy
// with reduction "mean" and no ignored index), classes on the last axis.
// The label's logit is picked by comparing with an iota, which XLA fuses
// into the reduction instead of materialising a one-hot tensor.
func crossEntropy(logits, labels *ir.Node) *ir.Node {
	last := logits.Rank() - 1
	mx := graph.StopGradient(graph.ReduceAndKeep(logits, graph.ReduceMax, last))
	shifted := graph.Sub(logits, mx)
	lse := graph.Log(graph.ReduceSum(graph.Exp(shifted), last))
	classes := graph.Iota(logits.Graph(), ir.MakeShape(labels.DType(), logits.Shape().Dimensions...), last)
	hit := graph.Equal(classes, graph.ExpandAxes(labels, -1))
	picked := graph.ReduceSum(graph.Where(hit, shifted, graph.ZerosLike(shifted)), last)
	return graph.ReduceAllMean(graph.Sub(lse, picked))
}

// update applies one optimizer step to a float32 master weight w with
// gradient gr and state, at step t (from 1); it returns the new weight and
// state.
func update(o train.Optimizer, w, gr *ir.Node, state []*ir.Node, t *ir.Node) (*ir.Node, []*ir.Node) {
	switch o.Kind {
	case train.AdamW, train.Adam:
		return adamUpdate(o, w, gr, state[0], state[1], t)
	}
	return sgdUpdate(o, w, gr, state)
}

// adamUpdate is torch.optim.AdamW (decoupled weight decay) or
// torch.optim.Adam (L2 weight decay added to the gradient), with
// amsgrad=False, maximize=False, as torch's single-tensor implementation
// computes it (https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html):
//
//	AdamW: w = w * (1 - lr*wd)        Adam: g = g + wd*w
//	m = b1*m + (1-b1)*g
//	v = b2*v + (1-b2)*g*g
//	w = w - lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
func adamUpdate(o train.Optimizer, w, gr, m, v, t *ir.Node) (*ir.Node, []*ir.Node) {
	g := w.Graph()
	c := func(x float64) *ir.Node { return graph.Scalar(g, ir.Float32, x) }
	if o.WeightDecay != 0 {
		if o.Kind == train.AdamW {
			w = graph.Mul(w, c(1-o.LR*o.WeightDecay))
		} else {
			gr = graph.Add(gr, graph.Mul(w, c(o.WeightDecay)))
		}
	}
	m = graph.Add(graph.Mul(m, c(o.Beta1)), graph.Mul(gr, c(1-o.Beta1)))
	v = graph.Add(graph.Mul(v, c(o.Beta2)), graph.Mul(graph.Mul(gr, gr), c(1-o.Beta2)))
	bc1 := graph.Sub(c(1), graph.Pow(c(o.Beta1), t))
	bc2 := graph.Sqrt(graph.Sub(c(1), graph.Pow(c(o.Beta2), t)))
	stepSize := graph.Div(c(o.LR), bc1)
	denom := graph.Add(graph.Div(graph.Sqrt(v), bc2), c(o.Eps))
	w = graph.Sub(w, graph.Mul(stepSize, graph.Div(m, denom)))
	return w, []*ir.Node{m, v}
}

// sgdUpdate is torch.optim.SGD with dampening 0 and no Nesterov
// (https://pytorch.org/docs/stable/generated/torch.optim.SGD.html):
// g = g + wd*w; with momentum, buf = momentum*buf + g (a zero buffer makes
// the first step's buf = g, as torch's), w = w - lr*buf; else w = w - lr*g.
func sgdUpdate(o train.Optimizer, w, gr *ir.Node, state []*ir.Node) (*ir.Node, []*ir.Node) {
	g := w.Graph()
	c := func(x float64) *ir.Node { return graph.Scalar(g, ir.Float32, x) }
	if o.WeightDecay != 0 {
		gr = graph.Add(gr, graph.Mul(w, c(o.WeightDecay)))
	}
	if len(state) == 0 {
		return graph.Sub(w, graph.Mul(gr, c(o.LR))), nil
	}
	buf := graph.Add(graph.Mul(state[0], c(o.Momentum)), gr)
	return graph.Sub(w, graph.Mul(buf, c(o.LR))), []*ir.Node{buf}
}

// donate marks parameters of the main function of a StableHLO module as
// donated to outputs (param position -> output index) with the
// tf.aliasing_output attribute, which XLA turns into the module's
// input/output aliasing: the compiler then reuses the weights' and
// optimizer state's buffers for their updates instead of allotting new
// ones, as a training loop that donates them gets. The arguments are
// found by scanning main's signature at bracket depth 0.
func donate(text []byte, donated map[int]int) ([]byte, error) {
	start := bytes.Index(text, []byte("func.func @main("))
	if start < 0 {
		return nil, fmt.Errorf("plan: no main function in the step's text")
	}
	i := start + len("func.func @main(")
	type arg struct{ end int } // index just after the argument's text
	var args []arg
	depth := 0
	for ; i < len(text); i++ {
		switch c := text[i]; c {
		case '<', '{', '[', '(':
			depth++
		case '>', '}', ']':
			depth--
		case ')':
			if depth == 0 {
				args = append(args, arg{end: i})
				goto done
			}
			depth--
		case ',':
			if depth == 0 {
				args = append(args, arg{end: i})
			}
		}
	}
	return nil, fmt.Errorf("plan: main's signature does not end")
done:
	out := make([]byte, 0, len(text)+40*len(donated))
	prev := 0
	for k, a := range args {
		o, ok := donated[k]
		if !ok {
			continue
		}
		attr := fmt.Sprintf("tf.aliasing_output = %d : i32", o)
		seg := text[prev:a.end]
		trimmed := bytes.TrimRight(seg, " ")
		if bytes.HasSuffix(trimmed, []byte("}")) {
			// An attribute dictionary "{ sdy.sharding = ... }": add to it.
			open := bytes.LastIndex(trimmed, []byte(": tensor<"))
			brace := bytes.IndexByte(trimmed[max(0, open):], '{')
			if open < 0 || brace < 0 {
				return nil, fmt.Errorf("plan: cannot read argument %d of main", k)
			}
			at := open + brace + 1
			out = append(out, seg[:at]...)
			out = append(out, " "+attr+","...)
			out = append(out, seg[at:]...)
		} else {
			out = append(out, trimmed...)
			out = append(out, " {"+attr+"}"...)
		}
		prev = a.end
	}
	for k := range donated {
		if k >= len(args) {
			return nil, fmt.Errorf("plan: donated parameter %d of %d", k, len(args))
		}
	}
	return append(out, text[prev:]...), nil
}
