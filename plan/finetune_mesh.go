package plan

// How an LLM fine-tune's tensors lie over the devices for each strategy
// train DIR --mesh runs (trainer_mesh.go planStorage, llm/finetune_tp.go
// TrainSplits), and what the collectives cost over ICI.
//
//   - dp: every tensor whole on every device; the gradients all-reduced.
//   - fsdp over D: each trained tensor, its gradient and AdamW state split
//     along the first dimension D divides (whole when none does); frozen
//     tensors whole; per step one all-gather of the trained weights and
//     one reduce-scatter of their gradients.
//   - tp over M (Megatron, https://arxiv.org/abs/1909.08053 section 3):
//     q/k/v/gate/up (and their biases) and embed/lm_head split by output
//     rows, o/down by input columns, norms and o/down biases whole; LoRA B
//     follows a row-split projection, A a column-split one; a dimension M
//     does not divide stays whole. Two all-reduces of [tokens, hidden] per
//     layer forward and two backward.
//
// Collectives are timed as rings: an all-reduce of S bytes over n devices
// sends 2(n-1)/n S per device, an all-gather or reduce-scatter (n-1)/n S
// (https://jax-ml.github.io/scaling-book/sharding/), at the catalog's ICI
// bandwidth per chip, not overlapped with compute.

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tensorbridge/tensorbridge/errs"
)

// ftTensor is one stored tensor kind of a decoder in Hugging Face's
// [out, in] layout: count copies (the layers) of shape dims; tpDim is the
// dimension tp splits (-1: whole); matmul says it is in a matrix product.
type ftTensor struct {
	name   string
	dims   []int64
	count  int64
	tpDim  int
	matmul bool
}

// ftTensors lists c's weights as train DIR stores them.
func ftTensors(c LLMConfig) []ftTensor {
	h, f, v, hd := int64(c.Hidden), int64(c.FFN), int64(c.Vocab), int64(c.HeadDim)
	q, kv, l := int64(c.Heads)*hd, int64(c.KVHeads)*hd, int64(c.Layers)
	ts := []ftTensor{{"embed_tokens", []int64{v, h}, 1, 0, c.Tied}, {"norm", []int64{h}, 1, -1, false}}
	if !c.Tied {
		ts = append(ts, ftTensor{"lm_head", []int64{v, h}, 1, 0, true})
	}
	layer := []ftTensor{{"input_layernorm", []int64{h}, l, -1, false}, {"post_attention_layernorm", []int64{h}, l, -1, false}}
	for _, m := range layerModules(c) {
		d := 0
		if m.name == "self_attn.o_proj" || m.name == "mlp.down_proj" {
			d = 1
		}
		layer = append(layer, ftTensor{m.name, []int64{m.out, m.in}, l, d, true})
	}
	if c.QKVBias {
		layer = append(layer, ftTensor{"q_proj.bias", []int64{q}, l, 0, false}, ftTensor{"k_proj.bias", []int64{kv}, l, 0, false},
			ftTensor{"v_proj.bias", []int64{kv}, l, 0, false})
	}
	if c.OBias {
		layer = append(layer, ftTensor{"o_proj.bias", []int64{h}, l, -1, false})
	}
	if c.MLPBias {
		layer = append(layer, ftTensor{"gate_proj.bias", []int64{f}, l, 0, false}, ftTensor{"up_proj.bias", []int64{f}, l, 0, false},
			ftTensor{"down_proj.bias", []int64{h}, l, -1, false})
	}
	if c.QKNorm {
		layer = append(layer, ftTensor{"q_norm", []int64{hd}, l, -1, false}, ftTensor{"k_norm", []int64{hd}, l, -1, false})
	}
	return append(ts, layer...)
}

// adapterTensors lists a LoRA plan's A [r, in] and B [out, r] with the
// split tp gives them (B by rows under a row-split projection, A by
// columns under a column-split one).
func adapterTensors(c LLMConfig, p *LoRAPlan) []ftTensor {
	r := int64(p.Rank)
	var ts []ftTensor
	for _, m := range layerModules(c) {
		n := int64(p.Modules[m.name])
		if n == 0 {
			continue
		}
		aDim, bDim := -1, 0
		if m.name == "self_attn.o_proj" || m.name == "mlp.down_proj" {
			aDim, bDim = 1, -1
		}
		ts = append(ts, ftTensor{m.name + ".lora_A", []int64{r, m.in}, n, aDim, true}, ftTensor{m.name + ".lora_B", []int64{m.out, r}, n, bDim, true})
	}
	return ts
}

// elems is a tensor's elements, all copies.
func (t ftTensor) elems() int64 {
	n := t.count
	for _, d := range t.dims {
		n *= d
	}
	return n
}

// fsdpElems is one device's elements of t split over d devices along the
// first dimension d divides (planStorage's rule), or whole.
func (t ftTensor) fsdpElems(d int) int64 {
	for _, x := range t.dims {
		if x%int64(d) == 0 {
			return t.elems() / int64(d)
		}
	}
	return t.elems()
}

// tpElems is one device's elements of t under tp over m devices; whole
// reports a split dimension m does not divide.
func (t ftTensor) tpElems(m int) (n int64, whole bool) {
	if t.tpDim < 0 || m <= 1 {
		return t.elems(), false
	}
	if t.dims[t.tpDim]%int64(m) != 0 {
		return t.elems(), true
	}
	return t.elems() / int64(m), false
}

// meshElems sums one device's elements of ts under strategy s; undivided
// names the tensors a split dimension of which s's axis does not divide.
func meshElems(ts []ftTensor, s ftMesh, trained bool) (n int64, undivided []string) {
	for _, t := range ts {
		switch {
		case s.Strategy == StrategyFSDP && trained:
			e := t.fsdpElems(s.Data)
			if e == t.elems() && s.Data > 1 {
				undivided = append(undivided, t.name)
			}
			n += e
		case s.Strategy == StrategyTP:
			e, whole := t.tpElems(s.Model)
			if whole {
				undivided = append(undivided, t.name)
			}
			n += e
		default:
			n += t.elems()
		}
	}
	return n, undivided
}

// ftMesh is a fine-tune's strategy over data x model devices.
type ftMesh struct {
	Strategy    string
	Data, Model int
}

// parseFTStrategy reads --strategy for a fine-tune over n devices: dp,
// fsdp, tp (model axis n), tp=M (data axis n/M) or auto/"" (nil: the
// caller tries each).
func parseFTStrategy(s string, n int) ([]ftMesh, error) {
	bad := func(exp string) error {
		return &errs.InputError{Name: "--strategy", Problem: "value", Expected: exp, Got: strconv.Quote(s)}
	}
	switch s {
	case "", "dp":
		return []ftMesh{{StrategyDP, n, 1}}, nil
	case "auto":
		if n == 1 { // one device: every strategy is the same
			return []ftMesh{{StrategyDP, 1, 1}}, nil
		}
		return []ftMesh{{StrategyDP, n, 1}, {StrategyFSDP, n, 1}, {StrategyTP, 1, n}}, nil
	case "fsdp":
		return []ftMesh{{StrategyFSDP, n, 1}}, nil
	case "tp":
		return []ftMesh{{StrategyTP, 1, n}}, nil
	}
	v, ok := strings.CutPrefix(s, "tp=")
	if !ok {
		return nil, bad("dp, fsdp, tp, tp=M or auto for an LLM fine-tune")
	}
	m, err := strconv.Atoi(v)
	if err != nil || m < 1 || n%m != 0 {
		return nil, bad(fmt.Sprintf("tp=M with M a divisor of the slice's %d devices (the data axis takes the rest)", n))
	}
	return []ftMesh{{StrategyTP, n / m, m}}, nil
}

// divIf is x / m when m divides x, else x (a dimension tp leaves whole).
func divIf(x, m int64) int64 {
	if m > 1 && x%m == 0 {
		return x / m
	}
	return x
}

// tpActivationsPerToken is activationsPerToken on one device of a tp
// axis of m: the layer inputs and norm outputs (4h) whole, the attention
// and MLP intermediates split where m divides their dimension (q by
// heads x head_dim, kv, f, the scores by heads), the LoRA A·x (r) whole.
func tpActivationsPerToken(c LLMConfig, seqLen, m int) int64 {
	h, f := int64(c.Hidden), int64(c.FFN)
	q, kv := int64(c.Heads)*int64(c.HeadDim), int64(c.KVHeads)*int64(c.HeadDim)
	M := int64(m)
	return 4*h + 2*divIf(q, M) + 2*divIf(kv, M) + 4*divIf(f, M) + divIf(int64(c.Heads), M)*int64(seqLen)
}
