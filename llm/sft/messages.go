package sft

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/tensorbridge/tensorbridge/llm/tokenizer"
)

// parseMessages checks a "messages" value: a non-empty array of objects
// with exactly "role" (system, user or assistant) and "content" (a
// string), starting with a system or user message and with at least one
// assistant message to train on.
func parseMessages(raw json.RawMessage) ([]tokenizer.Message, *LineError) {
	var items []json.RawMessage
	if kind(raw) != "array" || json.Unmarshal(raw, &items) != nil || len(items) == 0 {
		return nil, &LineError{Problem: fmt.Sprintf(`"messages" must be a non-empty array of {"role", "content"} objects, got a JSON %s`, kind(raw))}
	}
	msgs := make([]tokenizer.Message, len(items))
	for i, it := range items {
		m, lerr := parseMessage(i, it)
		if lerr != nil {
			return nil, lerr
		}
		msgs[i] = m
	}
	if msgs[0].Role == "assistant" {
		return nil, &LineError{Problem: "messages[0] is an assistant message: a conversation starts with a system or user message"}
	}
	if !slices.ContainsFunc(msgs, func(m tokenizer.Message) bool { return m.Role == "assistant" }) {
		return nil, &LineError{Problem: "no assistant message: nothing to train on"}
	}
	return msgs, nil
}

func parseMessage(i int, raw json.RawMessage) (tokenizer.Message, *LineError) {
	var obj map[string]json.RawMessage
	if kind(raw) != "object" || json.Unmarshal(raw, &obj) != nil {
		return tokenizer.Message{}, &LineError{Problem: fmt.Sprintf("messages[%d] must be an object, got a JSON %s", i, kind(raw))}
	}
	for k := range obj {
		if k != "role" && k != "content" {
			return tokenizer.Message{}, &LineError{Problem: fmt.Sprintf(`messages[%d] has key %q: only "role" and "content" are supported`, i, k)}
		}
	}
	role, lerr := stringField(obj, "role")
	if lerr == nil && !slices.Contains(roles, role) {
		lerr = &LineError{Problem: fmt.Sprintf("role %q is not one of %q", role, roles)}
	}
	if lerr != nil {
		return tokenizer.Message{}, &LineError{Problem: fmt.Sprintf("messages[%d]: %s", i, lerr.Problem)}
	}
	content, lerr := stringField(obj, "content")
	if lerr != nil {
		return tokenizer.Message{}, &LineError{Problem: fmt.Sprintf("messages[%d]: %s", i, lerr.Problem)}
	}
	return tokenizer.Message{Role: role, Content: content}, nil
}

// encodeMessages renders and tokenizes a conversation and marks each
// assistant message's span (package comment), checking in token space that
// both of its boundaries are prefixes of the whole.
func encodeMessages(tok *tokenizer.Tokenizer, msgs []tokenizer.Message) (Example, *LineError) {
	ids, err := tok.EncodeChat(msgs, false)
	if err != nil {
		return Example{}, &LineError{Problem: "rendering the chat template", Err: err}
	}
	targets := make([]bool, len(ids))
	for i, m := range msgs {
		if m.Role != "assistant" {
			continue
		}
		start, err := tok.EncodeChat(msgs[:i], true)
		if err != nil {
			return Example{}, &LineError{Problem: fmt.Sprintf("rendering the chat template for messages[:%d]", i), Err: err}
		}
		end, err := tok.EncodeChat(msgs[:i+1], false)
		if err != nil {
			return Example{}, &LineError{Problem: fmt.Sprintf("rendering the chat template for messages[:%d]", i+1), Err: err}
		}
		for _, b := range []struct {
			name string
			ids  []int
		}{{"start", start}, {"end", end}} {
			if len(b.ids) > len(ids) || !slices.Equal(b.ids, ids[:len(b.ids)]) {
				return Example{}, &LineError{Problem: "assistant message's target span", Err: &PrefixError{Message: i, Boundary: b.name}}
			}
		}
		for t := len(start); t < len(end); t++ {
			targets[t] = true
		}
	}
	return Example{IDs: ids, Targets: targets}, nil
}
