package onnx

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
)

// Control flow. If with a condition known at build time inlines the chosen
// branch (which may then have any shapes); with a run-time condition both
// branches are built and each output selected with Where, which needs the
// branches to agree on shapes and dtypes. Loop and Scan are unrolled, so
// their iteration counts must be known when the graph is built.

func init() {
	register("If", 1, convIf).withHost(convIf)
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("If")
}

func convIf(c *opCtx) error {
	thenG, elseG := c.attr("then_branch"), c.attr("else_branch")
	if thenG == nil || thenG.G == nil || elseG == nil || elseG.G == nil {
		c.fail("missing then_branch or else_branch")
	}
	if c.isHost(0) {
		cond, err := c.hostIn(0).scalarInt()
		if err != nil {
			return err
		}
		branch := elseG.G
		if cond != 0 {
			branch = thenG.G
		}
		outs, err := c.b.buildSubgraph(branch, nil)
		if err != nil {
			return err
		}
		return c.setBranchOutputs(outs)
	}
	cond := graph.Reshape(c.in(0))
	restore := c.b.idx.gateWith(cond) // each branch's index checks count only when it is taken (indexcheck.go)
	thenOuts, err := c.b.buildSubgraph(thenG.G, nil)
	restore()
	if err != nil {
		return err
	}
	restore = c.b.idx.gateWith(graph.LogicalNot(cond))
	elseOuts, err := c.b.buildSubgraph(elseG.G, nil)
	restore()
	if err != nil {
		return err
	}
	if len(thenOuts) != len(elseOuts) {
		c.fail("branches have %d and %d outputs", len(thenOuts), len(elseOuts))
	}
	for k := range thenOuts {
		if thenOuts[k].seq != nil || elseOuts[k].seq != nil || thenOuts[k].none || elseOuts[k].none {
			c.selectStructured(k, cond, thenOuts[k], elseOuts[k]) // values.go
			continue
		}
		t, e := c.b.nodeOf(thenOuts[k]), c.b.nodeOf(elseOuts[k])
		if !equalInts(t.Shape().Dimensions, e.Shape().Dimensions) || t.DType() != e.DType() {
			c.fail("with a condition computed at run time, both branches must give output %d the same shape and dtype (got %s and %s)",
				k, t.Shape(), e.Shape())
		}
		cb := graph.BroadcastToDims(cond, t.Shape().Dimensions...)
		c.setDT(k, graph.Where(cb, t, e), thenOuts[k].dt)
	}
	return nil
}

// setBranchOutputs copies a branch's output values to the node's outputs.
func (c *opCtx) setBranchOutputs(outs []*value) error {
	if len(outs) < c.numOutputs() {
		c.fail("branch has %d outputs, node expects %d", len(outs), c.numOutputs())
	}
	for k := range c.outs {
		c.copyValue(k, outs[k]) // tensors, sequences and optionals (values.go)
	}
	return nil
}

func init() {
	register("Loop", 1, convLoop).needs(0, 1)
	register("Scan", 9, convScan)
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("Loop", "Scan")
}

// maxUnroll bounds the iterations Loop and Scan unroll into the graph.
const maxUnroll = 1 << 14

// convLoop unrolls the loop: its trip count and condition must be known at
// build time (the condition the body computes included), so the number of
// iterations is fixed while building.
func convLoop(c *opCtx) error {
	body := c.attr("body")
	if body == nil || body.G == nil {
		c.fail("missing body")
	}
	trips := int64(-1)
	if c.has(0) {
		v, err := c.hostIn(0).scalarInt()
		if err != nil {
			return err
		}
		trips = v
	}
	cond := true
	if c.has(1) {
		v, err := c.hostIn(1).scalarInt()
		if err != nil {
			return err
		}
		cond = v != 0
	}
	carried := make([]*value, 0, len(c.inputs))
	for k := 2; k < len(c.inputs); k++ {
		carried = append(carried, c.input(k))
	}
	nCarried := len(carried)
	var scans [][]*value
	for it := int64(0); cond && (trips < 0 || it < trips); it++ {
		if it >= maxUnroll {
			c.fail("loop runs more than %d iterations; unrolling stops there", maxUnroll)
		}
		in := append([]*value{
			{name: "iter", dt: ir.Int64, host: hostInt64s([]int64{it}, []int{}...)},
			{name: "cond", dt: ir.Bool, host: newHostInts(ir.Bool, []int{}, []int64{b2i(cond)})},
		}, carried...)
		outs, err := c.b.buildSubgraph(body.G, in)
		if err != nil {
			return err
		}
		if len(outs) < 1+nCarried {
			c.fail("body gives %d outputs, needs at least %d", len(outs), 1+nCarried)
		}
		if outs[0].host == nil {
			c.fail("the loop condition is computed at run time; only loops whose iteration count is known when the graph is built are supported")
		}
		cv, err := outs[0].host.scalarInt()
		if err != nil {
			return err
		}
		cond = cv != 0
		carried = outs[1 : 1+nCarried]
		if scans == nil {
			scans = make([][]*value, len(outs)-1-nCarried)
		}
		for k, v := range outs[1+nCarried:] {
			scans[k] = append(scans[k], v)
		}
	}
	for k, v := range carried {
		c.copyValue(k, v) // tensors, sequences and optionals (values.go)
	}
	for k := nCarried; k < c.numOutputs(); k++ {
		if !c.wantsOutput(k) {
			continue
		}
		if scans == nil || len(scans[k-nCarried]) == 0 {
			c.fail("scan output %d of a loop that ran no iteration has no known shape", k)
		}
		c.set(k, stackValues(c, scans[k-nCarried], 0))
	}
	return nil
}

// stackValues stacks tensor values along a new axis.
func stackValues(c *opCtx, vals []*value, axis int) *graph.Node {
	parts := make([]*graph.Node, len(vals))
	for k, v := range vals {
		n := c.b.nodeOf(v)
		d := n.Shape().Dimensions
		parts[k] = graph.Reshape(n, append(append(append([]int{}, d[:axis]...), 1), d[axis:]...)...)
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return graph.Concatenate(parts, axis)
}

// convScan unrolls Scan (opset 9 and later) over the static length of its
// scan inputs.
func convScan(c *opCtx) error {
	body := c.attr("body")
	if body == nil || body.G == nil {
		c.fail("missing body")
	}
	m := int(c.attrInt("num_scan_inputs", 0))
	nState := len(c.inputs) - m
	if m <= 0 || nState < 0 {
		c.fail("num_scan_inputs %d does not fit %d inputs", m, len(c.inputs))
	}
	inAxes := intsAttrOr(c, "scan_input_axes", m, 0)
	inDirs := intsAttrOr(c, "scan_input_directions", m, 0)
	nOut := c.numOutputs() - nState
	outAxes := intsAttrOr(c, "scan_output_axes", nOut, 0)
	outDirs := intsAttrOr(c, "scan_output_directions", nOut, 0)
	scanIn := make([]*graph.Node, m)
	steps := -1
	for k := range m {
		x := c.in(nState + k)
		inAxes[k] = c.normAxis(int64(inAxes[k]), x.Rank())
		scanIn[k] = x
		d := x.Shape().Dimensions[inAxes[k]]
		if steps >= 0 && d != steps {
			c.fail("scan inputs have lengths %d and %d", steps, d)
		}
		steps = d
	}
	if steps > maxUnroll {
		c.fail("scan of %d steps exceeds the unrolling limit %d", steps, maxUnroll)
	}
	state := make([]*value, nState)
	for k := range nState {
		state[k] = c.input(k)
	}
	scans := make([][]*value, nOut)
	for t := range steps {
		in := append([]*value{}, state...)
		for k, x := range scanIn {
			pos := t
			if inDirs[k] != 0 {
				pos = steps - 1 - t
			}
			d := x.Shape().Dimensions
			sl := sliceAxis(x, inAxes[k], pos, pos+1, 1)
			sl = graph.Reshape(sl, append(append([]int{}, d[:inAxes[k]]...), d[inAxes[k]+1:]...)...)
			in = append(in, &value{name: "scan_in", dt: c.dtype(nState + k), node: sl})
		}
		outs, err := c.b.buildSubgraph(body.G, in)
		if err != nil {
			return err
		}
		if len(outs) != nState+nOut {
			c.fail("body gives %d outputs, node expects %d", len(outs), nState+nOut)
		}
		state = outs[:nState]
		for k := range nOut {
			scans[k] = append(scans[k], outs[nState+k])
		}
	}
	for k, v := range state {
		c.setValue(k, v)
	}
	for k := range nOut {
		if !c.wantsOutput(nState + k) {
			continue
		}
		if len(scans[k]) == 0 {
			c.fail("scan of length 0 has no known output shape")
		}
		vals := scans[k]
		if outDirs[k] != 0 {
			rev := make([]*value, len(vals))
			for j, v := range vals {
				rev[len(vals)-1-j] = v
			}
			vals = rev
		}
		r := c.b.nodeOf(vals[0]).Rank() + 1
		c.set(nState+k, stackValues(c, vals, c.normAxis(int64(outAxes[k]), r)))
	}
	return nil
}

func init() {
	register("Scan", 8, convScan8).needs(0)
}

// convScan8 is Scan before opset 9: inputs carry a leading batch axis
// (scan inputs scan along axis 1) and an optional sequence_lens first
// input, which must leave every sequence at full length. Each batch entry
// is unrolled separately and the results stacked.
func convScan8(c *opCtx) error {
	body := c.attr("body")
	if body == nil || body.G == nil {
		c.fail("missing body")
	}
	m := int(c.attrInt("num_scan_inputs", 0))
	nState := len(c.inputs) - 1 - m
	if m <= 0 || nState < 0 {
		c.fail("num_scan_inputs %d does not fit %d inputs", m, len(c.inputs))
	}
	dirs := intsAttrOr(c, "directions", m, 0)
	first := c.in(1 + nState)
	batch, steps := first.Shape().Dimensions[0], first.Shape().Dimensions[1]
	if c.has(0) {
		for _, l := range c.constInts(0) {
			if int(l) != steps {
				c.fail("sequence_lens shorter than the scan length are not supported")
			}
		}
	}
	if batch*steps > maxUnroll {
		c.fail("scan of %d steps exceeds the unrolling limit %d", batch*steps, maxUnroll)
	}
	nOut := c.numOutputs() - nState
	perOut := make([][]*value, c.numOutputs())
	row := func(x *graph.Node, b int) *graph.Node {
		d := x.Shape().Dimensions
		return graph.Reshape(sliceAxis(x, 0, b, b+1, 1), d[1:]...)
	}
	for b := range batch {
		state := make([]*value, nState)
		for k := range nState {
			state[k] = &value{name: "state", dt: c.dtype(1 + k), node: row(c.in(1+k), b)}
		}
		scans := make([][]*value, nOut)
		for t := range steps {
			in := append([]*value{}, state...)
			for k := range m {
				pos := t
				if dirs[k] != 0 {
					pos = steps - 1 - t
				}
				x := row(c.in(1+nState+k), b)
				d := x.Shape().Dimensions
				sl := graph.Reshape(sliceAxis(x, 0, pos, pos+1, 1), d[1:]...)
				in = append(in, &value{name: "scan_in", dt: c.dtype(1 + nState + k), node: sl})
			}
			outs, err := c.b.buildSubgraph(body.G, in)
			if err != nil {
				return err
			}
			if len(outs) != nState+nOut {
				c.fail("body gives %d outputs, node expects %d", len(outs), nState+nOut)
			}
			state = outs[:nState]
			for k := range nOut {
				scans[k] = append(scans[k], outs[nState+k])
			}
		}
		for k, v := range state {
			perOut[k] = append(perOut[k], v)
		}
		for k := range nOut {
			if steps == 0 {
				c.fail("scan of length 0 has no known output shape")
			}
			perOut[nState+k] = append(perOut[nState+k], &value{name: "scan_out", dt: scans[k][0].dt, node: stackValues(c, scans[k], 0)})
		}
	}
	for k := range c.numOutputs() {
		if c.wantsOutput(k) && len(perOut[k]) > 0 {
			c.set(k, stackValues(c, perOut[k], 0))
		}
	}
	return nil
}
