package main

import (
	"errors"
	"fmt"
	"sort"

	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// flopSourceONNX labels FLOP counts computed by countFLOPs.
const flopSourceONNX = "counted from the ONNX graph: 2 x multiply-accumulates of MatMul, Gemm, Conv and ConvTranspose (top-level graph; element-wise, normalisation, softmax and pooling not counted)"

// flopCount is the arithmetic of one inference at fixed input shapes.
type flopCount struct {
	Total float64            // FLOPs of one run
	ByOp  map[string]float64 // FLOPs per op type
	Nodes int                // nodes counted
}

// countedOps are the op types countFLOPs counts: the ones that carry
// nearly all the arithmetic of the networks benchmarked here.
var countedOps = map[string]bool{"MatMul": true, "Gemm": true, "Conv": true, "ConvTranspose": true}

// countFLOPs counts the floating-point operations of one inference of the
// model pb at the given input shapes (and values, for inputs that
// determine shapes), as 2 x multiply-accumulates of its MatMul, Gemm, Conv
// and ConvTranspose nodes. XLA's cost analysis would be the better source
// but the XLA CPU plugin tensorbridge uses answers UNIMPLEMENTED
// (docs/pjrt-findings.md).
//
// The shapes of intermediate values come from the importer itself: the
// operands and results of the counted nodes are added to a copy of the
// model as extra outputs, the copy is specialised to the input shapes and
// built (not compiled) on engine, and the built nodes' shapes are read.
// Initializer shapes come from the file. pb itself is not modified.
func countFLOPs(engine ir.Engine, pb *onnxpb.Model, shapes map[string][]int, values map[string]*ir.Tensor) (fc flopCount, err error) {
	if pb == nil || pb.Graph == nil {
		return fc, errors.New("flops: model has no graph")
	}
	inits := map[string][]int{}
	for k := range pb.Graph.Initializer {
		t := &pb.Graph.Initializer[k]
		inits[t.Name] = intsFrom64(t.Dims)
	}
	inputs := map[string]bool{}
	for _, in := range pb.Graph.Input {
		inputs[in.Name] = true
	}
	outputs := map[string]bool{}
	for _, o := range pb.Graph.Output {
		outputs[o.Name] = true
	}
	// Values whose shapes are needed and not known from the file.
	var need []string
	seen := map[string]bool{}
	want := func(name string) {
		if name == "" || seen[name] {
			return
		}
		seen[name] = true
		if _, ok := inits[name]; ok {
			return
		}
		if _, ok := shapes[name]; ok && inputs[name] {
			return
		}
		need = append(need, name)
	}
	var nodes []*onnxpb.Node
	for k := range pb.Graph.Node {
		n := &pb.Graph.Node[k]
		if (n.Domain != "" && n.Domain != "ai.onnx") || !countedOps[n.OpType] {
			continue
		}
		if len(n.Input) < 2 || len(n.Output) < 1 {
			return fc, fmt.Errorf("flops: %s node %q has %d inputs and %d outputs", n.OpType, n.Name, len(n.Input), len(n.Output))
		}
		nodes = append(nodes, n)
		want(n.Input[0])
		want(n.Input[1])
		want(n.Output[0])
	}
	fc.ByOp = map[string]float64{}
	if len(nodes) == 0 {
		return fc, nil
	}

	// Build a copy with the needed values as extra outputs.
	g := *pb.Graph
	g.Output = append([]onnxpb.ValueInfo(nil), pb.Graph.Output...)
	for _, name := range need {
		if outputs[name] {
			continue
		}
		g.Output = append(g.Output, onnxpb.ValueInfo{Name: name,
			Type: &onnxpb.TypeProto{TensorType: &onnxpb.TypeTensor{ElemType: onnxpb.Float}}})
	}
	cp := *pb
	cp.Graph = &g
	m, err := onnx.FromProto(&cp)
	if err != nil {
		return fc, fmt.Errorf("flops: %w", err)
	}
	plan, err := m.Specialize(shapes, values)
	if err != nil {
		return fc, fmt.Errorf("flops: %w", err)
	}
	known, err := buildShapes(engine, plan)
	if err != nil {
		return fc, err
	}
	for name, d := range inits {
		known[name] = d
	}
	for name, d := range shapes {
		if inputs[name] {
			known[name] = d
		}
	}
	for _, n := range nodes {
		f, err := nodeFLOPs(n, known)
		if err != nil {
			return fc, err
		}
		fc.Total += f
		fc.ByOp[n.OpType] += f
		fc.Nodes++
	}
	return fc, nil
}

// buildShapes builds the plan on a fresh graph of engine and returns the
// shape of every output it produces. The graph is never compiled.
func buildShapes(engine ir.Engine, plan *onnx.Plan) (out map[string][]int, err error) {
	g := ir.NewGraph(engine, "flops")
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("flops: building the graph for shapes: %v", r)
		}
	}()
	defer g.Finalize()
	nodes := map[string]*ir.Node{}
	for _, p := range plan.Params() {
		nodes[p.Name] = ir.Parameter(g, p.Name, p.Shape)
	}
	built, err := plan.Build(g, nodes)
	if err != nil {
		return nil, fmt.Errorf("flops: building the graph for shapes: %w", err)
	}
	out = make(map[string][]int, len(built))
	for name, n := range built {
		out[name] = append([]int(nil), n.Shape().Dimensions...)
	}
	return out, nil
}

// nodeFLOPs returns 2 x the multiply-accumulates of one MatMul, Gemm, Conv
// or ConvTranspose node, from the shapes of its operands and result.
func nodeFLOPs(n *onnxpb.Node, known map[string][]int) (float64, error) {
	get := func(name string) ([]int, error) {
		d, ok := known[name]
		if !ok {
			return nil, fmt.Errorf("flops: %s node %q: shape of %q unknown", n.OpType, n.Name, name)
		}
		return d, nil
	}
	a, err := get(n.Input[0])
	if err != nil {
		return 0, err
	}
	b, err := get(n.Input[1])
	if err != nil {
		return 0, err
	}
	y, err := get(n.Output[0])
	if err != nil {
		return 0, err
	}
	bad := func(why string) error {
		return fmt.Errorf("flops: %s node %q: %s (operands %v, %v; result %v)", n.OpType, n.Name, why, a, b, y)
	}
	switch n.OpType {
	case "MatMul":
		// Every result element is a dot product over A's last axis
		// (numpy matmul semantics; a 1-D A is a row vector).
		if len(a) == 0 || len(b) == 0 {
			return 0, bad("scalar operand")
		}
		return 2 * product(y) * float64(a[len(a)-1]), nil
	case "Gemm":
		if len(a) != 2 || len(y) != 2 {
			return 0, bad("Gemm operands must be 2-D")
		}
		k := a[1]
		if attrInt(n, "transA", 0) != 0 {
			k = a[0]
		}
		return 2 * product(y) * float64(k), nil
	case "Conv":
		// Each output element sums over C/group input channels and the
		// kernel window: W is [M, C/group, k1, k2, ...].
		if len(b) < 2 {
			return 0, bad("weight of rank < 2")
		}
		return 2 * product(y) * product(b[1:]), nil
	case "ConvTranspose":
		// Each input element is scattered to M/group channels times the
		// kernel window: W is [C, M/group, k1, k2, ...].
		if len(b) < 2 {
			return 0, bad("weight of rank < 2")
		}
		return 2 * product(a) * product(b[1:]), nil
	}
	return 0, bad("not a counted op")
}

func attrInt(n *onnxpb.Node, name string, def int64) int64 {
	for k := range n.Attribute {
		if n.Attribute[k].Name == name {
			return n.Attribute[k].I
		}
	}
	return def
}

func product(d []int) float64 {
	p := 1.0
	for _, v := range d {
		p *= float64(v)
	}
	return p
}

func intsFrom64(d []int64) []int {
	out := make([]int, len(d))
	for k, v := range d {
		out[k] = int(v)
	}
	return out
}

// sortedOps lists a count's op types, largest share first.
func (fc flopCount) sortedOps() []string {
	ops := make([]string, 0, len(fc.ByOp))
	for op := range fc.ByOp {
		ops = append(ops, op)
	}
	sort.Slice(ops, func(i, j int) bool {
		if fc.ByOp[ops[i]] != fc.ByOp[ops[j]] {
			return fc.ByOp[ops[i]] > fc.ByOp[ops[j]]
		}
		return ops[i] < ops[j]
	})
	return ops
}
