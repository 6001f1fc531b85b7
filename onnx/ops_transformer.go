package onnx

import (
	"math"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// The transformer ops of opsets 23 to 28: Attention (23, 24, 25),
// RMSNormalization and RotaryEmbedding (23), Swish (24), SwiGLU (28).
// Semantics from the operator pages, https://onnx.ai/onnx/operators/
// (onnx__Attention.html, onnx__RMSNormalization.html,
// onnx__RotaryEmbedding.html, onnx__Swish.html, onnx__SwiGLU.html).

func init() {
	register("Attention", 23, attentionConv(23))
	register("Attention", 24, attentionConv(24))
	register("Attention", 25, attentionConv(25))
	register("RMSNormalization", 23, convRMSNorm)
	register("RotaryEmbedding", 23, convRotaryEmbedding)
	register("Swish", 24, convSwish)
	register("SwiGLU", 28, convSwiGLU)
	register("LpNormalization", 1, convLpNormalization)
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("Attention", "LpNormalization", "RMSNormalization", "RotaryEmbedding",
		"SwiGLU", "Swish")
}

// convLpNormalization is x / ||x||_p along axis (p 1 or 2), zero where the
// norm is zero (https://onnx.ai/onnx/operators/onnx__LpNormalization.html).
func convLpNormalization(c *opCtx) error {
	x := c.in(0)
	axis := c.normAxis(c.attrInt("axis", -1), x.Rank())
	var norm *graph.Node
	switch p := c.attrInt("p", 2); p {
	case 1:
		norm = graph.ReduceAndKeep(graph.Abs(x), graph.ReduceSum, axis)
	case 2:
		norm = graph.Sqrt(graph.ReduceAndKeep(graph.Mul(x, x), graph.ReduceSum, axis))
	default:
		c.fail("p must be 1 or 2, got %d", p)
	}
	norm = broadcastNodeTo(norm, x.Shape().Dimensions)
	zero := graph.Equal(norm, scalarLikeB(norm, 0))
	safe := graph.Where(zero, scalarLikeB(norm, 1), norm)
	c.set(0, graph.Where(zero, scalarLikeB(x, 0), graph.Div(x, safe)))
	return nil
}

// attentionConv is Attention at opset version v: 24 adds the
// nonpad_kv_seqlen input (an external KV cache), 25 the sliding window
// (left_window_size, right_window_size) and forbids q_num_heads and
// kv_num_heads on 4-D inputs.
//
// Y = softmax(softcap(Q·Kᵀ·scale) + bias)·V per head, where bias combines
// the mask input (boolean: false is -inf; float: added), the causal frontier
// (query i sees key j iff j <= i + offset, offset the past length or, with
// nonpad_kv_seqlen, that length minus the query length), the window and the
// padding of nonpad_kv_seqlen. A query row whose bias is -inf everywhere
// gives a zero row. Q, K and V are 4-D (batch, heads, sequence, head size)
// or 3-D (batch, sequence, heads·head size) with the head counts given.
func attentionConv(v int) converterFunc {
	return func(c *opCtx) error {
		q, k, val := c.in(0), c.in(1), c.in(2)
		rank := q.Rank()
		if rank != 3 && rank != 4 || k.Rank() != rank || val.Rank() != rank {
			c.fail("Q, K and V must all be 3-D or all 4-D, got %s, %s, %s", q.Shape(), k.Shape(), val.Shape())
		}
		qHeads, kvHeads := int(c.attrInt("q_num_heads", 0)), int(c.attrInt("kv_num_heads", 0))
		if rank == 4 && v >= 25 && (c.hasAttr("q_num_heads") || c.hasAttr("kv_num_heads")) {
			c.fail("q_num_heads and kv_num_heads must not be set for 4-D inputs")
		}
		if rank == 3 {
			if qHeads <= 0 || kvHeads <= 0 {
				c.fail("3-D inputs need q_num_heads and kv_num_heads, got %d and %d", qHeads, kvHeads)
			}
			q, k, val = splitHeads(c, q, qHeads, "Q"), splitHeads(c, k, kvHeads, "K"), splitHeads(c, val, kvHeads, "V")
		}
		qd, kd, vd := q.Shape().Dimensions, k.Shape().Dimensions, val.Shape().Dimensions
		batch, qh, sq, hs := qd[0], qd[1], qd[2], qd[3]
		kh := kd[1]
		if kd[0] != batch || vd[0] != batch || kd[3] != hs || vd[1] != kh || vd[2] != kd[2] {
			c.fail("Q %v, K %v and V %v do not agree on batch, heads, key length or head size", qd, kd, vd)
		}
		if kh == 0 || qh%kh != 0 {
			c.fail("%d query heads are not a multiple of %d key/value heads", qh, kh)
		}
		pastLen := 0
		if c.has(4) != c.has(5) {
			c.fail("past_key and past_value must be given together")
		}
		if c.has(4) {
			pk, pv := c.in(4), c.in(5)
			pastLen = pk.Shape().Dimensions[2]
			k = graph.Concatenate([]*graph.Node{pk, k}, 2)
			val = graph.Concatenate([]*graph.Node{pv, val}, 2)
		}
		c.set(1, k)
		c.set(2, val)
		skv := k.Shape().Dimensions[2]
		var nonpad *graph.Node
		if v >= 24 && c.has(6) {
			if c.has(4) {
				c.fail("nonpad_kv_seqlen cannot be combined with past_key and past_value")
			}
			nonpad = graph.ConvertDType(graph.Reshape(c.in(6), batch), ir.Int64)
		}
		dt := q.DType()
		g := q.Graph()
		negInf := math.Inf(-1)

		// The bias, (batch, heads, sq, skv) at most; built from what is given.
		full := []int{batch, qh, sq, skv}
		bias := filled(g, dt, full, 0)
		if c.has(3) {
			m := c.in(3)
			md := m.Shape().Dimensions
			if len(md) == 0 {
				c.fail("attn_mask must have rank >= 1")
			}
			if pad := skv - md[len(md)-1]; pad > 0 {
				fill := scalarOf(g, m.DType(), negInf)
				if m.DType() == ir.Bool {
					fill = graph.Const(g, false)
				}
				before := make([]int, len(md))
				after := make([]int, len(md))
				after[len(md)-1] = pad
				m = padConstant(m, before, after, fill)
			} else if pad < 0 {
				c.fail("attn_mask's last dimension %d is longer than the %d keys", md[len(md)-1], skv)
			}
			if m.DType() == ir.Bool {
				m = graph.Where(m, scalarOf(g, dt, 0), scalarOf(g, dt, negInf))
			} else if m.DType() != dt {
				m = graph.ConvertDType(m, dt)
			}
			bias = graph.Add(bias, broadcastNodeTo(m, full))
		}
		// offset per batch, as an Int64 (batch, 1, 1, 1) node.
		var offset *graph.Node
		if nonpad != nil {
			offset = graph.Reshape(graph.Sub(nonpad, scalarOf(g, ir.Int64, float64(sq))), batch, 1, 1, 1)
		} else {
			offset = graph.Reshape(scalarOf(g, ir.Int64, float64(pastLen)), 1, 1, 1, 1)
		}
		qi := graph.Iota(g, ir.MakeShape(ir.Int64, 1, 1, sq, 1), 2)
		kj := graph.Iota(g, ir.MakeShape(ir.Int64, 1, 1, 1, skv), 3)
		pos := graph.Add(qi, offset) // absolute query position
		diff := graph.Sub(broadcastNodeTo(pos, []int{offset.Shape().Dimensions[0], 1, sq, skv}), broadcastNodeTo(kj, []int{offset.Shape().Dimensions[0], 1, sq, skv}))
		allowed := filled(g, ir.Bool, diff.Shape().Dimensions, 1)
		if c.attrInt("is_causal", 0) != 0 {
			allowed = graph.LogicalAnd(allowed, graph.GreaterOrEqual(diff, scalarOf(g, ir.Int64, 0)))
		}
		if v >= 25 {
			left, right := c.attrInt("left_window_size", -1), c.attrInt("right_window_size", -1)
			if left < -1 || right < -1 {
				c.fail("window sizes must be -1 or nonnegative, got left %d, right %d", left, right)
			}
			if left >= 0 {
				allowed = graph.LogicalAnd(allowed, graph.LessOrEqual(diff, scalarOf(g, ir.Int64, float64(left))))
			}
			if right >= 0 {
				allowed = graph.LogicalAnd(allowed, graph.GreaterOrEqual(diff, scalarOf(g, ir.Int64, float64(-right))))
			}
		}
		if nonpad != nil {
			inRange := graph.LessThan(broadcastNodeTo(kj, []int{batch, 1, 1, skv}), graph.Reshape(nonpad, batch, 1, 1, 1))
			allowed = graph.LogicalAnd(broadcastNodeTo(allowed, []int{batch, 1, sq, skv}), broadcastNodeTo(inRange, []int{batch, 1, sq, skv}))
		}
		frontier := graph.Where(allowed, filled(g, dt, allowed.Shape().Dimensions, 0), filled(g, dt, allowed.Shape().Dimensions, negInf))
		bias = graph.Add(bias, broadcastNodeTo(frontier, full))

		// Grouped heads: each key/value head serves qh/kh query heads.
		if reps := qh / kh; reps > 1 {
			k = repeatHeads(k, reps)
			val = repeatHeads(val, reps)
		}
		scale := c.attrFloat("scale", 1/math.Sqrt(float64(hs)))
		if !c.hasAttr("scale") {
			scale = 1 / math.Sqrt(float64(hs))
		}
		s := math.Sqrt(scale)
		qs := graph.Mul(q, scalarOf(g, dt, s))
		ks := graph.Mul(k, scalarOf(g, dt, s))
		qk := dotGeneral(qs, []int{3}, []int{0, 1}, ks, []int{3}, []int{0, 1}) // (batch, heads, sq, skv)
		if sc := c.attrFloat("softcap", 0); sc > 0 {
			qk = graph.Mul(graph.Tanh(graph.Div(qk, scalarOf(g, dt, sc))), scalarOf(g, dt, sc))
		}
		withBias := graph.Add(qk, bias)
		mode := c.attrInt("qk_matmul_output_mode", 0)
		scores := withBias
		if sp := c.attrInt("softmax_precision", 0); sp != 0 {
			sdt, err := dtypeFromONNX(onnxpb.DataType(sp))
			if err != nil || !isFloatDT(sdt) {
				c.fail("softmax_precision %d: expected a float type", sp)
			}
			if gdt := c.b.graphDT(sdt); gdt != scores.DType() {
				scores = graph.ConvertDType(scores, gdt)
			}
		}
		probs := maskedSoftmax(scores)
		// A row the bias masks entirely is a zero row.
		rowMax := graph.ReduceAndKeep(bias, graph.ReduceMax, -1)
		rowMasked := graph.Equal(rowMax, scalarLikeB(rowMax, negInf))
		probs = graph.Where(broadcastNodeTo(rowMasked, probs.Shape().Dimensions), filled(g, probs.DType(), probs.Shape().Dimensions, 0), probs)
		if probs.DType() != dt {
			probs = graph.ConvertDType(probs, dt)
		}
		y := dotGeneral(probs, []int{3}, []int{0, 1}, val, []int{2}, []int{0, 1}) // (batch, heads, sq, hv)
		if rank == 3 {
			y = graph.TransposeAllAxes(y, 0, 2, 1, 3)
			yd := y.Shape().Dimensions
			y = graph.Reshape(y, yd[0], yd[1], yd[2]*yd[3])
		}
		c.set(0, y)
		if c.wantsOutput(3) {
			var out *graph.Node
			switch mode {
			case 0, 1:
				out = qk
			case 2:
				out = withBias
			case 3:
				out = probs
			default:
				c.fail("qk_matmul_output_mode %d: expected 0 to 3", mode)
			}
			c.set(3, out)
		}
		return nil
	}
}

// splitHeads turns (batch, sequence, heads·size) into (batch, heads,
// sequence, size).
func splitHeads(c *opCtx, x *graph.Node, heads int, what string) *graph.Node {
	d := x.Shape().Dimensions
	if d[2]%heads != 0 {
		c.fail("%s: hidden size %d is not a multiple of %d heads", what, d[2], heads)
	}
	return graph.TransposeAllAxes(graph.Reshape(x, d[0], d[1], heads, d[2]/heads), 0, 2, 1, 3)
}

// repeatHeads repeats each head of (batch, heads, seq, size) reps times in
// place: head h of the result is head h/reps of x.
func repeatHeads(x *graph.Node, reps int) *graph.Node {
	d := x.Shape().Dimensions
	x = graph.Reshape(x, d[0], d[1], 1, d[2], d[3])
	x = graph.BroadcastToDims(x, d[0], d[1], reps, d[2], d[3])
	return graph.Reshape(x, d[0], d[1]*reps, d[2], d[3])
}

// maskedSoftmax is a softmax over the last axis that gives zeros, not NaN,
// for a row that is -inf everywhere.
func maskedSoftmax(x *graph.Node) *graph.Node {
	dims := x.Shape().Dimensions
	// The shift by the maximum does not change the result, so it is taken
	// out of the gradient (as GoMLX's Softmax does): GoMLX's ReduceMax
	// gradient is NaN on a row that is -Inf everywhere, which made a
	// fully masked row's gradient NaN on xla-cpu (TestGradCheckXLACPU,
	// test_attention_23_boolmask_fullymasked_row_nan_robustness).
	mx := graph.StopGradient(graph.ReduceAndKeep(x, graph.ReduceMax, -1))
	mx = graph.Where(graph.Equal(mx, scalarLikeB(mx, math.Inf(-1))), scalarLikeB(mx, 0), mx)
	e := graph.Exp(graph.Sub(x, broadcastNodeTo(mx, dims)))
	sum := graph.ReduceAndKeep(e, graph.ReduceSum, -1)
	sum = graph.Where(graph.Equal(sum, scalarLikeB(sum, 0)), scalarLikeB(sum, 1), sum)
	return graph.Div(e, broadcastNodeTo(sum, dims))
}

// convRMSNorm is X / sqrt(mean(X², axes from axis on) + epsilon) · scale,
// the first stage in float32 when stash_type is 1 (the default).
func convRMSNorm(c *opCtx) error {
	x := c.in(0)
	r := x.Rank()
	axis := c.normAxis(c.attrInt("axis", -1), r)
	axes := []int{}
	for a := axis; a < r; a++ {
		axes = append(axes, a)
	}
	xc := x
	if sdt := c.b.prec.nodeDT(ir.Float32); c.attrInt("stash_type", 1) == 1 && x.DType() != sdt &&
		(x.DType() == ir.BFloat16 || x.DType() == ir.Float16) {
		xc = graph.ConvertDType(x, sdt)
	}
	kd := keptDims(xc.Shape().Dimensions, axes)
	ms := graph.Reshape(reduceMean(graph.Mul(xc, xc), axes), kd...)
	rms := graph.Sqrt(graph.Add(ms, scalarLikeB(ms, c.attrFloat("epsilon", 1e-5))))
	y := graph.Div(xc, broadcastNodeTo(rms, xc.Shape().Dimensions))
	if xc != x {
		y = graph.ConvertDType(y, x.DType())
	}
	scale := c.in(1)
	if scale.DType() != y.DType() {
		c.fail("X (%s) and scale (%s) must have one dtype", c.dtype(0), c.dtype(1))
	}
	c.set(0, graph.Mul(y, broadcastNodeTo(scale, x.Shape().Dimensions)))
	return nil
}

// convRotaryEmbedding rotates pairs of X's head features by the angles
// whose cosines and sines the caches hold, per position: halves (x1 = the
// first half, x2 = the second) or interleaved pairs (even, odd features),
// over the first rotary_embedding_dim features (all by default).
func convRotaryEmbedding(c *opCtx) error {
	x := c.in(0)
	xd := x.Shape().Dimensions
	var b, s, h, hs int
	x4 := x // (batch, seq, heads, size)
	switch len(xd) {
	case 4: // (batch, heads, seq, size)
		b, h, s, hs = xd[0], xd[1], xd[2], xd[3]
		x4 = graph.TransposeAllAxes(x, 0, 2, 1, 3)
	case 3:
		heads := int(c.attrInt("num_heads", 0))
		if heads <= 0 || xd[2]%heads != 0 {
			c.fail("3-D input %v needs num_heads dividing its hidden size, got %d", xd, heads)
		}
		b, s, h, hs = xd[0], xd[1], heads, xd[2]/heads
		x4 = graph.Reshape(x, b, s, h, hs)
	default:
		c.fail("X must be 3-D or 4-D, got %s", x.Shape())
	}
	rd := int(c.attrInt("rotary_embedding_dim", 0))
	if rd == 0 {
		rd = hs
	}
	if rd%2 != 0 || rd > hs {
		c.fail("rotary_embedding_dim %d must be even and at most the head size %d", rd, hs)
	}
	half := rd / 2
	cos, sin := c.in(1), c.in(2)
	if c.has(3) {
		pos := c.in(3)
		if pd := pos.Shape().Dimensions; len(pd) != 2 || pd[0] != b || pd[1] != s {
			c.fail("position_ids must be (batch %d, sequence %d), got %v", b, s, pd)
		}
		if cos.Rank() != 2 || sin.Rank() != 2 {
			c.fail("with position_ids the caches must be 2-D, got %s and %s", cos.Shape(), sin.Shape())
		}
		idx := normalizeIndices(pos, cos.Shape().Dimensions[0])
		cos, sin = gatherAxis(cos, idx, 0), gatherAxis(sin, idx, 0)
	}
	for _, cc := range []*graph.Node{cos, sin} {
		if d := cc.Shape().Dimensions; len(d) != 3 || d[0] != b || d[1] != s || d[2] != half {
			c.fail("cos/sin cache must give (batch %d, sequence %d, %d) values, got %v", b, s, half, d)
		}
	}
	cos = broadcastNodeTo(graph.Reshape(cos, b, s, 1, half), []int{b, s, h, half})
	sin = broadcastNodeTo(graph.Reshape(sin, b, s, 1, half), []int{b, s, h, half})
	rot := sliceAxis(x4, 3, 0, rd, 1)
	var x1, x2 *graph.Node
	interleaved := c.attrInt("interleaved", 0) != 0
	if interleaved {
		pairs := graph.Reshape(rot, b, s, h, half, 2)
		x1 = graph.Reshape(sliceAxis(pairs, 4, 0, 1, 1), b, s, h, half)
		x2 = graph.Reshape(sliceAxis(pairs, 4, 1, 2, 1), b, s, h, half)
	} else {
		x1 = sliceAxis(rot, 3, 0, half, 1)
		x2 = sliceAxis(rot, 3, half, rd, 1)
	}
	real := graph.Sub(graph.Mul(cos, x1), graph.Mul(sin, x2))
	imag := graph.Add(graph.Mul(sin, x1), graph.Mul(cos, x2))
	if interleaved {
		rot = graph.Reshape(graph.Concatenate([]*graph.Node{
			graph.Reshape(real, b, s, h, half, 1), graph.Reshape(imag, b, s, h, half, 1)}, 4), b, s, h, rd)
	} else {
		rot = graph.Concatenate([]*graph.Node{real, imag}, 3)
	}
	if rd < hs {
		rot = graph.Concatenate([]*graph.Node{rot, sliceAxis(x4, 3, rd, hs, 1)}, 3)
	}
	if len(xd) == 4 {
		c.set(0, graph.TransposeAllAxes(rot, 0, 2, 1, 3))
	} else {
		c.set(0, graph.Reshape(rot, xd...))
	}
	return nil
}

// convSwish is x·sigmoid(alpha·x).
func convSwish(c *opCtx) error {
	x := c.in(0)
	alpha := c.attrFloat("alpha", 1)
	c.set(0, graph.Mul(x, graph.Sigmoid(graph.Mul(x, scalarLikeB(x, alpha)))))
	return nil
}

// convSwiGLU is Swish(A, alpha)·B; A and B have one shape (no
// broadcasting).
func convSwiGLU(c *opCtx) error {
	a, b := c.in(0), c.in(1)
	if !a.Shape().Equal(b.Shape()) {
		c.fail("A %s and B %s must have the same shape", a.Shape(), b.Shape())
	}
	alpha := c.attrFloat("alpha", 1)
	c.set(0, graph.Mul(graph.Mul(a, graph.Sigmoid(graph.Mul(a, scalarLikeB(a, alpha)))), b))
	return nil
}
