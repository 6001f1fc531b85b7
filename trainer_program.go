package tensorbridge

// The step and evaluation programs of a Trainer: batches cut into
// micro-batches, the compiled program per micro-batch shape, its arguments.

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
	"github.com/tensorbridge/tensorbridge/train"
)

// split checks the batch's names and sample counts and cuts it into k
// micro-batches along the first axis.
func (t *Trainer) split(batch map[string]*ir.Tensor, k int) ([]map[string]*ir.Tensor, error) {
	names, err := t.inputNames()
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	n := -1
	given := make([]string, 0, len(batch))
	for name := range batch {
		given = append(given, name)
	}
	sort.Strings(given) // the same batch gets the same error
	for _, name := range given {
		v := batch[name]
		if !want[name] {
			return nil, &errs.InputError{Name: name, Problem: "name", Expected: "one of " + strings.Join(names, ", "), Got: fmt.Sprintf("unknown name %q", name)}
		}
		if v == nil || v.Shape().Rank() == 0 {
			return nil, &errs.InputError{Name: name, Problem: "shape", Expected: "samples on the first axis", Got: fmt.Sprint(v)}
		}
		d := v.Shape().Dimensions[0]
		if n >= 0 && d != n {
			return nil, &errs.InputError{Name: name, Problem: "shape", Expected: fmt.Sprintf("%d samples, as the other tensors of the batch", n), Got: fmt.Sprint(d)}
		}
		n = d
	}
	for _, name := range names {
		if batch[name] == nil {
			return nil, &errs.InputError{Name: name, Problem: "value", Expected: "a tensor in the batch", Got: "none"}
		}
	}
	if n%k != 0 || n == 0 {
		return nil, &errs.InputError{Name: "batch", Problem: "shape", Expected: fmt.Sprintf("a sample count divisible by the %d micro-batches", k), Got: fmt.Sprint(n)}
	}
	if k == 1 {
		return []map[string]*ir.Tensor{batch}, nil
	}
	out := make([]map[string]*ir.Tensor, k)
	for i := range out {
		out[i] = map[string]*ir.Tensor{}
		for name, v := range batch {
			s, err := sliceRows(v, i*n/k, (i+1)*n/k)
			if err != nil {
				return nil, &errs.InputError{Name: name, Problem: "value", Expected: "a tensor readable on the host", Got: err.Error()}
			}
			out[i][name] = s
		}
	}
	return out, nil
}

// sliceRows copies rows [from, to) of t's first axis into a new tensor.
func sliceRows(t *ir.Tensor, from, to int) (*ir.Tensor, error) {
	raw, err := ir.TensorBytes(t)
	if err != nil {
		return nil, err
	}
	dims := append([]int(nil), t.Shape().Dimensions...)
	row := len(raw) / dims[0]
	dims[0] = to - from
	return ir.TensorFromBytes(t.DType(), dims, append([]byte(nil), raw[from*row:to*row]...))
}

// exec returns the compiled step (or evaluation) for this micro-batch's
// shapes, compiling it the first time.
func (t *Trainer) exec(ctx context.Context, mb map[string]*ir.Tensor, k int, eval bool) (*trainExec, error) {
	if t.src != nil {
		return t.sourceExec(ctx, mb, k, eval)
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
	if l := t.cfg.Loss; l.Kind != train.LossOutput {
		tt := mb[l.Target]
		target = &onnx.Param{Name: l.Target, Shape: tt.Shape()}
	}
	key := fmt.Sprintf("eval=%v k=%d %s", eval, k, specialisationKey(shapes, values))
	if target != nil {
		key += fmt.Sprintf(" target=%s", target.Shape)
	}
	if ex, ok := t.execs[key]; ok {
		return ex, nil
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
	ex := &trainExec{plan: plan, params: plan.Params(), target: target}
	if ex.exe, err = t.compile(ex, k, eval); err != nil {
		return nil, err
	}
	t.execs[key] = ex
	return ex, nil
}

// compile builds and compiles the step (train.BuildStep) or evaluation
// (train.BuildLoss) program on one device (buildProgram says what it takes
// and returns). The step donates the weights and optimizer state to their
// updates (the first outputs, in the same order): each step updates them
// in place instead of allotting a second copy.
func (t *Trainer) compile(ex *trainExec, k int, eval bool) (*Executable, error) {
	name := "train:" + t.name()
	var donate Donation
	if eval {
		name = "eval:" + t.name()
	} else {
		donate = Donation{}
		for i := range len(t.params) * (1 + len(t.slots)) {
			donate[i] = i
		}
	}
	return t.b.compileSyncDonating(name, func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		return t.buildProgram(g, in, ex, k, eval)
	}, donate, t.argShapes(ex, k, eval))
}

// argShapes are the program's argument shapes: the trainable weights, the
// optimizer state (step only), per micro-batch the plan's inputs and the
// target, and the hyper-parameter vector (step only).
func (t *Trainer) argShapes(ex *trainExec, k int, eval bool) []ir.Shape {
	var shapes []ir.Shape
	for _, p := range t.params {
		shapes = append(shapes, p.Shape)
	}
	if !eval {
		for range t.slots {
			for _, p := range t.params {
				shapes = append(shapes, p.Shape)
			}
		}
	}
	shapes = append(shapes, t.constShapes...)
	for range k {
		for _, p := range ex.params {
			shapes = append(shapes, p.Shape)
		}
		if ex.target != nil {
			shapes = append(shapes, ex.target.Shape)
		}
	}
	if !eval {
		shapes = append(shapes, ir.MakeShape(ir.Float32, train.NumHyper))
	}
	return shapes
}

// buildProgram builds the step or evaluation on g from its argument nodes
// (argShapes' order). Its results: the new weights and state, the loss and
// the gradient norm (step); the loss (evaluation).
func (t *Trainer) buildProgram(g *ir.Graph, in []*ir.Node, ex *trainExec, k int, eval bool) ([]*ir.Node, error) {
	n := len(t.params)
	slots := len(t.slots)
	if eval {
		slots = 0
	}
	perBatch := len(ex.params)
	if ex.target != nil {
		perBatch++
	}
	nodes := train.StepNodes{Weights: in[:n]}
	for s := range slots {
		nodes.State = append(nodes.State, in[n*(1+s):n*(2+s)])
	}
	off := n * (1 + slots)
	consts := in[off : off+len(t.consts)]
	off += len(t.consts)
	for b := range k {
		mb := map[string]*ir.Node{}
		for i, p := range ex.params {
			mb[p.Name] = in[off+b*perBatch+i]
		}
		if ex.target != nil {
			mb[ex.target.Name] = in[off+b*perBatch+len(ex.params)]
		}
		nodes.Batches = append(nodes.Batches, mb)
	}
	if eval && t.src != nil {
		loss, err := t.src.TrainLoss(g, in[:n], consts, nodes.Batches[0], false)
		return []*ir.Node{loss}, err
	}
	if eval {
		all := map[string]*ir.Node{}
		for i, p := range t.params {
			all[p.Name] = in[i]
		}
		for name, nd := range nodes.Batches[0] {
			all[name] = nd
		}
		loss, classes, err := train.BuildLoss(g, ex.plan, t.cfg.Loss, all)
		ex.classes = classes
		return []*ir.Node{loss}, err
	}
	nodes.Hyper = in[len(in)-1]
	spec := train.StepSpec{Plan: ex.plan, Loss: t.cfg.Loss, Optimizer: t.cfg.Optimizer,
		ClipGradNorm: t.cfg.ClipGradNorm, MicroBatches: k, GuardNonFinite: true}
	if t.src != nil {
		spec.Forward, spec.Weights = t.sourceForward(consts), t.params
	}
	out, err := train.BuildStep(g, spec, nodes)
	if err != nil {
		return nil, err
	}
	ex.classes = out.Classes
	res := append([]*ir.Node(nil), out.Weights...)
	for _, s := range out.State {
		res = append(res, s...)
	}
	return append(res, out.Loss, out.GradNorm), nil
}

// args prepares one micro-batch's arguments.
func (t *Trainer) args(ex *trainExec, mb map[string]*ir.Tensor) ([]*ir.Tensor, error) {
	if t.src != nil {
		return t.sourceArgs(ex, mb)
	}
	return ex.args(mb, t.cfg.Loss)
}

// args prepares one micro-batch's arguments, checking labels against the
// class count first.
func (ex *trainExec) args(mb map[string]*ir.Tensor, loss train.Loss) ([]*ir.Tensor, error) {
	var out []*ir.Tensor
	for _, p := range ex.params {
		a, err := ex.plan.PrepareInput(p.Name, mb[p.Name])
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	if ex.target == nil {
		return out, nil
	}
	tt := mb[ex.target.Name]
	if !tt.Shape().Equal(ex.target.Shape) {
		return nil, &errs.InputError{Name: ex.target.Name, Problem: "shape", Expected: ex.target.Shape.String(), Got: tt.Shape().String()}
	}
	if ex.classes > 0 {
		if err := checkLabels(ex.target.Name, tt, ex.classes); err != nil {
			return nil, err
		}
	}
	return append(out, tt), nil
}

// checkLabels refuses class indices outside [0, classes).
func checkLabels(name string, t *ir.Tensor, classes int) error {
	if t.DType() != ir.Int64 {
		return &errs.InputError{Name: name, Problem: "dtype", Expected: "int64 class indices", Got: t.DType().String()}
	}
	var bad error
	err := t.ConstFlatData(func(flat any) {
		for i, v := range flat.([]int64) {
			if v < 0 || v >= int64(classes) {
				bad = &errs.InputError{Name: name, Problem: "value", Expected: fmt.Sprintf("class indices in [0, %d) (the logits' class axis)", classes),
					Got: fmt.Sprintf("%d at sample element %d", v, i)}
				return
			}
		}
	})
	if err != nil {
		return err
	}
	return bad
}
