package llm

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestParseConfigModes: one parser serves the engine (strict: anything
// not implemented is refused by name) and planning (ShapesOnly: settings
// that do not change the weights' shapes are accepted, biases recorded);
// keys that change the weights themselves are refused by both.
//
// Injected fault: with checkWeightKeys removed, the mixture-of-experts
// and quantization cases parsed in ShapesOnly mode and failed here (and
// plan's TestLoadCheckpointBadInput "moe llama" and "quantized").
func TestParseConfigModes(t *testing.T) {
	with := func(kv ...any) []byte {
		c := tinyConfig()
		for i := 0; i < len(kv); i += 2 {
			c[kv[i].(string)] = kv[i+1]
		}
		raw, _ := json.Marshal(c)
		return raw
	}
	for _, c := range []struct {
		name   string
		raw    []byte
		strict string // the refused field in strict mode; "" accepts
		shapes string // the refused field with ShapesOnly; "" accepts
		check  func(*Config) bool
	}{
		{"plain", with(), "", "", func(c *Config) bool { return !c.AttentionBias && !c.MLPBias && c.HeadDim == 4 }},
		{"attention bias", with("attention_bias", true), "attention_bias", "", func(c *Config) bool { return c.AttentionBias && !c.QKVBias }},
		{"mlp bias", with("mlp_bias", true), "mlp_bias", "", func(c *Config) bool { return c.MLPBias }},
		{"gelu", with("hidden_act", "gelu"), "hidden_act", "", nil},
		{"pretraining tp", with("pretraining_tp", 2), "pretraining_tp", "", nil},
		{"yarn", with("rope_scaling", map[string]any{"rope_type": "yarn", "factor": 4.0}), "rope_scaling.rope_type", "", nil},
		{"unknown key", with("attn_logit_softcapping", 30.0), "attn_logit_softcapping", "", nil},
		{"llama sliding window", with("sliding_window", 16), "sliding_window", "", func(c *Config) bool { return c.SlidingWindow == 16 }},
		{"sliding window off", with("sliding_window", 16, "use_sliding_window", false), "sliding_window", "", func(c *Config) bool { return c.SlidingWindow == 0 }},
		{"experts", with("num_local_experts", 8), "num_local_experts", "num_local_experts", nil},
		{"experts off", with("num_experts", 0), "num_experts", "", nil},
		{"quantized", with("quantization_config", map[string]any{"bits": 4}), "quantization_config", "quantization_config", nil},
		{"no eps", func() []byte { c := tinyConfig(); delete(c, "rms_norm_eps"); raw, _ := json.Marshal(c); return raw }(), "rms_norm_eps", "", nil},
	} {
		for _, mode := range []struct {
			o    ParseOptions
			want string
		}{{ParseOptions{}, c.strict}, {ParseOptions{ShapesOnly: true}, c.shapes}} {
			cfg, err := ParseConfig("config.json", c.raw, mode.o)
			switch {
			case mode.want == "" && err != nil:
				t.Errorf("%s %+v: %v", c.name, mode.o, err)
			case mode.want == "" && c.check != nil && !c.check(cfg):
				t.Errorf("%s %+v: got %+v", c.name, mode.o, cfg)
			case mode.want != "" && (err == nil || !strings.Contains(err.Error(), mode.want)):
				t.Errorf("%s %+v: got %v, want an error naming %s", c.name, mode.o, err, mode.want)
			case mode.want != "" && mode.want != "rms_norm_eps":
				var ue *UnsupportedError
				if !errors.As(err, &ue) {
					t.Errorf("%s %+v: %v is not an *UnsupportedError", c.name, mode.o, err)
				}
			}
		}
	}
}
