package llm

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// GenerationConfig is a checkpoint's generation_config.json: the defaults
// transformers' generate uses for whatever its call leaves unset
// (https://github.com/huggingface/transformers/blob/main/src/transformers/generation/configuration_utils.py,
// GenerationConfig.__init__). Keys the file leaves out keep transformers'
// defaults: do_sample false, temperature 1, top_k 50, top_p 1, min_p
// unset.
type GenerationConfig struct {
	DoSample    bool
	Temperature float64
	TopK        int
	TopP        float64
	MinP        float64 // 0: unset
	// RepetitionPenalty is transformers' repetition_penalty (0: unset,
	// as 1: off); it applies whether or not the request samples, as in
	// transformers' generate and vLLM's default sampling parameters.
	RepetitionPenalty float64
	// MaxNewTokens and MaxLength are 0 when the file does not set them.
	// transformers' own default max_length (20) is not applied: a request
	// that sets no limit and whose checkpoint sets none runs to the
	// engine's own default (the context's room).
	MaxNewTokens int
	MaxLength    int
	BOS, Pad     int // -1: none
	EOS          []int
}

// defaultGenerationConfig is transformers' GenerationConfig() with no
// arguments, less max_length (see GenerationConfig.MaxLength).
func defaultGenerationConfig() GenerationConfig {
	return GenerationConfig{Temperature: 1, TopK: 50, TopP: 1, BOS: -1, Pad: -1}
}

// maxGenerationConfigBytes bounds generation_config.json; real ones are a
// few hundred bytes.
const maxGenerationConfigBytes = 1 << 20

// genImplemented are the generation_config.json keys GenerationConfig
// reads and the engine implements.
var genImplemented = map[string]bool{
	"do_sample": true, "temperature": true, "top_k": true, "top_p": true, "min_p": true,
	"max_new_tokens": true, "max_length": true, "bos_token_id": true, "eos_token_id": true,
	"pad_token_id": true, "repetition_penalty": true,
}

// genHarmless are keys that never change the tokens generated here:
// bookkeeping, what generate returns besides the tokens, caching, and
// settings only beam search reads (num_beams > 1 is refused).
var genHarmless = map[string]bool{
	"_from_model_config": true, "transformers_version": true, "use_cache": true,
	"output_attentions": true, "output_hidden_states": true, "output_scores": true,
	"output_logits": true, "return_dict_in_generate": true, "cache_implementation": true,
	"decoder_start_token_id": true, "is_assistant": true, "length_penalty": true,
	"early_stopping": true, "trust_remote_code": true, "num_assistant_tokens": true,
	"num_assistant_tokens_schedule": true, "assistant_confidence_threshold": true,
}

// genNeutral are keys that change the output unless they hold their
// neutral value (transformers' default, which disables them); the engine
// implements none of them, so any other value is refused by name.
var genNeutral = map[string]any{
	"encoder_repetition_penalty": 1.0, "num_beams": 1.0,
	"num_beam_groups": 1.0, "diversity_penalty": 0.0, "no_repeat_ngram_size": 0.0,
	"encoder_no_repeat_ngram_size": 0.0, "typical_p": 1.0, "epsilon_cutoff": 0.0,
	"eta_cutoff": 0.0, "min_length": 0.0, "min_new_tokens": nil, "bad_words_ids": nil,
	"force_words_ids": nil, "suppress_tokens": nil, "begin_suppress_tokens": nil,
	"forced_bos_token_id": nil, "forced_eos_token_id": nil, "forced_decoder_ids": nil,
	"sequence_bias": nil, "guidance_scale": nil, "penalty_alpha": nil,
	"exponential_decay_length_penalty": nil, "renormalize_logits": false,
	"remove_invalid_values": false, "watermarking_config": nil, "token_healing": false,
	"stop_strings": nil, "max_time": nil, "num_return_sequences": 1.0, "constraints": nil,
	"low_memory": nil, "top_h": nil, "dola_layers": nil,
}

// loadGenerationConfig reads dir/generation_config.json; nil, nil when
// the file does not exist.
func loadGenerationConfig(dir string) (*GenerationConfig, error) {
	path := filepath.Join(dir, "generation_config.json")
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > maxGenerationConfigBytes {
		return nil, fmt.Errorf("%s: %d bytes, over the %d a generation config may take", path, st.Size(), maxGenerationConfigBytes)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseGenerationConfig(path, raw)
}

// parseGenerationConfig checks a generation_config.json: a key that would
// change the output and is not implemented is an *UnsupportedError naming
// it, as is an unknown key; values out of range are errors.
func parseGenerationConfig(path string, raw []byte) (*GenerationConfig, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if err := checkGenerationKeys(path, m); err != nil {
		return nil, err
	}
	var c struct {
		DoSample     *bool           `json:"do_sample"`
		Temperature  *float64        `json:"temperature"`
		TopK         *int            `json:"top_k"`
		TopP         *float64        `json:"top_p"`
		MinP         *float64        `json:"min_p"`
		RepPenalty   *float64        `json:"repetition_penalty"`
		MaxNewTokens *int            `json:"max_new_tokens"`
		MaxLength    *int            `json:"max_length"`
		BOS          json.RawMessage `json:"bos_token_id"`
		EOS          json.RawMessage `json:"eos_token_id"`
		Pad          json.RawMessage `json:"pad_token_id"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	g := defaultGenerationConfig()
	bad := func(key string, v any, want string) error {
		return fmt.Errorf("%s: %s = %v, want %s", path, key, v, want)
	}
	if c.DoSample != nil {
		g.DoSample = *c.DoSample
	}
	if c.Temperature != nil {
		// transformers' TemperatureLogitsWarper refuses temperature <= 0
		// when sampling; greedy ignores it.
		if !(*c.Temperature > 0) || math.IsInf(*c.Temperature, 0) {
			return nil, bad("temperature", *c.Temperature, "> 0")
		}
		g.Temperature = *c.Temperature
	}
	if c.TopK != nil {
		if *c.TopK < 0 {
			return nil, bad("top_k", *c.TopK, ">= 0 (0: off)")
		}
		g.TopK = *c.TopK
	}
	if c.TopP != nil {
		if !(*c.TopP > 0 && *c.TopP <= 1) {
			return nil, bad("top_p", *c.TopP, "in (0, 1]")
		}
		g.TopP = *c.TopP
	}
	if c.MinP != nil {
		if !(*c.MinP >= 0 && *c.MinP <= 1) {
			return nil, bad("min_p", *c.MinP, "in [0, 1]")
		}
		g.MinP = *c.MinP
	}
	if c.RepPenalty != nil {
		// transformers' RepetitionPenaltyLogitsProcessor refuses a
		// penalty that is not > 0.
		if !(*c.RepPenalty > 0) || math.IsInf(*c.RepPenalty, 0) {
			return nil, bad("repetition_penalty", *c.RepPenalty, "> 0 (1: off)")
		}
		g.RepetitionPenalty = *c.RepPenalty
	}
	if c.MaxNewTokens != nil {
		if *c.MaxNewTokens < 1 {
			return nil, bad("max_new_tokens", *c.MaxNewTokens, ">= 1")
		}
		g.MaxNewTokens = *c.MaxNewTokens
	}
	if c.MaxLength != nil {
		if *c.MaxLength < 1 {
			return nil, bad("max_length", *c.MaxLength, ">= 1")
		}
		g.MaxLength = *c.MaxLength
	}
	for _, f := range []struct {
		key string
		raw json.RawMessage
		dst *int
	}{{"bos_token_id", c.BOS, &g.BOS}, {"pad_token_id", c.Pad, &g.Pad}} {
		ids, err := intOrList(f.raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %v", path, f.key, err)
		}
		switch {
		case len(ids) == 1 && ids[0] >= 0:
			*f.dst = ids[0]
		case len(ids) > 0:
			return nil, bad(f.key, ids, "one token id >= 0")
		}
	}
	eos, err := intOrList(c.EOS)
	if err != nil {
		return nil, fmt.Errorf("%s: eos_token_id: %v", path, err)
	}
	g.EOS = eos
	return &g, nil
}

// checkGenerationKeys refuses, by name, keys the engine does not
// implement that hold a value which would change the output, and keys it
// does not know.
func checkGenerationKeys(path string, m map[string]json.RawMessage) error {
	var unknown []string
	for k, v := range m {
		if genImplemented[k] || genHarmless[k] {
			continue
		}
		neutral, known := genNeutral[k]
		if !known {
			unknown = append(unknown, k)
			continue
		}
		var got any
		if err := json.Unmarshal(v, &got); err != nil {
			return fmt.Errorf("%s: %s: %v", path, k, err)
		}
		if got == nil || got == neutral {
			continue
		}
		return &UnsupportedError{File: path, Field: k, Value: string(v),
			Detail: fmt.Sprintf("not implemented; it changes the generated tokens (only %v, its neutral value, is accepted)", neutralText(neutral))}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return &UnsupportedError{File: path, Field: strings.Join(unknown, ", "), Value: "(present)",
			Detail: "a generation setting this implementation does not know; it may change the generated tokens"}
	}
	return nil
}

func neutralText(v any) string {
	if v == nil {
		return "null"
	}
	return fmt.Sprint(v)
}

// SamplingOptions are a request's sampling settings; nil fields are
// unset and take the checkpoint's generation defaults.
type SamplingOptions struct {
	// Temperature 0 is greedy; > 0 samples.
	Temperature *float64
	TopK        *int // 0: off
	TopP        *float64
	MinP        *float64
	Seed        uint32
	// RepetitionPenalty (> 0; 1: off) overrides the checkpoint's.
	RepetitionPenalty *float64
}

// Sampling resolves o against the generation defaults as transformers'
// generate resolves its arguments against generation_config: a set field
// wins; an unset one takes the checkpoint's value, else transformers'
// default. Unlike transformers, a request that sets a temperature > 0
// samples even where the checkpoint's do_sample is false (the APIs served
// here have no do_sample: temperature 0 is how a request asks for
// greedy); one that sets none samples exactly when do_sample is true.
func (g *GenerationConfig) Sampling(o SamplingOptions) SamplingParams {
	temp := 0.0
	switch {
	case o.Temperature != nil:
		temp = *o.Temperature
	case g.DoSample:
		temp = g.Temperature
	}
	rep := g.RepetitionPenalty
	if o.RepetitionPenalty != nil {
		rep = *o.RepetitionPenalty
	}
	if rep == 1 {
		rep = 0 // off, as the zero value
	}
	if temp <= 0 {
		// greedy: the filters do not apply, the penalty does
		return SamplingParams{Seed: o.Seed, RepetitionPenalty: float32(rep)}
	}
	s := SamplingParams{Temperature: float32(temp), TopK: g.TopK, TopP: float32(g.TopP), MinP: float32(g.MinP), Seed: o.Seed, RepetitionPenalty: float32(rep)}
	if o.TopK != nil {
		s.TopK = *o.TopK
	}
	if o.TopP != nil {
		s.TopP = float32(*o.TopP)
	}
	if o.MinP != nil {
		s.MinP = float32(*o.MinP)
	}
	return s
}

// MaxTokens resolves a request's max_tokens (nil: unset) for a prompt of
// promptLen tokens in a context of contextLen as transformers does: the
// request's value, else max_new_tokens, else max_length less the prompt
// (at least 1: generate always produces a token), else 0 (the engine's
// default: the context's room). A default is capped by the context's
// room; the request's own value is not (Engine.Generate refuses what does
// not fit).
func (g *GenerationConfig) MaxTokens(requested *int, promptLen, contextLen int) int {
	room := max(0, contextLen-promptLen)
	switch {
	case requested != nil:
		return *requested
	case g.MaxNewTokens > 0:
		return min(g.MaxNewTokens, room)
	case g.MaxLength > 0:
		return min(max(1, g.MaxLength-promptLen), room)
	}
	return 0
}
