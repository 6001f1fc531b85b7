package onnx

import (
	"math"

	"github.com/gomlx/gomlx/pkg/core/graph"
)

// The stateful sequence-model ops of opset 27: CausalConvWithState
// (https://onnx.ai/onnx/operators/onnx__CausalConvWithState.html) and
// LinearAttention (https://onnx.ai/onnx/operators/onnx__LinearAttention.html).
// Both carry a state from one call to the next (a decode step feeds the
// previous call's present_state back as past_state), and both are built as
// plain graph arithmetic: the time axis is static, so a recurrence is
// unrolled at build time.

func init() {
	register("CausalConvWithState", 27, convCausalConvWithState)
	register("LinearAttention", 27, convLinearAttention)
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("CausalConvWithState", "LinearAttention")
}

// convCausalConvWithState is a depthwise causal 1-D convolution: input
// (batch, channels, length), weight (channels, 1, k), optional bias
// (channels) and past_state (batch, channels, k-1) that stands in for the
// k-1 positions before the input (zeros when omitted). output[b,c,t] =
// bias[c] + Σ_j weight[c,0,j]·padded[b,c,t+j] over the padded input
// [past_state, input], optionally followed by SiLU (activation "silu" or its
// alias "swish"); present_state is the padded input's last k-1 positions.
func convCausalConvWithState(c *opCtx) error {
	x, w := c.in(0), c.in(1)
	xd, wd := x.Shape().Dimensions, w.Shape().Dimensions
	if len(xd) != 3 {
		c.fail("input must be 3-D (batch, channels, length), got %v", xd)
	}
	if len(wd) != 3 || wd[0] != xd[1] || wd[1] != 1 || wd[2] < 1 {
		c.fail("weight must be (channels=%d, 1, k>=1), got %v", xd[1], wd)
	}
	batch, ch, length, k := xd[0], xd[1], xd[2], wd[2]
	act := c.attrString("activation", "none")
	if act != "none" && act != "silu" && act != "swish" {
		c.fail("activation must be none, silu or swish, got %q", act)
	}
	padded := x
	if k > 1 {
		var past *graph.Node
		if c.has(3) {
			past = c.in(3)
			if pd := past.Shape().Dimensions; len(pd) != 3 || pd[0] != batch || pd[1] != ch || pd[2] != k-1 {
				c.fail("past_state must be (%d, %d, %d), got %v", batch, ch, k-1, pd)
			}
			if past.DType() != x.DType() {
				past = graph.ConvertDType(past, x.DType())
			}
		} else {
			past = filled(x.Graph(), x.DType(), []int{batch, ch, k - 1}, 0)
		}
		padded = graph.Concatenate([]*graph.Node{past, x}, 2)
	}
	var out *graph.Node
	for j := 0; j < k; j++ {
		wj := graph.Reshape(sliceAxis(w, 2, j, j+1, 1), 1, ch, 1)
		term := graph.Mul(sliceAxis(padded, 2, j, j+length, 1), broadcastNodeTo(wj, xd))
		if out == nil {
			out = term
		} else {
			out = graph.Add(out, term)
		}
	}
	if c.has(2) {
		b := c.in(2)
		if bd := b.Shape().Dimensions; len(bd) != 1 || bd[0] != ch {
			c.fail("bias must be (%d), got %v", ch, bd)
		}
		if b.DType() != out.DType() {
			b = graph.ConvertDType(b, out.DType())
		}
		out = graph.Add(out, broadcastNodeTo(graph.Reshape(b, 1, ch, 1), xd))
	}
	if act != "none" {
		out = graph.Mul(out, graph.Sigmoid(out))
	}
	c.set(0, out)
	if c.wantsOutput(1) && k == 1 {
		// An empty state (batch, channels, 0): a build-time value, since a
		// graph cannot hold a zero-sized slice here.
		c.setHost(1, hostZeros(c.dtype(0), []int{batch, ch, 0}))
	} else if c.wantsOutput(1) {
		total := padded.Shape().Dimensions[2]
		c.set(1, sliceAxis(padded, 2, total-(k-1), total, 1))
	}
	return nil
}

// convLinearAttention is the recurrent (linear-time) attention of opset 28.
// query and key are (batch, T, heads·d_k), value (batch, T, kv_heads·d_v);
// the state S is (batch, kv_heads, d_k, d_v), from past_state or zeros.
// Per step t, on each key/value head:
//
//	gated, gated_delta:  S ← S·exp(decay_t)            (decay per head or per key dim)
//	delta, gated_delta:  v_t ← beta_t·(v_t − Sᵀk_t)
//	all:                 S ← S + k_t ⊗ v_t
//	output_t = scale · q_tᵀ S                          (each query head reads its group's S)
//
// scale 0 (the default) means 1/√d_k. Computation is in the graph's float
// dtype (Float32 for Float16 models, as the reference computes); chunk_size
// is a tuning hint with no effect on the result. present_state is the final S.
func convLinearAttention(c *opCtx) error {
	q, k, v := c.in(0), c.in(1), c.in(2)
	for i, n := range []*graph.Node{q, k, v} {
		if n.Rank() != 3 {
			c.fail("input %d must be 3-D (batch, T, heads*size), got %s", i, n.Shape())
		}
	}
	rule := c.attrString("update_rule", "gated_delta")
	gating, delta := false, false
	switch rule {
	case "linear":
	case "gated":
		gating = true
	case "delta":
		delta = true
	case "gated_delta":
		gating, delta = true, true
	default:
		c.fail("update_rule must be linear, gated, delta or gated_delta, got %q", rule)
	}
	if gating != c.has(4) {
		c.fail("update_rule %q %s the decay input", rule, map[bool]string{true: "requires", false: "forbids"}[gating])
	}
	if delta != c.has(5) {
		c.fail("update_rule %q %s the beta input", rule, map[bool]string{true: "requires", false: "forbids"}[delta])
	}
	hq, hkv := int(c.attrInt("q_num_heads", 0)), int(c.attrInt("kv_num_heads", 0))
	if hq <= 0 || hkv <= 0 || hq%hkv != 0 {
		c.fail("q_num_heads (%d) must be a positive multiple of kv_num_heads (%d)", hq, hkv)
	}
	qd, kd, vd := q.Shape().Dimensions, k.Shape().Dimensions, v.Shape().Dimensions
	b, t := qd[0], qd[1]
	if kd[0] != b || vd[0] != b || kd[1] != t || vd[1] != t {
		c.fail("query %v, key %v and value %v disagree on batch or sequence length", qd, kd, vd)
	}
	if qd[2]%hq != 0 || kd[2]%hkv != 0 || vd[2]%hkv != 0 {
		c.fail("query %v, key %v, value %v: last dimensions are not multiples of the head counts %d, %d", qd, kd, vd, hq, hkv)
	}
	dk, dv := qd[2]/hq, vd[2]/hkv
	if kd[2]/hkv != dk {
		c.fail("key head size %d differs from query head size %d", kd[2]/hkv, dk)
	}
	dt := q.DType()
	g := q.Graph()
	conv := func(n *graph.Node) *graph.Node {
		if n.DType() != dt {
			return graph.ConvertDType(n, dt)
		}
		return n
	}
	// (B, T, H·D) → (B, H, T, D)
	heads := func(n *graph.Node, h, d int) *graph.Node {
		return graph.TransposeAllDims(graph.Reshape(conv(n), b, t, h, d), 0, 2, 1, 3)
	}
	q4, k4, v4 := heads(q, hq, dk), heads(k, hkv, dk), heads(v, hkv, dv)
	var decay4, beta4 *graph.Node
	if gating {
		d := c.in(4)
		dd := d.Shape().Dimensions
		switch {
		case len(dd) != 3 || dd[0] != b || dd[1] != t:
			c.fail("decay must be (%d, %d, %d or %d), got %v", b, t, hkv, hkv*dk, dd)
		case dd[2] == hkv:
			decay4 = heads(d, hkv, 1)
		case dd[2] == hkv*dk:
			decay4 = heads(d, hkv, dk)
		default:
			c.fail("decay's last dimension %d must be kv_num_heads (%d) or kv_num_heads*d_k (%d)", dd[2], hkv, hkv*dk)
		}
	}
	if delta {
		be := c.in(5)
		bd := be.Shape().Dimensions
		if len(bd) != 3 || bd[0] != b || bd[1] != t || (bd[2] != hkv && bd[2] != 1) {
			c.fail("beta must be (%d, %d, %d or 1), got %v", b, t, hkv, bd)
		}
		beta4 = heads(be, bd[2], 1) // (B, H_kv or 1, T, 1)
	}
	sdims := []int{b, hkv, dk, dv}
	var state *graph.Node
	if c.has(3) {
		state = conv(c.in(3))
		if pd := state.Shape().Dimensions; len(pd) != 4 || pd[0] != b || pd[1] != hkv || pd[2] != dk || pd[3] != dv {
			c.fail("past_state must be %v, got %v", sdims, pd)
		}
	} else {
		state = filled(g, dt, sdims, 0)
	}
	scale := c.attrFloat("scale", 0)
	if scale == 0 {
		scale = 1 / math.Sqrt(float64(dk))
	}
	group := hq / hkv
	step := func(n *graph.Node, i int) *graph.Node { // (B, H, T, D) → (B, H, D)
		d := n.Shape().Dimensions
		return graph.Reshape(sliceAxis(n, 2, i, i+1, 1), d[0], d[1], d[3])
	}
	if t == 0 {
		c.fail("sequence length must be at least 1")
	}
	outs := make([]*graph.Node, t)
	for i := 0; i < t; i++ {
		kt, vt := step(k4, i), step(v4, i) // (B, Hkv, dk), (B, Hkv, dv)
		if gating {
			gt := graph.Exp(step(decay4, i)) // (B, Hkv, 1 or dk)
			gd := gt.Shape().Dimensions
			state = graph.Mul(state, broadcastNodeTo(graph.Reshape(gt, gd[0], gd[1], gd[2], 1), sdims))
		}
		if delta {
			// retrieved[b,h,m] = Σ_d S[b,h,d,m]·k_t[b,h,d]
			kx := broadcastNodeTo(graph.Reshape(kt, b, hkv, dk, 1), sdims)
			retrieved := graph.ReduceSum(graph.Mul(state, kx), 2)
			bt := step(beta4, i) // (B, Hkv or 1, 1)
			vt = graph.Mul(broadcastNodeTo(bt, []int{b, hkv, dv}), graph.Sub(vt, retrieved))
		}
		outer := graph.Mul(broadcastNodeTo(graph.Reshape(kt, b, hkv, dk, 1), sdims),
			broadcastNodeTo(graph.Reshape(vt, b, hkv, 1, dv), sdims))
		state = graph.Add(state, outer)
		// Query head h reads kv head h/group.
		read := state
		if group > 1 {
			read = graph.Reshape(broadcastNodeTo(graph.Reshape(state, b, hkv, 1, dk, dv), []int{b, hkv, group, dk, dv}), b, hq, dk, dv)
		}
		qt := step(q4, i) // (B, Hq, dk)
		o := graph.ReduceSum(graph.Mul(read, broadcastNodeTo(graph.Reshape(qt, b, hq, dk, 1), []int{b, hq, dk, dv})), 2)
		outs[i] = graph.Reshape(graph.MulScalar(o, scale), b, 1, hq*dv) // (B, 1, Hq·dv)
	}
	out := outs[0]
	if t > 1 {
		out = graph.Concatenate(outs, 1)
	}
	c.setDT(0, out, c.dtype(0))
	if c.wantsOutput(1) {
		src := 0 // the state's dtype: past_state's, else query's
		if c.has(3) {
			src = 3
		}
		if want := c.in(src).DType(); state.DType() != want {
			state = graph.ConvertDType(state, want)
		}
		c.setDT(1, state, c.dtype(src))
	}
	return nil
}
