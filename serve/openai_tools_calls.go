package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// The prompt of a chat with tools, and the tool calls of its answer
// (openai_tools.go).

// toolSystemPrompt introduces the tools when the chat template ignores
// them: their definitions one JSON object a line, and the call syntax the
// answer is parsed for (Hermes' <tool_call> blocks).
const toolSystemPrompt = "# Tools\n\nYou may call one or more functions. Their signatures, one JSON object a line:\n<tools>\n%s</tools>\n\n" +
	"To call a function, answer with a JSON object inside <tool_call></tool_call> tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <arguments-object>}\n</tool_call>"

// toolCall is one call: the function's name and its arguments (compact
// JSON text, as OpenAI sends them).
type toolCall struct {
	Name      string
	Arguments string
}

// hasToolFields reports whether a message carries tool_calls or is a tool
// result, which the plain rendering cannot carry.
func (q *oaiRequest) hasToolFields() bool {
	for _, m := range q.Messages {
		if m.Role == "tool" || len(bytes.TrimSpace(m.ToolCalls)) > 0 && string(bytes.TrimSpace(m.ToolCalls)) != "null" {
			return true
		}
	}
	return false
}

// toolPromptIDs renders a chat with tools or tool messages; ok is false
// when it has neither (the plain rendering applies).
func (q *oaiRequest) toolPromptIDs(g *generator) (ids []int, ok bool, err error) {
	if !q.plan.active() && !q.hasToolFields() {
		return nil, false, nil
	}
	msgs, err := q.toolMessages(false)
	if err != nil {
		return nil, true, err
	}
	var tools []byte
	if q.plan.active() {
		tools, _ = json.Marshal(q.plan.raw)
	}
	render := func(msgs []map[string]any, tools []byte) (string, error) {
		m, err := json.Marshal(msgs)
		if err != nil {
			return "", err
		}
		s, err := g.tok.ApplyChatTemplateTools(m, tools, true)
		if err != nil {
			return "", paramErr("messages", "%v", err)
		}
		return s, nil
	}
	with, err := render(msgs, tools)
	if err != nil {
		return nil, true, err
	}
	without, err := render(msgs, nil)
	if err != nil {
		return nil, true, err
	}
	if tools != nil && with == without { // the template ignores tools: the documented fallback
		if msgs, err = q.toolMessages(true); err != nil {
			return nil, true, err
		}
		if with, err = render(msgs, nil); err != nil {
			return nil, true, err
		}
	}
	ids, err = g.tok.Encode(with, false)
	return ids, true, err
}

// toolMessages is the conversation as the template takes it: role,
// content, and tool_calls (arguments as objects, as transformers'
// templates read them, their keys in the client's order), tool_call_id
// and name. fallback writes the tool
// definitions into the system prompt and the tool calls into the
// assistant messages' content, for a template that ignores tools.
func (q *oaiRequest) toolMessages(fallback bool) ([]map[string]any, error) {
	out := make([]map[string]any, 0, len(q.Messages)+1)
	for i, m := range q.Messages {
		text, err := m.text(i)
		if err != nil {
			return nil, err
		}
		msg := map[string]any{"role": m.Role, "content": text}
		if m.Name != "" {
			msg["name"] = m.Name
		}
		if m.ToolCallID != "" {
			msg["tool_call_id"] = m.ToolCallID
		}
		calls, err := m.calls(i)
		if err != nil {
			return nil, err
		}
		if len(calls) > 0 {
			if fallback {
				var b strings.Builder
				b.WriteString(text)
				for _, c := range calls {
					fn := c["function"].(map[string]any)
					j, _ := json.Marshal(map[string]any{"name": fn["name"], "arguments": fn["arguments"]})
					fmt.Fprintf(&b, "<tool_call>\n%s\n</tool_call>", j)
				}
				msg["content"] = b.String()
			} else {
				list := make([]any, len(calls))
				for k, c := range calls {
					list[k] = c
				}
				msg["tool_calls"] = list
			}
		}
		out = append(out, msg)
	}
	if fallback && q.plan.active() {
		var defs strings.Builder
		for _, t := range q.plan.raw {
			j, _ := json.Marshal(t)
			defs.Write(j)
			defs.WriteByte('\n')
		}
		sys := fmt.Sprintf(toolSystemPrompt, defs.String())
		if len(out) > 0 && out[0]["role"] == "system" {
			out[0]["content"] = out[0]["content"].(string) + "\n\n" + sys
		} else {
			out = append([]map[string]any{{"role": "system", "content": sys}}, out...)
		}
	}
	return out, nil
}

// calls reads an assistant message's tool_calls: each {id, type,
// function: {name, arguments}}, arguments a JSON text (OpenAI's) turned
// into its value.
func (m chatMessage) calls(i int) ([]map[string]any, error) {
	raw := bytes.TrimSpace(m.ToolCalls)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	field := fmt.Sprintf("messages[%d].tool_calls", i)
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, paramErr(field, "%s must be a list of {id, type: function, function: {name, arguments}}: %v", field, err)
	}
	out := make([]map[string]any, len(list))
	for k, c := range list {
		var buf bytes.Buffer
		if err := json.Compact(&buf, []byte(c.Function.Arguments)); err != nil {
			return nil, paramErr(field, "%s[%d].function.arguments is not a JSON text: %v", field, k, err)
		}
		args := json.RawMessage(buf.Bytes())
		out[k] = map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Function.Name, "arguments": args}}
	}
	return out, nil
}

// parseToolCalls finds the calls of declared functions in an answer: Qwen
// and Hermes' <tool_call>{"name", "arguments"}</tool_call> blocks
// (https://github.com/NousResearch/Hermes-Function-Calling), Mistral's
// [TOOL_CALLS] followed by a JSON list of {"name", "arguments"}, or a
// Llama 3.1 answer that is one JSON object {"name", "parameters"}
// (https://www.llama.com/docs/model-cards-and-prompt-formats/llama3_1/),
// optionally after <|python_tag|>. It returns the content left (the text
// outside the calls) and the calls; a block that does not parse, or names
// an undeclared function, leaves the text as it is.
func (p *toolPlan) parseToolCalls(text string) (string, []toolCall) {
	if content, calls := p.hermesCalls(text); len(calls) > 0 {
		return content, calls
	}
	if i := strings.Index(text, "[TOOL_CALLS]"); i >= 0 {
		var list []json.RawMessage
		if json.Unmarshal([]byte(strings.TrimSpace(text[i+len("[TOOL_CALLS]"):])), &list) == nil {
			if calls, ok := p.callsOf(list); ok {
				return strings.TrimSpace(text[:i]), calls
			}
		}
	}
	t := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(text), "<|python_tag|>"))
	if strings.HasPrefix(t, "{") {
		if calls, ok := p.callsOf([]json.RawMessage{json.RawMessage(t)}); ok {
			return "", calls
		}
	}
	return text, nil
}

// hermesCalls reads <tool_call> blocks (the last may lack its closing tag,
// cut by the end of sequence).
func (p *toolPlan) hermesCalls(text string) (string, []toolCall) {
	var content strings.Builder
	var calls []toolCall
	rest := text
	for {
		i := strings.Index(rest, "<tool_call>")
		if i < 0 {
			content.WriteString(rest)
			break
		}
		content.WriteString(rest[:i])
		body := rest[i+len("<tool_call>"):]
		j := strings.Index(body, "</tool_call>")
		next := ""
		if j >= 0 {
			body, next = body[:j], body[j+len("</tool_call>"):]
		}
		c, ok := p.callsOf([]json.RawMessage{json.RawMessage(strings.TrimSpace(body))})
		if !ok {
			return text, nil
		}
		calls = append(calls, c...)
		rest = next
	}
	return strings.TrimSpace(content.String()), calls
}

// callsOf reads JSON objects {"name", "arguments" or "parameters": an
// object} naming declared functions; ok is false if one does not.
func (p *toolPlan) callsOf(list []json.RawMessage) ([]toolCall, bool) {
	var calls []toolCall
	for _, raw := range list {
		var c struct {
			Name       string          `json:"name"`
			Arguments  json.RawMessage `json:"arguments"`
			Parameters json.RawMessage `json:"parameters"`
		}
		if json.Unmarshal(raw, &c) != nil || p.find(c.Name) == nil {
			return nil, false
		}
		args := c.Arguments
		if len(args) == 0 {
			args = c.Parameters
		}
		var buf bytes.Buffer
		if len(bytes.TrimSpace(args)) == 0 || json.Compact(&buf, args) != nil || !bytes.HasPrefix(buf.Bytes(), []byte("{")) {
			return nil, false
		}
		calls = append(calls, toolCall{Name: c.Name, Arguments: buf.String()})
	}
	return calls, len(calls) > 0
}

// answerCalls is the calls of a finished answer: the parsed syntax for
// auto, the constrained JSON for required and named.
func (p *toolPlan) answerCalls(text string) (string, []toolCall) {
	switch p.choice {
	case "named":
		var buf bytes.Buffer
		if json.Compact(&buf, []byte(text)) != nil {
			return text, nil // cut by max_tokens
		}
		return "", []toolCall{{Name: p.named, Arguments: buf.String()}}
	case "required":
		if calls, ok := p.callsOf([]json.RawMessage{json.RawMessage(text)}); ok {
			return "", calls
		}
		return text, nil
	}
	return p.parseToolCalls(text)
}

// toolCallsJSON is calls as OpenAI's tool_calls (streamed, with index).
func toolCallsJSON(calls []toolCall, stream bool) []any {
	out := make([]any, len(calls))
	for i, c := range calls {
		m := map[string]any{"id": newID("call_"), "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Arguments}}
		if stream {
			m["index"] = i
		}
		out[i] = m
	}
	return out
}

// toolMessage sets a whole answer's message from its text: tool_calls
// (content null when nothing else was said) and finish "tool_calls" when
// the answer has calls.
func (o *oaiOut) toolMessage(c map[string]any, text string) {
	if !o.tools.active() {
		return
	}
	content, calls := o.tools.answerCalls(text)
	if len(calls) == 0 {
		return
	}
	msg := map[string]any{"role": "assistant", "content": nil, "tool_calls": toolCallsJSON(calls, false)}
	if content != "" {
		msg["content"] = content
	}
	c["message"] = msg
	c["finish_reason"] = "tool_calls"
}

// toolStreamEvent holds a streamed answer with tools until it ends, then
// sends it as one delta (its tool calls, or its content) and the finish.
func (o *oaiOut) toolStreamEvent(ev genEvent) error {
	o.text.WriteString(ev.text)
	if ev.finish == "" {
		return nil
	}
	content, calls := o.tools.answerCalls(o.text.String())
	finish := ev.finish
	d := map[string]any{"role": "assistant", "content": content}
	if len(calls) > 0 {
		d["tool_calls"], finish = toolCallsJSON(calls, true), "tool_calls"
		if content == "" {
			d["content"] = nil
		}
	}
	o.roleSent = true
	c := map[string]any{"index": o.index, "delta": d, "logprobs": nil, "finish_reason": nil}
	if err := o.chunk([]any{c}, nil); err != nil {
		return err
	}
	return o.chunk([]any{map[string]any{"index": o.index, "delta": map[string]any{}, "logprobs": nil, "finish_reason": finish}}, nil)
}
