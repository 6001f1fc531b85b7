package onnx

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// Sequence and optional values at the model boundary.
//
// ONNX models may take and return sequences of tensors
// (https://onnx.ai/onnx/repo-docs/IR.html#static-tensor-shapes-and-types,
// "seq(tensor)") and optional values ("optional(T)", ONNX IR version 8).
// Inside a graph the importer holds a sequence as a list fixed when the
// graph is built, and an optional as its element or as "none". At the
// boundary a Value carries them; a model is specialised to the structure of
// its inputs (each sequence's length, each optional's presence) as it is to
// their shapes: WithInputs derives a model whose inputs are plain tensors
// (element k of sequence "s" is the tensor input "s[k]", an optional's
// element is "o?") and whose graph starts by building the sequences and
// optionals from them. Outputs come back the same way, flattened by
// Plan.Build and reassembled by Plan.AssembleOutputs.

// ValueKind says what a model input or output holds.
type ValueKind int

const (
	// KindTensor is a tensor (the zero value: every ValueSpec of a
	// tensor-only model).
	KindTensor ValueKind = iota
	// KindSequence is a sequence of values of one type (ONNX seq(T)).
	KindSequence
	// KindOptional is a value that may be absent (ONNX optional(T)).
	KindOptional
)

func (k ValueKind) String() string {
	switch k {
	case KindTensor:
		return "tensor"
	case KindSequence:
		return "sequence"
	case KindOptional:
		return "optional"
	}
	return fmt.Sprintf("ValueKind(%d)", int(k))
}

// Value is a model input or output: a tensor, a sequence of values, or an
// optional value, present or not. The zero Value is an invalid tensor.
// Values are immutable; constructors copy their slices.
type Value struct {
	kind    ValueKind
	tensor  *ir.Tensor
	elems   []Value // a sequence's elements; an optional's element (one, when present)
	present bool    // an optional's presence
}

// TensorValue wraps a tensor.
func TensorValue(t *ir.Tensor) Value { return Value{kind: KindTensor, tensor: t} }

// SequenceValue is a sequence of the given elements (none: an empty sequence).
func SequenceValue(elems ...Value) Value {
	return Value{kind: KindSequence, elems: append([]Value{}, elems...)}
}

// OptionalValue is an optional holding v.
func OptionalValue(v Value) Value { return Value{kind: KindOptional, elems: []Value{v}, present: true} }

// NoneValue is an empty optional.
func NoneValue() Value { return Value{kind: KindOptional} }

// Kind says what v holds.
func (v Value) Kind() ValueKind { return v.kind }

// Tensor is v's tensor, nil unless v is a tensor.
func (v Value) Tensor() *ir.Tensor {
	if v.kind != KindTensor {
		return nil
	}
	return v.tensor
}

// Len is a sequence's length (0 for other kinds).
func (v Value) Len() int {
	if v.kind != KindSequence {
		return 0
	}
	return len(v.elems)
}

// Elems returns a sequence's elements (nil for other kinds).
func (v Value) Elems() []Value {
	if v.kind != KindSequence {
		return nil
	}
	return append([]Value{}, v.elems...)
}

// Get returns an optional's element and whether it is present.
func (v Value) Get() (Value, bool) {
	if v.kind != KindOptional || !v.present {
		return Value{}, false
	}
	return v.elems[0], true
}

func (v Value) String() string {
	switch v.kind {
	case KindSequence:
		parts := make([]string, len(v.elems))
		for k, e := range v.elems {
			parts[k] = e.String()
		}
		return "seq[" + strings.Join(parts, ", ") + "]"
	case KindOptional:
		if !v.present {
			return "none"
		}
		return "optional(" + v.elems[0].String() + ")"
	}
	if v.tensor == nil {
		return "<nil tensor>"
	}
	return v.tensor.Shape().String()
}

// seqElemName and optElemName are the flattened names of a sequence's
// element k and an optional's element.
func seqElemName(name string, k int) string { return fmt.Sprintf("%s[%d]", name, k) }
func optElemName(name string) string        { return name + "?" }

// structuredSpec reads a sequence or optional type. Sequences of tensors
// and optionals of tensors or of sequences of tensors are supported; maps
// and deeper nesting are refused.
func structuredSpec(vi onnxpb.ValueInfo) (ValueSpec, error) {
	var conv func(name string, tp *onnxpb.TypeProto, depth int) (ValueSpec, error)
	conv = func(name string, tp *onnxpb.TypeProto, depth int) (ValueSpec, error) {
		switch {
		case tp == nil:
			return ValueSpec{}, &ModelError{Reason: fmt.Sprintf("value %q has no element type", vi.Name)}
		case tp.TensorType != nil:
			return specFromValueInfo(onnxpb.ValueInfo{Name: name, Type: tp})
		case tp.SequenceType != nil && depth < 2:
			e, err := conv(name, tp.SequenceType.ElemType, depth+1)
			if err != nil {
				return e, err
			}
			if e.Kind != KindTensor {
				break
			}
			return ValueSpec{Name: name, Kind: KindSequence, DType: e.DType, Narrow: e.Narrow, Elem: &e}, nil
		case tp.OptionalType != nil && depth == 0:
			e, err := conv(name, tp.OptionalType.ElemType, depth+1)
			if err != nil {
				return e, err
			}
			return ValueSpec{Name: name, Kind: KindOptional, DType: e.DType, Narrow: e.Narrow, Elem: &e}, nil
		}
		return ValueSpec{}, &UnsupportedDTypeError{Name: "non-tensor type (map, sparse tensor, or sequences and optionals nested deeper than optional(sequence(tensor)))",
			Where: fmt.Sprintf("value %q", vi.Name)}
	}
	return conv(vi.Name, vi.Type, 0)
}

// HasStructuredBoundary says whether an input or output is a sequence or
// an optional (such a model runs through values: WithInputs, then
// Plan.AssembleOutputs).
func (m *Model) HasStructuredBoundary() bool {
	for _, s := range append(append([]ValueSpec{}, m.inputs...), m.outputs...) {
		if s.Kind != KindTensor {
			return true
		}
	}
	return false
}

// WithInputs specialises the model's boundary to the structure of the
// given input values: it returns a model whose inputs are all tensors (the
// flattened ones: "s[k]" for element k of sequence s, "o?" for optional o's
// element), the flattened tensors keyed by those names, and a key naming
// the structure (part of a specialisation key). A tensor-only model comes
// back unchanged with key "". Errors are *errs.InputError naming the input
// and the kind expected against the one given.
func (m *Model) WithInputs(inputs map[string]Value) (*Model, map[string]*ir.Tensor, string, error) {
	flat := map[string]*ir.Tensor{}
	known := map[string]bool{}
	for _, in := range m.inputs {
		known[in.Name] = true
	}
	for name := range inputs {
		if !known[name] {
			return nil, nil, "", &errs.InputError{Name: name, Problem: "name", Expected: "one of " + inputNames(m.inputs), Got: "unknown input " + quote(name)}
		}
	}
	structured := false
	for _, in := range m.inputs {
		if in.Kind != KindTensor {
			structured = true
		}
	}
	if !structured {
		for name, v := range inputs {
			if v.kind != KindTensor {
				return nil, nil, "", &errs.InputError{Name: name, Problem: "kind", Expected: "a tensor", Got: "a " + v.kind.String()}
			}
			flat[name] = v.tensor
		}
		return m, flat, "", nil
	}
	dm := *m
	dm.inputs = nil
	dm.needConst, dm.valueInputs = nil, nil
	var pre []*onnxpb.Node
	var keys []string
	addNode := func(op string, in []string, out string, attrs ...onnxpb.Attribute) {
		pre = append(pre, &onnxpb.Node{OpType: op, Input: in, Output: []string{out}, Name: "tensorbridge_boundary_" + out, Attribute: attrs})
	}
	var flatten func(spec ValueSpec, v Value, name string) error
	flatten = func(spec ValueSpec, v Value, name string) error {
		if v.kind != spec.Kind {
			return &errs.InputError{Name: name, Problem: "kind", Expected: "a " + spec.Kind.String(), Got: "a " + v.kind.String()}
		}
		switch spec.Kind {
		case KindTensor:
			if v.tensor == nil {
				return &errs.InputError{Name: name, Problem: "value", Expected: "a tensor", Got: "nil"}
			}
			s := spec
			s.Name = name
			if name != spec.Name {
				// A sequence's elements may differ in shape: their
				// symbolic dimensions are unnamed, so each element
				// sizes its own.
				s.Dims = append([]Dim(nil), spec.Dims...)
				for d := range s.Dims {
					if s.Dims[d].Value < 0 {
						s.Dims[d].Param = ""
					}
				}
			}
			dm.inputs = append(dm.inputs, s)
			flat[name] = v.tensor
		case KindSequence:
			keys = append(keys, fmt.Sprintf("%s=seq%d", name, len(v.elems)))
			if len(v.elems) == 0 {
				addNode("SequenceEmpty", nil, name, onnxpb.Attribute{Name: "dtype", Type: onnxpb.AttrInt, I: int64(onnxTypeOf(spec.logical()))})
				return nil
			}
			var names []string
			for k, e := range v.elems {
				en := seqElemName(name, k)
				if err := flatten(*spec.Elem, e, en); err != nil {
					return err
				}
				names = append(names, en)
			}
			addNode("SequenceConstruct", names, name)
		case KindOptional:
			if !v.present {
				keys = append(keys, name+"=none")
				addNode("Optional", nil, name)
				return nil
			}
			keys = append(keys, name+"=some")
			en := optElemName(name)
			if err := flatten(*spec.Elem, v.elems[0], en); err != nil {
				return err
			}
			addNode("Optional", []string{en}, name)
		}
		return nil
	}
	for _, in := range m.inputs {
		v, ok := inputs[in.Name]
		if !ok {
			if in.Kind == KindOptional {
				v = NoneValue() // an optional input left out is absent
			} else {
				return nil, nil, "", &errs.InputError{Name: in.Name, Problem: "missing", Expected: in.String(), Got: "no value"}
			}
		}
		if err := flatten(in, v, in.Name); err != nil {
			return nil, nil, "", err
		}
	}
	dm.nodes = append(append([]*onnxpb.Node{}, pre...), m.nodes...)
	dm.defs = make([]*opDef, 0, len(dm.nodes))
	dm.attrs = make([]map[string]*onnxpb.Attribute, 0, len(dm.nodes))
	for _, n := range pre {
		dm.defs = append(dm.defs, boundaryDefs[n.OpType])
		a := map[string]*onnxpb.Attribute{}
		for k := range n.Attribute {
			a[n.Attribute[k].Name] = &n.Attribute[k]
		}
		dm.attrs = append(dm.attrs, a)
	}
	dm.defs = append(dm.defs, m.defs...)
	dm.attrs = append(dm.attrs, m.attrs...)
	dm.analyseConst()
	sort.Strings(keys)
	return &dm, flat, strings.Join(keys, ","), nil
}

// boundaryDefs convert the nodes WithInputs puts before the graph, whatever
// the model's opset (a model of opset 11 may take a sequence input).
// Each has a host evaluator, so that a sequence of build-time values is one.
var boundaryDefs = map[string]*opDef{
	"SequenceEmpty":     {op: "SequenceEmpty", since: 11, conv: convSequenceEmpty, host: convSequenceEmpty},
	"SequenceConstruct": {op: "SequenceConstruct", since: 11, conv: convSequenceConstruct, host: convSequenceConstruct},
	"Optional":          {op: "Optional", since: 15, conv: convOptional, host: convOptional},
}

// onnxTypeOf is the ONNX element type naming dt.
func onnxTypeOf(dt ir.DType) onnxpb.DataType {
	for t := onnxpb.DataType(1); t < 64; t++ {
		if d, err := dtypeFromONNX(t); err == nil && d == dt {
			return t
		}
	}
	return onnxpb.Float
}

// outputLayout records, per structured output, its structure once a plan
// has been built (Plan.Build fills it).
type outputLayout struct {
	mu   sync.Mutex
	flat []ValueSpec      // every flattened tensor output, in order
	vals map[string]Value // structured outputs with nil tensors, by name
}

// flattenOutput puts value v of structured output spec into outs under its
// flattened names and returns the structure (tensors nil) and the
// flattened specs.
func (b *builder) flattenOutput(spec ValueSpec, v *value, name string, outs map[string]*ir.Node, flat *[]ValueSpec) (Value, error) {
	switch spec.Kind {
	case KindSequence:
		if v.seq == nil {
			return Value{}, fmt.Errorf("output %q is declared a sequence but the graph computes a tensor", name)
		}
		elems := make([]Value, len(v.seq))
		for k, e := range v.seq {
			en := seqElemName(name, k)
			ev, err := b.flattenOutput(*spec.Elem, e, en, outs, flat)
			if err != nil {
				return Value{}, err
			}
			elems[k] = ev
		}
		return Value{kind: KindSequence, elems: elems}, nil
	case KindOptional:
		if v.none {
			return NoneValue(), nil
		}
		ev, err := b.flattenOutput(*spec.Elem, v, optElemName(name), outs, flat)
		if err != nil {
			return Value{}, err
		}
		return OptionalValue(ev), nil
	}
	if v.none || v.seq != nil {
		return Value{}, fmt.Errorf("output %q is declared a tensor but the graph computes a sequence or an optional", name)
	}
	n, err := b.safeNodeOf(v)
	if err != nil {
		return Value{}, fmt.Errorf("output %q: %w", name, err)
	}
	// As Build does for tensor outputs.
	if want := graphDType(spec.DType); b.prec.low() && lowerable(n.DType()) && lowerable(want) && n.DType() != want {
		n = b.roundNode(n, want)
	}
	if b.wideBF16 && spec.DType == ir.BFloat16 && n.DType() == ir.Float32 {
		n = rneBFloat16(n)
	}
	outs[name] = n
	s := spec
	s.Name = name
	*flat = append(*flat, s)
	return Value{kind: KindTensor}, nil
}

// FlatOutputs returns the plan's outputs as the graph computes them, after
// Build: the model's declared outputs for a tensor-only model; otherwise
// every tensor within its sequence and optional outputs, under flattened
// names ("s[k]", "o?"), in declaration order.
func (p *Plan) FlatOutputs() []ValueSpec {
	if !p.m.HasStructuredBoundary() {
		return p.m.Outputs()
	}
	p.layout.mu.Lock()
	defer p.layout.mu.Unlock()
	return append([]ValueSpec(nil), p.layout.flat...)
}

// AssembleOutputs turns the flattened outputs of a run (keyed as
// FlatOutputs names them) into the model's declared outputs.
func (p *Plan) AssembleOutputs(flat map[string]*ir.Tensor) (map[string]Value, error) {
	out := map[string]Value{}
	p.layout.mu.Lock()
	defer p.layout.mu.Unlock()
	var fill func(skel Value, name string) (Value, error)
	fill = func(skel Value, name string) (Value, error) {
		switch skel.kind {
		case KindSequence:
			elems := make([]Value, len(skel.elems))
			for k, e := range skel.elems {
				ev, err := fill(e, seqElemName(name, k))
				if err != nil {
					return Value{}, err
				}
				elems[k] = ev
			}
			return Value{kind: KindSequence, elems: elems}, nil
		case KindOptional:
			if !skel.present {
				return NoneValue(), nil
			}
			ev, err := fill(skel.elems[0], optElemName(name))
			if err != nil {
				return Value{}, err
			}
			return OptionalValue(ev), nil
		}
		t, ok := flat[name]
		if !ok {
			return Value{}, fmt.Errorf("onnx: output %q missing from the run's results", name)
		}
		return TensorValue(t), nil
	}
	for _, o := range p.m.outputs {
		if o.Kind == KindTensor {
			t, ok := flat[o.Name]
			if !ok {
				return nil, fmt.Errorf("onnx: output %q missing from the run's results", o.Name)
			}
			out[o.Name] = TensorValue(t)
			continue
		}
		skel, ok := p.layout.vals[o.Name]
		if !ok {
			return nil, fmt.Errorf("onnx: output %q: the plan has not been built", o.Name)
		}
		v, err := fill(skel, o.Name)
		if err != nil {
			return nil, err
		}
		out[o.Name] = v
	}
	return out, nil
}

// The optional ops (opset 15 and 18; https://onnx.ai/onnx/operators/
// onnx__Optional.html, onnx__OptionalHasElement.html,
// onnx__OptionalGetElement.html). A present optional is its element; an
// empty one a value marked none.

func init() {
	// Each is its own host evaluator: they move values, never compute.
	register("Optional", 15, convOptional).withHost(convOptional)
	register("OptionalHasElement", 15, convOptionalHasElement(15)).withHost(convOptionalHasElement(15))
	register("OptionalHasElement", 18, convOptionalHasElement(18)).withHost(convOptionalHasElement(18))
	register("OptionalGetElement", 15, convOptionalGetElement(15)).withHost(convOptionalGetElement(15))
	register("OptionalGetElement", 18, convOptionalGetElement(18)).withHost(convOptionalGetElement(18))
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("Optional", "OptionalGetElement", "OptionalHasElement")
}

// copyValue makes output k a copy of v (tensor, sequence or none).
func (c *opCtx) copyValue(k int, v *value) {
	if !c.wantsOutput(k) {
		return
	}
	o := c.outs[k]
	o.dt, o.host, o.node, o.seq, o.none = v.dt, v.host, v.node, v.seq, v.none
}

func convOptional(c *opCtx) error {
	if c.has(0) {
		c.copyValue(0, c.input(0))
		return nil
	}
	if c.wantsOutput(0) {
		c.outs[0].none = true
	}
	return nil
}

func convOptionalHasElement(v int) converterFunc {
	return func(c *opCtx) error {
		has := c.has(0) && !c.input(0).none
		if v < 18 && !c.has(0) {
			c.fail("input is required before opset 18")
		}
		h := int64(0)
		if has {
			h = 1
		}
		c.setHost(0, newHostInts(ir.Bool, nil, []int64{h}))
		return nil
	}
}

func convOptionalGetElement(v int) converterFunc {
	return func(c *opCtx) error {
		in := c.input(0)
		if in.none {
			c.fail("input %q is an empty optional", in.name)
		}
		c.copyValue(0, in)
		return nil
	}
}

// RunValues is Run for models with sequence or optional inputs or outputs
// (any model works): inputs and outputs are Values. An optional input left
// out is absent.
func (m *Model) RunValues(ctx context.Context, engine ir.Engine, inputs map[string]Value, opts SpecializeOptions) (map[string]Value, error) {
	dm, flat, _, err := m.WithInputs(inputs)
	if err != nil {
		return nil, err
	}
	outs, p, err := dm.runWith(ctx, engine, flat, opts)
	if err != nil {
		return nil, err
	}
	return p.AssembleOutputs(outs)
}

// selectStructured sets output k of an If whose condition is computed at
// run time, when its branches give sequences or optionals: both must have
// the same structure (lengths, presence) and element shapes, and the
// elements are selected one by one. Branches whose structure differs can
// only be chosen when the graph is built.
func (c *opCtx) selectStructured(k int, cond *graph.Node, t, e *value) {
	if t.none || e.none {
		if t.none && e.none {
			c.copyValue(k, t)
			return
		}
		c.fail("output %d: one branch gives an empty optional and the other a value; with a condition computed at run time the branches must agree", k)
	}
	if (t.seq == nil) != (e.seq == nil) || len(t.seq) != len(e.seq) {
		c.fail("output %d: the branches give sequences of different lengths (or a sequence and a tensor); with a condition computed at run time they must agree", k)
	}
	elems := make([]*value, len(t.seq))
	for j := range t.seq {
		tn, en := c.b.nodeOf(t.seq[j]), c.b.nodeOf(e.seq[j])
		if !equalInts(tn.Shape().Dimensions, en.Shape().Dimensions) || tn.DType() != en.DType() {
			c.fail("output %d element %d: the branches give shapes %s and %s; with a condition computed at run time they must agree", k, j, tn.Shape(), en.Shape())
		}
		elems[j] = &value{name: fmt.Sprintf("%s[%d]", c.outs[k].name, j), dt: t.seq[j].dt,
			node: graph.Where(graph.BroadcastToDims(cond, tn.Shape().Dimensions...), tn, en)}
	}
	c.setSeq(k, elems)
	if len(elems) == 0 && c.wantsOutput(k) {
		c.outs[k].dt = t.dt
	}
}
