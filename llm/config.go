package llm

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tensorbridge/tensorbridge/errs"
)

// Config is what the decoder needs from a checkpoint's config.json, checked.
type Config struct {
	Architecture   string
	Vocab          int
	Hidden         int
	Intermediate   int
	Layers         int
	Heads          int
	KVHeads        int
	HeadDim        int
	RMSEps         float64
	MaxPositions   int
	TiedEmbeddings bool
	QKVBias        bool // Qwen2: biases on q, k and v
	QKNorm         bool // Qwen3: RMSNorm of q and k per head
	// AttentionBias (biases on q, k, v and o: Llama's and Qwen3's
	// attention_bias) and MLPBias are only ever set with
	// ParseOptions.ShapesOnly: the decoder does not implement them.
	AttentionBias, MLPBias bool
	// SlidingWindow, when > 0, limits attention to the last SlidingWindow
	// positions (Mistral).
	SlidingWindow int
	Rope          Rope
	BOS           int   // -1: none; from config.json, then generation_config.json
	EOS           []int // from config.json, then generation_config.json
	// Generation is generation_config.json's defaults (transformers' own
	// defaults where the file is absent or leaves a key out).
	Generation GenerationConfig
	// quant is how Load stores the projection weights (quant.go); not
	// from config.json.
	quant Quantization
	// adapt is the LoRA adapters Load placed beside the weights
	// (adapters.go); nil without.
	adapt *adapterLayout
}

// Rope is the rotary embedding's settings.
type Rope struct {
	Theta float64
	// Type is "default", "linear" or "llama3".
	Type                          string
	Factor                        float64
	LowFreqFactor, HighFreqFactor float64
	OriginalMaxPositions          int
}

// UnsupportedError says a checkpoint uses something this package does not
// implement: an architecture, a config field or one of its values.
type UnsupportedError struct {
	File   string // config.json
	Field  string // "architectures", "rope_scaling.rope_type", ...
	Value  string
	Detail string
}

func (e *UnsupportedError) Error() string {
	s := fmt.Sprintf("%s: %s = %s is not supported", e.File, e.Field, e.Value)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// ConfigError says a config.json value is out of range: the file, the
// key, its value and what was expected. It matches errs.ErrInvalidInput.
type ConfigError struct {
	File     string // the config.json read
	Field    string // "hidden_size", ...
	Value    string
	Expected string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("%s: %s = %s: expected %s", e.File, e.Field, e.Value, e.Expected)
}

// Is makes a ConfigError match errs.ErrInvalidInput.
func (e *ConfigError) Is(target error) bool { return target == errs.ErrInvalidInput }

// maxConfigSize bounds each size in config.json (vocabulary, hidden and
// intermediate sizes, layers, heads, positions): 2^24, far above any
// released model's (a larger value is most likely a corrupt file), and
// small enough that the product of two sizes cannot overflow.
const maxConfigSize = 1 << 24

// checkpointDir checks that dir is an existing directory, so that a
// mistyped path is reported as the directory, not as the first file read
// in it. The error is an *fs.PathError (errors.Is fs.ErrNotExist when
// there is nothing there).
func checkpointDir(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return &fs.PathError{Op: "checkpoint directory", Path: dir, Err: err}
	}
	if !st.IsDir() {
		return &fs.PathError{Op: "checkpoint directory", Path: dir, Err: errors.New("not a directory")}
	}
	return nil
}

// supportedArchitectures maps config.json's "architectures" entry to the
// features it may use.
var supportedArchitectures = map[string]bool{
	"LlamaForCausalLM":   true,
	"MistralForCausalLM": true,
	"Qwen2ForCausalLM":   true,
	"Qwen3ForCausalLM":   true,
}

// mathKeys are the config keys this package reads; every one changes the
// computation and is implemented.
var mathKeys = map[string]bool{
	"architectures": true, "model_type": true, "vocab_size": true, "hidden_size": true,
	"intermediate_size": true, "num_hidden_layers": true, "num_attention_heads": true,
	"num_key_value_heads": true, "head_dim": true, "rms_norm_eps": true, "rope_theta": true,
	"rope_scaling": true, "rope_parameters": true, "max_position_embeddings": true,
	"tie_word_embeddings": true, "attention_bias": true, "mlp_bias": true, "hidden_act": true,
	"sliding_window": true, "use_sliding_window": true, "max_window_layers": true,
	"layer_types": true, "pretraining_tp": true, "bos_token_id": true, "eos_token_id": true,
	"partial_rotary_factor": true,
}

// harmlessKeys are config keys that do not change inference's arithmetic
// (training-only settings, bookkeeping, the dtype the file was saved in,
// which the weights' own dtypes say).
var harmlessKeys = map[string]bool{
	"_name_or_path": true, "transformers_version": true, "torch_dtype": true, "dtype": true,
	"initializer_range": true, "use_cache": true, "pad_token_id": true, "attention_dropout": true,
	"output_attentions": true, "output_hidden_states": true, "return_dict": true,
	"tokenizer_class": true, "id2label": true, "label2id": true, "auto_map": true,
	"is_encoder_decoder": true, "add_cross_attention": true, "tie_encoder_decoder": true,
	"chunk_size_feed_forward": true, "problem_type": true, "torchscript": true,
	"use_bfloat16": true,
}

// LoadConfig reads and checks dir/config.json and dir/generation_config.json.
func LoadConfig(dir string) (*Config, error) {
	if err := checkpointDir(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	gen, err := loadGenerationConfig(dir)
	if err != nil {
		return nil, err
	}
	return parseConfig(path, raw, gen)
}

func intOrList(m json.RawMessage) ([]int, error) {
	if len(m) == 0 || string(m) == "null" {
		return nil, nil
	}
	var one int
	if json.Unmarshal(m, &one) == nil {
		return []int{one}, nil
	}
	var list []int
	if err := json.Unmarshal(m, &list); err != nil {
		return nil, fmt.Errorf("want an integer or a list of integers, got %s", m)
	}
	return list, nil
}

// ParseOptions tune ParseConfig.
type ParseOptions struct {
	// ShapesOnly checks only what decides the weights' shapes and count
	// and the KV cache's size, for planning (package plan): settings that
	// change the arithmetic but not the shapes (rope scaling types,
	// activations, pretraining_tp, unknown keys) are accepted, biases are
	// recorded in Config.AttentionBias and MLPBias instead of refused, and
	// a sliding window is read for any architecture (use_sliding_window
	// false turns it off). Keys that change the weights themselves
	// (mixture of experts, quantization) are refused in both modes.
	ShapesOnly bool
}

// ParseConfig checks the config.json read from path, without
// generation_config.json: the parser of LoadConfig, for callers that have
// the bytes (planning).
func ParseConfig(path string, raw []byte, o ParseOptions) (*Config, error) {
	return parseConfigOpts(path, raw, nil, o)
}

// weightKeys change the weights' layout or bytes; neither mode
// implements them, so a value other than off is refused.
var weightKeys = map[string]string{
	"num_local_experts":   "mixture-of-experts weights are not implemented",
	"num_experts":         "mixture-of-experts weights are not implemented",
	"quantization_config": "quantized weights change the bytes and the arithmetic; not implemented",
}

// checkWeightKeys refuses a weight key set to anything but null, 0 or
// false.
func checkWeightKeys(path string, m map[string]json.RawMessage) error {
	keys := make([]string, 0, len(weightKeys))
	for k := range weightKeys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, ok := m[k]
		if !ok {
			continue
		}
		var x any
		if err := json.Unmarshal(v, &x); err != nil {
			return fmt.Errorf("%s: %s: %v", path, k, err)
		}
		if x == nil || x == false || x == 0.0 {
			continue
		}
		return &UnsupportedError{File: path, Field: k, Value: string(v), Detail: weightKeys[k]}
	}
	return nil
}

// parseConfig checks a config.json. gen, when not nil, is
// generation_config.json's, whose bos and eos ids take precedence.
func parseConfig(path string, raw []byte, gen *GenerationConfig) (*Config, error) {
	return parseConfigOpts(path, raw, gen, ParseOptions{})
}

func parseConfigOpts(path string, raw []byte, gen *GenerationConfig, o ParseOptions) (*Config, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	var c struct {
		Architectures    []string        `json:"architectures"`
		Vocab            int             `json:"vocab_size"`
		Hidden           int             `json:"hidden_size"`
		Intermediate     int             `json:"intermediate_size"`
		Layers           int             `json:"num_hidden_layers"`
		Heads            int             `json:"num_attention_heads"`
		KVHeads          *int            `json:"num_key_value_heads"`
		HeadDim          *int            `json:"head_dim"`
		RMSEps           float64         `json:"rms_norm_eps"`
		RopeTheta        *float64        `json:"rope_theta"`
		RopeScaling      json.RawMessage `json:"rope_scaling"`
		RopeParameters   json.RawMessage `json:"rope_parameters"`
		MaxPositions     int             `json:"max_position_embeddings"`
		Tie              *bool           `json:"tie_word_embeddings"`
		AttentionBias    *bool           `json:"attention_bias"`
		MLPBias          *bool           `json:"mlp_bias"`
		HiddenAct        string          `json:"hidden_act"`
		SlidingWindow    *int            `json:"sliding_window"`
		UseSlidingWindow *bool           `json:"use_sliding_window"`
		LayerTypes       []string        `json:"layer_types"`
		PretrainingTP    *int            `json:"pretraining_tp"`
		PartialRotary    *float64        `json:"partial_rotary_factor"`
		BOS              json.RawMessage `json:"bos_token_id"`
		EOS              json.RawMessage `json:"eos_token_id"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(c.Architectures) != 1 {
		return nil, fmt.Errorf("%s: architectures = %v: want exactly one", path, c.Architectures)
	}
	arch := c.Architectures[0]
	if !supportedArchitectures[arch] {
		return nil, &UnsupportedError{File: path, Field: "architectures", Value: arch,
			Detail: "supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM"}
	}
	if err := checkWeightKeys(path, m); err != nil {
		return nil, err
	}
	var unknown []string
	for k := range m {
		if !mathKeys[k] && !harmlessKeys[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 && !o.ShapesOnly {
		sort.Strings(unknown)
		return nil, &UnsupportedError{File: path, Field: strings.Join(unknown, ", "), Value: "(present)",
			Detail: "a config field this implementation does not know; it may change the computation"}
	}
	cfg := &Config{Architecture: arch, Vocab: c.Vocab, Hidden: c.Hidden, Intermediate: c.Intermediate,
		Layers: c.Layers, Heads: c.Heads, RMSEps: c.RMSEps, MaxPositions: c.MaxPositions, BOS: -1}
	for _, f := range []struct {
		name string
		v    int
	}{{"vocab_size", c.Vocab}, {"hidden_size", c.Hidden}, {"intermediate_size", c.Intermediate},
		{"num_hidden_layers", c.Layers}, {"num_attention_heads", c.Heads}, {"max_position_embeddings", c.MaxPositions}} {
		if o.ShapesOnly && f.name == "max_position_embeddings" && f.v == 0 {
			continue // planning takes the context from its options
		}
		switch {
		case f.v <= 0:
			return nil, &ConfigError{File: path, Field: f.name, Value: fmt.Sprint(f.v), Expected: "a positive size"}
		case f.v > maxConfigSize:
			return nil, &ConfigError{File: path, Field: f.name, Value: fmt.Sprint(f.v),
				Expected: fmt.Sprintf("at most %d (2^24): the limit this implementation sets on every size in config.json", maxConfigSize)}
		}
	}
	if c.RMSEps <= 0 && !o.ShapesOnly {
		return nil, fmt.Errorf("%s: rms_norm_eps = %g, want > 0", path, c.RMSEps)
	}
	cfg.KVHeads = c.Heads
	if c.KVHeads != nil {
		cfg.KVHeads = *c.KVHeads
	}
	if cfg.KVHeads <= 0 || c.Heads%cfg.KVHeads != 0 {
		return nil, fmt.Errorf("%s: num_key_value_heads = %d must divide num_attention_heads = %d", path, cfg.KVHeads, c.Heads)
	}
	cfg.HeadDim = c.Hidden / c.Heads
	if c.HeadDim != nil {
		cfg.HeadDim = *c.HeadDim
	} else if c.Hidden%c.Heads != 0 {
		return nil, fmt.Errorf("%s: hidden_size %d is not a multiple of num_attention_heads %d and head_dim is absent", path, c.Hidden, c.Heads)
	}
	if cfg.HeadDim <= 0 || (cfg.HeadDim%2 != 0 && !o.ShapesOnly) {
		return nil, fmt.Errorf("%s: head_dim = %d, want a positive even number", path, cfg.HeadDim)
	}
	if err := checkArithmetic(path, c.HiddenAct, c.PretrainingTP, c.PartialRotary, o); err != nil {
		return nil, err
	}
	cfg.MLPBias = c.MLPBias != nil && *c.MLPBias
	attnBias := c.AttentionBias != nil && *c.AttentionBias
	switch arch {
	case "Qwen2ForCausalLM":
		cfg.QKVBias = true // Qwen2Attention: q, k, v with bias, o without; attention_bias unread
	case "Qwen3ForCausalLM":
		cfg.QKNorm = true
		cfg.AttentionBias = attnBias
	default:
		cfg.AttentionBias = attnBias
	}
	if !o.ShapesOnly {
		if cfg.MLPBias {
			return nil, &UnsupportedError{File: path, Field: "mlp_bias", Value: "true"}
		}
		if cfg.AttentionBias {
			return nil, &UnsupportedError{File: path, Field: "attention_bias", Value: "true"}
		}
	}
	// LlamaConfig, MistralConfig, Qwen2Config and Qwen3Config all default
	// tie_word_embeddings to false.
	cfg.TiedEmbeddings = c.Tie != nil && *c.Tie
	if o.ShapesOnly {
		if sw := c.SlidingWindow; sw != nil && *sw > 0 && (c.UseSlidingWindow == nil || *c.UseSlidingWindow) {
			cfg.SlidingWindow = *sw
		}
	} else if err := cfg.slidingWindow(path, arch, c.SlidingWindow, c.UseSlidingWindow, c.LayerTypes); err != nil {
		return nil, err
	}
	rope, err := parseRope(path, c.RopeTheta, c.RopeScaling, c.RopeParameters)
	var ue *UnsupportedError
	if err != nil && !(o.ShapesOnly && errors.As(err, &ue)) {
		return nil, err
	}
	cfg.Rope = rope
	if b, err := intOrList(c.BOS); err != nil {
		return nil, fmt.Errorf("%s: bos_token_id: %v", path, err)
	} else if len(b) == 1 {
		cfg.BOS = b[0]
	}
	eos, err := intOrList(c.EOS)
	if err != nil {
		return nil, fmt.Errorf("%s: eos_token_id: %v", path, err)
	}
	cfg.Generation = defaultGenerationConfig()
	if gen != nil {
		cfg.Generation = *gen
		if gen.EOS != nil {
			eos = gen.EOS
		}
		if gen.BOS >= 0 {
			cfg.BOS = gen.BOS
		}
	}
	for _, id := range eos {
		if id < 0 || id >= cfg.Vocab {
			return nil, fmt.Errorf("%s: eos token id %d outside the vocabulary (%d)", path, id, cfg.Vocab)
		}
	}
	for _, f := range []struct {
		name string
		id   int
	}{{"bos_token_id", cfg.BOS}, {"generation_config.json pad_token_id", cfg.Generation.Pad}} {
		if f.id >= cfg.Vocab {
			return nil, fmt.Errorf("%s: %s %d outside the vocabulary (%d)", path, f.name, f.id, cfg.Vocab)
		}
	}
	cfg.EOS = eos
	cfg.Generation.EOS = eos
	cfg.Generation.BOS = cfg.BOS
	return cfg, nil
}

// checkArithmetic refuses settings that change the computation but not
// the shapes, unless o.ShapesOnly.
func checkArithmetic(path, act string, tp *int, partial *float64, o ParseOptions) error {
	switch {
	case o.ShapesOnly:
	case act != "" && act != "silu":
		return &UnsupportedError{File: path, Field: "hidden_act", Value: act, Detail: "only silu"}
	case tp != nil && *tp != 1:
		return &UnsupportedError{File: path, Field: "pretraining_tp", Value: fmt.Sprint(*tp), Detail: "only 1"}
	case partial != nil && *partial != 1:
		return &UnsupportedError{File: path, Field: "partial_rotary_factor", Value: fmt.Sprint(*partial), Detail: "only 1"}
	}
	return nil
}

// slidingWindow reads Mistral's sliding_window and refuses Qwen's
// per-layer windows.
func (cfg *Config) slidingWindow(path, arch string, sw *int, use *bool, layerTypes []string) error {
	for i, t := range layerTypes {
		if t != "full_attention" {
			return &UnsupportedError{File: path, Field: fmt.Sprintf("layer_types[%d]", i), Value: t, Detail: "only full_attention"}
		}
	}
	switch arch {
	case "MistralForCausalLM":
		if sw != nil && *sw > 0 {
			cfg.SlidingWindow = *sw
		}
	case "Qwen2ForCausalLM", "Qwen3ForCausalLM":
		if use != nil && *use {
			return &UnsupportedError{File: path, Field: "use_sliding_window", Value: "true"}
		}
	default:
		if sw != nil && *sw > 0 {
			return &UnsupportedError{File: path, Field: "sliding_window", Value: fmt.Sprint(*sw), Detail: "only for MistralForCausalLM"}
		}
	}
	return nil
}

// parseRope reads the older rope_theta/rope_scaling keys or transformers
// 5's rope_parameters (which holds rope_theta too).
func parseRope(path string, theta *float64, scaling, params json.RawMessage) (Rope, error) {
	r := Rope{Theta: 10000, Type: "default", Factor: 1}
	if theta != nil {
		r.Theta = *theta
	}
	src, field := scaling, "rope_scaling"
	if len(params) > 0 && string(params) != "null" {
		src, field = params, "rope_parameters"
	}
	if len(src) > 0 && string(src) != "null" {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(src, &m); err != nil {
			return r, fmt.Errorf("%s: %s: %v", path, field, err)
		}
		var s struct {
			RopeType string   `json:"rope_type"`
			Type     string   `json:"type"`
			Theta    *float64 `json:"rope_theta"`
			Factor   *float64 `json:"factor"`
			Low      *float64 `json:"low_freq_factor"`
			High     *float64 `json:"high_freq_factor"`
			OrigMax  *int     `json:"original_max_position_embeddings"`
		}
		if err := json.Unmarshal(src, &s); err != nil {
			return r, fmt.Errorf("%s: %s: %v", path, field, err)
		}
		if s.Theta != nil {
			r.Theta = *s.Theta
		}
		typ := s.RopeType
		if typ == "" {
			typ = s.Type
		}
		if typ == "" {
			typ = "default"
		}
		known := map[string]bool{"rope_type": true, "type": true, "rope_theta": true}
		switch typ {
		case "default":
		case "linear":
			known["factor"] = true
			if s.Factor == nil || *s.Factor <= 0 {
				return r, fmt.Errorf("%s: %s: linear scaling needs factor > 0", path, field)
			}
			r.Type, r.Factor = typ, *s.Factor
		case "llama3":
			for _, k := range []string{"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"} {
				known[k] = true
			}
			if s.Factor == nil || s.Low == nil || s.High == nil || s.OrigMax == nil || *s.High <= *s.Low || *s.Factor <= 0 || *s.OrigMax <= 0 {
				return r, fmt.Errorf("%s: %s: llama3 scaling needs factor > 0, low_freq_factor < high_freq_factor and original_max_position_embeddings > 0", path, field)
			}
			r.Type, r.Factor, r.LowFreqFactor, r.HighFreqFactor, r.OriginalMaxPositions = typ, *s.Factor, *s.Low, *s.High, *s.OrigMax
		default:
			return r, &UnsupportedError{File: path, Field: field + ".rope_type", Value: typ, Detail: "supported: default, linear, llama3"}
		}
		for k := range m {
			if !known[k] {
				return r, &UnsupportedError{File: path, Field: field + "." + k, Value: string(m[k]), Detail: "not implemented for rope_type " + typ}
			}
		}
	}
	if !(r.Theta > 0) || math.IsInf(r.Theta, 0) {
		return r, fmt.Errorf("%s: rope_theta = %g, want > 0", path, r.Theta)
	}
	return r, nil
}

// invFreq returns the rotary inverse frequencies as transformers computes
// them (modeling_rope_utils.py: _compute_default_rope_parameters,
// _compute_linear_scaling_rope_parameters, _compute_llama3_parameters),
// in float32 as torch does.
func (r Rope) invFreq(headDim int) []float32 {
	half := headDim / 2
	out := make([]float32, half)
	for i := range half {
		exp := float32(2*i) / float32(headDim)
		inv := float32(1 / math.Pow(r.Theta, float64(exp)))
		switch r.Type {
		case "linear":
			inv = inv / float32(r.Factor)
		case "llama3":
			old := float64(r.OriginalMaxPositions)
			lowWave := old / r.LowFreqFactor
			highWave := old / r.HighFreqFactor
			wave := 2 * math.Pi / float64(inv)
			v := float64(inv)
			if wave > lowWave {
				v = v / r.Factor
			} else if wave >= highWave {
				smooth := (old/wave - r.LowFreqFactor) / (r.HighFreqFactor - r.LowFreqFactor)
				v = (1-smooth)*v/r.Factor + smooth*v
			}
			inv = float32(v)
		}
		out[i] = inv
	}
	return out
}
