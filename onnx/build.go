package onnx

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// Param is one graph parameter a Plan expects: a user input with its
// concrete shape, in the dtype the graph computes it in (Float16 inputs are
// Float32 parameters; with a 16-bit compute precision, floating inputs are
// parameters of that dtype: see Plan.PrepareInput).
type Param struct {
	Name  string
	Shape ir.Shape
}

// Plan is a model specialised to concrete input shapes (and to the values
// of its value inputs, if any): everything needed to build a static graph.
type Plan struct {
	m      *Model
	dims   map[string]int        // resolved symbolic dimensions
	shapes map[string][]int      // every user input's concrete dims
	values map[string]*ir.Tensor // value inputs
	params []Param
	prec   precisionMode
	// weightsAsParams: the initializers in weights are graph parameters
	// (SpecializeOptions.WeightsAsParams; weights.go).
	weightsAsParams bool
	weightNames     []string // SpecializeOptions.Weights
	weights         []Param
	// STRING inputs given in SpecializeOptions.Strings and the STRING
	// outputs Build computed on the host (strings.go).
	strIn  map[string]*StringTensor
	strOut stringOutputs
	// layout: the structure of sequence and optional outputs, set by Build
	// (values.go).
	layout outputLayout
	// idx: the index range checks the latest Build recorded (indexcheck.go).
	idx planChecks
}

// Specialize fixes the model's input shapes. shapes gives the concrete
// dimensions of inputs whose declared shape is not fully static (it may
// also repeat static ones, which are then checked); values gives the
// values of the model's value inputs (see ValueInputs), and may also give
// values for other inputs, which are then folded into the graph as
// constants. Every symbolic dimension must get one value across all
// inputs; errors name the input and dimension. The plan computes in the
// model's own precision (SpecializeWith chooses another).
func (m *Model) Specialize(shapes map[string][]int, values map[string]*ir.Tensor) (*Plan, error) {
	return m.SpecializeWith(shapes, values, SpecializeOptions{})
}

// SpecializeWith is Specialize with precision options: with a 16-bit
// Compute dtype the plan's parameters for floating inputs take that dtype
// (convert tensors with Plan.PrepareInput), initializers and constants are
// rounded to it on the host, and Build's outputs keep the dtypes Specialize
// would give them. Values for value inputs are given in the declared dtype.
func (m *Model) SpecializeWith(shapes map[string][]int, values map[string]*ir.Tensor, opts SpecializeOptions) (*Plan, error) {
	return m.SpecializeStrings(shapes, values, nil, opts)
}

// SpecializeStrings is SpecializeWith for models with STRING inputs: strs
// gives their values, which specialise the plan (strings.go).
func (m *Model) SpecializeStrings(shapes map[string][]int, values map[string]*ir.Tensor, strs map[string]*StringTensor, opts SpecializeOptions) (*Plan, error) {
	prec, err := opts.mode()
	if err != nil {
		return nil, err
	}
	p := &Plan{m: m, dims: map[string]int{}, shapes: map[string][]int{}, values: map[string]*ir.Tensor{}, prec: prec}
	known := map[string]bool{}
	for _, in := range m.inputs {
		known[in.Name] = true
	}
	for name := range shapes {
		if !known[name] {
			return nil, &errs.InputError{Name: name, Problem: "name", Expected: "one of " + inputNames(m.inputs), Got: "unknown input " + quote(name)}
		}
	}
	for name := range values {
		if !known[name] {
			return nil, &errs.InputError{Name: name, Problem: "name", Expected: "one of " + inputNames(m.inputs), Got: "unknown input " + quote(name)}
		}
	}
	for _, in := range m.inputs {
		if in.Kind != KindTensor {
			return nil, &errs.InputError{Name: in.Name, Problem: "kind", Expected: "values for a " + in.Kind.String() + " input (Model.WithInputs)", Got: "tensor shapes"}
		}
		if isStr, err := p.bindStrings(in, strs); isStr || err != nil {
			if err != nil {
				return nil, err
			}
			continue
		}
		dims, given := shapes[in.Name]
		if v, ok := values[in.Name]; ok && v != nil {
			vd := v.Shape().Dimensions
			if given && !equalInts(vd, dims) {
				return nil, &errs.InputError{Name: in.Name, Problem: "shape", Expected: fmt.Sprint(dims), Got: fmt.Sprintf("a value of shape %v", vd)}
			}
			if want := graphDType(in.DType); v.DType() != in.DType && v.DType() != want {
				return nil, &errs.InputError{Name: in.Name, Problem: "dtype", Expected: in.DType.String(), Got: v.DType().String()}
			}
			dims, given = vd, true
			p.values[in.Name] = v
		}
		if !given {
			if !in.IsStatic() {
				return nil, &DimError{Param: firstSymbolic(in), Input: in.Name, Axis: firstSymbolicAxis(in),
					Reason: "no shape given for an input with symbolic dimensions " + in.String()}
			}
			dims = make([]int, len(in.Dims))
			for k, d := range in.Dims {
				dims[k] = d.Value
			}
		}
		if in.RankKnown {
			if len(dims) != len(in.Dims) {
				return nil, &errs.InputError{Name: in.Name, Problem: "shape", Expected: in.String(), Got: fmt.Sprint(dims)}
			}
			for k, d := range in.Dims {
				if dims[k] < 0 {
					return nil, &errs.InputError{Name: in.Name, Problem: "shape", Expected: "non-negative dimensions", Got: fmt.Sprint(dims)}
				}
				switch {
				case d.Value >= 0 && d.Value != dims[k]:
					return nil, &errs.InputError{Name: in.Name, Problem: "shape", Expected: in.String(), Got: fmt.Sprint(dims)}
				case d.Value < 0 && d.Param != "":
					if prev, ok := p.dims[d.Param]; ok && prev != dims[k] {
						return nil, &DimError{Param: d.Param, Input: in.Name, Axis: k,
							Reason: fmt.Sprintf("given %d here but %d by an earlier input", dims[k], prev)}
					}
					p.dims[d.Param] = dims[k]
				}
			}
		}
		p.shapes[in.Name] = append([]int{}, dims...)
		if _, isValue := p.values[in.Name]; !isValue {
			p.params = append(p.params, Param{Name: in.Name, Shape: ir.MakeShape(prec.nodeDT(in.DType), dims...)})
		}
	}
	for _, name := range m.valueInputs {
		if _, ok := p.values[name]; !ok {
			return nil, &errs.InputError{Name: name, Problem: "value", Expected: "its value at specialisation time (it determines shapes in the graph)", Got: "only a shape"}
		}
	}
	if err := p.selectWeights(opts.WeightsAsParams, opts.Weights); err != nil {
		return nil, err
	}
	return p, nil
}

func quote(s string) string { return fmt.Sprintf("%q", s) }

func inputNames(specs []ValueSpec) string {
	names := make([]string, len(specs))
	for k, s := range specs {
		names[k] = quote(s.Name)
	}
	if len(names) == 0 {
		return "(none: the model has no inputs)"
	}
	return strings.Join(names, ", ")
}

func firstSymbolic(s ValueSpec) string {
	for _, d := range s.Dims {
		if d.Value < 0 {
			return d.Param
		}
	}
	return ""
}

func firstSymbolicAxis(s ValueSpec) int {
	for k, d := range s.Dims {
		if d.Value < 0 {
			return k
		}
	}
	return -1
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if a[k] != b[k] {
			return false
		}
	}
	return true
}

// Params returns the graph parameters the plan expects, in the model's input
// order, excluding value inputs (which are folded into the graph).
func (p *Plan) Params() []Param { return append([]Param(nil), p.params...) }

// Dims returns the value each symbolic dimension name was given.
func (p *Plan) Dims() map[string]int {
	out := make(map[string]int, len(p.dims))
	for k, v := range p.dims {
		out[k] = v
	}
	return out
}

// Model returns the model the plan specialises.
func (p *Plan) Model() *Model { return p.m }

// Build adds the model's computation to g, reading each parameter from
// inputs (keyed by input name, shaped as Params says) and returning the
// model's outputs keyed by output name. Float16 values are Float32 nodes
// (convert host tensors with ToGraphDType and ToModelDType). Failures,
// GoMLX panics included, come back as errors naming the node.
//
// With a 16-bit compute precision (SpecializeWith), parameters are nodes
// of Param's dtype and every output is converted in the graph to
// GraphDType of its declared dtype (BFloat16 and Float16 to Float32 is
// exact), so ToModelDType applies unchanged. A compute dtype the backend
// cannot execute (Float16 on the pure-Go backend) is an
// *errs.UnsupportedError.
//
// Some parameters may end up unused (an input only read for its shape).
// The pure-Go backend of GoMLX v0.26.0 fails with an index-out-of-range
// panic when executing a graph with a parameter no output depends on; Run
// works around it by returning such parameters as extra outputs, and other
// callers must do the same or not declare them.
func (p *Plan) Build(g *ir.Graph, inputs map[string]*ir.Node) (outs map[string]*ir.Node, err error) {
	return p.buildTraced(g, inputs, nil)
}

// buildTraced is Build recording in tr, when not nil, which ONNX node
// created which graph nodes (gradcheck.go).
func (p *Plan) buildTraced(g *ir.Graph, inputs map[string]*ir.Node, tr *nodeTrace) (outs map[string]*ir.Node, err error) {
	if g == nil {
		return nil, errors.New("onnx: Build needs a graph")
	}
	if err := p.CheckEngine(g.Backend()); err != nil {
		return nil, err
	}
	truncates := bf16ConvertTruncates(g.Backend())
	b := &builder{m: p.m, g: g, vals: map[string]*value{}, prec: p.prec, trace: tr,
		emulate: p.prec.compute == ir.BFloat16 && truncates, wideBF16: !p.prec.low() && truncates,
		idx: newIndexRecorder(p.m)}
	for _, prm := range p.params {
		n, ok := inputs[prm.Name]
		if !ok || n == nil {
			return nil, &errs.InputError{Name: prm.Name, Problem: "name", Expected: "a node for every parameter", Got: "no node for " + quote(prm.Name)}
		}
		if !n.Shape().Equal(prm.Shape) {
			return nil, &errs.InputError{Name: prm.Name, Problem: "shape", Expected: prm.Shape.String(), Got: n.Shape().String()}
		}
		dt := prm.Shape.DType
		for _, in := range p.m.inputs {
			if in.Name == prm.Name {
				dt = p.prec.logicalDT(in.logical())
			}
		}
		if b.wideBF16 && n.DType() == ir.BFloat16 {
			n = graph.ConvertDType(n, ir.Float32) // exact
		}
		b.vals[prm.Name] = &value{name: prm.Name, dt: dt, node: n}
	}
	for name := range inputs {
		if _, ok := b.vals[name]; !ok {
			if _, isValue := p.values[name]; !isValue && !p.isWeight(name) {
				return nil, &errs.InputError{Name: name, Problem: "name", Expected: "one of " + inputNames(p.m.inputs), Got: "unknown input " + quote(name)}
			}
		}
	}
	for name, t := range p.values {
		dt := t.DType()
		for _, in := range p.m.inputs {
			if in.Name == name {
				dt = p.prec.hostDT(in.logical())
			}
		}
		b.vals[name] = &value{name: name, dt: dt, host: hostFromIR(t, dt)}
	}
	for name, t := range p.m.inits {
		dt := p.prec.hostDT(p.m.initDT[name])
		b.vals[name] = &value{name: name, dt: dt, host: hostFromIR(t, dt)}
	}
	if err := p.bindWeights(b, inputs); err != nil {
		return nil, err
	}
	p.bindStringValues(b)
	if err := b.convertNodes(p.m.nodes, p.m.defs, p.m.attrs); err != nil {
		return nil, err
	}
	outs = map[string]*ir.Node{}
	p.layout.mu.Lock()
	defer p.layout.mu.Unlock()
	p.layout.flat, p.layout.vals = nil, map[string]Value{}
	for _, o := range p.m.outputs {
		v := b.vals[o.Name]
		if v == nil {
			return nil, &ModelError{Reason: fmt.Sprintf("output %q was not computed", o.Name)}
		}
		if o.DType == String { // host only: not a graph output (strings.go)
			if v.host == nil || v.host.dt != String {
				return nil, &ModelError{Reason: fmt.Sprintf("STRING output %q was not computed on the host", o.Name)}
			}
			p.strOut.set(o.Name, v.host.toStringTensor())
			continue
		}
		if p.m.HasStructuredBoundary() { // sequences and optionals: values.go
			skel, err := b.flattenOutput(o, v, o.Name, outs, &p.layout.flat)
			if err != nil {
				return nil, err
			}
			p.layout.vals[o.Name] = skel
			continue
		}
		n, err := b.safeNodeOf(v)
		if err != nil {
			return nil, fmt.Errorf("output %q: %w", o.Name, err)
		}
		if want := graphDType(o.DType); p.prec.low() && lowerable(n.DType()) && lowerable(want) && n.DType() != want {
			n = b.roundNode(n, want)
		}
		if b.wideBF16 && o.DType == ir.BFloat16 && n.DType() == ir.Float32 {
			n = rneBFloat16(n)
		}
		outs[o.Name] = n
	}
	b.idx.finish(p, outs)
	return outs, nil
}

// BuildGraph specialises the model to the shapes of the given nodes and
// builds it on g (see Plan.Build). Models with value inputs need Specialize
// with their values instead.
func (m *Model) BuildGraph(g *ir.Graph, inputs map[string]*ir.Node) (map[string]*ir.Node, error) {
	shapes := map[string][]int{}
	for name, n := range inputs {
		if n == nil {
			return nil, &errs.InputError{Name: name, Problem: "value", Expected: "a graph node", Got: "nil"}
		}
		shapes[name] = n.Shape().Dimensions
	}
	for _, in := range m.inputs {
		n, ok := inputs[in.Name]
		if !ok {
			continue
		}
		if want := graphDType(in.DType); n.DType() != want {
			return nil, &errs.InputError{Name: in.Name, Problem: "dtype", Expected: want.String(), Got: n.DType().String()}
		}
	}
	p, err := m.Specialize(shapes, nil)
	if err != nil {
		return nil, err
	}
	return p.Build(g, inputs)
}

// builder holds the state of one graph construction.
type builder struct {
	m      *Model
	g      *graph.Graph
	vals   map[string]*value
	parent *builder // enclosing graph's builder, for subgraphs
	prec   precisionMode
	views  map[viewKey]*value // adapted inputs (see adaptInputs)
	// emulate: BFloat16 ops compute in Float32 and round, because the
	// backend's BFloat16 arithmetic truncates (see adaptInputs).
	emulate bool
	// wideBF16: at Float32 compute on a backend whose BFloat16 arithmetic
	// truncates, values the model declares BFLOAT16 are Float32 nodes (as
	// Float16 values always are), rounded to BFloat16 to nearest even at
	// casts to BFLOAT16 and at the model's outputs (see graphDT).
	wideBF16 bool
	// trace, when not nil, records the graph nodes each ONNX node created.
	trace *nodeTrace
	// idx records index range checks (indexcheck.go): the main graph's
	// and its control-flow bodies'; nil in constant folds.
	idx *indexRecorder
}

// graphDT is the dtype of graph nodes for values the model declares dt:
// the precision mode's node dtype, with BFloat16 widened to Float32 under
// wideBF16.
func (b *builder) graphDT(dt ir.DType) ir.DType {
	dt = b.prec.nodeDT(dt)
	if b.wideBF16 && dt == ir.BFloat16 {
		return ir.Float32
	}
	return dt
}

// widenOutputs, under wideBF16, widens (exactly) any BFloat16 graph
// output a converter produced (a generator, a rounding cast) to Float32,
// keeping its logical dtype, so that every BFLOAT16 value is a Float32
// node and the backend never computes in BFloat16.
func (b *builder) widenOutputs(c *opCtx) {
	if !b.wideBF16 {
		return
	}
	for _, o := range c.outs {
		if o != nil && o.node != nil && o.node.DType() == ir.BFloat16 {
			o.node = graph.ConvertDType(o.node, ir.Float32)
			o.dt = ir.BFloat16
		}
	}
}

// buildSubgraph converts a graph attribute (an If branch...) in a child
// builder that sees this builder's values, with the given values bound to
// the subgraph's formal inputs, and returns its outputs.
func (b *builder) buildSubgraph(g *onnxpb.Graph, inputs []*value) ([]*value, error) {
	sg := b.m.subs[g]
	if sg == nil {
		return nil, fmt.Errorf("subgraph %q was not prepared", g.Name)
	}
	child := &builder{m: b.m, g: b.g, vals: map[string]*value{}, parent: b, prec: b.prec, emulate: b.emulate, wideBF16: b.wideBF16, trace: b.trace,
		idx: b.idx} // a body's index checks reach the outer graph's check output (indexcheck.go)
	for name, t := range sg.inits {
		dt := b.prec.hostDT(sg.initDT[name])
		child.vals[name] = &value{name: name, dt: dt, host: hostFromIR(t, dt)}
	}
	if len(inputs) != len(g.Input) {
		return nil, fmt.Errorf("subgraph %q takes %d inputs, got %d", g.Name, len(g.Input), len(inputs))
	}
	for k, in := range g.Input {
		v := *inputs[k]
		v.name = in.Name
		child.vals[in.Name] = &v
	}
	if err := child.convertNodes(sg.nodes, sg.defs, sg.attrs); err != nil {
		return nil, err
	}
	outs := make([]*value, len(g.Output))
	for k, o := range g.Output {
		v := child.lookup(o.Name)
		if v == nil {
			return nil, fmt.Errorf("subgraph %q output %q is not computed", g.Name, o.Name)
		}
		outs[k] = v
	}
	return outs, nil
}

// nodeOf returns v as a graph node, materialising a host value as a
// constant once.
func (b *builder) nodeOf(v *value) *graph.Node {
	if v.node != nil {
		return v.node
	}
	if v.host == nil {
		panic(fmt.Errorf("value %q is a sequence, not a tensor", v.name))
	}
	cdt := b.prec.constDT(v.host.dt)
	if b.wideBF16 && cdt == ir.BFloat16 {
		cdt = ir.Float32
	}
	t, err := v.host.toIRAs(cdt)
	if err != nil {
		panic(fmt.Errorf("value %q: %w", v.name, err))
	}
	v.node = graph.ConstTensor(b.g, t)
	return v.node
}

func (b *builder) safeNodeOf(v *value) (n *graph.Node, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = panicError(r)
		}
	}()
	return b.nodeOf(v), nil
}

// panicError turns a recovered panic value into an error.
// A runtime error (a bug in a converter: index out of range, nil
// dereference) gets the innermost importer source position appended.
func panicError(r any) error {
	if re, ok := r.(runtime.Error); ok {
		return fmt.Errorf("%w (at %s)", re, panicSite())
	}
	if e, ok := r.(error); ok {
		return e
	}
	return fmt.Errorf("%v", r)
}

// panicSite returns file:line of the innermost frame of this package's
// converters on the current (panicking) stack.
func panicSite() string {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(3, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if strings.Contains(f.Function, "tensorbridge/onnx.") && !strings.Contains(f.Function, "panicError") &&
			!strings.HasSuffix(f.File, "/build.go") {
			return fmt.Sprintf("%s:%d", filepath.Base(f.File), f.Line)
		}
		if !more {
			return "unknown"
		}
	}
}

// lookup finds a value by name in this builder or an enclosing one (a
// subgraph reads its parents' values).
func (b *builder) lookup(name string) *value {
	for s := b; s != nil; s = s.parent {
		if v := s.vals[name]; v != nil {
			return v
		}
	}
	return nil
}

func (b *builder) convertNodes(nodes []*onnxpb.Node, defs []*opDef, attrs []map[string]*onnxpb.Attribute) error {
	for k, n := range nodes {
		c := &opCtx{
			b: b, node: n, def: defs[k], name: nodeName(n), opset: b.m.opset, g: b.g,
			attrs: attrs[k],
		}
		c.inputs = make([]*value, len(n.Input))
		for i, name := range n.Input {
			if name == "" {
				continue
			}
			v := b.lookup(name)
			if v == nil {
				return &ModelError{Reason: fmt.Sprintf("node %q (%s) reads undefined value %q", c.name, n.OpType, name)}
			}
			c.inputs[i] = v
		}
		c.outs = make([]*value, len(n.Output))
		for i, name := range n.Output {
			if name != "" {
				c.outs[i] = &value{name: name}
			}
		}
		first := len(b.g.Nodes())
		if err := b.convertNode(c); err != nil {
			return err
		}
		b.trace.record(first, len(b.g.Nodes()), n.OpType, c.name)
		for i, o := range c.outs {
			if o == nil {
				continue
			}
			if o.host == nil && o.node == nil && o.seq == nil && !o.none {
				return &NodeError{Node: c.name, Op: n.OpType, Err: fmt.Errorf("converter did not produce output %d (%q)", i, o.name)}
			}
			b.vals[o.name] = o
		}
	}
	return nil
}

// convertNode picks how to compute a node: on the host when every input
// is known and the op has a host evaluator; by folding a small graph when
// every input is known, a consumer needs the result at build time and
// only a graph converter exists; in the graph otherwise.
func (b *builder) convertNode(c *opCtx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = panicError(r)
		}
		if err != nil {
			var nc *NotConstantError
			var ne *NodeError
			if !errors.As(err, &nc) && !errors.As(err, &ne) {
				err = &NodeError{Node: c.name, Op: c.node.OpType, Err: err}
			}
		}
	}()
	allHost := true
	for _, in := range c.inputs {
		if in != nil && in.host == nil {
			allHost = false
		}
	}
	if allHost && len(c.inputs) == 0 && c.def.host == nil {
		allHost = false // a generator with no inputs and only a graph converter
	}
	needed := false
	for _, o := range c.outs {
		if o != nil && b.m.needConst[o.name] {
			needed = true
		}
	}
	if allHost && c.def.host != nil {
		if err := c.def.host(c); !errors.Is(err, errNoHost) {
			if err != nil {
				return err
			}
			return b.adaptOutputs(c, true)
		}
	}
	computeOut := false
	if c.def.conv != nil {
		computeOut = b.adaptInputs(c)
	}
	switch {
	case allHost && needed && c.def.conv != nil:
		if err := b.fold(c); err != nil {
			return err
		}
		return b.adaptOutputs(c, computeOut)
	case c.def.conv != nil:
		if err := c.def.conv(c); err != nil {
			return err
		}
		b.widenOutputs(c)
		return b.adaptOutputs(c, computeOut)
	}
	for k, in := range c.inputs {
		if in != nil && in.host == nil {
			return &NotConstantError{Node: c.name, Op: c.node.OpType, Input: k, Name: in.name}
		}
	}
	return fmt.Errorf("op has no converter for these inputs")
}

// fold computes a node whose inputs are all known by building and running
// it as a separate small graph on the same engine, and records its outputs
// as host values.
func (b *builder) fold(c *opCtx) error {
	fg := graph.NewGraph(b.g.Backend(), ir.EphemeralPrefix+"onnx_fold_"+c.node.OpType)
	defer fg.Finalize()
	fb := &builder{m: b.m, g: fg, vals: map[string]*value{}, prec: b.prec, emulate: b.emulate, wideBF16: b.wideBF16}
	fc := *c
	fc.b, fc.g = fb, fg
	fc.inputs = make([]*value, len(c.inputs))
	for k, in := range c.inputs {
		if in != nil {
			fc.inputs[k] = &value{name: in.name, dt: in.dt, host: in.host}
		}
	}
	fc.outs = make([]*value, len(c.outs))
	for k, o := range c.outs {
		if o != nil {
			fc.outs[k] = &value{name: o.name}
		}
	}
	if err := c.def.conv(&fc); err != nil {
		return err
	}
	var nodes []*graph.Node
	var idx []int
	for k, o := range fc.outs {
		if o == nil {
			continue
		}
		if o.host != nil {
			c.outs[k].host, c.outs[k].dt = o.host, o.dt
			continue
		}
		if o.node == nil {
			return fmt.Errorf("converter did not produce output %d", k)
		}
		nodes = append(nodes, o.node)
		idx = append(idx, k)
	}
	if len(nodes) == 0 {
		return nil
	}
	res, err := compileAndRun(fg, nodes, nil)
	if err != nil {
		return err
	}
	for j, t := range res {
		k := idx[j]
		o := fc.outs[k]
		h := hostFromIR(t, t.DType())
		if err := h.decode(); err != nil {
			return err
		}
		h.src = nil
		h.dt = o.dt
		h.normalize()
		c.outs[k].host, c.outs[k].dt = h, o.dt
	}
	return nil
}
