package llm

import (
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:staticcheck // graph-building code reads as math
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/train"
)

// rematLayer runs decoder layer l (body) on x under train.Remat: the
// backward pass recomputes the layer from x instead of keeping its
// activations (FineTune with Remat). The layer's differentiable inputs
// are x and its trained tensors (LoRA's A and B, or the layer's weights
// of a full fine-tune that are trained); the frozen weights, the rope
// tables and the positions are read as they are. LoRA dropout draws the
// same masks in the recomputation: it starts again from the state the
// layer began with.
func (w netWeights) rematLayer(l int, x *Node, body func(netWeights, *Node) *Node) *Node {
	type slot struct {
		lora  int // loraKey, or -1 for a layer weight
		which int // 0, 1: A, B; else the index in w.p
	}
	in, slots := []*Node{x}, []slot{{}}
	for i := range w.c.perLayer() {
		if ab, ok := w.lora[loraKey(l, i)]; ok {
			in = append(in, ab[0], ab[1])
			slots = append(slots, slot{loraKey(l, i), 0}, slot{loraKey(l, i), 1})
		}
		if p := 1 + l*w.c.perLayer() + i; w.remat[w.p[p]] {
			in = append(in, w.p[p])
			slots = append(slots, slot{-1, p})
		}
	}
	var entry *Node
	if w.drop != nil {
		entry = w.drop.state
	}
	calls := 0
	fn := func(in []*Node) []*Node {
		wl := w
		wl.p = append([]*Node(nil), w.p...)
		wl.lora = make(map[int][2]*Node, len(w.lora))
		for k, v := range w.lora {
			wl.lora[k] = v
		}
		for i, s := range slots[1:] {
			if s.lora < 0 {
				wl.p[s.which] = in[1+i]
				continue
			}
			ab := wl.lora[s.lora]
			ab[s.which] = in[1+i]
			wl.lora[s.lora] = ab
		}
		if calls++; calls > 1 && w.drop != nil { // the recomputation
			wl.drop = &loraDropout{p: w.drop.p, state: entry}
		}
		return []*Node{body(wl, in[0])}
	}
	out, _ := train.Remat(fn, in...)
	return out[0]
}

// rematLogitRows bounds the rows of logits a rematerialised loss holds at
// once: 2^22 float32 values (16 MiB), 262 rows of a 16,000-word head.
var rematLogitRows = 1 << 22 // a variable for TestRematLoss

// labelLogProbs is log_softmax(logits(hidden))[n, labels[n]] for each row
// n of hidden [N, H]: [N] float32. With remat the rows go through the head
// in chunks, each under train.Remat, so that neither the forward nor the
// backward pass holds more than one chunk's [rows, vocab] logits (the
// largest activations of a small model's step); the values are the same
// rows' log-softmax either way.
func (w netWeights) labelLogProbs(hidden, labels *Node) *Node {
	n := hidden.Shape().Dimensions[0]
	rows := max(1, rematLogitRows/w.c.Vocab)
	if w.remat == nil || rows >= n {
		return pickLogProbs(w, hidden, labels)
	}
	head := 2 + w.c.Layers*w.c.perLayer() // w.head()'s index in w.p
	if w.c.TiedEmbeddings {
		head = 0
	}
	var parts []*Node
	for lo := 0; lo < n; lo += rows {
		lab := Slice(labels, AxisRange(lo, min(n, lo+rows)))
		in := []*Node{Slice(hidden, AxisRange(lo, min(n, lo+rows)))}
		if w.remat[w.p[head]] { // a full fine-tune trains the head
			in = append(in, w.p[head])
		}
		out, _ := train.Remat(func(in []*Node) []*Node {
			wl := w
			if len(in) > 1 {
				wl.p = append([]*Node(nil), w.p...)
				wl.p[head] = in[1]
			}
			return []*Node{pickLogProbs(wl, in[0], lab)}
		}, in...)
		parts = append(parts, out[0])
	}
	return Concatenate(parts, 0)
}

// pickLogProbs is log_softmax(logits(h))[n, lab[n]] for the rows of h.
//
// Each row's entry is selected and summed (Where, then ReduceSum over the
// vocabulary), not gathered: every other term is +0, so the value is the
// entry's, bit for bit, and so is the gradient, which is then an
// element-wise select where a Gather's is a ScatterSum into a zeroed
// [n, V] that the cpu engine runs through its inner engine (65 MB of heap
// a step of the 100M Llama's LoRA fine-tune). Label ids compare as
// float32, exact below 2^24; a larger vocabulary gathers.
func pickLogProbs(w netWeights, h, lab *Node) *Node {
	n := h.Shape().Dimensions[0]
	logp := LogSoftmax(logits(w, h), -1) // [n, V]
	v := logp.Shape().Dimensions[1]
	if v > 1<<24 {
		idx := Concatenate([]*Node{Iota(h.Graph(), ir.MakeShape(ir.Int32, n, 1), 0), Reshape(lab, n, 1)}, 1)
		return Gather(logp, idx) // [n]
	}
	ids := BroadcastToDims(Iota(h.Graph(), ir.MakeShape(ir.Float32, 1, v), 1), n, v)
	hit := Equal(ids, BroadcastToDims(ConvertDType(Reshape(lab, n, 1), ir.Float32), n, v))
	return ReduceSum(Where(hit, logp, ZerosLike(logp)), -1)
}
