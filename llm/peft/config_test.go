package peft

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/errs"
)

// peftConfig is adapter_config.json as PEFT 0.15.2 saved it for the
// fixtures (r=8, lora_alpha=16, q_proj and v_proj, a bare Qwen2 model).
const peftConfig = `{
  "alpha_pattern": {},
  "auto_mapping": {"base_model_class": "Qwen2ForCausalLM", "parent_library": "transformers.models.qwen2.modeling_qwen2"},
  "base_model_name_or_path": "/fixtures/qwen2",
  "bias": "none", "corda_config": null, "eva_config": null, "exclude_modules": null,
  "fan_in_fan_out": false, "inference_mode": true, "init_lora_weights": true,
  "layer_replication": null, "layers_pattern": null, "layers_to_transform": null,
  "loftq_config": {}, "lora_alpha": 16, "lora_bias": false, "lora_dropout": 0.0,
  "megatron_config": null, "megatron_core": "megatron.core", "modules_to_save": null,
  "peft_type": "LORA", "r": 8, "rank_pattern": {}, "revision": null,
  "target_modules": ["q_proj", "v_proj"], "task_type": null,
  "trainable_token_indices": null, "use_dora": false, "use_rslora": false
}`

// with returns peftConfig with one key's value replaced (or the key
// removed when value is "").
func with(key, value string) string {
	lines := strings.Split(peftConfig, "\n")
	for i, l := range lines {
		at := strings.Index(l, `"`+key+`": `)
		if at < 0 {
			continue
		}
		rest := l[at+len(key)+4:]
		end := len(rest)
		for depth, j := 0, 0; j < len(rest); j++ {
			switch rest[j] {
			case '[', '{':
				depth++
			case ']', '}':
				depth--
			case ',':
				if depth == 0 {
					end = j
					j = len(rest)
				}
			}
		}
		if value == "" {
			lines[i] = l[:at] + `"x_removed": 0` + rest[end:]
		} else {
			lines[i] = l[:at+len(key)+4] + value + rest[end:]
		}
	}
	return strings.Join(lines, "\n")
}

func TestParseConfigGood(t *testing.T) {
	for _, tc := range []struct {
		name   string
		json   string
		r      int
		alpha  float64
		scale  float64
		target Targets
		task   string
	}{
		{"PEFT's file", peftConfig, 8, 16, 2, Targets{List: []string{"q_proj", "v_proj"}}, ""},
		{"rslora", with("use_rslora", "true"), 8, 16, 16 / math.Sqrt(8), Targets{List: []string{"q_proj", "v_proj"}}, ""},
		{"regex", with("target_modules", `".*\\.(q|v)_proj"`), 8, 16, 2, Targets{Regex: `.*\.(q|v)_proj`, IsRe: true}, ""},
		{"float alpha, task type", strings.Replace(with("lora_alpha", "8.5"), `"task_type": null`, `"task_type": "CAUSAL_LM"`, 1), 8, 8.5, 8.5 / 8, Targets{List: []string{"q_proj", "v_proj"}}, "CAUSAL_LM"},
		{"r as 4.0", with("r", "4.0"), 4, 16, 4, Targets{List: []string{"q_proj", "v_proj"}}, ""},
		{"off values spelled otherwise", with("modules_to_save", "[]"), 8, 16, 2, Targets{List: []string{"q_proj", "v_proj"}}, ""},
		{"unknown key ignored", strings.Replace(peftConfig, `"r": 8,`, `"r": 8, "future_field": [1, 2],`, 1), 8, 16, 2, Targets{List: []string{"q_proj", "v_proj"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig("adapter_config.json", []byte(tc.json))
			if err != nil {
				t.Fatal(err)
			}
			if c.R != tc.r || c.Alpha != tc.alpha || math.Abs(c.Scale()-tc.scale) > 1e-15 || c.TaskType != tc.task ||
				!slices.Equal(c.TargetModules.List, tc.target.List) || c.TargetModules.Regex != tc.target.Regex || c.TargetModules.IsRe != tc.target.IsRe {
				t.Errorf("got %+v scale %v", c, c.Scale())
			}
		})
	}
}

// TestParseConfigErrors: each unsupported feature is ErrUnsupported
// naming its field; each bad value ErrInvalidInput naming the field.
func TestParseConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		json  string
		kind  error
		field string
	}{
		{"dora", with("use_dora", "true"), errs.ErrUnsupported, "use_dora"},
		{"bias all", with("bias", `"all"`), errs.ErrUnsupported, "bias"},
		{"lora_bias", with("lora_bias", "true"), errs.ErrUnsupported, "lora_bias"},
		{"modules_to_save", with("modules_to_save", `["lm_head"]`), errs.ErrUnsupported, "modules_to_save"},
		{"rank_pattern", with("rank_pattern", `{"q_proj": 4}`), errs.ErrUnsupported, "rank_pattern"},
		{"alpha_pattern", with("alpha_pattern", `{"q_proj": 4}`), errs.ErrUnsupported, "alpha_pattern"},
		{"fan_in_fan_out", with("fan_in_fan_out", "true"), errs.ErrUnsupported, "fan_in_fan_out"},
		{"layers_to_transform", with("layers_to_transform", "[0]"), errs.ErrUnsupported, "layers_to_transform"},
		{"exclude_modules", with("exclude_modules", `["k_proj"]`), errs.ErrUnsupported, "exclude_modules"},
		{"not lora", with("peft_type", `"IA3"`), errs.ErrUnsupported, "peft_type"},
		{"all-linear", with("target_modules", `"all-linear"`), errs.ErrUnsupported, "target_modules"},
		{"python-only regex", with("target_modules", `".*(?<!k)_proj"`), errs.ErrUnsupported, "target_modules"},
		{"r zero", with("r", "0"), errs.ErrInvalidInput, "r"},
		{"r negative", with("r", "-4"), errs.ErrInvalidInput, "r"},
		{"r fractional", with("r", "2.5"), errs.ErrInvalidInput, "r"},
		{"r string", with("r", `"8"`), errs.ErrInvalidInput, "r"},
		{"r missing", with("r", ""), errs.ErrInvalidInput, "r"},
		{"alpha missing", with("lora_alpha", ""), errs.ErrInvalidInput, "lora_alpha"},
		{"alpha huge", with("lora_alpha", "1e999"), errs.ErrInvalidInput, "lora_alpha"},
		{"dropout 1", with("lora_dropout", "1"), errs.ErrInvalidInput, "lora_dropout"},
		{"dropout negative", with("lora_dropout", "-0.1"), errs.ErrInvalidInput, "lora_dropout"},
		{"targets empty", with("target_modules", "[]"), errs.ErrInvalidInput, "target_modules"},
		{"targets null", with("target_modules", "null"), errs.ErrInvalidInput, "target_modules"},
		{"targets numbers", with("target_modules", "[1]"), errs.ErrInvalidInput, "target_modules"},
		{"rslora string", with("use_rslora", `"yes"`), errs.ErrInvalidInput, "use_rslora"},
		{"peft_type missing", with("peft_type", ""), errs.ErrInvalidInput, "peft_type"},
		{"not an object", `[1, 2]`, errs.ErrInvalidInput, "a JSON object"},
		{"truncated", peftConfig[:40], errs.ErrInvalidInput, "a JSON object"},
		{"too big", strings.Repeat(" ", maxConfigBytes+1), errs.ErrInvalidInput, "bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("adapter_config.json", []byte(tc.json))
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("got %v, want %v naming %q", err, tc.kind, tc.field)
			}
		})
	}
}

// TestMatch: PEFT's rule (a list entry matches the name itself or a
// ".entry" suffix; a string is a whole-name regex), in module order.
func TestMatch(t *testing.T) {
	mods := []Module{
		{"model.layers.0.self_attn.q_proj", 64, 64}, {"model.layers.0.self_attn.v_proj", 64, 32},
		{"model.layers.0.mlp.up_proj", 64, 128}, {"model.layers.1.self_attn.q_proj", 64, 64},
		{"model.layers.1.self_attn.v_proj", 64, 32}, {"lm_head", 64, 384},
	}
	names := func(ms []Module) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Name)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		t    Targets
		want []string
		err  string // in the error; "" for success
	}{
		{"suffixes", Targets{List: []string{"v_proj", "q_proj"}}, []string{"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.v_proj", "model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.v_proj"}, ""},
		{"dotted suffix", Targets{List: []string{"self_attn.q_proj"}}, []string{"model.layers.0.self_attn.q_proj", "model.layers.1.self_attn.q_proj"}, ""},
		{"whole name", Targets{List: []string{"lm_head", "model.layers.1.self_attn.v_proj"}}, []string{"model.layers.1.self_attn.v_proj", "lm_head"}, ""},
		{"part of a component is no suffix", Targets{List: []string{"proj"}}, nil, `"proj", which matches no module`},
		{"one target of two missing", Targets{List: []string{"q_proj", "qkv_proj"}}, nil, `"qkv_proj"`},
		{"regex", Targets{Regex: `.*layers\.1\..*_proj`, IsRe: true}, []string{"model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.v_proj"}, ""},
		{"regex is a full match", Targets{Regex: `q_proj`, IsRe: true}, nil, `regex "q_proj"`},
		{"regex alternation is anchored whole", Targets{Regex: `lm_head|.*up_proj`, IsRe: true}, []string{"model.layers.0.mlp.up_proj", "lm_head"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Match(&Config{R: 8, TargetModules: tc.t}, mods)
			if tc.err != "" {
				if !errors.Is(err, errs.ErrInvalidInput) || !strings.Contains(err.Error(), tc.err) ||
					!strings.Contains(err.Error(), "lm_head, q_proj, up_proj, v_proj") {
					t.Fatalf("got %v, want an error naming %s and listing the modules", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(names(got), tc.want) {
				t.Fatalf("got %v, %v; want %v", names(got), err, tc.want)
			}
		})
	}
	if _, err := Match(&Config{R: 0, TargetModules: Targets{List: []string{"q_proj"}}}, mods); !errors.Is(err, errs.ErrInvalidInput) {
		t.Errorf("r = 0: got %v", err)
	}
}
