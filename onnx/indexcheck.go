package onnx

import (
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// Index range checks.
//
// ONNX makes an out-of-range index of Gather, GatherElements, GatherND,
// ScatterElements and ScatterND an error (indices lie in [-s, s-1] for an
// axis of size s; https://onnx.ai/onnx/operators/onnx__Gather.html), and
// ONNX Runtime raises one. XLA and GoMLX's pure-Go backend clamp gather
// indices instead, which turns a bad token id into a silent wrong answer.
// Build therefore records, for every such index operand that is not known
// at build time (known ones are checked while building):
//
//   - when it is a model input, possibly through ops that keep its values
//     (Identity, Cast to INT64, Reshape, Unsqueeze, Squeeze, Flatten,
//     Transpose, Expand), a host check of that input's values before the
//     run (IndexChecks.CheckInputs; an *errs.InputError);
//   - otherwise (indices computed in the graph), the minimum and maximum of
//     the raw indices, returned as one extra Int64 program output named
//     IndexCheckOutput and checked after the run (IndexChecks.CheckOutput).
//
// Index operands inside control-flow bodies (If branches, Loop bodies)
// are not checked: If computes both branches, so a branch not taken could
// report an index the model never uses.
//
// OneHot is not checked: ONNX defines an out-of-range OneHot index as a
// row of off values (https://onnx.ai/onnx/operators/onnx__OneHot.html).
//
// Cost, measured 2026-11-26 on the shared 2-core VM (BenchmarkIndexCheckCost
// against a tensorbridge_noindexcheck build, process CPU time per run, the
// least of 7 interleaved rounds): no reference model and no model of the
// real-model set computes indices in the graph; their host checks are
// below the noise (bert_tiny 2.84 against 2.72 ms on cpu, 136 against
// 144 us on xla-cpu; MiniLM 29.0 against 31.1 ms on xla-cpu) and take
// 1.3 us for a [2, 128] input (BenchmarkCheckInputs). The check output
// costs one more output buffer per run: bert_tiny with its token ids
// computed in the graph took 2.86 against 2.84 ms on cpu but 145 against
// 122 us on xla-cpu (+19%, about 23 us per run).

// IndexCheckOutput is the name under which Build returns the in-graph
// index check, when the plan has one (IndexChecks.HasOutput). It cannot
// collide with an ONNX value name in practice (it holds a NUL byte).
const IndexCheckOutput = "\x00tensorbridge.index_check"

// IndexChecks are a built plan's index range checks (see Plan.IndexChecks).
type IndexChecks struct {
	host  []hostIndexCheck
	graph []graphIndexCheck
}

// hostIndexCheck: model input Input holds indices that node Node reads;
// each value (component j of a tuple when Tuple, with len(Sizes) components
// along the last axis) must lie in [-Sizes[j], Sizes[j]-1].
type hostIndexCheck struct {
	input, node, op string
	sizes           []int
	tuple           bool
}

// graphIndexCheck: node's indices computed in the graph; the check output
// holds, from offset off, len(sizes) minima then len(sizes) maxima.
type graphIndexCheck struct {
	node, op string
	sizes    []int
	off      int
}

// indexRecorder collects checks while the main graph is built.
type indexRecorder struct {
	prod   map[string]int // value name -> index of the node producing it
	host   []hostIndexCheck
	graph  []graphIndexCheck
	nodes  []*graph.Node // Int64 [2*len(sizes)] per graph check
	offset int
}

// IndexChecks returns the checks the latest Build recorded, or nil when
// the plan has none (or was not built).
func (p *Plan) IndexChecks() *IndexChecks { return p.idx.Load() }

// planChecks is the atomically published IndexChecks of a plan.
type planChecks = atomic.Pointer[IndexChecks]

// HasOutput says whether the program returns IndexCheckOutput.
func (ic *IndexChecks) HasOutput() bool { return ic != nil && len(ic.graph) > 0 }

// HasInputChecks says whether CheckInputs checks anything.
func (ic *IndexChecks) HasInputChecks() bool { return ic != nil && len(ic.host) > 0 }

// CheckInputs checks the values of the model inputs that feed index
// operands, as the user gave them (in the model's declared dtypes, before
// any padding). An out-of-range value is an *errs.InputError naming the
// input, the node, the value and its position.
func (ic *IndexChecks) CheckInputs(inputs map[string]*ir.Tensor) error {
	if ic == nil {
		return nil
	}
	for _, hc := range ic.host {
		t := inputs[hc.input]
		if t == nil {
			continue // missing inputs are reported by the input checks
		}
		if err := hc.checkTensor(t); err != nil {
			return err
		}
	}
	return nil
}

// checkTensor checks t's values in place for the usual index dtypes
// (int64, int32: no copy) and through a decoded copy otherwise.
func (hc hostIndexCheck) checkTensor(t *ir.Tensor) error {
	var err error
	fast := false
	if e := t.ConstFlatData(func(flat any) {
		switch f := flat.(type) {
		case []int64:
			fast, err = true, hc.check(f)
		case []int32:
			fast, err = true, checkInts(hc, f)
		}
	}); e != nil {
		return fmt.Errorf("onnx: checking the indices of input %q: %w", hc.input, e)
	}
	if fast {
		return err
	}
	vals, err := hostFromIR(t, t.DType()).ints()
	if err != nil {
		return fmt.Errorf("onnx: checking the indices of input %q: %w", hc.input, err)
	}
	return hc.check(vals)
}

// checkInts is hostIndexCheck.check for int32 values: a scan, and the
// int64 check of the first bad value's position for the error.
func checkInts(hc hostIndexCheck, vals []int32) error {
	m := len(hc.sizes)
	for pos, v := range vals {
		if s := int32(min(hc.sizes[pos%m], 1<<31-1)); v < -s || v >= s {
			widened := make([]int64, len(vals))
			for k, w := range vals {
				widened[k] = int64(w)
			}
			return hc.check(widened)
		}
	}
	return nil
}

// check returns an *errs.InputError for the first value out of range.
func (hc hostIndexCheck) check(vals []int64) error {
	m := len(hc.sizes)
	if m == 1 { // the common case: one range for every value
		s := int64(hc.sizes[0])
		ok := true
		for _, v := range vals {
			ok = ok && v >= -s && v < s
		}
		if ok {
			return nil
		}
	}
	for pos, v := range vals {
		s := int64(hc.sizes[pos%m])
		if v >= -s && v < s {
			continue
		}
		what := "indices"
		if hc.tuple {
			what = fmt.Sprintf("index tuples whose component %d is", pos%m)
		}
		return &errs.InputError{Name: hc.input, Problem: "value",
			Expected: fmt.Sprintf("%s in [%d, %d] (node %q, %s, indexes an axis of size %d with it)", what, -s, s-1, hc.node, hc.op, s),
			Got:      fmt.Sprintf("%d at flat position %d", v, pos)}
	}
	return nil
}

// CheckOutput checks the program's IndexCheckOutput tensor. An
// out-of-range index is an error matching errs.ErrInvalidInput that names
// the node and one offending index (the smallest or largest one).
func (ic *IndexChecks) CheckOutput(t *ir.Tensor) error {
	if !ic.HasOutput() {
		return nil
	}
	vals, err := hostFromIR(t, t.DType()).ints()
	if err != nil {
		return fmt.Errorf("onnx: reading the index check: %w", err)
	}
	for _, gc := range ic.graph {
		m := len(gc.sizes)
		if gc.off+2*m > len(vals) {
			return fmt.Errorf("onnx: index check output has %d values, need %d", len(vals), gc.off+2*m)
		}
		for j, sz := range gc.sizes {
			s := int64(sz)
			lo, hi := vals[gc.off+j], vals[gc.off+m+j]
			bad, ok := lo, lo >= -s
			if ok && hi >= s {
				bad, ok = hi, false
			}
			if ok {
				continue
			}
			where := ""
			if m > 1 {
				where = fmt.Sprintf(" (component %d of its index tuples)", j)
			}
			return &NodeError{Node: gc.node, Op: gc.op, Err: fmt.Errorf("%w: computed index %d out of range [%d, %d] for an axis of size %d%s",
				errs.ErrInvalidInput, bad, -s, s-1, s, where)}
		}
	}
	return nil
}

// String lists the checks, for diagnostics.
func (ic *IndexChecks) String() string {
	if ic == nil {
		return "no index checks"
	}
	var parts []string
	for _, h := range ic.host {
		parts = append(parts, fmt.Sprintf("input %q -> %s %q %v", h.input, h.op, h.node, h.sizes))
	}
	for _, g := range ic.graph {
		parts = append(parts, fmt.Sprintf("computed -> %s %q %v", g.op, g.node, g.sizes))
	}
	return strings.Join(parts, "; ")
}

// noteIndices records the check of input k of c's node, which holds
// indices into axes of the given sizes: one size for plain indices, m
// sizes for index tuples along the last axis (tuple). Host-known indices
// were checked by the converter; nothing is recorded outside the main
// graph's builder.
func (c *opCtx) noteIndices(k int, sizes []int, tuple bool) {
	r := c.b.idx
	if indexChecksOff || r == nil || c.isHost(k) || !c.has(k) || c.inputs[k].node == nil {
		return
	}
	sizes = append([]int(nil), sizes...)
	if in, ok := c.b.m.indexSource(r.prod, c.node.Input[k], tuple); ok {
		r.host = append(r.host, hostIndexCheck{input: in, node: c.name, op: c.node.OpType, sizes: sizes, tuple: tuple})
		return
	}
	idx := graph.ConvertDType(c.inputs[k].node, ir.Int64)
	m := len(sizes)
	if !tuple {
		idx = graph.Reshape(idx, -1, 1)
	} else {
		idx = graph.Reshape(idx, -1, m)
	}
	if idx.Shape().Dimensions[0] == 0 {
		return // no indices
	}
	lo, hi := graph.ReduceMin(idx, 0), graph.ReduceMax(idx, 0)
	r.nodes = append(r.nodes, graph.Concatenate([]*graph.Node{lo, hi}, 0))
	r.graph = append(r.graph, graphIndexCheck{node: c.name, op: c.node.OpType, sizes: sizes, off: r.offset})
	r.offset += 2 * m
}

// newIndexRecorder prepares the recording of a Build of m.
func newIndexRecorder(m *Model) *indexRecorder {
	prod := make(map[string]int, len(m.nodes))
	for k, n := range m.nodes {
		for _, o := range n.Output {
			if o != "" {
				prod[o] = k
			}
		}
	}
	return &indexRecorder{prod: prod}
}

// finish publishes the recorded checks on p and adds the check output to
// outs when some indices are computed in the graph.
func (r *indexRecorder) finish(p *Plan, outs map[string]*ir.Node) {
	if len(r.host) == 0 && len(r.graph) == 0 {
		p.idx.Store(nil)
		return
	}
	if len(r.nodes) > 0 {
		outs[IndexCheckOutput] = graph.Concatenate(r.nodes, 0)
	}
	p.idx.Store(&IndexChecks{host: r.host, graph: r.graph})
}

// indexSource follows value name back through ops that keep every value
// it holds to a model input; ok is false when the value is computed, an
// initializer, or not an integer model input. For index tuples (tuple)
// only ops that keep the last axis whole are followed.
func (m *Model) indexSource(prod map[string]int, name string, tuple bool) (string, bool) {
	for range len(m.nodes) + 1 {
		for _, in := range m.inputs {
			if in.Name == name {
				return name, in.Kind == KindTensor && in.DType.IsInt()
			}
		}
		k, ok := prod[name]
		if !ok {
			return "", false
		}
		n := m.nodes[k]
		if len(n.Input) == 0 {
			return "", false
		}
		switch n.OpType {
		case "Identity":
		case "Cast":
			if a := m.attrs[k]["to"]; a == nil || a.I != int64(onnxpb.Int64) {
				return "", false // a narrowing cast can change values
			}
		case "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Transpose", "Expand":
			if tuple {
				return "", false
			}
		default:
			return "", false
		}
		name = n.Input[0]
	}
	return "", false
}

// HasIndexOps says whether the model has an op whose run-time indices a
// built plan checks (Gather, GatherElements, GatherND, Scatter,
// ScatterElements, ScatterND): a caller that runs a plan without building
// it (a warm start) builds it on the host first to learn its IndexChecks.
func (m *Model) HasIndexOps() bool {
	for _, n := range m.nodes {
		switch n.OpType {
		case "Gather", "GatherElements", "GatherND", "Scatter", "ScatterElements", "ScatterND":
			return true
		}
	}
	return false
}
