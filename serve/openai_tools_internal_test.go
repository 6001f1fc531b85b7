package serve

import (
	"slices"
	"testing"
)

func weatherPlan() *toolPlan {
	return &toolPlan{choice: "auto", funcs: []toolFunc{{Name: "weather", Params: []byte(`{"type":"object"}`)}, {Name: "time_in", Params: []byte(`{"type":"object"}`)}}}
}

// TestParseToolCalls: the three syntaxes, as their model cards write them
// (expected calls written by hand), and what is left as text.
func TestParseToolCalls(t *testing.T) {
	p := weatherPlan()
	for _, c := range []struct {
		name, text, content string
		calls               []toolCall
	}{
		{"hermes", "Let me check.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 2}}\n</tool_call>",
			"Let me check.", []toolCall{{"weather", `{"city":"Oslo","days":2}`}}},
		{"hermes two, the last unclosed", "<tool_call>{\"name\":\"time_in\",\"arguments\":{\"zone\":\"UTC\"}}</tool_call>\n<tool_call>{\"name\":\"weather\",\"arguments\":{}}",
			"", []toolCall{{"time_in", `{"zone":"UTC"}`}, {"weather", `{}`}}},
		{"mistral", "[TOOL_CALLS] [{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}]", "", []toolCall{{"weather", `{"city":"Paris"}`}}},
		{"llama 3.1", "<|python_tag|>{\"name\": \"time_in\", \"parameters\": {\"zone\": \"CET\"}}", "", []toolCall{{"time_in", `{"zone":"CET"}`}}},
		{"llama 3.1 bare", " {\"name\": \"weather\", \"parameters\": {\"days\": 1}} ", "", []toolCall{{"weather", `{"days":1}`}}},
		{"undeclared function", "<tool_call>{\"name\":\"rm\",\"arguments\":{}}</tool_call>", "<tool_call>{\"name\":\"rm\",\"arguments\":{}}</tool_call>", nil},
		{"bad JSON", "<tool_call>{\"name\":\"weather\",</tool_call>", "<tool_call>{\"name\":\"weather\",</tool_call>", nil},
		{"arguments not an object", "{\"name\":\"weather\",\"arguments\":[1]}", "{\"name\":\"weather\",\"arguments\":[1]}", nil},
		{"plain text", "It is sunny.", "It is sunny.", nil},
	} {
		content, calls := p.parseToolCalls(c.text)
		if content != c.content || !slices.Equal(calls, c.calls) {
			t.Errorf("%s: got %q %v, want %q %v", c.name, content, calls, c.content, c.calls)
		}
	}
}

// FuzzParseToolCalls: any model output parses without a panic, into calls
// of declared functions with object arguments, or into itself.
func FuzzParseToolCalls(f *testing.F) {
	for _, s := range []string{"<tool_call>{\"name\":\"weather\",\"arguments\":{}}</tool_call>", "[TOOL_CALLS] [{\"name\":\"time_in\",\"arguments\":{\"a\":1}}]",
		"<|python_tag|>{\"name\":\"weather\",\"parameters\":{}}", "<tool_call><tool_call></tool_call>", "[TOOL_CALLS]", "{"} {
		f.Add(s)
	}
	p := weatherPlan()
	f.Fuzz(func(t *testing.T, text string) {
		content, calls := p.parseToolCalls(text)
		if len(calls) == 0 && content != text {
			t.Fatalf("no calls, but the content %q is not the text %q", content, text)
		}
		for _, c := range calls {
			if p.find(c.Name) == nil || len(c.Arguments) < 2 || c.Arguments[0] != '{' {
				t.Fatalf("call %+v of %q", c, text)
			}
		}
	})
}

// TestRequiredSchemaRefs: under tool_choice required, parameters with
// $ref pointers (as Pydantic writes nested models) compile nested in the
// combined schema, for one function and for two, and the combined
// schema accepts a call written by hand and refuses a bad one.
func TestRequiredSchemaRefs(t *testing.T) {
	params := []byte(`{"type":"object","properties":{"p":{"$ref":"#/$defs/Point"}},"required":["p"],"additionalProperties":false,"$defs":{"Point":{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"],"additionalProperties":false}}}`)
	for _, funcs := range [][]toolFunc{{{Name: "f", Params: params}}, {{Name: "g", Params: []byte(`{"type":"object"}`)}, {Name: "f", Params: params}}} {
		p := &toolPlan{choice: "required", funcs: funcs}
		gr, err := (&formatState{}).compiled(p.constraintSchema())
		if err != nil {
			t.Fatalf("%d functions: %v", len(funcs), err)
		}
		if !gr.Accepts([]byte(`{"name":"f","arguments":{"p":{"x":3}}}`)) || gr.Accepts([]byte(`{"name":"f","arguments":{"p":{"y":3}}}`)) {
			t.Errorf("%d functions: the combined schema does not follow $ref", len(funcs))
		}
	}
}
