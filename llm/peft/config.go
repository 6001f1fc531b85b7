// Package peft reads, writes, initialises and merges LoRA adapters in the
// file format of Hugging Face PEFT.
//
// The format (https://huggingface.co/docs/peft/main/en/developer_guides/checkpoint)
// is a directory holding adapter_config.json (the LoraConfig's fields) and
// adapter_model.safetensors, with for each adapted linear module NAME of
// the base model (transformers' module path, e.g.
// model.layers.0.self_attn.q_proj) the tensors
//
//	base_model.model.NAME.lora_A.weight  [r, in]
//	base_model.model.NAME.lora_B.weight  [out, r]
//
// so that the module computes W x + Scale()·B (A x). Only plain LoRA is
// implemented; a config asking for anything else (DoRA, trained biases,
// modules_to_save, per-module rank or alpha patterns, fan_in_fan_out, ...)
// is refused with an errs.ErrUnsupported error naming the field, never
// silently read as something else.
//
// The package knows nothing of a model's graph: callers list the base
// model's linear modules (Module) and get back the targeted ones.
package peft

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/tensorbridge/tensorbridge/errs"
)

// File names inside an adapter directory, as PEFT names them.
const (
	ConfigFile  = "adapter_config.json"
	WeightsFile = "adapter_model.safetensors"
)

// maxConfigBytes bounds adapter_config.json (PEFT's are about 1 KB).
const maxConfigBytes = 1 << 20

// Config is a LoRA adapter's adapter_config.json: the fields this
// package reads and writes (PEFT 0.15.2's LoraConfig,
// https://huggingface.co/docs/peft/main/en/package_reference/lora).
type Config struct {
	PeftType      string  // "LORA"
	TaskType      string  // "" is JSON null (as get_peft_model on a bare model writes)
	BaseModel     string  // base_model_name_or_path
	R             int     // the rank r
	Alpha         float64 // lora_alpha
	Dropout       float64 // lora_dropout, on the module's input in training
	UseRSLoRA     bool    // use_rslora: scale alpha/sqrt(r) instead of alpha/r
	TargetModules Targets // target_modules
	// AutoMapping is "auto_mapping" as read (PEFT writes it for a bare
	// transformers model); it is written back unchanged, null when nil.
	AutoMapping json.RawMessage
}

// Targets is target_modules: a list of module names (each matches a
// module named exactly so or ending in "." + it) or, when Regex is set, a
// regular expression matched against the whole module name.
type Targets struct {
	List  []string
	Regex string
	IsRe  bool
}

// Scale is the factor of the adapter's product: alpha/r, or alpha/sqrt(r)
// with use_rslora (PEFT's LoraLayer.update_layer).
func (c *Config) Scale() float64 {
	if c.UseRSLoRA {
		return c.Alpha / math.Sqrt(float64(c.R))
	}
	return c.Alpha / float64(c.R)
}

// rawConfig holds every key ParseConfig looks at, undecoded.
type rawConfig map[string]json.RawMessage

// ParseConfig decodes adapter_config.json. file names it in errors. A
// field with the wrong JSON type or value is an errs.ErrInvalidInput
// error; a feature this package does not implement is errs.ErrUnsupported
// naming the field. Keys it does not know are ignored (later PEFT
// versions add fields whose default changes nothing).
func ParseConfig(file string, data []byte) (*Config, error) {
	if len(data) > maxConfigBytes {
		return nil, badField(file, "", fmt.Sprintf("at most %d bytes", maxConfigBytes), fmt.Sprintf("%d bytes", len(data)))
	}
	var raw rawConfig
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(&raw); err != nil || raw == nil {
		return nil, badField(file, "", "a JSON object", fmt.Sprintf("%.60q (%v)", data, err))
	}
	if err := raw.unsupported(file); err != nil {
		return nil, err
	}
	c := &Config{AutoMapping: raw["auto_mapping"]}
	if isNull(c.AutoMapping) {
		c.AutoMapping = nil
	}
	var err error
	if c.PeftType, err = raw.str(file, "peft_type", false); err != nil {
		return nil, err
	}
	if c.PeftType != "LORA" {
		return nil, unsupported(file, "peft_type", fmt.Sprintf("%q (only \"LORA\" adapters are implemented)", c.PeftType))
	}
	if c.TaskType, err = raw.str(file, "task_type", true); err != nil {
		return nil, err
	}
	if c.BaseModel, err = raw.str(file, "base_model_name_or_path", true); err != nil {
		return nil, err
	}
	if err := raw.numbers(file, c); err != nil {
		return nil, err
	}
	if c.UseRSLoRA, err = raw.boolean(file, "use_rslora"); err != nil {
		return nil, err
	}
	if c.TargetModules, err = raw.targets(file); err != nil {
		return nil, err
	}
	return c, c.Validate(file)
}

// Validate checks the values: r > 0, a finite alpha, dropout in [0, 1),
// at least one target, and a target regex Go can compile.
func (c *Config) Validate(file string) error {
	switch {
	case c.R <= 0:
		return badField(file, "r", "an integer > 0", strconv.Itoa(c.R))
	case math.IsNaN(c.Alpha) || math.IsInf(c.Alpha, 0):
		return badField(file, "lora_alpha", "a finite number", fmt.Sprint(c.Alpha))
	case !(c.Dropout >= 0 && c.Dropout < 1):
		return badField(file, "lora_dropout", "a number in [0, 1)", fmt.Sprint(c.Dropout))
	case !c.TargetModules.IsRe && len(c.TargetModules.List) == 0:
		return badField(file, "target_modules", "at least one module name", "none")
	}
	if c.TargetModules.IsRe {
		if _, err := c.TargetModules.compile(file); err != nil {
			return err
		}
	}
	return nil
}

// unsupported refuses the LoraConfig features not implemented, each only
// when its value is not one that means "off" (absent, null, false, an
// empty list, map or string; "none" for bias).
func (r rawConfig) unsupported(file string) error {
	checks := []struct{ key, why string }{
		{"use_dora", "DoRA adapters are not implemented"},
		{"bias", "trained biases are not implemented"},
		{"lora_bias", "a bias on lora_B is not implemented"},
		{"fan_in_fan_out", "Conv1D-style (fan_in_fan_out) weights are not implemented"},
		{"modules_to_save", "fully trained extra modules are not implemented"},
		{"rank_pattern", "per-module ranks are not implemented"},
		{"alpha_pattern", "per-module alphas are not implemented"},
		{"layers_to_transform", "choosing layers by index is not implemented"},
		{"layers_pattern", "choosing layers by index is not implemented"},
		{"exclude_modules", "excluded modules are not implemented"},
		{"layer_replication", "layer replication is not implemented"},
		{"trainable_token_indices", "trainable token rows are not implemented"},
	}
	for _, ch := range checks {
		v, ok := r[ch.key]
		if !ok {
			continue
		}
		switch c := compact(v); {
		case c == "null" || c == "false" || c == "[]" || c == "{}" || c == `""`:
		case c == `"none"` && ch.key == "bias":
		default:
			return unsupported(file, ch.key, fmt.Sprintf("%s (%s)", c, ch.why))
		}
	}
	return nil
}

// numbers decodes r, lora_alpha and lora_dropout.
func (r rawConfig) numbers(file string, c *Config) error {
	rank, err := r.number(file, "r", true)
	if err != nil {
		return err
	}
	if rank != math.Trunc(rank) || math.Abs(rank) > 1<<30 {
		return badField(file, "r", "an integer > 0", fmt.Sprint(rank))
	}
	c.R = int(rank)
	if c.Alpha, err = r.number(file, "lora_alpha", true); err != nil {
		return err
	}
	c.Dropout, err = r.number(file, "lora_dropout", false)
	return err
}

func (r rawConfig) number(file, key string, required bool) (float64, error) {
	v, ok := r[key]
	if !ok || isNull(v) {
		if required {
			return 0, badField(file, key, "a number", "nothing")
		}
		return 0, nil
	}
	var n json.Number // (which also takes a quoted number: refused)
	if err := json.Unmarshal(v, &n); err != nil || strings.HasPrefix(compact(v), `"`) {
		return 0, badField(file, key, "a number", compact(v))
	}
	f, err := n.Float64()
	if err != nil {
		return 0, badField(file, key, "a finite number", n.String())
	}
	return f, nil
}

func (r rawConfig) str(file, key string, nullable bool) (string, error) {
	v, ok := r[key]
	if !ok || isNull(v) {
		if nullable {
			return "", nil
		}
		return "", badField(file, key, "a string", "nothing")
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", badField(file, key, "a string", compact(v))
	}
	return s, nil
}

func (r rawConfig) boolean(file, key string) (bool, error) {
	v, ok := r[key]
	if !ok || isNull(v) {
		return false, nil
	}
	var b bool
	if err := json.Unmarshal(v, &b); err != nil {
		return false, badField(file, key, "true or false", compact(v))
	}
	return b, nil
}

// targets decodes target_modules: a list of strings or one string (a
// regex). "all-linear" is a PEFT shorthand resolved when the adapter is
// created; a file that still holds it is refused.
func (r rawConfig) targets(file string) (Targets, error) {
	v, ok := r["target_modules"]
	if !ok || isNull(v) {
		return Targets{}, badField(file, "target_modules", "a list of module names or a regex", "nothing")
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		if s == "all-linear" {
			return Targets{}, unsupported(file, "target_modules", `"all-linear" (list the modules)`)
		}
		return Targets{Regex: s, IsRe: true}, nil
	}
	var list []string
	if err := json.Unmarshal(v, &list); err != nil {
		return Targets{}, badField(file, "target_modules", "a list of strings or a string", compact(v))
	}
	return Targets{List: list}, nil
}

func isNull(v json.RawMessage) bool { return compact(v) == "null" }

// compact is v without insignificant white space, for comparing and
// quoting in errors (at most 80 bytes).
func compact(v json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return string(v)
	}
	if b.Len() > 80 {
		return b.String()[:77] + "..."
	}
	return b.String()
}

func badField(file, field, expected, got string) error {
	name := file
	if field != "" {
		name += ": " + field
	}
	return &errs.InputError{Name: name, Problem: "value", Expected: expected, Got: got}
}

func unsupported(file, field, detail string) error {
	return &errs.UnsupportedError{What: "adapter_config.json field", Name: field, Detail: file + ": " + detail}
}
