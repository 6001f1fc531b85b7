package onnx

// Weights as graph parameters, and models loaded by shape only.
//
// By default a Plan folds every initializer into the program as a constant:
// simple, and on XLA's CPU compiler often the fastest (the compiler can
// specialise on the values). On an accelerator that costs twice: the
// program text carries every weight, so large models compile slowly and
// their cache entries hold the weights again, and each compiled shape holds
// its own copy on the device. With SpecializeOptions.WeightsAsParams the
// weights become graph parameters instead (Plan.Weights lists them, first
// among the parameters a caller passes), so one set of device buffers serves
// every compiled shape, and the program holds shapes and dtypes only.
//
// LoadOptions.ShapesOnly goes one step further for planning: the weights'
// bytes are never read (their files need not even exist); only the
// initializers a graph needs as values at build time (shape tensors, axes,
// small scalars) are read.

import (
	"fmt"
	"sort"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// WeightMinElements is the size from which an initializer is a weight
// parameter under WeightsAsParams. Smaller ones (scalars such as an
// attention scale or a normalisation epsilon) stay constants, which the
// compiler folds; so do initializers whose values the importer needs at
// build time (a Reshape's shape, Gather indices used as axes...).
const WeightMinElements = 16

// LoadOptions choose how LoadWith and FromProtoWith read a model.
type LoadOptions struct {
	// ShapesOnly reads the initializers' names, dtypes and dimensions but
	// not their bytes, except those the importer needs as values at build
	// time and those smaller than WeightMinElements (which stay constants).
	// Such a model can only be specialised with WeightsAsParams, and
	// Plan.WeightTensor fails on it: it is for planning (compiling ahead of
	// time to read memory and cost figures), not for running.
	ShapesOnly bool

	// release: the model owns the decoded proto (Load, LoadWith, Parse),
	// so it may drop the payloads it has converted (releaseFile).
	release bool
}

// LoadWith is Load with options.
func LoadWith(path string, opts LoadOptions) (*Model, error) {
	pb, err := onnxpb.ReadModel(path)
	if err != nil {
		return nil, err
	}
	opts.release = true
	return newModel(pb, opts)
}

// FromProtoWith is FromProto with options.
func FromProtoWith(pb *onnxpb.Model, opts LoadOptions) (*Model, error) { return newModel(pb, opts) }

// ShapesOnly says whether the model was loaded without its weights' bytes.
func (m *Model) ShapesOnly() bool { return m.shapesOnly }

// noteInitializer records an initializer's logical dtype and dimensions.
func (m *Model) noteInitializer(t *onnxpb.Tensor, dt ir.DType) error {
	if _, err := t.NumElements(); err != nil {
		return fmt.Errorf("initializer %q: %w", t.Name, err)
	}
	dims := make([]int, len(t.Dims))
	for i, d := range t.Dims {
		dims[i] = int(d)
	}
	m.initDT[t.Name] = dt
	m.initShape[t.Name] = ir.MakeShape(dt, dims...)
	return nil
}

// weightCandidate says whether initializer name becomes a parameter under
// WeightsAsParams (when some node uses it).
func (m *Model) weightCandidate(name string) bool {
	sh, ok := m.initShape[name]
	return ok && !m.needConst[name] && sh.Size() >= WeightMinElements
}

// loadConstInitializers reads, for a shapes-only model, the bytes of the
// initializers that stay constants.
func (m *Model) loadConstInitializers() error {
	for k := range m.graph.Initializer {
		t := &m.graph.Initializer[k]
		if m.weightCandidate(t.Name) {
			continue
		}
		it, err := t.ToIR()
		if err != nil {
			return fmt.Errorf("initializer %q (needed as a value even when planning by shape): %w", t.Name, err)
		}
		m.inits[t.Name] = it
	}
	return nil
}

// usedNames returns every value name a node reads, in the main graph and
// in control-flow bodies.
func (m *Model) usedNames() map[string]bool {
	used := map[string]bool{}
	for _, n := range m.nodes {
		for _, in := range n.Input {
			used[in] = true
		}
	}
	for _, sg := range m.subs {
		for _, n := range sg.nodes {
			for _, in := range n.Input {
				used[in] = true
			}
		}
	}
	for _, o := range m.graph.Output {
		used[o.Name] = true
	}
	return used
}

// selectWeights fills p.weights when weights are parameters, in the
// model's initializer order.
func (p *Plan) selectWeights(on bool, names []string) error {
	p.weightsAsParams = on
	if !on {
		if p.m.shapesOnly {
			return &errs.Error{Kind: errs.FailedPrecondition, Op: "specialize",
				Err: fmt.Errorf("onnx: the model was loaded by shape only (its weights' bytes were not read): specialise it with WeightsAsParams")}
		}
		return nil
	}
	ws, err := p.m.weightParams(p.prec, names)
	if err != nil {
		return err
	}
	p.weights, p.weightNames = ws, append([]string(nil), names...)
	return nil
}

// WeightParams returns the weight parameters a plan specialised with opts
// and WeightsAsParams takes (Plan.Weights): they depend on the model and
// the precision only, not on the input shapes, so one set of device
// buffers serves every specialisation.
func (m *Model) WeightParams(opts SpecializeOptions) ([]Param, error) {
	prec, err := opts.mode()
	if err != nil {
		return nil, err
	}
	return m.weightParams(prec, opts.Weights)
}

// weightParams lists the weight parameters: those named (when names is not
// nil) or every candidate, in initializer order, skipping unused ones.
func (m *Model) weightParams(prec precisionMode, names []string) ([]Param, error) {
	var chosen map[string]bool
	if names != nil {
		chosen = make(map[string]bool, len(names))
		for _, n := range names {
			if _, ok := m.initShape[n]; !ok {
				return nil, &errs.InputError{Name: n, Problem: "name", Expected: "an initializer of the model", Got: "no initializer " + quote(n)}
			}
			if m.needConst[n] {
				return nil, &errs.InputError{Name: n, Problem: "value",
					Expected: "an initializer the graph may take as a parameter",
					Got:      "one the importer needs as a value at build time (it sets shapes, axes or scales)"}
			}
			chosen[n] = true
		}
	}
	used := m.usedNames()
	var out []Param
	for k := range m.graph.Initializer {
		name := m.graph.Initializer[k].Name
		if !used[name] || (chosen == nil && !m.weightCandidate(name)) || (chosen != nil && !chosen[name]) {
			continue
		}
		sh := m.initShape[name]
		dt := prec.constDT(prec.hostDT(sh.DType))
		out = append(out, Param{Name: name, Shape: ir.MakeShape(dt, sh.Dimensions...)})
	}
	return out, nil
}

// Weights returns the initializers the plan takes as graph parameters
// (none unless specialised with WeightsAsParams), in the model's
// initializer order, with the shape and dtype the graph takes them in.
// Build expects a node for each, besides those for Params.
func (p *Plan) Weights() []Param { return append([]Param(nil), p.weights...) }

// WeightsBytes is the size of the weight parameters in the graph's dtypes.
func (p *Plan) WeightsBytes() int64 {
	var n int64
	for _, w := range p.weights {
		n += int64(w.Shape.Memory())
	}
	return n
}

func (p *Plan) isWeight(name string) bool {
	for _, w := range p.weights {
		if w.Name == name {
			return true
		}
	}
	return false
}

// WeightTensor returns weight name's value converted to the dtype the graph
// takes it in (rounded to nearest even for a 16-bit compute precision, as
// constants are). The tensor may share storage with the model: callers must
// not modify or finalize it. A shapes-only model has no values: that is an
// error of kind FailedPrecondition.
func (p *Plan) WeightTensor(name string) (*ir.Tensor, error) {
	return p.m.weightValue(name, p.prec, p.weights)
}

// WeightValue is Plan.WeightTensor without a plan: weight name's value in
// the dtype a plan specialised with opts takes it in.
func (m *Model) WeightValue(name string, opts SpecializeOptions) (*ir.Tensor, error) {
	prec, err := opts.mode()
	if err != nil {
		return nil, err
	}
	ws, err := m.weightParams(prec, opts.Weights)
	if err != nil {
		return nil, err
	}
	return m.weightValue(name, prec, ws)
}

func (m *Model) weightValue(name string, prec precisionMode, weights []Param) (*ir.Tensor, error) {
	var prm *Param
	for k := range weights {
		if weights[k].Name == name {
			prm = &weights[k]
		}
	}
	if prm == nil {
		return nil, &errs.InputError{Name: name, Problem: "name", Expected: "a weight parameter", Got: quote(name)}
	}
	t, ok := m.inits[name]
	if !ok {
		return nil, &errs.Error{Kind: errs.FailedPrecondition, Op: "weight",
			Err: fmt.Errorf("onnx: initializer %q has no values: the model was loaded by shape only", name)}
	}
	out, err := hostFromIR(t, prec.hostDT(m.initDT[name])).toIRAs(prm.Shape.DType)
	if err != nil {
		return nil, fmt.Errorf("onnx: weight %q: %w", name, err)
	}
	return out, nil
}

// bindWeights binds the weight parameters' nodes for Build.
func (p *Plan) bindWeights(b *builder, inputs map[string]*ir.Node) error {
	for _, w := range p.weights {
		n, ok := inputs[w.Name]
		if !ok || n == nil {
			return &errs.InputError{Name: w.Name, Problem: "name", Expected: "a node for every weight parameter", Got: "no node for " + quote(w.Name)}
		}
		if !n.Shape().Equal(w.Shape) {
			return &errs.InputError{Name: w.Name, Problem: "shape", Expected: w.Shape.String(), Got: n.Shape().String()}
		}
		b.vals[w.Name] = &value{name: w.Name, dt: p.prec.hostDT(p.m.initDT[w.Name]), node: n}
	}
	return nil
}

// Initializers lists every initializer of the main graph with its logical
// dtype and dimensions, sorted by name; it reads no bytes.
func (m *Model) Initializers() []Param {
	out := make([]Param, 0, len(m.initShape))
	for name, sh := range m.initShape {
		out = append(out, Param{Name: name, Shape: sh})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// weightArgs declares the weight parameters on g (after the inputs) and
// appends their values to args, for Plan.run.
func (p *Plan) weightArgs(g *ir.Graph, nodes map[string]*ir.Node, args []any) ([]any, error) {
	for _, w := range p.weights {
		t, err := p.WeightTensor(w.Name)
		if err != nil {
			return nil, err
		}
		nodes[w.Name] = ir.Parameter(g, w.Name, w.Shape)
		args = append(args, t)
	}
	return args, nil
}
