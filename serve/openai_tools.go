package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/tensorbridge/tensorbridge/llm"
	"github.com/tensorbridge/tensorbridge/llm/tokenizer"
)

// Tool calling on /v1/chat/completions (OpenAI's tools and tool_choice).
//
// The checkpoint's chat template renders the tools (transformers' tools
// variable) and the conversation's tool calls and tool results. When the
// template ignores tools (it renders the same text with and without
// them), the server writes their definitions into the system prompt
// (toolSystemPrompt, Hermes' format) and the earlier assistant tool calls
// into those messages' content as <tool_call> blocks.
//
// tool_choice "auto" (the default with tools): the answer is parsed for
// the model's tool-call syntax (parseToolCalls: Qwen/Hermes <tool_call>
// JSON, Mistral [TOOL_CALLS] and a Llama 3.1 JSON object), only calls of
// declared functions counting. "required": the answer is constrained to
// {"name": one of the functions, "arguments": its parameters}, "named"
// ({"type": "function", "function": {"name": ...}}): to the function's
// parameter schema (both by llm/grammar, so the arguments always
// validate). "none": the tools are not rendered and nothing is parsed.
// Whenever tool_calls is non-empty, finish_reason is "tool_calls".
// Streamed, an answer with tools is held until it ends, then sent as one
// delta (tool_calls with whole arguments, or the content) and the finish.

// oaiTools are the tool fields of a chat request, kept raw so that a
// wrong shape is a 400 naming them.
type oaiTools struct {
	Tools      json.RawMessage `json:"tools"`
	ToolChoice json.RawMessage `json:"tool_choice"`
	// ParallelToolCalls is accepted; the parsers return every call made.
	ParallelToolCalls *bool `json:"parallel_tool_calls"`
	plan              *toolPlan
}

// Limits of a request's tools.
const (
	maxTools        = 128
	maxToolNameLen  = 64
	toolCallIDBytes = 12
)

// toolNameRE is OpenAI's function name rule.
var toolNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// toolFunc is one declared function.
type toolFunc struct {
	Name   string
	Params []byte // compact JSON schema ({"type":"object"} when absent)
}

// toolPlan is a request's tools and what tool_choice asks of them.
type toolPlan struct {
	funcs  []toolFunc
	raw    []json.RawMessage // the tools as given (compact), for the template
	choice string            // "auto", "none", "required" or "named"
	named  string            // the function of "named"
}

// readTools reads tools and tool_choice (chat only); nil when there are no
// tools. A bad shape, name, or parameter schema is a 400 naming the field.
func (q *oaiRequest) readTools(g *generator, chat bool) error {
	has := func(r json.RawMessage) bool { r = bytes.TrimSpace(r); return len(r) > 0 && string(r) != "null" }
	if !chat && (has(q.Tools) || has(q.ToolChoice)) {
		return paramErr("tools", "tools and tool_choice are chat completions fields")
	}
	if !has(q.Tools) {
		if has(q.ToolChoice) && !bytes.Equal(bytes.TrimSpace(q.ToolChoice), []byte(`"none"`)) {
			return paramErr("tool_choice", "tool_choice needs tools")
		}
		return nil
	}
	var list []struct {
		Type     string `json:"type"`
		Function *struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal(q.Tools, &list); err != nil {
		return paramErr("tools", "tools must be a list of {\"type\": \"function\", \"function\": {...}}: %v", err)
	}
	var raw []json.RawMessage
	_ = json.Unmarshal(q.Tools, &raw)
	for i, r := range raw {
		var buf bytes.Buffer
		_ = json.Compact(&buf, r)
		raw[i] = buf.Bytes()
	}
	if len(list) == 0 || len(list) > maxTools {
		return paramErr("tools", "tools must hold 1 to %d functions, got %d", maxTools, len(list))
	}
	p := &toolPlan{raw: raw, choice: "auto"}
	for i, t := range list {
		if t.Type != "function" || t.Function == nil {
			return paramErr("tools", "tools[%d] must be {\"type\": \"function\", \"function\": {...}}", i)
		}
		if !toolNameRE.MatchString(t.Function.Name) {
			return paramErr("tools", "tools[%d].function.name %q must be 1 to %d letters, digits, _ or -", i, t.Function.Name, maxToolNameLen)
		}
		for _, f := range p.funcs {
			if f.Name == t.Function.Name {
				return paramErr("tools", "tools[%d]: a second function named %q", i, f.Name)
			}
		}
		params := []byte(`{"type":"object"}`)
		if s := bytes.TrimSpace(t.Function.Parameters); len(s) > 0 && string(s) != "null" {
			var buf bytes.Buffer
			if err := json.Compact(&buf, s); err != nil {
				return paramErr("tools", "tools[%d].function.parameters is not JSON: %v", i, err)
			}
			params = buf.Bytes()
		}
		if _, err := g.format.compiled(params); err != nil {
			return paramErr("tools", "tools[%d].function.parameters: %v", i, err)
		}
		p.funcs = append(p.funcs, toolFunc{Name: t.Function.Name, Params: params})
	}
	if err := p.readChoice(q.ToolChoice); err != nil {
		return err
	}
	if p.choice != "auto" && p.choice != "none" && len(bytes.TrimSpace(q.ResponseFormat)) > 0 && string(bytes.TrimSpace(q.ResponseFormat)) != "null" {
		return paramErr("tool_choice", "tool_choice %q constrains the answer; response_format cannot too", p.choice)
	}
	q.plan = p
	return nil
}

// readChoice reads tool_choice: "auto", "none", "required", or
// {"type": "function", "function": {"name": a declared function}}.
func (p *toolPlan) readChoice(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "auto", "none", "required":
			p.choice = s
			return nil
		}
		return paramErr("tool_choice", "tool_choice must be auto, none, required or {\"type\": \"function\", \"function\": {\"name\": ...}}, got %q", s)
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &named); err != nil || named.Type != "function" {
		return paramErr("tool_choice", "tool_choice must be auto, none, required or {\"type\": \"function\", \"function\": {\"name\": ...}}")
	}
	if p.find(named.Function.Name) == nil {
		return paramErr("tool_choice", "tool_choice names %q, which is not one of the tools", named.Function.Name)
	}
	p.choice, p.named = "named", named.Function.Name
	return nil
}

func (p *toolPlan) find(name string) *toolFunc {
	for i := range p.funcs {
		if p.funcs[i].Name == name {
			return &p.funcs[i]
		}
	}
	return nil
}

// active reports whether the answer is read for tool calls.
func (p *toolPlan) active() bool { return p != nil && p.choice != "none" }

// constraintSchema is the schema the answer is constrained to: the named
// function's parameters, or for required {"name", "arguments"} of one of
// the functions (nil for auto and none).
func (p *toolPlan) constraintSchema() []byte {
	switch p.choice {
	case "named":
		return p.find(p.named).Params
	case "required":
		alts := make([]string, len(p.funcs))
		for i, f := range p.funcs {
			name, _ := json.Marshal(f.Name)
			at := "#/properties/arguments"
			if len(p.funcs) > 1 {
				at = fmt.Sprintf("#/anyOf/%d/properties/arguments", i)
			}
			alts[i] = fmt.Sprintf(`{"type":"object","properties":{"name":{"const":%s},"arguments":%s},"required":["name","arguments"],"additionalProperties":false}`, name, rebaseRefs(f.Params, at))
		}
		if len(alts) == 1 {
			return []byte(alts[0])
		}
		return []byte(`{"anyOf":[` + strings.Join(alts, ",") + `]}`)
	}
	return nil
}

// applyTools constrains r for required and named tool_choice, and keeps
// the special tokens of the tool-call syntaxes in the text for auto.
func (q *oaiRequest) applyTools(g *generator, r *llm.Request) error {
	p := q.plan
	if !p.active() {
		return nil
	}
	if s := p.constraintSchema(); s != nil {
		return constrainRequest(g, r, s, "tools")
	}
	keep := map[int]bool{}
	for _, s := range []string{"<tool_call>", "</tool_call>", "[TOOL_CALLS]", "<|python_tag|>"} {
		if id, ok := g.tok.TokenID(s); ok {
			keep[id] = true
		}
	}
	r.NewDetokenizer = func() llm.Detokenizer { return &keepSpecialDecoder{tok: g.tok, keep: keep, d: g.tok.NewDecoder(false)} }
	return nil
}

// keepSpecialDecoder is the tokenizer's stream decoder that drops special
// tokens except those in keep (the tool-call markers).
type keepSpecialDecoder struct {
	tok  *tokenizer.Tokenizer
	keep map[int]bool
	d    *tokenizer.StreamDecoder
}

func (k *keepSpecialDecoder) Add(id int) string {
	if k.tok.IsSpecial(id) && !k.keep[id] {
		return ""
	}
	return k.d.Add(id)
}

func (k *keepSpecialDecoder) Flush() string { return k.d.Flush() }

// rebaseRefs rewrites the schema's local $ref pointers ("#..."), written
// against its own root, against at, where it is nested in a larger
// schema. A schema that does not parse is returned as it is (it compiled
// alone, so it parses).
func rebaseRefs(schema []byte, at string) []byte {
	if !bytes.Contains(schema, []byte(`"$ref"`)) {
		return schema // as it is: marshalling a map would reorder the properties
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(schema))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return schema
	}
	var walk func(x any)
	walk = func(x any) {
		switch t := x.(type) {
		case map[string]any:
			for k, c := range t {
				if r, ok := c.(string); ok && k == "$ref" && strings.HasPrefix(r, "#") {
					t[k] = at + r[1:]
					continue
				}
				walk(c)
			}
		case []any:
			for _, c := range t {
				walk(c)
			}
		}
	}
	walk(v)
	out, err := json.Marshal(v)
	if err != nil {
		return schema
	}
	return out
}
