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
	data := make(map[string]any, len(ct.vars)+2)
	for k, v := range ct.vars {
		data[k] = v
	}
	msgs := make([]any, len(messages))
	for i, m := range messages {
		msgs[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	data["messages"] = msgs
	data["add_generation_prompt"] = addGenerationPrompt
	// transformers passes these as None when the caller gives none.
	data["tools"] = nil
	data["documents"] = nil
	return ct.tmpl.Render(data)
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
