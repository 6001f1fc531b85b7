package onnx

// Which models can be trained: CheckGradients finds, before any training
// step runs, the first ONNX node on the path from the trained parameters
// to the outputs whose gradient reverse-mode autodiff (GoMLX's
// graph.Gradient) cannot build, or whose gradient is known to be wrong,
// and names it. graph.Gradient reports a missing VJP, a VJP that does not
// support the node's configuration (max pooling with dilations) and an op
// the backend lacks by panicking while it builds the backward graph; a
// trainer that met this inside a step would fail mid-run.

import (
	"fmt"
	"sort"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
)

// nodeTrace records which ONNX node created which graph nodes: graph nodes
// get consecutive ids, so each converted ONNX node owns an id range (a
// subgraph's nodes belong to the innermost ONNX node that created them).
type nodeTrace struct {
	owner []int // graph node id -> index in nodes, -1 for none
	nodes []tracedNode
}

// tracedNode is one converted ONNX node and its graph node ids [first, end).
type tracedNode struct {
	op, name   string
	first, end int
}

// record notes that the ONNX node (op, name) created graph nodes
// [first, end). Ids already owned (by a subgraph's nodes) keep their owner.
func (t *nodeTrace) record(first, end int, op, name string) {
	if t == nil {
		return
	}
	idx := len(t.nodes)
	t.nodes = append(t.nodes, tracedNode{op: op, name: name, first: first, end: end})
	for len(t.owner) < end {
		t.owner = append(t.owner, -1)
	}
	for id := first; id < end; id++ {
		if t.owner[id] < 0 {
			t.owner[id] = idx
		}
	}
}

// ownerOf returns the index of the ONNX node that created graph node id,
// or -1.
func (t *nodeTrace) ownerOf(id int) int {
	if id < 0 || id >= len(t.owner) {
		return -1
	}
	return t.owner[id]
}

// GradientWrong lists the ONNX ops whose gradient, as the importer builds
// them, disagrees with finite differences (gradcheck_test.go measures it
// over the ONNX node tests; testdata/gradcheck-golden.txt holds the
// result), with the reason. CheckGradients refuses a model that trains
// through one of them. It is empty: every op the node tests cover either
// passes or has no gradient at all (and is refused as such). Only tests
// write it, and never while CheckGradients runs.
var GradientWrong = map[string]string{}

// CheckGradients says whether reverse-mode autodiff can differentiate the
// plan's outputs with respect to the named parameters: the plan's inputs
// (Params) and, when specialised with WeightsAsParams, its weights
// (Weights). It builds the forward graph on engine e, the gradient of the
// sum of every floating-point output with respect to wrt, and nothing
// else: nothing is compiled or run.
//
// The first ONNX node on the differentiated path that has no gradient
// (graph.Gradient panics building its VJP, or the VJP needs an op e does
// not have) or whose gradient is listed in GradientWrong comes back as an
// *errs.UnsupportedError whose Name is the ONNX op type and whose Detail
// names the node. A name in wrt that is not a floating-point parameter of
// the plan is an *errs.InputError. Other build failures come back as
// Build returns them.
//
// A Trainer calls it when it is created, so that a model that cannot be
// trained is refused before its first step instead of failing inside one.
func (p *Plan) CheckGradients(e ir.Engine, wrt []string) (err error) {
	if e == nil {
		return fmt.Errorf("onnx: CheckGradients needs an engine")
	}
	if len(wrt) == 0 {
		return nil
	}
	g := graph.NewGraph(e, ir.EphemeralPrefix+"onnx_gradcheck")
	defer g.Finalize()
	defer func() {
		if r := recover(); r != nil {
			err = panicError(r)
		}
	}()
	inputs := map[string]*ir.Node{}
	for _, prm := range append(p.Params(), p.weights...) {
		inputs[prm.Name] = graph.Parameter(g, prm.Name, prm.Shape)
	}
	var wrtNodes []*graph.Node
	for _, name := range wrt {
		n, ok := inputs[name]
		if !ok || !n.DType().IsFloat() {
			got := "unknown name " + quote(name)
			if ok {
				got = fmt.Sprintf("%q of dtype %s", name, n.DType())
			}
			return &errs.InputError{Name: name, Problem: "name", Expected: "a floating-point input or weight parameter of the plan", Got: got}
		}
		wrtNodes = append(wrtNodes, n)
	}
	tr := &nodeTrace{}
	outs, err := p.buildTraced(g, inputs, tr)
	if err != nil {
		return err
	}
	loss := sumOutputs(outs, wrtNodes[0].DType())
	if loss == nil {
		return nil // no floating-point output: nothing to differentiate
	}
	path := newGradPath(g, loss, wrtNodes, tr)
	for _, k := range path.onnxNodes() {
		if why, wrong := GradientWrong[tr.nodes[k].op]; wrong {
			return gradUnsupported(tr.nodes[k], "its gradient is wrong: "+why, nil)
		}
	}
	if gerr := tryGradient(loss, wrtNodes); gerr != nil {
		return path.blame(gerr)
	}
	return nil
}

// sumOutputs returns the sum of every element of every floating-point
// output, in dtype dt, or nil when there is none.
func sumOutputs(outs map[string]*ir.Node, dt ir.DType) *graph.Node {
	names := make([]string, 0, len(outs))
	for name := range outs {
		names = append(names, name)
	}
	sort.Strings(names)
	var loss *graph.Node
	for _, name := range names {
		o := outs[name]
		if !o.DType().IsFloat() || o.NumOutputs() != 1 {
			continue
		}
		term := graph.ConvertDType(graph.ReduceAllSum(o), dt)
		if loss == nil {
			loss = term
		} else {
			loss = graph.Add(loss, term)
		}
	}
	return loss
}

// tryGradient builds graph.Gradient(loss, wrt...), turning a panic into an
// error.
func tryGradient(loss *graph.Node, wrt []*graph.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = panicError(r)
		}
	}()
	graph.Gradient(loss, wrt...)
	return nil
}

// gradPath is the part of a graph reverse-mode autodiff walks: nodes the
// loss depends on (included) that depend on a differentiated parameter
// (useful), as graph.Gradient selects them.
type gradPath struct {
	nodes    []*graph.Node
	tr       *nodeTrace
	loss     *graph.Node
	included []bool
	useful   []bool
	// escapes: the node's value is read outside its ONNX node's graph
	// nodes (by another ONNX node or the loss).
	escapes []bool
}

func newGradPath(g *graph.Graph, loss *graph.Node, wrt []*graph.Node, tr *nodeTrace) *gradPath {
	nodes := append([]*graph.Node(nil), g.Nodes()...)
	n := len(nodes)
	p := &gradPath{nodes: nodes, tr: tr, loss: loss, included: make([]bool, n), useful: make([]bool, n), escapes: make([]bool, n)}
	for _, w := range wrt {
		p.useful[w.Id()] = true
	}
	for id, nd := range nodes {
		for _, in := range nd.Inputs() {
			if p.useful[in.Id()] {
				p.useful[id] = true
			}
			if tr.ownerOf(int(in.Id())) != tr.ownerOf(id) {
				p.escapes[in.Id()] = true
			}
		}
	}
	p.included[loss.Id()] = true
	for id := int(loss.Id()); id >= 0; id-- {
		if !p.included[id] {
			continue
		}
		for _, in := range nodes[id].Inputs() {
			p.included[in.Id()] = true
		}
	}
	return p
}

// on says whether graph node id is differentiated through.
func (p *gradPath) on(id int) bool {
	return id < len(p.nodes) && p.included[id] && p.useful[id] && !p.nodes[id].StopGradient()
}

// onnxNodes lists, last first (the order autodiff meets them), the ONNX
// nodes that own a graph node on the path with an input on the path.
func (p *gradPath) onnxNodes() []int {
	seen := map[int]bool{}
	var out []int
	for id := len(p.nodes) - 1; id >= 0; id-- {
		k := p.tr.ownerOf(id)
		if k < 0 || seen[k] || !p.on(id) {
			continue
		}
		for _, in := range p.nodes[id].Inputs() {
			if p.on(int(in.Id())) {
				seen[k] = true
				out = append(out, k)
				break
			}
		}
	}
	return out
}

// blame finds which ONNX node made graph.Gradient fail with gerr: it
// differentiates each ONNX node on its own (the sum of its path values
// read elsewhere, with respect to its path inputs from other nodes), in
// the order autodiff meets them, and returns the first failure as an
// *errs.UnsupportedError. If none fails alone, gerr is returned as an
// UnsupportedError of the whole graph.
func (p *gradPath) blame(gerr error) error {
	for _, k := range p.onnxNodes() {
		tn := p.tr.nodes[k]
		if err := p.tryAlone(tn); err != nil {
			return gradUnsupported(tn, "no gradient", err)
		}
	}
	return &errs.UnsupportedError{What: "gradient", Name: "graph", Detail: "reverse-mode autodiff failed and no single ONNX node fails alone", Err: gerr}
}

// tryAlone builds the gradient of one ONNX node's graph nodes alone.
func (p *gradPath) tryAlone(tn tracedNode) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = panicError(r)
		}
	}()
	var ins []*graph.Node
	seen := map[graph.NodeId]bool{}
	var sum *graph.Node
	for id := tn.first; id < tn.end && id < len(p.nodes); id++ {
		if !p.on(id) {
			continue
		}
		nd := p.nodes[id]
		for _, in := range nd.Inputs() {
			if int(in.Id()) < tn.first && p.on(int(in.Id())) && !seen[in.Id()] {
				seen[in.Id()] = true
				ins = append(ins, in)
			}
		}
		if (p.escapes[id] || nd == p.loss) && nd.NumOutputs() == 1 && nd.DType().IsFloat() && len(ins) > 0 {
			term := graph.ConvertDType(graph.ReduceAllSum(nd), p.loss.DType())
			if sum == nil {
				sum = term
			} else {
				sum = graph.Add(sum, term)
			}
		}
	}
	if sum == nil || len(ins) == 0 {
		return nil
	}
	graph.Gradient(sum, ins...)
	return nil
}

// gradUnsupported names an ONNX node that cannot be differentiated.
func gradUnsupported(tn tracedNode, why string, err error) error {
	return &errs.UnsupportedError{What: "op", Name: tn.op,
		Detail: fmt.Sprintf("node %q cannot be trained through: %s", tn.name, why), Err: err}
}
