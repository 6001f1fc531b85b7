package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ardanlabs/jinja"
)

// ApplyChatTemplateTools renders a conversation given as JSON: messages, a
// list of OpenAI's message objects (role, content, and an assistant's
// tool_calls, arguments as objects, or a tool message's tool_call_id and
// name, as transformers' apply_chat_template takes them), and tools, the
// function definitions ({"type": "function", "function": {...}}), passed
// to the template as transformers passes them
// (https://huggingface.co/docs/transformers/main/en/chat_extras); nil
// tools is None. Objects keep their keys in the order of the JSON text, so
// that the template's tojson writes them as transformers does (Python
// dicts keep insertion order).
func (t *Tokenizer) ApplyChatTemplateTools(messages, tools []byte, addGenerationPrompt bool) (string, error) {
	if t.chat == nil {
		return "", ErrNoChatTemplate
	}
	msgs, err := jsonValue(messages)
	if err != nil || !msgs.IsList() {
		return "", fmt.Errorf("tokenizer: chat messages are not a JSON list: %v", err)
	}
	data := make(map[string]jinja.Value, len(t.chat.vars)+6)
	for k, v := range t.chat.vars {
		data[k] = jinja.FromGoValue(v)
	}
	data["messages"] = msgs
	data["add_generation_prompt"] = jinja.NewBool(addGenerationPrompt)
	data["tools"] = jinja.None()
	if tools != nil {
		if data["tools"], err = jsonValue(tools); err != nil {
			return "", fmt.Errorf("tokenizer: chat tools are not JSON: %v", err)
		}
	}
	data["documents"] = jinja.None()
	data["range"] = jinja.NewCallable("range", boundedRange)
	s, err := t.chat.tmpl.RenderValues(data)
	if err != nil {
		return "", fmt.Errorf("tokenizer: chat template: %s", strings.TrimSpace(err.Error()))
	}
	return s, nil
}

// jsonValue is a JSON text as a template value, objects' keys in order,
// integers as integers (as Python's json reads them).
func jsonValue(b []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := readValue(dec)
	if err == nil && dec.More() {
		err = fmt.Errorf("data after the JSON value")
	}
	return v, err
}

func readValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch x := tok.(type) {
	case json.Delim:
		if x == '[' {
			var items []jinja.Value
			for dec.More() {
				v, err := readValue(dec)
				if err != nil {
					return v, err
				}
				items = append(items, v)
			}
			_, err := dec.Token()
			return jinja.NewList(items), err
		}
		d := jinja.NewDict()
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return d, err
			}
			v, err := readValue(dec)
			if err != nil {
				return v, err
			}
			d.AsDict().Set(k.(string), v)
		}
		_, err := dec.Token()
		return d, err
	}
	return jinja.FromGoValue(tok), nil
}
