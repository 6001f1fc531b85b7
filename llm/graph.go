package llm

import (
	"math"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:staticcheck // graph-building code reads as math
	"github.com/tensorbridge/tensorbridge/ir"
)

// The decoder as GoMLX graphs. One function, step, runs the layers over a
// [B, T] block of tokens whose keys and values go into the KV cache:
// prefill is B = 1, T = the prompt bucket (attending to the block's own
// keys), decode is T = 1 over B sequences (attending to their cache rows).
// Weights are graph parameters, passed as the device buffers the model
// owns, so every program shares one copy of them.

// netWeights indexes the weight parameters of a program.
type netWeights struct {
	c        *Config
	p        []*Node
	cos, sin *Node
}

func newNetWeights(c *Config, p []*Node) netWeights {
	n := len(weightSpecs(c))
	return netWeights{c: c, p: p[:n], cos: p[n], sin: p[n+1]}
}

// numWeightParams is the count of weight parameters including the rope tables.
func numWeightParams(c *Config) int { return len(weightSpecs(c)) + 2 }

func (w netWeights) embed() *Node { return w.p[0] }
func (w netWeights) layer(l, i int) *Node {
	return w.p[1+l*w.c.perLayer()+i]
}
func (w netWeights) norm() *Node { return w.p[1+w.c.Layers*w.c.perLayer()] }
func (w netWeights) head() *Node {
	if w.c.TiedEmbeddings {
		return w.embed()
	}
	return w.p[2+w.c.Layers*w.c.perLayer()]
}

// Layer weight indices, in weightSpecs' order.
const (
	wInNorm = iota
	wQ
	wK
	wV
	wO
	wPostNorm
	wGate
	wUp
	wDown
	wQBias // with QKVBias: q, k, v biases; then q_norm, k_norm with QKNorm
)

func (w netWeights) qkNorm(l int) (q, k *Node) {
	base := wQBias
	if w.c.QKVBias {
		base += 3
	}
	return w.layer(l, base), w.layer(l, base+1)
}

// rmsNorm is transformers' LlamaRMSNorm: in float32, then scaled by the
// weight in the activations' dtype.
func rmsNorm(x, weight *Node, eps float64) *Node {
	dt := x.DType()
	x32 := ConvertDType(x, ir.Float32)
	ms := ReduceAndKeep(Square(x32), ReduceMean, -1)
	y := Mul(x32, Rsqrt(Add(ms, ConstAsDType(x.Graph(), ir.Float32, eps))))
	return Mul(ConvertDType(y, dt), weight)
}

// linear is x [N, in] times W [out, in] transposed, plus bias when given.
func linear(x, w, bias *Node) *Node {
	y := Einsum("ni,oi->no", x, w)
	if bias != nil {
		y = Add(y, InsertAxes(bias, 0))
	}
	return y
}

// rope rotates x [B, T, heads, D] by the angles at positions [B, T]
// (transformers' rotate_half convention).
func rope(x, cos, sin, positions *Node) *Node {
	dt := x.DType()
	b, t := x.Shape().Dimensions[0], x.Shape().Dimensions[1]
	half := x.Shape().Dimensions[3] / 2
	idx := Reshape(positions, b*t, 1)
	c := Reshape(Gather(cos, idx), b, t, 1, half)
	s := Reshape(Gather(sin, idx), b, t, 1, half)
	x32 := ConvertDType(x, ir.Float32)
	x1 := Slice(x32, AxisRange(), AxisRange(), AxisRange(), AxisRange(0, half))
	x2 := Slice(x32, AxisRange(), AxisRange(), AxisRange(), AxisRange(half))
	c = BroadcastToDims(c, b, t, x.Shape().Dimensions[2], half)
	s = BroadcastToDims(s, b, t, x.Shape().Dimensions[2], half)
	r1 := Sub(Mul(x1, c), Mul(x2, s))
	r2 := Add(Mul(x2, c), Mul(x1, s))
	return ConvertDType(Concatenate([]*Node{r1, r2}, -1), dt)
}

// attention is grouped-query attention of q [B, T, Hkv, G, D] over keys and
// values [B, S, Hkv, D], query positions [B, T] and key positions [S]:
// causal, and within the sliding window when the config has one.
func attention(c *Config, q, k, v, qpos, kpos *Node) *Node {
	g := q.Graph()
	dims := q.Shape().Dimensions
	b, t, hkv, grp, d := dims[0], dims[1], dims[2], dims[3], dims[4]
	s := k.Shape().Dimensions[1]
	scores := Einsum("btkgd,bskd->bkgts", ConvertDType(q, ir.Float32), ConvertDType(k, ir.Float32))
	scores = Mul(scores, ConstAsDType(g, ir.Float32, 1/math.Sqrt(float64(d))))
	qp := BroadcastToDims(Reshape(qpos, b, 1, 1, t, 1), b, hkv, grp, t, s)
	kp := BroadcastToDims(Reshape(kpos, 1, 1, 1, 1, s), b, hkv, grp, t, s)
	mask := LessOrEqual(kp, qp)
	if c.SlidingWindow > 0 {
		mask = LogicalAnd(mask, GreaterThan(kp, Sub(qp, ConstAsDType(g, ir.Int32, c.SlidingWindow))))
	}
	scores = Where(mask, scores, BroadcastToDims(ConstAsDType(g, ir.Float32, math.Inf(-1)), b, hkv, grp, t, s))
	probs := Softmax(scores, -1)
	out := Einsum("bkgts,bskd->btkgd", probs, ConvertDType(v, ir.Float32))
	return ConvertDType(Reshape(out, b*t, hkv*grp*d), q.DType())
}

// cacheIO says how a step reads and writes the KV cache.
type cacheIO struct {
	// k, v: [L, slots, maxContext, Hkv, D], updated in place in the graph.
	k, v *Node
	// slots [B] int32: each row's cache slot.
	slots *Node
	// prefill: keys are the block's own (positions 0..T-1, written at
	// offset 0 of the slot); decode: each row writes at its position and
	// attends to its slot's whole row.
	prefill bool
}

// step runs the decoder on tokens [B, T] at positions [B, T] and returns
// the final hidden states [B*T, H] (after the last norm) and the updated
// cache (nil nodes when cache is nil: no cache kept, as for prompt logits).
func step(c *Config, w netWeights, tokens, positions *Node, cache *cacheIO) (hidden, newK, newV *Node) {
	g := tokens.Graph()
	b, t := tokens.Shape().Dimensions[0], tokens.Shape().Dimensions[1]
	hq, hkv, d := c.Heads, c.KVHeads, c.HeadDim
	grp := hq / hkv
	x := Gather(w.embed(), Reshape(tokens, b*t, 1))
	var kc, vc *Node
	if cache != nil {
		kc, vc = cache.k, cache.v
	}
	for l := range c.Layers {
		h := rmsNorm(x, w.layer(l, wInNorm), c.RMSEps)
		var qb, kb, vb *Node
		if c.QKVBias {
			qb, kb, vb = w.layer(l, wQBias), w.layer(l, wQBias+1), w.layer(l, wQBias+2)
		}
		q := Reshape(linear(h, w.layer(l, wQ), qb), b, t, hq, d)
		k := Reshape(linear(h, w.layer(l, wK), kb), b, t, hkv, d)
		v := Reshape(linear(h, w.layer(l, wV), vb), b, t, hkv, d)
		if c.QKNorm {
			qn, kn := w.qkNorm(l)
			q = rmsNorm(q, qn, c.RMSEps)
			k = rmsNorm(k, kn, c.RMSEps)
		}
		q = rope(q, w.cos, w.sin, positions)
		k = rope(k, w.cos, w.sin, positions)
		q5 := Reshape(q, b, t, hkv, grp, d)
		var att *Node
		switch {
		case cache == nil:
			att = attention(c, q5, k, v, positions, Iota(g, ir.MakeShape(ir.Int32, t), 0))
		case cache.prefill:
			zero := ConstAsDType(g, ir.Int32, 0)
			lc := ConstAsDType(g, ir.Int32, l)
			slot := Reshape(cache.slots, 0)
			kc = DynamicUpdateSlice(kc, Reshape(k, 1, 1, t, hkv, d), []*Node{lc, slot, zero, zero, zero})
			vc = DynamicUpdateSlice(vc, Reshape(v, 1, 1, t, hkv, d), []*Node{lc, slot, zero, zero, zero})
			att = attention(c, q5, k, v, positions, Iota(g, ir.MakeShape(ir.Int32, t), 0))
		default:
			zero := ConstAsDType(g, ir.Int32, 0)
			lc := ConstAsDType(g, ir.Int32, l)
			for i := range b {
				slot := Reshape(Slice(cache.slots, AxisRange(i, i+1)), 0)
				pos := Reshape(Slice(positions, AxisRange(i, i+1), AxisRange()), 0)
				kc = DynamicUpdateSlice(kc, Reshape(Slice(k, AxisRange(i, i+1)), 1, 1, 1, hkv, d), []*Node{lc, slot, pos, zero, zero})
				vc = DynamicUpdateSlice(vc, Reshape(Slice(v, AxisRange(i, i+1)), 1, 1, 1, hkv, d), []*Node{lc, slot, pos, zero, zero})
			}
			idx := Concatenate([]*Node{BroadcastToDims(Reshape(lc, 1, 1), b, 1), Reshape(cache.slots, b, 1)}, 1)
			keys := Gather(kc, idx) // [B, maxContext, Hkv, D]
			vals := Gather(vc, idx)
			s := keys.Shape().Dimensions[1]
			att = attention(c, q5, keys, vals, positions, Iota(g, ir.MakeShape(ir.Int32, s), 0))
		}
		x = Add(x, linear(att, w.layer(l, wO), nil))
		h = rmsNorm(x, w.layer(l, wPostNorm), c.RMSEps)
		gate := linear(h, w.layer(l, wGate), nil)
		up := linear(h, w.layer(l, wUp), nil)
		x = Add(x, linear(Mul(Mul(gate, Sigmoid(gate)), up), w.layer(l, wDown), nil))
	}
	return rmsNorm(x, w.norm(), c.RMSEps), kc, vc
}

// logits is the LM head on hidden [N, H], in float32.
func logits(w netWeights, hidden *Node) *Node {
	return Einsum("nh,vh->nv", ConvertDType(hidden, ir.Float32), ConvertDType(w.head(), ir.Float32))
}
