package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ardanlabs/jinja"
)

// config is what this package reads from tokenizer_config.json.
type config struct {
	BOS, EOS, UNK, PAD   *string
	AddBOS, AddEOS       *bool
	Cleanup              bool
	Class                string
	ChatTemplate         string
	AddedTokensDecoder   map[string]addedToken
	hasChatTemplateField bool
	// Specials are the special tokens the config declares, in transformers'
	// SPECIAL_TOKENS_ATTRIBUTES order; transformers adds any of them that
	// tokenizer.json lacks as special added tokens.
	Specials []string
}

// specialNames are the special token strings a chat template may use.
type specialNames struct {
	bos, eos, unk, pad *string
}

func configErr(field, format string, args ...any) error {
	return &FormatError{File: "tokenizer_config.json", Field: field, Detail: fmt.Sprintf(format, args...)}
}

// tokenField reads a special token given as a string or as an AddedToken
// object ({"content": ...}); null means none.
func tokenField(raw json.RawMessage, field string) (*string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return &s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return nil, configErr(field, "want a string or an object with content")
	}
	return obj.Content, nil
}

func parseConfig(b []byte) (config, error) {
	var c config
	if b == nil {
		return c, nil
	}
	var raw struct {
		BOS                json.RawMessage       `json:"bos_token"`
		EOS                json.RawMessage       `json:"eos_token"`
		UNK                json.RawMessage       `json:"unk_token"`
		PAD                json.RawMessage       `json:"pad_token"`
		AddBOS             *bool                 `json:"add_bos_token"`
		AddEOS             *bool                 `json:"add_eos_token"`
		Cleanup            *bool                 `json:"clean_up_tokenization_spaces"`
		Class              string                `json:"tokenizer_class"`
		ChatTemplate       json.RawMessage       `json:"chat_template"`
		AddedTokensDecoder map[string]addedToken `json:"added_tokens_decoder"`
		SEP                json.RawMessage       `json:"sep_token"`
		CLS                json.RawMessage       `json:"cls_token"`
		Mask               json.RawMessage       `json:"mask_token"`
		Additional         []json.RawMessage     `json:"additional_special_tokens"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return c, &FormatError{File: "tokenizer_config.json", Detail: "not a JSON object of the expected shape", Err: err}
	}
	var err error
	if c.BOS, err = tokenField(raw.BOS, "bos_token"); err != nil {
		return c, err
	}
	if c.EOS, err = tokenField(raw.EOS, "eos_token"); err != nil {
		return c, err
	}
	if c.UNK, err = tokenField(raw.UNK, "unk_token"); err != nil {
		return c, err
	}
	if c.PAD, err = tokenField(raw.PAD, "pad_token"); err != nil {
		return c, err
	}
	named := []struct {
		raw   json.RawMessage
		field string
	}{{raw.BOS, "bos_token"}, {raw.EOS, "eos_token"}, {raw.UNK, "unk_token"}, {raw.SEP, "sep_token"},
		{raw.PAD, "pad_token"}, {raw.CLS, "cls_token"}, {raw.Mask, "mask_token"}}
	for i, a := range raw.Additional {
		named = append(named, struct {
			raw   json.RawMessage
			field string
		}{a, fmt.Sprintf("additional_special_tokens[%d]", i)})
	}
	for _, n := range named {
		s, err := tokenField(n.raw, n.field)
		if err != nil {
			return c, err
		}
		if s != nil && *s != "" {
			c.Specials = append(c.Specials, *s)
		}
	}
	c.AddBOS, c.AddEOS, c.Class, c.AddedTokensDecoder = raw.AddBOS, raw.AddEOS, raw.Class, raw.AddedTokensDecoder
	c.Cleanup = raw.Cleanup != nil && *raw.Cleanup
	if !isNull(raw.ChatTemplate) {
		c.hasChatTemplateField = true
		var s string
		if json.Unmarshal(raw.ChatTemplate, &s) == nil {
			c.ChatTemplate = s
		} else {
			// The older list form: [{"name": "default", "template": ...}, ...].
			var named []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err := json.Unmarshal(raw.ChatTemplate, &named); err != nil {
				return c, configErr("chat_template", "want a string or a list of {name, template}")
			}
			for _, n := range named {
				if n.Name == "default" {
					c.ChatTemplate = n.Template
				}
			}
			if c.ChatTemplate == "" {
				return c, configErr("chat_template", "no template named default")
			}
		}
	}
	return c, nil
}

// postProcessorClasses are the transformers tokenizer classes whose
// constructor rebuilds the post-processor from add_bos_token/add_eos_token
// (update_post_processor), with their defaults.
var postProcessorClasses = map[string][2]bool{
	"LlamaTokenizer": {true, false}, "LlamaTokenizerFast": {true, false},
	"CodeLlamaTokenizer": {true, false}, "CodeLlamaTokenizerFast": {true, false},
	"GemmaTokenizer": {true, false}, "GemmaTokenizerFast": {true, false},
	"CohereTokenizer": {true, false}, "CohereTokenizerFast": {true, false},
	"GPTNeoXTokenizer": {false, false}, "GPTNeoXTokenizerFast": {false, false},
}

func (t *Tokenizer) applyConfig(c config, templateFile []byte) error {
	t.tokens = specialNames{bos: c.BOS, eos: c.EOS, unk: c.UNK, pad: c.PAD}
	t.cleanup = c.Cleanup
	if c.BOS != nil {
		id, ok := t.TokenID(*c.BOS)
		if !ok {
			return configErr("bos_token", "%q is not in the vocabulary", *c.BOS)
		}
		t.bos = id
	}
	if c.EOS != nil {
		id, ok := t.TokenID(*c.EOS)
		if !ok {
			return configErr("eos_token", "%q is not in the vocabulary", *c.EOS)
		}
		t.eos = []int{id}
	}
	if defaults, ok := postProcessorClasses[c.Class]; ok {
		addBOS, addEOS := defaults[0], defaults[1]
		if c.AddBOS != nil {
			addBOS = *c.AddBOS
		}
		if c.AddEOS != nil {
			addEOS = *c.AddEOS
		}
		p := &postProcessor{}
		if addBOS {
			if t.bos < 0 {
				return configErr("add_bos_token", "true but there is no bos_token")
			}
			p.prefix = []int{t.bos}
		}
		if addEOS {
			if len(t.eos) == 0 {
				return configErr("add_eos_token", "true but there is no eos_token")
			}
			p.suffix = []int{t.eos[0]}
		}
		t.post = p
	}
	src := c.ChatTemplate
	if templateFile != nil {
		src = string(templateFile)
	}
	if src != "" {
		ct, err := compileChat(src, t.tokens)
		if err != nil {
			return err
		}
		t.chat = ct
	}
	return nil
}

// chatTemplate is a compiled chat template with the special-token variables
// it renders with.
type chatTemplate struct {
	tmpl *jinja.Template
	vars map[string]any
}

// probe is rendered at load so that a template this Jinja implementation
// cannot run fails then, not on the first request.
var probe = []Message{{Role: "user", Content: "Hello"}}

func compileChat(src string, names specialNames) (*chatTemplate, error) {
	tmpl, err := jinja.Compile(src)
	if err != nil {
		return nil, &UnsupportedError{Component: "chat_template", Type: "jinja", Detail: err.Error()}
	}
	vars := map[string]any{}
	for k, v := range map[string]*string{"bos_token": names.bos, "eos_token": names.eos, "unk_token": names.unk, "pad_token": names.pad} {
		if v != nil {
			vars[k] = *v
		}
	}
	ct := &chatTemplate{tmpl: tmpl, vars: vars}
	if _, err := ct.render(probe, true); err != nil {
		return nil, &UnsupportedError{Component: "chat_template", Type: "jinja",
			Detail: "rendering a one-message user conversation failed: " + err.Error()}
	}
	return ct, nil
}

func (ct *chatTemplate) render(messages []Message, addGenerationPrompt bool) (string, error) {
	data := make(map[string]jinja.Value, len(ct.vars)+6)
	for k, v := range ct.vars {
		data[k] = jinja.FromGoValue(v)
	}
	msgs := make([]any, len(messages))
	for i, m := range messages {
		msgs[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	data["messages"] = jinja.FromGoValue(msgs)
	data["add_generation_prompt"] = jinja.NewBool(addGenerationPrompt)
	// transformers passes these as None when the caller gives none.
	data["tools"] = jinja.None()
	data["documents"] = jinja.None()
	data["range"] = jinja.NewCallable("range", boundedRange)
	return ct.tmpl.RenderValues(data)
}

// maxRange is Jinja2's sandbox MAX_RANGE: transformers renders templates in
// an ImmutableSandboxedEnvironment, whose range() refuses more items
// (https://github.com/pallets/jinja/blob/main/src/jinja2/sandbox.py). The
// library's own range has no bound, so a template could allocate without
// limit at load.
const maxRange = 100000

// boundedRange is Python's range with Jinja2's sandbox bound.
func boundedRange(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	n := make([]int64, len(args))
	for i, a := range args {
		if !a.IsInt() {
			return jinja.Undefined(), fmt.Errorf("range: argument %d is not an integer", i+1)
		}
		n[i] = a.AsInt()
	}
	start, stop, step := int64(0), int64(0), int64(1)
	switch len(n) {
	case 1:
		stop = n[0]
	case 2:
		start, stop = n[0], n[1]
	case 3:
		start, stop, step = n[0], n[1], n[2]
	default:
		return jinja.Undefined(), fmt.Errorf("range: expected 1 to 3 arguments, got %d", len(n))
	}
	if step == 0 {
		return jinja.Undefined(), fmt.Errorf("range: step must not be zero")
	}
	var count int64
	switch {
	case step > 0 && stop > start:
		count = (stop - start + step - 1) / step
	case step < 0 && stop < start:
		count = (start - stop - step - 1) / -step
	}
	if count > maxRange || count < 0 {
		return jinja.Undefined(), fmt.Errorf("range: %d items is more than the %d a sandboxed template may make", count, maxRange)
	}
	items := make([]jinja.Value, count)
	for i := range items {
		items[i] = jinja.NewInt(start + int64(i)*step)
	}
	return jinja.NewList(items), nil
}

// ErrNoChatTemplate is returned by ApplyChatTemplate when the checkpoint has
// no chat template.
var ErrNoChatTemplate = fmt.Errorf("tokenizer: no chat template in tokenizer_config.json or chat_template.jinja")

// ApplyChatTemplate renders messages with the checkpoint's chat template, as
// transformers' apply_chat_template(messages, tokenize=False,
// add_generation_prompt=...) does. The template's raise_exception is an error.
func (t *Tokenizer) ApplyChatTemplate(messages []Message, addGenerationPrompt bool) (string, error) {
	if t.chat == nil {
		return "", ErrNoChatTemplate
	}
	s, err := t.chat.render(messages, addGenerationPrompt)
	if err != nil {
		return "", fmt.Errorf("tokenizer: chat template: %s", strings.TrimSpace(err.Error()))
	}
	return s, nil
}

// HasChatTemplate reports whether the checkpoint has a chat template.
func (t *Tokenizer) HasChatTemplate() bool { return t.chat != nil }

// EncodeChat renders messages with the chat template and encodes the result
// without the post-processor's special tokens, as transformers'
// apply_chat_template(messages, tokenize=True, add_generation_prompt=...)
// does: the template writes its own BOS, so adding one would double it.
func (t *Tokenizer) EncodeChat(messages []Message, addGenerationPrompt bool) ([]int, error) {
	s, err := t.ApplyChatTemplate(messages, addGenerationPrompt)
	if err != nil {
		return nil, err
	}
	return t.Encode(s, false)
}
