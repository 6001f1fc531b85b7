package onnx

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// Supported range of the default (ai.onnx) operator set.
const (
	MinOpset = 7
	MaxOpset = onnxOpsetMax
)

// Dim is one dimension of a declared input or output shape: a static size
// (Value >= 0), or a symbolic one (Value < 0) named by Param ("" when the
// model leaves it unnamed).
type Dim struct {
	Value int
	Param string
}

func (d Dim) String() string {
	switch {
	case d.Value >= 0:
		return strconv.Itoa(d.Value)
	case d.Param != "":
		return d.Param
	}
	return "?"
}

// ValueSpec describes a model input or output as the model declares it.
type ValueSpec struct {
	Name  string
	DType ir.DType // logical element type (Float16 stays Float16)
	// Narrow is the element type when the model declares one of the
	// narrow types (FLOAT8 and FLOAT4 formats, INT4, UINT4, INT2, UINT2:
	// ir.DType values XLA names them with); DType is then the carrier their
	// values travel in, widened exactly (Float32, Int8 or Uint8), as
	// onnxpb.Tensor.ToIR decodes them. ir.InvalidDType otherwise.
	Narrow ir.DType
	// Dims is the declared shape; empty for a scalar. When RankKnown is
	// false the model does not declare the rank and Dims is nil.
	Dims      []Dim
	RankKnown bool
	// Kind is KindTensor for a tensor; for a sequence or an optional
	// (values.go) Elem describes the element and DType is the element's.
	Kind ValueKind
	Elem *ValueSpec
}

// logical is the dtype the importer computes the value's semantics in:
// Narrow when set, else DType.
func (v ValueSpec) logical() ir.DType {
	if v.Narrow != ir.InvalidDType {
		return v.Narrow
	}
	return v.DType
}

func (v ValueSpec) String() string {
	if v.Kind != KindTensor && v.Elem != nil { // values.go
		e := v.Elem.String()
		return fmt.Sprintf("%s: %s(%s)", v.Name, v.Kind, e[strings.Index(e, ": ")+2:])
	}
	dt := v.DType.String()
	if v.Narrow != ir.InvalidDType {
		dt = fmt.Sprintf("%s(%s)", v.DType, v.Narrow)
	}
	if !v.RankKnown {
		return fmt.Sprintf("%s: %s[?]", v.Name, dt)
	}
	parts := make([]string, len(v.Dims))
	for k, d := range v.Dims {
		parts[k] = d.String()
	}
	return fmt.Sprintf("%s: %s[%s]", v.Name, dt, strings.Join(parts, ", "))
}

// IsStatic says whether every dimension is known.
func (v ValueSpec) IsStatic() bool {
	if !v.RankKnown || v.Kind != KindTensor {
		return false
	}
	for _, d := range v.Dims {
		if d.Value < 0 {
			return false
		}
	}
	return true
}

// Model is a decoded ONNX model, checked against the importer's op registry.
// It is immutable and safe for concurrent use; each Specialize or
// BuildGraph works on its own state.
type Model struct {
	pb    *onnxpb.Model
	graph *onnxpb.Graph
	opset int

	nodes []*onnxpb.Node // topological order
	defs  []*opDef       // defs[k] converts nodes[k]
	attrs []map[string]*onnxpb.Attribute

	inits    map[string]*ir.Tensor    // initializers, converted once
	strInits map[string]*StringTensor // STRING initializers (strings.go)
	initDT   map[string]ir.DType      // their logical dtypes
	inputs   []ValueSpec              // user inputs (initializers excluded)
	outputs  []ValueSpec

	needConst   map[string]bool // values whose contents are needed at build time
	valueInputs []string        // user inputs among them

	subs map[*onnxpb.Graph]*subgraph // control-flow bodies (If branches...)

	// Weights as parameters and shape-only loading (weights.go).
	initShape  map[string]ir.Shape // every initializer's logical dtype and dims
	shapesOnly bool                // initializer bytes not read (LoadOptions.ShapesOnly)
}

// subgraph is a graph attribute (an If branch, a Loop body) prepared for
// building: nodes in file order with their converters, and its own
// initializers.
type subgraph struct {
	g      *onnxpb.Graph
	nodes  []*onnxpb.Node
	defs   []*opDef
	attrs  []map[string]*onnxpb.Attribute
	inits  map[string]*ir.Tensor
	initDT map[string]ir.DType
}

// Load reads and checks an ONNX model file. External tensor data is resolved
// relative to the file's directory.
func Load(path string) (*Model, error) {
	pb, err := onnxpb.ReadModel(path)
	if err != nil {
		return nil, err
	}
	return newModel(pb, LoadOptions{release: true})
}

// Parse decodes and checks an ONNX model from its serialized bytes. The
// model keeps no reference to b.
func Parse(b []byte) (*Model, error) {
	pb, err := onnxpb.Decode(b)
	if err != nil {
		return nil, err
	}
	return newModel(pb, LoadOptions{release: true})
}

// FromProto checks an already decoded model.
func FromProto(pb *onnxpb.Model) (*Model, error) { return newModel(pb) }

func newModel(pb *onnxpb.Model, opts ...LoadOptions) (*Model, error) {
	if pb == nil || pb.Graph == nil {
		return nil, &ModelError{Reason: "model has no graph"}
	}
	m := &Model{pb: pb, graph: pb.Graph, opset: -1, initShape: map[string]ir.Shape{}}
	release := false
	for _, o := range opts {
		m.shapesOnly = m.shapesOnly || o.ShapesOnly
		release = release || o.release
	}
	for _, o := range pb.OpsetImport {
		if o.Domain == "" || o.Domain == "ai.onnx" {
			m.opset = int(o.Version)
		}
	}
	if m.opset < 0 {
		// IR version 2 models predate opset_import and mean opset 1; treat
		// a model without any as the oldest supported.
		m.opset = MinOpset
	}
	if m.opset > MaxOpset {
		return nil, &OpsetError{Version: m.opset, Min: MinOpset, Max: MaxOpset}
	}

	// Initializers.
	m.inits = map[string]*ir.Tensor{}
	m.initDT = map[string]ir.DType{}
	m.strInits = map[string]*StringTensor{}
	for k := range m.graph.Initializer {
		t := &m.graph.Initializer[k]
		dt, err := valueDType(t.DataType)
		if err != nil {
			return nil, withWhere(err, fmt.Sprintf("initializer %q", t.Name))
		}
		if err := m.noteInitializer(t, dt); err != nil {
			return nil, err
		}
		if dt == String { // host only (strings.go)
			st, err := StringTensorFromProto(t)
			if err != nil {
				return nil, fmt.Errorf("initializer %q: %w", t.Name, err)
			}
			m.strInits[t.Name] = st
			continue
		}
		if m.shapesOnly {
			continue // bytes read after analyseConst, only where needed (weights.go)
		}
		it, err := t.ToIR()
		if err != nil {
			return nil, fmt.Errorf("initializer %q: %w", t.Name, err)
		}
		m.inits[t.Name] = it
	}

	// Inputs and outputs.
	for _, vi := range m.graph.Input {
		if _, isInit := m.initDT[vi.Name]; isInit {
			continue
		}
		spec, err := specFromValueInfo(vi)
		if err != nil {
			return nil, err
		}
		m.inputs = append(m.inputs, spec)
	}
	for _, vi := range m.graph.Output {
		spec, err := specFromValueInfo(vi)
		if err != nil {
			return nil, err
		}
		m.outputs = append(m.outputs, spec)
	}

	if err := m.sortNodes(); err != nil {
		return nil, err
	}

	// Resolve every node's converter; collect all the unsupported ones.
	unsupported := map[string]int{}
	m.defs = make([]*opDef, len(m.nodes))
	m.attrs = make([]map[string]*onnxpb.Attribute, len(m.nodes))
	for k, n := range m.nodes {
		attrs := make(map[string]*onnxpb.Attribute, len(n.Attribute))
		for a := range n.Attribute {
			attrs[n.Attribute[a].Name] = &n.Attribute[a]
		}
		m.attrs[k] = attrs
		m.defs[k] = m.resolveOp(n, unsupported)
		if err := m.prepareSubgraphs(n, unsupported); err != nil {
			return nil, err
		}
	}
	if len(unsupported) > 0 {
		return nil, &UnsupportedOpsError{Ops: unsupported}
	}
	m.analyseConst()
	if m.shapesOnly {
		if err := m.loadConstInitializers(); err != nil {
			return nil, err
		}
	}
	if release && !m.shapesOnly {
		m.releaseFile()
	}
	return m, nil
}

// releaseFile lets go of the file the model was decoded from: the
// initializers are converted (m.inits, the subgraphs' inits), so their
// payloads in the decoded proto are replaced by the converted tensors
// (which ToIR returns to a model built again from Proto), and what else
// points into the file (attribute tensors, strings) is copied out. A model held
// its weights twice before (ResNet-50: 97 MB of file and 95 MB converted).
func (m *Model) releaseFile() {
	for k := range m.graph.Initializer {
		t := &m.graph.Initializer[k]
		t.ReleaseData(m.inits[t.Name])
	}
	for g, sg := range m.subs {
		for k := range g.Initializer {
			g.Initializer[k].ReleaseData(sg.inits[g.Initializer[k].Name])
		}
	}
	m.pb.DetachBytes()
}

// resolveOp finds a node's converter, counting it as unsupported if none.
func (m *Model) resolveOp(n *onnxpb.Node, unsupported map[string]int) *opDef {
	if n.Domain == mlDomain {
		return m.resolveML(n, unsupported) // ops_ml.go
	}
	if n.Domain != "" && n.Domain != "ai.onnx" {
		unsupported[n.Domain+":"+n.OpType]++
		return nil
	}
	d, newer := lookupOp(n.OpType, m.opset)
	switch {
	case newer > 0:
		unsupported[fmt.Sprintf("%s version %d", n.OpType, newer)]++
	case d == nil:
		unsupported[n.OpType]++
	}
	return d
}

// prepareSubgraphs prepares the graph attributes of n, recursively.
func (m *Model) prepareSubgraphs(n *onnxpb.Node, unsupported map[string]int) error {
	for a := range n.Attribute {
		attr := &n.Attribute[a]
		var gs []*onnxpb.Graph
		if attr.G != nil {
			gs = append(gs, attr.G)
		}
		for k := range attr.Graphs {
			gs = append(gs, &attr.Graphs[k])
		}
		for _, g := range gs {
			if err := m.prepareSubgraph(g, unsupported); err != nil {
				return fmt.Errorf("node %q (%s) attribute %q: %w", nodeName(n), n.OpType, attr.Name, err)
			}
		}
	}
	return nil
}

func (m *Model) prepareSubgraph(g *onnxpb.Graph, unsupported map[string]int) error {
	if m.subs == nil {
		m.subs = map[*onnxpb.Graph]*subgraph{}
	}
	sg := &subgraph{g: g, inits: map[string]*ir.Tensor{}, initDT: map[string]ir.DType{}}
	for k := range g.Initializer {
		t := &g.Initializer[k]
		dt, err := valueDType(t.DataType)
		if err != nil {
			return withWhere(err, fmt.Sprintf("initializer %q", t.Name))
		}
		it, err := t.ToIR()
		if err != nil {
			return fmt.Errorf("initializer %q: %w", t.Name, err)
		}
		sg.inits[t.Name], sg.initDT[t.Name] = it, dt
	}
	for k := range g.Node {
		n := &g.Node[k]
		attrs := make(map[string]*onnxpb.Attribute, len(n.Attribute))
		for a := range n.Attribute {
			attrs[n.Attribute[a].Name] = &n.Attribute[a]
		}
		sg.nodes = append(sg.nodes, n)
		sg.attrs = append(sg.attrs, attrs)
		sg.defs = append(sg.defs, m.resolveOp(n, unsupported))
		if err := m.prepareSubgraphs(n, unsupported); err != nil {
			return err
		}
	}
	m.subs[g] = sg
	return nil
}

// withWhere adds a location to an UnsupportedDTypeError.
func withWhere(err error, where string) error {
	if e, ok := err.(*UnsupportedDTypeError); ok {
		c := *e
		c.Where = where
		return &c
	}
	return fmt.Errorf("%s: %w", where, err)
}

func specFromValueInfo(vi onnxpb.ValueInfo) (ValueSpec, error) {
	spec := ValueSpec{Name: vi.Name}
	if vi.Type == nil || vi.Type.TensorType == nil {
		if vi.Type != nil && (vi.Type.SequenceType != nil || vi.Type.OptionalType != nil) {
			return structuredSpec(vi) // values.go
		}
		if vi.Type != nil && (vi.Type.MapType != nil || vi.Type.SparseTensorType != nil) {
			return spec, &UnsupportedDTypeError{Name: "non-tensor type (sequence, map, optional or sparse)", Where: fmt.Sprintf("value %q", vi.Name)}
		}
		return spec, &ModelError{Reason: fmt.Sprintf("value %q has no tensor type", vi.Name)}
	}
	tt := vi.Type.TensorType
	dt, err := valueDType(tt.ElemType)
	if err != nil {
		return spec, withWhere(err, fmt.Sprintf("value %q", vi.Name))
	}
	spec.DType = dt
	if isNarrow(dt) {
		spec.DType, spec.Narrow = carrierDType(dt), dt
	}
	if tt.Shape != nil {
		spec.RankKnown = true
		spec.Dims = make([]Dim, len(tt.Shape.Dim))
		for k, d := range tt.Shape.Dim {
			if d.HasDimValue && d.DimValue >= 0 {
				spec.Dims[k] = Dim{Value: int(d.DimValue)}
			} else {
				spec.Dims[k] = Dim{Value: -1, Param: anonymousDim(d.DimParam)}
			}
		}
	}
	return spec, nil
}

// anonymousDim returns a declared dim_param, or "" for "?": exporters
// (paddle2onnx among them, e.g. RapidOCR's ch_ppocr_mobile_v2.0_cls_infer.onnx
// declares x as [-1, 3, "?", "?"]) write "?" for a size they do not know, not
// as a name that ties every "?" axis of the model to one size.
func anonymousDim(param string) string {
	if param == "?" {
		return ""
	}
	return param
}

// sortNodes orders the nodes topologically (ONNX requires files to be
// sorted already; sorting makes the importer robust to files that are not)
// and checks every input is defined.
func (m *Model) sortNodes() error {
	defined := map[string]bool{"": true}
	for name := range m.initDT {
		defined[name] = true
	}
	for _, in := range m.graph.Input {
		defined[in.Name] = true
	}
	nodes := m.graph.Node
	done := make([]bool, len(nodes))
	m.nodes = make([]*onnxpb.Node, 0, len(nodes))
	for len(m.nodes) < len(nodes) {
		progress := false
		for k := range nodes {
			if done[k] {
				continue
			}
			ready := true
			for _, in := range nodes[k].Input {
				if !defined[in] {
					ready = false
					break
				}
			}
			if !ready {
				continue
			}
			done[k] = true
			progress = true
			m.nodes = append(m.nodes, &nodes[k])
			for _, out := range nodes[k].Output {
				defined[out] = true
			}
		}
		if !progress {
			for k := range nodes {
				if done[k] {
					continue
				}
				for _, in := range nodes[k].Input {
					if !defined[in] {
						return &ModelError{Reason: fmt.Sprintf("node %q (%s) reads %q, which no node, input or initializer defines (or the graph has a cycle)",
							nodeName(&nodes[k]), nodes[k].OpType, in)}
					}
				}
			}
			return &ModelError{Reason: "the graph's nodes cannot be ordered"}
		}
	}
	for _, out := range m.graph.Output {
		if !defined[out.Name] {
			return &ModelError{Reason: fmt.Sprintf("graph output %q is not defined", out.Name)}
		}
	}
	return nil
}

func nodeName(n *onnxpb.Node) string {
	if n.Name != "" {
		return n.Name
	}
	if len(n.Output) > 0 {
		return n.Output[0]
	}
	return n.OpType
}

// analyseConst finds the values whose contents must be known when the
// graph is built: inputs an op needs as constants (Reshape's shape...),
// and, transitively, the inputs of the ops computing them, stopping at ops
// that only read shapes. User inputs reached this way become value inputs.
func (m *Model) analyseConst() {
	m.needConst = map[string]bool{}
	for k := len(m.nodes) - 1; k >= 0; k-- {
		m.analyseConstNode(m.nodes[k], m.defs[k]) // constflow.go: follows subgraphs too
	}
	m.hostIfConditions()
	for _, in := range m.inputs {
		if m.needConst[in.Name] && in.DType != String { // STRING inputs are always on the host (strings.go)
			m.valueInputs = append(m.valueInputs, in.Name)
		}
	}
}

// hostIfConditions makes an If's condition a build-time value when it is
// computed from scalar user inputs only (with initializers and shapes), so
// the graph is specialised on those inputs' values and only the chosen
// branch is built. Silero VAD's `sr` is such an input: its 8 kHz and 16 kHz
// branches give different shapes (and feed an LSTM a different rank), which
// the run-time path, building both branches and selecting with Where,
// cannot hold. A condition that needs a non-scalar input stays a run-time
// value.
func (m *Model) hostIfConditions() {
	for k, n := range m.nodes {
		if n.OpType != "If" || (n.Domain != "" && n.Domain != "ai.onnx") || len(n.Input) == 0 || m.needConst[n.Input[0]] {
			continue
		}
		need := map[string]bool{n.Input[0]: true}
		for j := k - 1; j >= 0; j-- {
			if m.defs[j].shapeOnly {
				continue
			}
			for _, out := range m.nodes[j].Output {
				if need[out] {
					for _, in := range m.nodes[j].Input {
						if in != "" {
							need[in] = true
						}
					}
					break
				}
			}
		}
		scalars := true
		for _, in := range m.inputs {
			if need[in.Name] && (!in.RankKnown || len(in.Dims) != 0) {
				scalars = false
			}
		}
		if scalars {
			for name := range need {
				m.needConst[name] = true
			}
		}
	}
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Inputs returns the model's user inputs in declaration order: graph inputs
// that are not initializers.
func (m *Model) Inputs() []ValueSpec { return cloneSpecs(m.inputs) }

// Outputs returns the model's outputs in declaration order.
func (m *Model) Outputs() []ValueSpec { return cloneSpecs(m.outputs) }

// Opset returns the version of the default ai.onnx operator set the model
// imports.
func (m *Model) Opset() int { return m.opset }

// ValueInputs returns the user inputs whose values, not only shapes, are
// needed to build the graph (an input that feeds a Reshape's shape, for
// example). Specialize must be given their values; the graph is then
// specialised on them.
func (m *Model) ValueInputs() []string { return append([]string(nil), m.valueInputs...) }

func cloneSpecs(s []ValueSpec) []ValueSpec {
	out := make([]ValueSpec, len(s))
	for k, v := range s {
		out[k] = v
		out[k].Dims = append([]Dim(nil), v.Dims...)
		if v.Dims == nil && v.RankKnown {
			out[k].Dims = []Dim{}
		}
	}
	return out
}

// tensorToHost converts a tensor from the model (attribute or
// initializer-like) into a host value.
func (m *Model) tensorToHost(t *onnxpb.Tensor, where string) (*hostTensor, error) {
	dt, err := valueDType(t.DataType)
	if err != nil {
		return nil, withWhere(err, where)
	}
	if dt == String {
		st, err := StringTensorFromProto(t)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		return hostFromStrings(st), nil
	}
	it, err := t.ToIR()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return hostFromIR(it, dt), nil
}
