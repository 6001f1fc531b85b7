package llm

import (
	"fmt"
	"math"
	"slices"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:staticcheck
	"github.com/tensorbridge/tensorbridge/ir"
)

// Penalties and biases on the device, before temperature and the
// filters, in vLLM's order (its sampler applies logit_bias and min_tokens,
// then repetition, frequency and presence penalties; transformers' own
// order for the two it has, SequenceBiasLogitsProcessor before
// RepetitionPenaltyLogitsProcessor, is the same):
//
//  1. logit_bias: bias[id] added to the logit of id; while fewer than
//     min_tokens tokens were generated, the stop ids (EOS and stop_token_ids)
//     get -inf.
//  2. repetition_penalty r (transformers' RepetitionPenaltyLogitsProcessor):
//     every id in the prompt or the generated tokens has its logit divided
//     by r when > 0, multiplied by r otherwise.
//  3. frequency_penalty f and presence_penalty p (OpenAI's definition,
//     over the generated tokens only, as vLLM counts them): the logit of id
//     less f × count[id] less p × (count[id] > 0).
//
// The token history comes as ids (the prompt in prefill, the prompt and
// the generated tokens in decode, padded to the context bucket), counted
// on the device by scattering ones into [B, V]; the bias as a fixed number
// of (id, value) pairs per row. Only ids cross to the device, never a
// vocabulary-sized vector.

// Limits of a request's penalty inputs; the fixed widths of the programs'
// bias inputs follow from them.
const (
	// MaxLogitBias is the most logit_bias entries a request may carry.
	MaxLogitBias = 300
	// MaxStopIDs is the most stop token ids a request may carry.
	MaxStopIDs = 64
	// MaxAbsLogitBias bounds each logit_bias value, as OpenAI does.
	MaxAbsLogitBias = 100
	// MaxAbsPenalty bounds frequency_penalty and presence_penalty, as
	// OpenAI does.
	MaxAbsPenalty = 2
)

// penaltyInputs are the program inputs of penalize.
type penaltyInputs struct {
	// hist [B, W] int32: each row's token history, valid below hlen.
	// plen [B], hlen [B] int32: prompt length and history length; ids at
	// [plen, hlen) are the generated ones.
	hist, plen, hlen *Node
	// biasIDs [B, K] int32, biasVals [B, K] float32: bias pairs (value 0
	// on padding).
	biasIDs, biasVals *Node
	// rep, freq, pres [B] float32: repetition (1: off), frequency and
	// presence penalties (0: off).
	rep, freq, pres *Node
	// on: the program applies them. Decode programs come in two variants
	// (decodeKey.pen): without penalties, a step of 16 streams of the 100M
	// Llama ran 21% slower for the [B, vocabulary] passes alone.
	on bool
}

// needsPenalties reports whether row r's next token needs the penalty
// program: any penalty, a logit bias, or min_tokens not reached.
func (r row) needsPenalties() bool {
	return r.s.repetition() != 1 || r.s.FrequencyPenalty != 0 || r.s.PresencePenalty != 0 ||
		len(r.biasIDs) > 0 || (r.index < r.s.MinTokens && len(r.stops) > 0)
}

// penalize returns lg [B, V] with the biases and penalties applied.
func penalize(lg *Node, in penaltyInputs) *Node {
	g := lg.Graph()
	b, v := lg.Shape().Dimensions[0], lg.Shape().Dimensions[1]
	col := func(x *Node) *Node { return BroadcastToDims(Reshape(x, b, 1), b, v) }
	zeros := Zeros(g, ir.MakeShape(ir.Float32, b, v))
	// scatterRows adds vals [B, N] at (row, ids[row, n]) into zeros.
	scatterRows := func(ids, vals *Node) *Node {
		n := ids.Shape().Dimensions[1]
		rowIdx := Iota(g, ir.MakeShape(ir.Int32, b, n), 0)
		idx := Reshape(Stack([]*Node{rowIdx, ids}, -1), b*n, 2)
		return ScatterSum(zeros, idx, Reshape(vals, b*n), false, false)
	}
	x := Add(lg, scatterRows(in.biasIDs, in.biasVals))

	w := in.hist.Shape().Dimensions[1]
	bw := func(x *Node) *Node { return BroadcastToDims(Reshape(x, b, 1), b, w) }
	i := Iota(g, ir.MakeShape(ir.Int32, b, w), 1)
	valid := LessThan(i, bw(in.hlen))
	gen := LogicalAnd(valid, GreaterOrEqual(i, bw(in.plen)))
	one := func(m *Node) *Node { return ConvertDType(m, ir.Float32) }
	seen := GreaterThan(scatterRows(in.hist, one(valid)), zeros)
	count := scatterRows(in.hist, one(gen))

	rep := col(in.rep)
	x = Where(seen, Where(GreaterThan(x, zeros), Div(x, rep), Mul(x, rep)), x)
	x = Sub(x, Mul(col(in.freq), count))
	return Sub(x, Mul(col(in.pres), one(GreaterThan(count, zeros))))
}

// penaltyBlocks are one program run's penalty inputs, on the host.
type penaltyBlocks struct {
	hist, plen, hlen []int // hist is [n, w]
	biasIDs          []int // [n, k]
	biasVals         []float32
}

// biasWidth is the bias pairs a row may need: its logit_bias entries and,
// under min_tokens, its stop ids (MaxStopIDs and the model's EOS ids).
func (e *Engine) biasWidth() int { return MaxLogitBias + MaxStopIDs + len(e.m.Config.EOS) }

// rowBias fills one row's bias pairs (k of them) into ids and vals: the
// request's logit_bias, and -inf on its stop ids while it has generated
// fewer than MinTokens tokens.
func rowBias(r row, ids []int, vals []float32) {
	j := 0
	for _, id := range r.biasIDs {
		ids[j], vals[j] = id, r.s.LogitBias[id]
		j++
	}
	if r.index < r.s.MinTokens {
		for _, id := range r.stops {
			ids[j], vals[j] = id, float32(math.Inf(-1))
			j++
		}
	}
}

// buildPenalties lays out rows' histories (padded to w) and bias pairs
// (k per row) for n rows.
func buildPenalties(rows []row, n, w, k int) penaltyBlocks {
	p := penaltyBlocks{hist: make([]int, n*w), plen: make([]int, n), hlen: make([]int, n),
		biasIDs: make([]int, n*k), biasVals: make([]float32, n*k)}
	for i, r := range rows {
		h := r.hist[:min(len(r.hist), w)]
		copy(p.hist[i*w:], h)
		p.plen[i], p.hlen[i] = r.plen, len(h)
		rowBias(r, p.biasIDs[i*k:(i+1)*k], p.biasVals[i*k:(i+1)*k])
	}
	return p
}

// checkPenalties checks a request's penalty and token-control settings
// against their ranges and the vocabulary.
func checkPenalties(s SamplingParams, r Request, vocab int) error {
	bad := func(format string, a ...any) error { return &RequestError{Problem: fmt.Sprintf(format, a...)} }
	for _, f := range []struct {
		name string
		v    float32
	}{{"presence_penalty", s.PresencePenalty}, {"frequency_penalty", s.FrequencyPenalty}} {
		if !(f.v >= -MaxAbsPenalty && f.v <= MaxAbsPenalty) {
			return bad("%s %g outside [-%d, %d]", f.name, f.v, MaxAbsPenalty, MaxAbsPenalty)
		}
	}
	if s.RepetitionPenalty < 0 || math.IsNaN(float64(s.RepetitionPenalty)) || math.IsInf(float64(s.RepetitionPenalty), 0) {
		return bad("repetition_penalty %g must be > 0 (1 or 0: off)", s.RepetitionPenalty)
	}
	if len(s.LogitBias) > MaxLogitBias {
		return bad("logit_bias has %d entries, more than the %d allowed", len(s.LogitBias), MaxLogitBias)
	}
	for id, v := range s.LogitBias {
		if id < 0 || id >= vocab {
			return bad("logit_bias token id %d outside the vocabulary (%d)", id, vocab)
		}
		if !(v >= -MaxAbsLogitBias && v <= MaxAbsLogitBias) {
			return bad("logit_bias value %g for token %d outside [-%d, %d]", v, id, MaxAbsLogitBias, MaxAbsLogitBias)
		}
	}
	if len(r.StopIDs) > MaxStopIDs {
		return bad("%d stop token ids, more than the %d allowed", len(r.StopIDs), MaxStopIDs)
	}
	if s.MinTokens < 0 {
		return bad("min_tokens %d is negative", s.MinTokens)
	}
	if r.MaxTokens > 0 && s.MinTokens > r.MaxTokens {
		return bad("min_tokens %d exceeds max_tokens %d", s.MinTokens, r.MaxTokens)
	}
	return nil
}

// sortedBiasIDs is the logit_bias ids in order (a row's pairs are laid
// out the same way every step).
func sortedBiasIDs(m map[int]float32) []int {
	ids := make([]int, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// repetition is the repetition penalty as the program takes it: 1 when
// off.
func (s SamplingParams) repetition() float32 {
	if s.RepetitionPenalty == 0 {
		return 1
	}
	return s.RepetitionPenalty
}
