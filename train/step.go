package train

// The training step as a graph: forward, loss, reverse-mode gradients
// (GoMLX's graph.Gradient), optional global-norm clipping and the optimizer
// update, all in one program. tensorbridge.Trainer compiles it per input
// shape; plan --train can build the same step (BuildStep) to compile it
// ahead of time and read its memory figures.

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
)

// Indices into the hyper-parameter vector a step takes (StepNodes.Hyper):
// the scalars that change from update to update, computed on the host in
// float64 as torch.optim computes them in Python, then rounded to float32
// (as torch's CPU kernels take a Python scalar for a float32 tensor). With
// them as a parameter the step compiles once for a run.
const (
	HyperLR       = iota // the scheduled learning rate
	HyperDecay           // AdamW: 1 - lr*weight_decay
	HyperStepSize        // Adam, AdamW: lr / (1 - beta1^t)
	HyperBC2Sqrt         // Adam, AdamW: sqrt(1 - beta2^t)
	HyperMomentum        // SGD: the momentum, 0 at the first update (the buffer starts as the gradient)
	NumHyper
)

// Hyper returns the hyper-parameter vector of the update with 0-based
// index update, for the scheduled learning rate lr (Optimizer.LR times
// Schedule.Factor(update)).
func Hyper(o Optimizer, lr float64, update int) []float32 {
	t := float64(update + 1) // torch's step count, after its increment
	h := make([]float32, NumHyper)
	h[HyperLR] = float32(lr)
	h[HyperDecay] = float32(1 - lr*o.WeightDecay)
	h[HyperStepSize] = float32(lr / (1 - math.Pow(o.Beta1, t)))
	h[HyperBC2Sqrt] = float32(math.Sqrt(1 - math.Pow(o.Beta2, t)))
	if update > 0 {
		h[HyperMomentum] = float32(o.Momentum)
	}
	return h
}

// StateSlots names the optimizer's per-weight state tensors, as
// torch.optim's state_dict names them: exp_avg and exp_avg_sq for Adam and
// AdamW, momentum_buffer for SGD with momentum, none for plain SGD. Each
// has its weight's shape and dtype and starts at zero.
func StateSlots(o Optimizer) []string {
	switch o.Kind {
	case Adam, AdamW:
		return []string{"exp_avg", "exp_avg_sq"}
	case SGD:
		if o.Momentum != 0 {
			return []string{"momentum_buffer"}
		}
	}
	return nil
}

// StepSpec is what a training step is made of besides its nodes.
type StepSpec struct {
	// Plan is the model specialised for one micro-batch, with the
	// trainable weights as its weight parameters (SpecializeOptions with
	// WeightsAsParams and Weights): Plan.Weights are what the step trains.
	Plan *onnx.Plan
	// Forward, when set, replaces Plan and Loss: a model that is not an
	// ONNX plan (a Hugging Face checkpoint's decoder, package llm) builds
	// one micro-batch's loss (a float32 scalar) from its weight nodes (one
	// per Weights, in that order) and the micro-batch's nodes by name.
	Forward func(g *ir.Graph, weights []*ir.Node, batch map[string]*ir.Node) (*ir.Node, error)
	// Weights are Forward's weights (names and shapes); unused with Plan.
	Weights   []onnx.Param
	Loss      Loss
	Optimizer Optimizer
	// ClipGradNorm clips the global gradient norm (0: off).
	ClipGradNorm float64
	// MicroBatches is how many micro-batches the step averages the
	// gradients of (gradient accumulation); 0 means 1.
	MicroBatches int
	// Frozen names weights of Plan.Weights that are graph parameters but
	// not trained: the forward pass reads them, nothing differentiates or
	// updates them, and they have no optimizer state. The Trainer folds its
	// frozen weights into the program as constants and leaves this empty;
	// plan --train, which compiles models loaded by shape only (no weight
	// values to fold), passes them as parameters.
	Frozen map[string]bool
	// GuardNonFinite applies the update only when the loss and the global
	// gradient norm are both finite: otherwise the step's weights and
	// optimizer state come out as they went in (what PyTorch's GradScaler
	// does with a step whose gradients overflowed), so a NaN or infinity is
	// never written into the weights. The caller sees the non-finite loss
	// or norm in the outputs and decides (tensorbridge.Trainer returns a
	// *NonFiniteError and does not count the update).
	GuardNonFinite bool
}

// weights are the step's weight parameters: Plan.Weights, or Weights
// with Forward.
func (spec StepSpec) weights() []onnx.Param {
	if spec.Forward != nil {
		return spec.Weights
	}
	return spec.Plan.Weights()
}

// Trained returns the weights the step trains: Plan.Weights (or Weights)
// less spec.Frozen, in that order.
func (spec StepSpec) Trained() []onnx.Param {
	var out []onnx.Param
	for _, w := range spec.weights() {
		if !spec.Frozen[w.Name] {
			out = append(out, w)
		}
	}
	return out
}

// StepNodes are the step's graph inputs.
type StepNodes struct {
	// Weights: one per Plan.Weights, in that order. A trained weight's
	// node is its master copy: when its dtype differs from the plan's (a
	// float32 master under bfloat16 compute without Mixed), the forward
	// pass reads it cast to the plan's dtype, and the gradient and the
	// update are taken in the master's dtype.
	Weights []*ir.Node
	// State: per StateSlots slot, one per trained weight (StepSpec.Trained).
	State [][]*ir.Node
	// Batches: per micro-batch, a node per Plan.Params name and, for the
	// cross_entropy and mse losses, one for Loss.Target.
	Batches []map[string]*ir.Node
	// Hyper: a float32 vector of NumHyper elements (Hyper).
	Hyper *ir.Node
	// NewTarget, when set, declares the loss target of a micro-batch that
	// lacks one, once the forward pass has given the output's shape: dims
	// are the labels' (the logits' less the class axis, int64 unless the
	// caller picks int32) or the targets' (the output's, floating point)
	// dimensions. plan --train uses it to size the labels from the model.
	NewTarget func(kind LossKind, dims []int) *ir.Node
}

// StepOutputs are the step's results.
type StepOutputs struct {
	Weights []*ir.Node   // updated, one per trained weight (StepSpec.Trained)
	State   [][]*ir.Node // updated, per slot, per trained weight
	// Loss is the mean of the micro-batches' losses (float32 scalar), before the update.
	Loss *ir.Node
	// GradNorm is the global norm of the averaged gradients before
	// clipping (float32 scalar).
	GradNorm *ir.Node
	// Classes is the class count of a cross_entropy loss (the logits' last
	// axis), for checking labels on the host; 0 otherwise.
	Classes int
}

// BuildStep builds one training step on g. A gradient GoMLX cannot build
// (an op without a VJP) is an *errs.UnsupportedError, not a panic.
func BuildStep(g *ir.Graph, spec StepSpec, in StepNodes) (out StepOutputs, err error) {
	k := max(1, spec.MicroBatches)
	if len(in.Batches) != k {
		return out, fmt.Errorf("train: %d micro-batches of nodes for %d micro-batches", len(in.Batches), k)
	}
	ws := spec.weights()
	if len(in.Weights) != len(ws) {
		return out, fmt.Errorf("train: %d weight nodes for %d weights", len(in.Weights), len(ws))
	}
	var masters []*ir.Node // the trained weights' nodes, in Trained order
	var trained []onnx.Param
	for i, w := range ws {
		if !spec.Frozen[w.Name] {
			masters = append(masters, in.Weights[i])
			trained = append(trained, w)
		}
	}
	if len(masters) == 0 {
		return out, invalid("nothing to train: every floating-point initializer is frozen (or unused)")
	}
	var losses []*ir.Node
	for _, b := range in.Batches {
		if spec.Forward != nil {
			l, err := spec.Forward(g, in.Weights, b)
			if err != nil {
				return out, err
			}
			losses = append(losses, l)
			continue
		}
		nodes := make(map[string]*ir.Node, len(ws)+len(b))
		for i, w := range ws {
			nodes[w.Name] = in.Weights[i]
			if in.Weights[i].DType() != w.Shape.DType {
				nodes[w.Name] = graph.ConvertDType(in.Weights[i], w.Shape.DType)
			}
		}
		for name, n := range b {
			nodes[name] = n
		}
		l, classes, err := buildLoss(g, spec.Plan, spec.Loss, nodes, in.NewTarget)
		if err != nil {
			return out, err
		}
		out.Classes = classes
		losses = append(losses, l)
	}
	loss := losses[0]
	for _, l := range losses[1:] {
		loss = graph.Add(loss, l)
	}
	if k > 1 {
		loss = graph.DivScalar(loss, float64(k))
	}
	grads, err := gradients(loss, masters, trained)
	if err != nil {
		return out, err
	}
	out.Loss = loss
	grads, out.GradNorm = clip(grads, spec.ClipGradNorm)
	out.Weights, out.State = update(spec.Optimizer, masters, in.State, grads, in.Hyper)
	if spec.GuardNonFinite {
		ok := graph.LogicalAnd(graph.IsFinite(loss), graph.IsFinite(out.GradNorm))
		out.Weights = keepUnless(ok, out.Weights, masters)
		for s := range out.State {
			out.State[s] = keepUnless(ok, out.State[s], in.State[s])
		}
	}
	return out, nil
}

// keepUnless returns, per tensor, updated where the scalar ok holds and
// old where it does not.
func keepUnless(ok *ir.Node, updated, old []*ir.Node) []*ir.Node {
	out := make([]*ir.Node, len(updated))
	for i, u := range updated {
		cond := ok
		if dims := u.Shape().Dimensions; len(dims) > 0 {
			cond = graph.BroadcastToDims(ok, dims...)
		}
		out[i] = graph.Where(cond, u, old[i])
	}
	return out
}

// BuildLoss builds the forward pass of plan on g from nodes (weights and
// inputs by name, plus the loss target) and the loss: a float32 scalar. It
// also returns the class count of a cross_entropy loss. A loss output that
// is not a floating-point scalar, or logits and labels that disagree, wrap
// errs.ErrInvalidInput.
func BuildLoss(g *ir.Graph, plan *onnx.Plan, loss Loss, nodes map[string]*ir.Node) (*ir.Node, int, error) {
	return buildLoss(g, plan, loss, nodes, nil)
}

// buildLoss is BuildLoss, declaring a missing target with newTarget when
// it is set (StepNodes.NewTarget).
func buildLoss(g *ir.Graph, plan *onnx.Plan, loss Loss, nodes map[string]*ir.Node, newTarget func(LossKind, []int) *ir.Node) (*ir.Node, int, error) {
	in := make(map[string]*ir.Node, len(nodes))
	for name, n := range nodes {
		if loss.Kind == LossOutput || name != loss.Target {
			in[name] = n
		}
	}
	built, err := plan.Build(g, in)
	if err != nil {
		return nil, 0, err
	}
	out, ok := built[loss.Output]
	if !ok {
		var names []string
		for _, o := range plan.FlatOutputs() {
			names = append(names, o.Name)
		}
		return nil, 0, invalid("--loss %s: the model has no output %q (outputs: %v)", loss, loss.Output, names)
	}
	if !out.DType().IsFloat() {
		return nil, 0, invalid("--loss %s: output %q is %s, want a floating-point tensor", loss, loss.Output, out.Shape())
	}
	out = graph.ConvertDType(out, ir.Float32)
	if nodes[loss.Target] == nil && newTarget != nil && loss.Kind != LossOutput {
		dims := out.Shape().Dimensions
		if loss.Kind == LossCrossEntropy && len(dims) > 0 {
			dims = dims[:len(dims)-1]
		}
		nodes[loss.Target] = newTarget(loss.Kind, dims)
	}
	switch loss.Kind {
	case LossOutput:
		if out.Rank() != 0 {
			return nil, 0, invalid("--loss %s: output %q has shape %v, not a scalar: want a scalar loss", loss, loss.Output, out.Shape().Dimensions)
		}
		return out, 0, nil
	case LossCrossEntropy:
		return crossEntropy(out, nodes[loss.Target], loss)
	case LossMSE:
		t := nodes[loss.Target]
		if t == nil {
			return nil, 0, invalid("--loss %s: no targets %q", loss, loss.Target)
		}
		if !t.DType().IsFloat() || !equalDims(t.Shape().Dimensions, out.Shape().Dimensions) {
			return nil, 0, invalid("--loss %s: targets %q are %s, want floating-point of the output's shape %v", loss, loss.Target, t.Shape(), out.Shape().Dimensions)
		}
		return graph.ReduceAllMean(graph.Square(graph.Sub(out, graph.ConvertDType(t, ir.Float32)))), 0, nil
	}
	return nil, 0, invalid("unknown loss kind %q", loss.Kind)
}

// crossEntropy is torch.nn.functional.cross_entropy with mean reduction:
// the mean over every leading position of -log_softmax(logits)[label].
func crossEntropy(logits, labels *ir.Node, loss Loss) (*ir.Node, int, error) {
	if labels == nil {
		return nil, 0, invalid("--loss %s: no labels %q", loss, loss.Target)
	}
	ld := logits.Shape().Dimensions
	if len(ld) == 0 {
		return nil, 0, invalid("--loss %s: logits %q are a scalar, want classes on the last axis", loss, loss.Output)
	}
	if (labels.DType() != ir.Int64 && labels.DType() != ir.Int32) || !equalDims(labels.Shape().Dimensions, ld[:len(ld)-1]) {
		return nil, 0, invalid("--loss %s: labels %q are %s, want int64 (or int32) %v (the logits' shape %v less the class axis)",
			loss, loss.Target, labels.Shape(), ld[:len(ld)-1], ld)
	}
	classes := ld[len(ld)-1]
	logp := graph.LogSoftmax(logits, -1)
	picked := graph.ReduceSum(graph.Mul(logp, graph.OneHot(labels, classes, ir.Float32)), -1)
	return graph.Neg(graph.ReduceAllMean(picked)), classes, nil
}

// gradients differentiates loss with respect to the weights, turning a
// panic of GoMLX's autodiff (an op with no gradient) into an error.
func gradients(loss *ir.Node, weights []*ir.Node, ws []onnx.Param) (grads []*ir.Node, err error) {
	defer func() {
		if r := recover(); r != nil {
			detail := fmt.Sprint(r)
			if e, ok := r.(error); ok {
				detail = e.Error()
			}
			grads, err = nil, &errs.UnsupportedError{What: "gradient", Name: "training step",
				Detail: fmt.Sprintf("reverse-mode autodiff of the model failed (an op with no gradient?): %s", firstLine(detail))}
		}
	}()
	grads = graph.Gradient(loss, weights...)
	if len(grads) != len(weights) {
		return nil, fmt.Errorf("train: %d gradients for %d weights", len(grads), len(weights))
	}
	for i, gr := range grads {
		if gr == nil {
			return nil, &errs.UnsupportedError{What: "gradient", Name: ws[i].Name, Detail: "no gradient reaches this weight"}
		}
	}
	return grads, nil
}

// clip scales the gradients as torch.nn.utils.clip_grad_norm_ does
// (https://pytorch.org/docs/stable/generated/torch.nn.utils.clip_grad_norm_.html):
// total = the 2-norm of all gradients together, coef = max/(total+1e-6)
// clamped to at most 1, every gradient multiplied by coef. It returns the
// total norm too (computed whether or not clipping is on).
func clip(grads []*ir.Node, maxNorm float64) ([]*ir.Node, *ir.Node) {
	var sq *ir.Node
	for _, gr := range grads {
		s := graph.ReduceAllSum(graph.Square(graph.ConvertDType(gr, ir.Float32)))
		if sq == nil {
			sq = s
		} else {
			sq = graph.Add(sq, s)
		}
	}
	total := graph.Sqrt(sq)
	if maxNorm <= 0 {
		return grads, total
	}
	coef := graph.MinScalar(graph.Div(graph.Scalar(total.Graph(), ir.Float32, maxNorm), graph.AddScalar(total, 1e-6)), 1.0)
	out := make([]*ir.Node, len(grads))
	for i, gr := range grads {
		out[i] = graph.Mul(gr, graph.ConvertDType(coef, gr.DType()))
	}
	return out, total
}

// update applies the optimizer, following torch.optim's single-tensor CPU
// implementations (torch/optim/adamw.py, adam.py, sgd.py):
//
//	AdamW: p *= 1-lr*wd; m += (1-b1)*(g-m); v = v*b2 + (1-b2)*g*g;
//	       p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps)
//	Adam:  g += wd*p, then as AdamW without the decay of p
//	SGD:   g += wd*p; buf = g at the first update, mu*buf+g after; p -= lr*buf
func update(o Optimizer, ws []*ir.Node, state [][]*ir.Node, grads []*ir.Node, hyper *ir.Node) ([]*ir.Node, [][]*ir.Node) {
	h := func(i int, like *ir.Node) *ir.Node {
		s := graph.Reshape(graph.Slice(hyper, graph.AxisRange(i, i+1)))
		return graph.ConvertDType(s, like.DType())
	}
	newW := make([]*ir.Node, len(ws))
	newS := make([][]*ir.Node, len(state))
	for s := range state {
		newS[s] = make([]*ir.Node, len(ws))
	}
	for i, p := range ws {
		g := graph.ConvertDType(grads[i], p.DType())
		switch o.Kind {
		case AdamW, Adam:
			if o.Kind == AdamW && o.WeightDecay != 0 {
				p = graph.Mul(p, h(HyperDecay, p))
			}
			if o.Kind == Adam && o.WeightDecay != 0 {
				g = graph.Add(g, graph.MulScalar(p, o.WeightDecay))
			}
			m, v := state[0][i], state[1][i]
			m = graph.Add(m, graph.MulScalar(graph.Sub(g, m), 1-o.Beta1))
			v = graph.Add(graph.MulScalar(v, o.Beta2), graph.Mul(graph.MulScalar(g, 1-o.Beta2), g))
			denom := graph.AddScalar(graph.Div(graph.Sqrt(v), h(HyperBC2Sqrt, p)), o.Eps)
			p = graph.Sub(p, graph.Div(graph.Mul(h(HyperStepSize, p), m), denom))
			newS[0][i], newS[1][i] = m, v
		case SGD:
			if o.WeightDecay != 0 {
				g = graph.Add(g, graph.MulScalar(p, o.WeightDecay))
			}
			if o.Momentum != 0 {
				g = graph.Add(graph.Mul(h(HyperMomentum, p), state[0][i]), g)
				newS[0][i] = g
			}
			p = graph.Sub(p, graph.Mul(h(HyperLR, p), g))
		}
		newW[i] = p
	}
	return newW, newS
}

func equalDims(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func firstLine(s string) string {
	for i := range len(s) {
		if s[i] == '\n' {
			return s[:i]
		}
	}
	return s
}
