package serve

import (
	"math"
	"strconv"

	"github.com/tensorbridge/tensorbridge/llm"
)

// oaiExtras are the OpenAI fields beyond the shared sampling ones:
// penalties and token controls (OpenAI's presence_penalty,
// frequency_penalty, logit_bias; vLLM's extra body fields
// repetition_penalty, min_tokens, stop_token_ids) and stream_options.
type oaiExtras struct {
	PresencePenalty   *float64           `json:"presence_penalty"`
	FrequencyPenalty  *float64           `json:"frequency_penalty"`
	RepetitionPenalty *float64           `json:"repetition_penalty"`
	LogitBias         map[string]float64 `json:"logit_bias"`
	MinTokens         *int64             `json:"min_tokens"`
	StopTokenIDs      []int64            `json:"stop_token_ids"`
	StreamOptions     *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
}

// includeUsage says whether a stream ends with a usage chunk; the field
// without stream is refused, as vLLM refuses it.
func (q *oaiRequest) includeUsage() (bool, error) {
	if q.StreamOptions == nil {
		return false, nil
	}
	if !q.Stream {
		return false, paramErr("stream_options", "stream_options can only be set when stream is true")
	}
	return q.StreamOptions.IncludeUsage != nil && *q.StreamOptions.IncludeUsage, nil
}

// applyExtras checks the penalty and token-control fields, each a 400
// naming it when out of range, and sets them on r (built by toRequest,
// whose repetition penalty is the checkpoint's default).
func (q *oaiRequest) applyExtras(g *generator, r *llm.Request) error {
	s := &r.Sampling
	for _, f := range []struct {
		name string
		v    *float64
		dst  *float32
	}{{"presence_penalty", q.PresencePenalty, &s.PresencePenalty}, {"frequency_penalty", q.FrequencyPenalty, &s.FrequencyPenalty}} {
		if f.v == nil {
			continue
		}
		if !(*f.v >= -llm.MaxAbsPenalty && *f.v <= llm.MaxAbsPenalty) {
			return paramErr(f.name, "%s must be in [-%d, %d], got %g", f.name, llm.MaxAbsPenalty, llm.MaxAbsPenalty, *f.v)
		}
		*f.dst = float32(*f.v)
	}
	if v := q.RepetitionPenalty; v != nil {
		if !(*v > 0) || math.IsInf(*v, 0) {
			return paramErr("repetition_penalty", "repetition_penalty must be greater than 0 (1: off), got %g", *v)
		}
		s.RepetitionPenalty = float32(*v)
		if *v == 1 {
			s.RepetitionPenalty = 0
		}
	}
	if err := q.logitBias(g, s); err != nil {
		return err
	}
	if err := q.stopTokenIDs(g, r); err != nil {
		return err
	}
	if q.MinTokens != nil {
		limit := int64(r.MaxTokens)
		if limit == 0 {
			limit = int64(g.context - len(r.Prompt))
		}
		if *q.MinTokens < 0 || *q.MinTokens > limit {
			return paramErr("min_tokens", "min_tokens must be in [0, max_tokens] = [0, %d], got %d", limit, *q.MinTokens)
		}
		s.MinTokens = int(*q.MinTokens)
	}
	return nil
}

// logitBias reads logit_bias: token ids (as strings, JSON object keys)
// to biases in [-100, 100], at most llm.MaxLogitBias of them.
func (q *oaiRequest) logitBias(g *generator, s *llm.SamplingParams) error {
	if len(q.LogitBias) == 0 {
		return nil
	}
	if len(q.LogitBias) > llm.MaxLogitBias {
		return paramErr("logit_bias", "logit_bias has %d entries; at most %d are allowed", len(q.LogitBias), llm.MaxLogitBias)
	}
	vocab := g.model.Config.Vocab
	s.LogitBias = make(map[int]float32, len(q.LogitBias))
	for k, v := range q.LogitBias {
		id, err := strconv.Atoi(k)
		if err != nil || id < 0 || id >= vocab {
			return paramErr("logit_bias", "logit_bias key %q is not a token id of this model's vocabulary (0..%d)", k, vocab-1)
		}
		if !(v >= -llm.MaxAbsLogitBias && v <= llm.MaxAbsLogitBias) {
			return paramErr("logit_bias", "logit_bias[%q] must be in [-%d, %d], got %g", k, llm.MaxAbsLogitBias, llm.MaxAbsLogitBias, v)
		}
		s.LogitBias[id] = float32(v)
	}
	return nil
}

// stopTokenIDs reads stop_token_ids (vLLM's): ids that end the sequence,
// reported as finish "stop".
func (q *oaiRequest) stopTokenIDs(g *generator, r *llm.Request) error {
	if len(q.StopTokenIDs) > llm.MaxStopIDs {
		return paramErr("stop_token_ids", "stop_token_ids has %d ids; at most %d are allowed", len(q.StopTokenIDs), llm.MaxStopIDs)
	}
	vocab := int64(g.model.Config.Vocab)
	for i, id := range q.StopTokenIDs {
		if id < 0 || id >= vocab {
			return paramErr("stop_token_ids", "stop_token_ids[%d] = %d is outside this model's vocabulary (0..%d)", i, id, vocab-1)
		}
		r.StopIDs = append(r.StopIDs, int(id))
	}
	return nil
}

// usageField sets what a chunk carries of usage: nothing when the
// request did not ask for it, null on every chunk but the last when it
// did (as OpenAI streams it).
func (o *oaiOut) usageField(m map[string]any, u *usage) {
	switch {
	case u != nil:
		m["usage"] = u
	case o.includeUsage:
		m["usage"] = nil
	}
}
