package llm

import (
	"fmt"
	"math"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:staticcheck
	"github.com/tensorbridge/tensorbridge/ir"
)

// Log-probabilities of the alternatives (OpenAI's top_logprobs) and of
// the prompt's tokens (completions' echo with logprobs), computed on the
// device from the raw logits: log-softmax in float32 before penalties,
// biases, temperature and filters, as vLLM reports them by default
// (https://docs.vllm.ai/en/latest/features/sampling_params.html, its
// logprobs_mode "raw_logprobs"). Only the top maxTop values and ids per
// row cross to the host, never a vocabulary-sized vector.
//
// The programs that compute them are variants of prefill and decode
// (prefillKey, decodeKey with Engine.decodeLP), compiled the first time
// a request asks for them; requests without keep the plain programs.

// MaxLogprobs is the most alternatives a request may ask for per token
// (OpenAI's limit for top_logprobs and completions' logprobs).
const MaxLogprobs = 20

// TopLogprob is one alternative: a token id and its log-probability.
type TopLogprob struct {
	ID      int
	Logprob float32
}

// PromptLogprob is a prompt token's log-probability given the tokens
// before it, and the top alternatives at its position.
type PromptLogprob struct {
	ID      int
	Logprob float32
	Top     []TopLogprob
}

// topWidth is how many alternatives the logprob programs return per row:
// MaxLogprobs, or the vocabulary when it is smaller.
func (e *Engine) topWidth() int { return min(MaxLogprobs, e.m.Config.Vocab) }

// topGroup is the group size of topLogprobs' first stage; a vocabulary
// of fewer than topTwoStageMin entries takes the rounds directly.
const (
	topGroup       = 256
	topTwoStageMin = 8192
)

// topLogprobs returns the k largest entries of lsm [N, V] per row, in
// descending order: values [N, k] float32 and ids [N, k] int32. GoMLX
// v0.26.0 has neither TopK nor Sort, so it takes k rounds of ArgMax, each
// masking the entry it found (topRounds). A large vocabulary first splits
// each row into groups of topGroup entries: the k entries sought lie in
// the k groups of largest maximum (each of them is at least the k-th
// largest entry, and at most k groups hold such entries), so the rounds
// run over those groups' k·topGroup entries and over the V/topGroup
// group maxima instead of V entries: for Qwen's 151,936 entries, 20
// rounds over 594 and 5,120 entries instead of 151,936. Ranking every
// entry at once ([N, V, V] comparisons, a fixed handful of ops) was
// measured slower even at V = 384: about 1 ms against 0.1 ms for the
// rounds on the cpu engine.
func topLogprobs(lsm *Node, k int) (vals, ids *Node) {
	g := lsm.Graph()
	n, v := lsm.Shape().Dimensions[0], lsm.Shape().Dimensions[1]
	if v < topTwoStageMin {
		return topRounds(lsm, k)
	}
	groups := (v + topGroup - 1) / topGroup
	x := lsm
	if pad := groups*topGroup - v; pad > 0 {
		x = Concatenate([]*Node{x, BroadcastToDims(ConstAsDType(g, ir.Float32, math.Inf(-1)), n, pad)}, 1)
	}
	x = Reshape(x, n, groups, topGroup)
	_, gids := topRounds(ReduceMax(x, -1), k) // [N, k] group ids
	rows := Iota(g, ir.MakeShape(ir.Int32, n, k), 0)
	cand := Reshape(Gather(x, Stack([]*Node{rows, gids}, -1)), n, k*topGroup) // [N, k·topGroup]
	vals, local := topRounds(cand, k)
	// local = j·topGroup + offset within the j-th chosen group.
	size := ConstAsDType(g, ir.Int32, topGroup)
	j := Div(local, size)
	ids = Add(Mul(Gather(gids, Stack([]*Node{rows, j}, -1)), size), Sub(local, Mul(j, size)))
	return vals, ids
}

// topRounds is topLogprobs by k rounds of ArgMax over the whole row
// (ties: the lower index first), the k values gathered at the end.
func topRounds(lsm *Node, k int) (vals, ids *Node) {
	g := lsm.Graph()
	n, v := lsm.Shape().Dimensions[0], lsm.Shape().Dimensions[1]
	iota := Iota(g, ir.MakeShape(ir.Int32, n, v), 1)
	negInf := BroadcastToDims(ConstAsDType(g, ir.Float32, math.Inf(-1)), n, v)
	x := lsm
	is := make([]*Node, k)
	for j := range k {
		is[j] = ArgMax(x, -1, ir.Int32) // [N]
		if j+1 < k {
			x = Where(Equal(iota, BroadcastToDims(Reshape(is[j], n, 1), n, v)), negInf, x)
		}
	}
	ids = Stack(is, 1) // [N, k]
	rows := Iota(g, ir.MakeShape(ir.Int32, n, k), 0)
	return Gather(lsm, Stack([]*Node{rows, ids}, -1)), ids
}

// rowLogprob is lsm [N, V] at (row, ids[row]) for ids [N] int32.
func rowLogprob(lsm, ids *Node) *Node {
	n := lsm.Shape().Dimensions[0]
	rowIdx := Iota(lsm.Graph(), ir.MakeShape(ir.Int32, n), 0)
	return Gather(lsm, Stack([]*Node{rowIdx, ids}, -1))
}

// promptLogprobs returns, for hidden [P, H] of a prompt tokens [1, P]
// (padded), the log-probability at each position i of token i+1 [P]
// (the last position's is meaningless: the host reads those below the
// prompt's length less one) and the top k alternatives [P, k] each.
func promptLogprobs(w netWeights, hidden, tokens *Node, k int) (lp, topV, topI *Node) {
	g := tokens.Graph()
	p := tokens.Shape().Dimensions[1]
	flat := Reshape(tokens, p)
	next := Concatenate([]*Node{Slice(flat, AxisRange(1, p)), Zeros(g, ir.MakeShape(ir.Int32, 1))}, 0)
	lsm := LogSoftmax(logits(w, hidden), -1)
	topV, topI = topLogprobs(lsm, k)
	return rowLogprob(lsm, next), topV, topI
}

// logprobOuts are the extra outputs of a logprob program, read back:
// each row's top alternatives ([rows, width], best first) and, for a
// prefill with the prompt's, each prompt position's.
type logprobOuts struct {
	width             int
	topV              []float32
	topI              []int
	promptLP          []float32
	promptV           []float32
	promptI           []int
	hasTop, hasPrompt bool
}

// read fills o from a program's outputs after its first four (token,
// logprob, K and V caches): none, the top pair, or the top pair and the
// prompt triple.
func (o *logprobOuts) read(extra []*ir.Tensor, width int) error {
	if len(extra) == 0 {
		return nil
	}
	if len(extra) != 2 && len(extra) != 5 {
		return fmt.Errorf("llm: a logprob program returned %d extra outputs, want 2 or 5", len(extra))
	}
	o.width = width
	var err error
	if o.topV, err = float32s(extra[0]); err != nil {
		return err
	}
	if o.topI, err = int32s(extra[1]); err != nil {
		return err
	}
	o.hasTop = true
	if len(extra) == 2 {
		return nil
	}
	if o.promptLP, err = float32s(extra[2]); err != nil {
		return err
	}
	if o.promptV, err = float32s(extra[3]); err != nil {
		return err
	}
	o.promptI, err = int32s(extra[4])
	o.hasPrompt = err == nil
	return err
}

// top is row i's first k alternatives (nil when the program computed
// none or k is 0).
func (o *logprobOuts) top(i, k int) []TopLogprob {
	return topSlice(o.hasTop, o.topV, o.topI, i, k, o.width)
}

func topSlice(has bool, vals []float32, ids []int, i, k, width int) []TopLogprob {
	if !has || k <= 0 {
		return nil
	}
	k = min(k, width)
	out := make([]TopLogprob, k)
	for j := range k {
		out[j] = TopLogprob{ID: ids[i*width+j], Logprob: vals[i*width+j]}
	}
	return out
}

// prompt is the prompt's log-probabilities: one entry per prompt token
// after the first, with k alternatives each (nil when the program
// computed none).
func (o *logprobOuts) prompt(ids []int, k int) []PromptLogprob {
	if !o.hasPrompt {
		return nil
	}
	out := make([]PromptLogprob, 0, max(len(ids)-1, 0))
	for i := 0; i+1 < len(ids); i++ {
		out = append(out, PromptLogprob{ID: ids[i+1], Logprob: o.promptLP[i],
			Top: topSlice(true, o.promptV, o.promptI, i, k, o.width)})
	}
	return out
}

// checkLogprobs checks a request's logprob settings.
func checkLogprobs(r Request) error {
	if r.TopLogprobs < 0 || r.TopLogprobs > MaxLogprobs {
		return &RequestError{Problem: fmt.Sprintf("top_logprobs %d outside [0, %d]", r.TopLogprobs, MaxLogprobs)}
	}
	return nil
}
