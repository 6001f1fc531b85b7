package onnx

import (
	"fmt"
	"math"
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
//   - when it is such an input plus or minus a constant (an Add or Sub of
//     a known single value, as position ids offset by a padding index), the
//     same host check of the input shifted by the constant;
//   - when the analysis proves the indices in range (indexBounds: ArgMax,
//     ArgMin and TopK indices are bounded by the reduced axis, Clip by its
//     known bounds, through the ops above), nothing;
//   - otherwise (indices computed in the graph), one max-reduction over the
//     indices and their bitwise complements (max and ^min, so one
//     reduction gives both ends without the overflow of negating MinInt64),
//     returned as one extra Int64 program output named IndexCheckOutput and
//     checked after the run (IndexChecks.CheckOutput).
//
// Control flow: Loop and Scan are unrolled (ops_control.go), so every
// iteration's body runs; its indices are checked like the main graph's,
// the iterations of one body node folded into one check by an elementwise
// Max. If with a run-time condition builds both branches and selects; the
// checks of each branch are gated by the condition under which it is taken
// (nested Ifs: the conjunction), a branch not taken reporting the neutral
// MinInt64, so a branch the model does not take never raises an error.
//
// Padded (bucketed) and mesh-padded runs: padding rows can compute indices
// the real rows never form, so a check that fails on a padded run is not
// trusted; the run is repeated at the exact shapes (tensorbridge's
// Model.Run), whose check counts only real rows.
//
// OneHot is not checked: ONNX defines an out-of-range OneHot index as a
// row of off values (https://onnx.ai/onnx/operators/onnx__OneHot.html).
//
// Cost (BENCHMARKS.md, "Index checks"; 2026-11-26, the shared 2-core VM at
// load average 20-26): no reference model computes indices in the graph
// (mlp, tiny_resnet and mobilenet_v2_w025 have no index ops; bert_tiny and
// bert_tiny_op13 check their token ids on the host, 1.3 us for a [2, 128]
// input, BenchmarkCheckInputs, under 1% of bert_tiny's 136 us on xla-cpu).
// The in-graph check output, on bert_tiny with its token ids computed
// (BenchmarkIndexCheckPaired, alternating runs in one process): 6.1 to 9.5
// us (+4.4 to +6.2%) per run on xla-cpu, where the build without checks
// shows -1.3 to +1.9 us; within the noise (-1.3 to +0.5%) on cpu.

// IndexCheckOutput is the name under which Build returns the in-graph
// index check, when the plan has one (IndexChecks.HasOutput). It cannot
// collide with an ONNX value name in practice (it holds a NUL byte).
const IndexCheckOutput = "\x00tensorbridge.index_check"

// IndexChecks are a built plan's index range checks (see Plan.IndexChecks).
type IndexChecks struct {
	host   []hostIndexCheck
	graph  []graphIndexCheck
	proven []string // nodes whose indices need no check (indexBounds)
}

// hostIndexCheck: model input Input holds indices that node Node reads;
// each value (component j of a tuple when Tuple, with len(Sizes) components
// along the last axis) must lie in [-Sizes[j], Sizes[j]-1].
type hostIndexCheck struct {
	input, node, op string
	sizes           []int
	tuple           bool
	// shift is added to each value before the check: the node indexes with
	// input+shift (an Add or Sub of a constant on the way).
	shift int64
}

// graphIndexCheck: node's indices computed in the graph; the check output
// holds, from offset off, len(sizes) maxima then len(sizes) bitwise
// complements of the minima (^min).
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
	nodes  []*graph.Node  // Int64 [2*len(sizes)] per graph check: maxima, then ^minima
	byKey  map[string]int // node name and sizes -> its entry in graph (unrolled bodies)
	gate   *graph.Node    // scalar Bool: the If branch being built is taken; nil when always
	proven []string       // nodes whose indices indexBounds proved in range (no check)
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
	if hc.shift != 0 {
		fast = false // the generic path below applies the shift
	} else if e := t.ConstFlatData(func(flat any) {
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
	if m == 1 && hc.shift == 0 { // the common case: one range for every value
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
		if inShifted(v, hc.shift, s) {
			continue
		}
		what := "indices"
		if hc.tuple {
			what = fmt.Sprintf("index tuples whose component %d is", pos%m)
		}
		ie := &errs.InputError{Name: hc.input, Problem: "value",
			Expected: fmt.Sprintf("%s in [%d, %d] (node %q, %s, indexes an axis of size %d with it)", what, -s, s-1, hc.node, hc.op, s),
			Got:      fmt.Sprintf("%d at flat position %d", v, pos)}
		if hc.shift != 0 {
			ie.Got += fmt.Sprintf(" (index %d%+d after node %q's input is shifted by a constant)", v, hc.shift, hc.node)
		}
		return ie
	}
	return nil
}

// inShifted says whether v+shift lies in [-s, s-1], without overflow.
func inShifted(v, shift, s int64) bool {
	if shift > 0 && v > math.MaxInt64-shift || shift < 0 && v < math.MinInt64-shift {
		return false // v+shift overflows: far outside any axis
	}
	w := v + shift
	return w >= -s && w < s
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
			hi, lo := vals[gc.off+j], ^vals[gc.off+m+j]
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
// were checked by the converter; nothing is recorded outside the builders
// of the main graph and its control-flow bodies (constant folds).
func (c *opCtx) noteIndices(k int, sizes []int, tuple bool) {
	r := c.b.idx
	if indexChecksOff || r == nil || c.isHost(k) || !c.has(k) || c.inputs[k].node == nil {
		return
	}
	sizes = append([]int(nil), sizes...)
	if c.b.parent == nil { // value names below are the main graph's
		if in, shift, ok := c.b.indexSource(r.prod, c.node.Input[k], tuple); ok {
			r.host = append(r.host, hostIndexCheck{input: in, node: c.name, op: c.node.OpType, sizes: sizes, tuple: tuple, shift: shift})
			return
		}
		if lo, hi, ok := c.b.indexBounds(r.prod, c.node.Input[k], 0); ok && !tuple && lo >= -int64(sizes[0]) && hi < int64(sizes[0]) {
			r.proven = append(r.proven, c.name)
			return
		}
	}
	idx := graph.ConvertDType(c.inputs[k].node, ir.Int64)
	m := len(sizes)
	idx = graph.Reshape(idx, -1, m)
	if idx.Shape().Dimensions[0] == 0 {
		return // no indices
	}
	// One reduction: the maxima of the indices and of their complements.
	red := graph.ReduceMax(graph.Concatenate([]*graph.Node{idx, graph.BitwiseNot(idx)}, 1), 0)
	if r.gate != nil { // inside an If branch: neutral when not taken
		red = graph.Where(graph.BroadcastToDims(r.gate, 2*m), red, graph.BroadcastToDims(graph.Const(c.g, int64(math.MinInt64)), 2*m))
	}
	key := fmt.Sprintf("%s\x00%v", c.name, sizes)
	if j, ok := r.byKey[key]; ok { // another iteration of an unrolled body
		r.nodes[j] = graph.Max(r.nodes[j], red)
		return
	}
	if r.byKey == nil {
		r.byKey = map[string]int{}
	}
	r.byKey[key] = len(r.graph)
	r.nodes = append(r.nodes, red)
	r.graph = append(r.graph, graphIndexCheck{node: c.name, op: c.node.OpType, sizes: sizes, off: r.offset})
	r.offset += 2 * m
}

// gateWith makes the checks recorded until the returned restore runs count
// only when cond (a scalar Bool node) holds, as well as any enclosing gate:
// convIf builds each branch of a run-time If under its condition.
func (r *indexRecorder) gateWith(cond *graph.Node) (restore func()) {
	if r == nil {
		return func() {}
	}
	old := r.gate
	if old != nil {
		cond = graph.LogicalAnd(old, cond)
	}
	r.gate = cond
	return func() { r.gate = old }
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
		var ic *IndexChecks // nil: nothing to check
		if len(r.proven) > 0 {
			ic = &IndexChecks{proven: r.proven}
		}
		p.idx.Store(ic)
		return
	}
	if len(r.nodes) > 0 {
		outs[IndexCheckOutput] = graph.Concatenate(r.nodes, 0)
	}
	p.idx.Store(&IndexChecks{host: r.host, graph: r.graph, proven: r.proven})
}

// provenNodes lists the nodes whose run-time indices the analysis proved in
// range, so that no check was built for them (for the tests).
func (ic *IndexChecks) provenNodes() []string {
	if ic == nil {
		return nil
	}
	return ic.proven
}

// keepsValues says whether node k passes its first input's values through
// unchanged (possibly rearranged or repeated); for index tuples (tuple)
// only ops that keep the last axis whole count.
func (m *Model) keepsValues(k int, tuple bool) bool {
	n := m.nodes[k]
	switch n.OpType {
	case "Identity":
		return true
	case "Cast":
		a := m.attrs[k]["to"]
		return a != nil && a.I == int64(onnxpb.Int64) // a narrowing cast can change values
	case "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Transpose", "Expand":
		return !tuple
	}
	return false
}

// hostShift returns the single integer value a known input holds, when
// name is one (an initializer or a folded constant of one element).
func (b *builder) hostShift(name string) (int64, bool) {
	v := b.lookup(name)
	if v == nil || v.host == nil || v.host.size() != 1 || !v.host.dt.IsInt() {
		return 0, false
	}
	vals, err := v.host.ints()
	if err != nil || len(vals) != 1 {
		return 0, false
	}
	return vals[0], true
}

// indexSource follows value name back through ops that keep every value
// it holds (keepsValues), and Adds or Subs of one known value (the
// returned shift), to a model input; ok is false when the value is
// otherwise computed, an initializer, or not an integer model input.
func (b *builder) indexSource(prod map[string]int, name string, tuple bool) (input string, shift int64, ok bool) {
	m := b.m
	for range len(m.nodes) + 1 {
		for _, in := range m.inputs {
			if in.Name == name {
				return name, shift, in.Kind == KindTensor && in.DType.IsInt()
			}
		}
		k, found := prod[name]
		if !found || len(m.nodes[k].Input) == 0 {
			return "", 0, false
		}
		n := m.nodes[k]
		switch {
		case m.keepsValues(k, tuple):
		case (n.OpType == "Add" || n.OpType == "Sub") && !tuple && len(n.Input) == 2:
			c, ok := b.hostShift(n.Input[1])
			if !ok && n.OpType == "Add" {
				if c, ok = b.hostShift(n.Input[0]); ok {
					n = &onnxpb.Node{Input: []string{n.Input[1]}}
				}
			}
			if !ok || c == math.MinInt64 || !addsSafely(shift, c, n.OpType == "Sub") {
				return "", 0, false
			}
			if n.OpType == "Sub" {
				c = -c
			}
			shift += c
		default:
			return "", 0, false
		}
		name = n.Input[0]
	}
	return "", 0, false
}

// addsSafely says whether shift ± c stays far from int64 overflow (within
// ±2^62, beyond any axis size).
func addsSafely(shift, c int64, sub bool) bool {
	const lim = 1 << 62
	if sub {
		c = -c
	}
	return c > -lim && c < lim && shift+c > -lim && shift+c < lim
}

// indexBounds proves bounds [lo, hi] of the integer values of name in the
// main graph where their producer fixes them: ArgMax and ArgMin give [0,
// d-1] for the reduced axis of size d, TopK's indices the same, Clip its
// known bounds, through keepsValues ops and Adds or Subs of a known value.
func (b *builder) indexBounds(prod map[string]int, name string, depth int) (lo, hi int64, ok bool) {
	m := b.m
	k, found := prod[name]
	if !found || depth > 64 || len(m.nodes[k].Input) == 0 {
		return 0, 0, false
	}
	n := m.nodes[k]
	if m.keepsValues(k, false) {
		return b.indexBounds(prod, n.Input[0], depth+1)
	}
	switch n.OpType {
	case "ArgMax", "ArgMin", "TopK":
		if n.OpType == "TopK" && (len(n.Output) < 2 || n.Output[1] != name) {
			return 0, 0, false
		}
		v := b.lookup(n.Input[0])
		if v == nil || v.node == nil && v.host == nil {
			return 0, 0, false
		}
		dims := []int(nil)
		if v.node != nil {
			dims = v.node.Shape().Dimensions
		} else {
			dims = v.host.dims
		}
		axis := int64(0)
		if n.OpType == "TopK" {
			axis = -1
		}
		if a := m.attrs[k]["axis"]; a != nil {
			axis = a.I
		}
		if axis < 0 {
			axis += int64(len(dims))
		}
		if axis < 0 || int(axis) >= len(dims) || dims[axis] == 0 {
			return 0, 0, false
		}
		return 0, int64(dims[axis]) - 1, true
	case "Clip":
		if len(n.Input) < 3 || n.Input[1] == "" || n.Input[2] == "" {
			return 0, 0, false
		}
		l, okl := b.hostShift(n.Input[1])
		h, okh := b.hostShift(n.Input[2])
		return l, h, okl && okh
	case "Add", "Sub":
		if len(n.Input) != 2 {
			return 0, 0, false
		}
		c, okc := b.hostShift(n.Input[1])
		if !okc || !addsSafely(0, c, n.OpType == "Sub") {
			return 0, 0, false
		}
		if n.OpType == "Sub" {
			c = -c
		}
		l, h, ok := b.indexBounds(prod, n.Input[0], depth+1)
		if !ok || !addsSafely(l, c, false) || !addsSafely(h, c, false) {
			return 0, 0, false
		}
		return l + c, h + c, true
	}
	return 0, 0, false
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
