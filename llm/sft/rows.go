package sft

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/tensorbridge/tensorbridge/llm/tokenizer"
)

// roles are the message roles a conversation may use: the ones every chat
// template of the supported checkpoints renders.
var roles = []string{"system", "user", "assistant"}

// parseObject decodes one line as a JSON object, keeping its values raw.
func parseObject(b []byte) (map[string]json.RawMessage, *LineError) {
	var v json.RawMessage
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, &LineError{Problem: "not a JSON value", Err: err}
	}
	if k := kind(b); k != "object" {
		return nil, &LineError{Problem: "a JSON " + k + ", expected an object with \"text\", \"prompt\" and \"completion\", or \"messages\""}
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, &LineError{Problem: "not a JSON object", Err: err}
	}
	return obj, nil
}

// kind names a JSON value's type from its first byte.
func kind(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 'n':
		return "null"
	case 't', 'f':
		return "boolean"
	}
	return "number"
}

// shapeOf says which of TRL's shapes obj has: exactly one must be present.
func shapeOf(obj map[string]json.RawMessage) (string, *LineError) {
	var found []string
	for _, s := range [][]string{{"text"}, {"prompt", "completion"}, {"messages"}} {
		if slices.ContainsFunc(s, func(k string) bool { _, ok := obj[k]; return ok }) {
			found = append(found, s[0])
		}
	}
	if len(found) == 1 {
		return found[0], nil
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, fmt.Sprintf("%q", k))
	}
	slices.Sort(keys)
	what := "none of"
	if len(found) > 1 {
		what = "more than one of"
	}
	return "", &LineError{Problem: fmt.Sprintf(`%s the shapes {"text"}, {"prompt", "completion"}, {"messages"}: the object's keys are [%s]`,
		what, strings.Join(keys, ", "))}
}

// stringField returns obj[key], which must be a JSON string.
func stringField(obj map[string]json.RawMessage, key string) (string, *LineError) {
	raw, ok := obj[key]
	if !ok {
		return "", &LineError{Problem: fmt.Sprintf("%q is missing", key)}
	}
	var s string
	if kind(raw) != "string" || json.Unmarshal(raw, &s) != nil {
		return "", &LineError{Problem: fmt.Sprintf("%q must be a string, got a JSON %s", key, kind(raw))}
	}
	return s, nil
}

// encodeRow tokenizes one row by its shape (the package comment has the
// rules), before the cut to seqLen.
func encodeRow(tok *tokenizer.Tokenizer, obj map[string]json.RawMessage) (Example, *LineError) {
	shape, lerr := shapeOf(obj)
	if lerr != nil {
		return Example{}, lerr
	}
	switch shape {
	case "text":
		t, lerr := stringField(obj, "text")
		if lerr != nil {
			return Example{}, lerr
		}
		ids, err := tok.Encode(t, true)
		if err != nil {
			return Example{}, &LineError{Problem: "tokenizing \"text\"", Err: err}
		}
		return Example{IDs: ids, Targets: flags(len(ids), 0, len(ids))}, nil
	case "prompt":
		return encodePrompt(tok, obj)
	}
	msgs, lerr := parseMessages(obj["messages"])
	if lerr != nil {
		return Example{}, lerr
	}
	return encodeMessages(tok, msgs)
}

// flags returns n flags, true in [from, to).
func flags(n, from, to int) []bool {
	f := make([]bool, n)
	for i := from; i < to && i < n; i++ {
		f[i] = true
	}
	return f
}

func encodePrompt(tok *tokenizer.Tokenizer, obj map[string]json.RawMessage) (Example, *LineError) {
	p, lerr := stringField(obj, "prompt")
	if lerr != nil {
		return Example{}, lerr
	}
	c, lerr := stringField(obj, "completion")
	if lerr != nil {
		return Example{}, lerr
	}
	pids, err := tok.Encode(p, true)
	if err != nil {
		return Example{}, &LineError{Problem: "tokenizing \"prompt\"", Err: err}
	}
	ids, err := tok.Encode(p+c, true)
	if err != nil {
		return Example{}, &LineError{Problem: "tokenizing \"prompt\" + \"completion\"", Err: err}
	}
	return Example{IDs: ids, Targets: flags(len(ids), len(pids), len(ids))}, nil
}
