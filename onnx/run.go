package onnx

import (
	"context"
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
)

// Run checks the named inputs against the model, specialises it to their
// shapes (and to the values of its value inputs), builds and compiles the
// graph on engine and executes it, returning the outputs by name in the
// dtypes the model declares.
//
// It is a convenience for tests and tools: every call builds and compiles
// afresh. Float16 inputs are widened to Float32 on the host and Float16
// outputs rounded back (to nearest even), since the graph computes Float16
// as Float32. Wrong names, dtypes or shapes are *errs.InputError or
// *DimError values. The backends cannot be interrupted: when ctx ends
// first, Run returns ctx's error and the computation finishes in the
// background.
func (m *Model) Run(ctx context.Context, engine ir.Engine, inputs map[string]*ir.Tensor) (map[string]*ir.Tensor, error) {
	return m.RunWith(ctx, engine, inputs, SpecializeOptions{})
}

// RunWith is Run with precision options (see SpecializeWith): inputs are
// given and outputs returned in the dtypes the model declares; floating
// inputs are rounded to the compute dtype on the host (Plan.PrepareInput).
func (m *Model) RunWith(ctx context.Context, engine ir.Engine, inputs map[string]*ir.Tensor, opts SpecializeOptions) (map[string]*ir.Tensor, error) {
	if m.HasStructuredBoundary() {
		return nil, &errs.InputError{Name: "", Problem: "kind", Expected: "RunValues for a model with sequence or optional inputs or outputs", Got: "Run"}
	}
	outs, _, err := m.runWith(ctx, engine, inputs, opts)
	return outs, err
}

// runWith is RunWith, also returning the plan it ran (values.go reads the
// structure of its outputs).
func (m *Model) runWith(ctx context.Context, engine ir.Engine, inputs map[string]*ir.Tensor, opts SpecializeOptions) (map[string]*ir.Tensor, *Plan, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if engine == nil {
		return nil, nil, fmt.Errorf("onnx: Run needs an engine")
	}
	shapes := map[string][]int{}
	values := map[string]*ir.Tensor{}
	byName := map[string]ValueSpec{}
	for _, in := range m.inputs {
		byName[in.Name] = in
	}
	for name, t := range inputs {
		spec, ok := byName[name]
		if !ok {
			return nil, nil, &errs.InputError{Name: name, Problem: "name", Expected: "one of " + inputNames(m.inputs), Got: "unknown input " + quote(name)}
		}
		if t == nil {
			return nil, nil, &errs.InputError{Name: name, Problem: "value", Expected: "a tensor", Got: "nil"}
		}
		if t.DType() != spec.DType {
			return nil, nil, &errs.InputError{Name: name, Problem: "dtype", Expected: spec.DType.String(), Got: t.DType().String()}
		}
		shapes[name] = t.Shape().Dimensions
	}
	for _, in := range m.inputs {
		if _, ok := inputs[in.Name]; !ok {
			return nil, nil, &errs.InputError{Name: in.Name, Problem: "name", Expected: "a value for input " + quote(in.Name), Got: "none"}
		}
	}
	for _, name := range m.valueInputs {
		values[name] = inputs[name]
	}
	p, err := m.SpecializeWith(shapes, values, opts)
	if err != nil {
		return nil, nil, err
	}
	type result struct {
		outs map[string]*ir.Tensor
		err  error
	}
	done := make(chan result, 1)
	go func() {
		outs, err := p.run(engine, inputs)
		done <- result{outs, err}
	}()
	select {
	case r := <-done:
		return r.outs, p, r.err
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

// run builds, compiles and executes the plan on engine.
func (p *Plan) run(engine ir.Engine, inputs map[string]*ir.Tensor) (outs map[string]*ir.Tensor, err error) {
	defer func() {
		if r := recover(); r != nil {
			outs, err = nil, fmt.Errorf("onnx: running the model: %w", panicError(r))
		}
	}()
	if err := p.CheckEngine(engine); err != nil {
		return nil, err
	}
	g := graph.NewGraph(engine, "onnx")
	defer g.Finalize()
	nodes := map[string]*ir.Node{}
	args := make([]any, 0, len(p.params))
	for _, prm := range p.params {
		nodes[prm.Name] = graph.Parameter(g, prm.Name, prm.Shape)
		t, err := p.PrepareInput(prm.Name, inputs[prm.Name])
		if err != nil {
			return nil, err
		}
		args = append(args, t)
	}
	args, err = p.weightArgs(g, nodes, args) // weights.go
	if err != nil {
		return nil, err
	}
	built, err := p.Build(g, nodes)
	if err != nil {
		return nil, err
	}
	flatOuts := p.FlatOutputs() // the declared outputs, or the tensors of sequence and optional ones (values.go)
	order := make([]*ir.Node, 0, len(built))
	var graphOuts []ValueSpec // STRING outputs stay on the host (strings.go)
	for _, o := range flatOuts {
		if o.DType != String {
			graphOuts = append(graphOuts, o)
			order = append(order, built[o.Name])
		}
	}
	checks := p.IndexChecks() // indexcheck.go
	if err := checks.CheckInputs(inputs); err != nil {
		return nil, err
	}
	if checks.HasOutput() {
		order = append(order, built[IndexCheckOutput])
	}
	// The pure-Go backend (v0.26.0) indexes out of range when executing a
	// graph with a parameter no output depends on: return such parameters
	// as extra outputs (ignored).
	reach := reachable(order)
	for _, prm := range p.params {
		if n := nodes[prm.Name]; !reach[n] {
			order = append(order, n)
		}
	}
	var res []*ir.Tensor
	if len(order) > 0 {
		if res, err = compileAndRun(g, order, args); err != nil {
			return nil, err
		}
	}
	if checks.HasOutput() {
		if err := checks.CheckOutput(res[len(graphOuts)]); err != nil {
			return nil, err
		}
	}
	outs = map[string]*ir.Tensor{}
	for k, o := range graphOuts {
		t, err := ToModelDType(res[k], o.DType)
		if err != nil {
			return nil, fmt.Errorf("onnx: output %q: %w", o.Name, err)
		}
		outs[o.Name] = t
	}
	return outs, nil
}

// reachable returns the nodes the outputs depend on.
func reachable(outputs []*graph.Node) map[*graph.Node]bool {
	seen := map[*graph.Node]bool{}
	stack := append([]*graph.Node{}, outputs...)
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if n == nil || seen[n] {
			continue
		}
		seen[n] = true
		stack = append(stack, n.Inputs()...)
	}
	return seen
}

// compileAndRun compiles g with the given outputs (which may repeat) and
// runs it once.
func compileAndRun(g *graph.Graph, outputs []*graph.Node, args []any) (res []*ir.Tensor, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = nil, panicError(r)
		}
	}()
	var uniq []*graph.Node
	pos := make([]int, len(outputs))
	seen := map[*graph.Node]int{}
	for k, n := range outputs {
		j, ok := seen[n]
		if !ok {
			j = len(uniq)
			seen[n] = j
			uniq = append(uniq, n)
		}
		pos[k] = j
	}
	g.Compile(uniq...)
	// Every device buffer of this run is ours and freed before returning:
	// inputs are placed for the run only, outputs come back as host tensors.
	eng := g.Backend()
	bufs := make([]ir.Buffer, len(args))
	owned := make([]bool, len(args))
	defer func() {
		for i, b := range bufs {
			if owned[i] {
				_ = ir.FreeBuffer(eng, b)
			}
		}
	}()
	for i, a := range args {
		t, ok := a.(*ir.Tensor)
		if !ok {
			t = tensors.FromAnyValue(a)
		}
		if bufs[i], owned[i], err = ir.DeviceBuffer(eng, 0, t); err != nil {
			return nil, err
		}
	}
	got, err := ir.RunOwned(g, 0, bufs)
	if err != nil {
		return nil, err
	}
	res = make([]*ir.Tensor, len(outputs))
	for k := range outputs {
		res[k] = got[pos[k]]
	}
	return res, nil
}

// GraphDType is the dtype the graph computes a value of ONNX dtype dt in:
// Float32 for Float16 (see the package documentation), dt otherwise.
func GraphDType(dt ir.DType) ir.DType { return graphDType(dt) }

// ToGraphDType converts a host tensor to the dtype its graph parameter has:
// Float16 tensors are widened to Float32 (exactly); others are returned as
// they are.
func ToGraphDType(t *ir.Tensor) (*ir.Tensor, error) {
	if t == nil || t.DType() != ir.Float16 {
		return t, nil
	}
	return hostFromIR(t, ir.Float16).toIRAs(ir.Float32)
}

// ToModelDType converts a graph result to the dtype the model declares for
// it: a Float32 result of a Float16 output is rounded to nearest even.
// A result already of the declared dtype (or with no declared dtype,
// ir.InvalidDType) is returned as it is; any other mismatch is an error.
func ToModelDType(t *ir.Tensor, declared ir.DType) (*ir.Tensor, error) {
	if t == nil || declared == ir.InvalidDType || t.DType() == declared {
		return t, nil
	}
	if graphDType(declared) != t.DType() {
		return nil, fmt.Errorf("model declares %s, graph computed %s", declared, t.DType())
	}
	h := hostFromIR(t, t.DType())
	if err := h.decode(); err != nil {
		return nil, err
	}
	h.src, h.dt = nil, declared
	h.normalize()
	return h.toIRAs(declared)
}
