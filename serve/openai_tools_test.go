package serve_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/serve"
)

// longContextFixture is the qwen2 fixture with a 1024-token context (its
// config.json rewritten; the other files linked): the tool definitions the
// server writes into the system prompt take more than the fixtures' 128
// tokens in their 384-token vocabulary.
func longContextFixture(t *testing.T) *llmFixture {
	t.Helper()
	src := loadLLMFixture(t, "qwen2")
	dir := filepath.Join(t.TempDir(), "qwen2")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "config.json" {
			continue
		}
		if err := os.Symlink(filepath.Join(src.dir, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(filepath.Join(src.dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["max_position_embeddings"] = 1024
	raw, _ = json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	f := *src
	f.dir = dir
	return &f
}

const weatherTools = `[{"type":"function","function":{"name":"weather","description":"the forecast","parameters":{"type":"object","properties":{"city":{"type":"string","minLength":1,"maxLength":8},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"],"additionalProperties":false}}},
 {"type":"function","function":{"name":"time_in","parameters":{"type":"object","properties":{"zone":{"enum":["UTC","CET"]}},"required":["zone"],"additionalProperties":false}}}]`

// checkToolArgs validates arguments against weatherTools' function name
// (independently of llm/grammar).
func checkToolArgs(name, args string) error {
	dec := json.NewDecoder(strings.NewReader(args))
	dec.DisallowUnknownFields()
	switch name {
	case "weather":
		var a struct {
			City *string `json:"city"`
			Days *int    `json:"days"`
		}
		if err := dec.Decode(&a); err != nil || a.City == nil || a.Days == nil {
			return fmt.Errorf("weather arguments %s: %v", args, err)
		}
		if n := len([]rune(*a.City)); n < 1 || n > 8 || *a.Days < 1 || *a.Days > 7 {
			return fmt.Errorf("weather arguments %s out of range", args)
		}
	case "time_in":
		var a struct {
			Zone *string `json:"zone"`
		}
		if err := dec.Decode(&a); err != nil || a.Zone == nil || (*a.Zone != "UTC" && *a.Zone != "CET") {
			return fmt.Errorf("time_in arguments %s: %v", args, err)
		}
	default:
		return fmt.Errorf("unknown function %q", name)
	}
	return nil
}

type toolAnswer struct {
	Choices []struct {
		Finish  string `json:"finish_reason"`
		Message struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
	} `json:"choices"`
	Usage oaiUsage `json:"usage"`
}

// TestOpenAIToolChoice: with tool_choice required or a named function, at
// temperature 1 from a random model, every answer is tool_calls of a
// declared function whose arguments validate against its parameters,
// with an id and finish_reason "tool_calls", whole and streamed (one
// delta with the whole call, then the finish). Injected fault: the
// constraint not set for required (applyTools returning early) gives
// answers without tool_calls.
func TestOpenAIToolChoice(t *testing.T) {
	f := longContextFixture(t)
	gs := startGen(t, f, serve.Options{})
	bias := whitespaceBias(t, f.dir)
	for _, choice := range []string{`"required"`, `{"type":"function","function":{"name":"time_in"}}`, `{"type":"function","function":{"name":"weather"}}`} {
		for seed := range 3 {
			body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"weather?"}],"max_tokens":80,"temperature":1,"seed":%d,"tools":%s,"tool_choice":%s%s`,
				gs.name, seed, weatherTools, choice, bias)
			var a toolAnswer
			decodeJSON(t, postJSON(t, gs.url+"/v1/chat/completions", body+"}"), 200, &a)
			c := a.Choices[0]
			if c.Finish != "tool_calls" || len(c.Message.ToolCalls) != 1 {
				t.Fatalf("%s seed %d: finish %s, %d calls (content %v)", choice, seed, c.Finish, len(c.Message.ToolCalls), c.Message.Content)
			}
			tc := c.Message.ToolCalls[0]
			if err := checkToolArgs(tc.Function.Name, tc.Function.Arguments); err != nil || !strings.HasPrefix(tc.ID, "call_") || tc.Type != "function" {
				t.Errorf("%s seed %d: %+v: %v", choice, seed, tc, err)
			}
			if strings.Contains(choice, "time_in") && tc.Function.Name != "time_in" {
				t.Errorf("named time_in, called %s", tc.Function.Name)
			}
			resp := postJSON(t, gs.url+"/v1/chat/completions", body+`,"stream":true}`)
			ev := sseEvents(t, resp.Body)
			resp.Body.Close()
			var name, args, finish string
			for _, e := range ev[:len(ev)-1] {
				var ch struct {
					Choices []struct {
						Finish *string `json:"finish_reason"`
						Delta  struct {
							ToolCalls []struct {
								Index    int `json:"index"`
								Function struct{ Name, Arguments string }
							} `json:"tool_calls"`
						} `json:"delta"`
					} `json:"choices"`
				}
				if err := json.Unmarshal([]byte(e), &ch); err != nil {
					t.Fatal(err)
				}
				for _, c := range ch.Choices {
					for _, d := range c.Delta.ToolCalls {
						name += d.Function.Name
						args += d.Function.Arguments
					}
					if c.Finish != nil {
						finish = *c.Finish
					}
				}
			}
			if name != tc.Function.Name || args != tc.Function.Arguments || finish != "tool_calls" {
				t.Errorf("%s seed %d streamed: %s(%s) finish %s; whole %s(%s)", choice, seed, name, args, finish, tc.Function.Name, tc.Function.Arguments)
			}
		}
	}
}

// TestOpenAIToolPrompt: tools are rendered (the fixture's template ignores
// them: the server's system prompt, so the prompt grows), tool_choice none
// does not render them, and a conversation with an assistant's tool_calls
// and a role "tool" result renders (its prompt longer than without them).
func TestOpenAIToolPrompt(t *testing.T) {
	f := longContextFixture(t)
	gs := startGen(t, f, serve.Options{})
	prompt := func(extra string, msgs string) int {
		var a toolAnswer
		decodeJSON(t, postJSON(t, gs.url+"/v1/chat/completions", fmt.Sprintf(`{"model":%q,"messages":%s,"max_tokens":1,"temperature":0%s}`, gs.name, msgs, extra)), 200, &a)
		return a.Usage.Prompt
	}
	user := `[{"role":"user","content":"weather?"}]`
	plain := prompt("", user)
	withTools := prompt(`,"tools":`+weatherTools, user)
	none := prompt(`,"tools":`+weatherTools+`,"tool_choice":"none"`, user)
	if withTools <= plain+50 || none != plain {
		t.Errorf("prompt tokens: plain %d, with tools %d (want much more), tool_choice none %d (want %d)", plain, withTools, none, plain)
	}
	conv := `[{"role":"user","content":"weather?"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Oslo\",\"days\":2}"}}]},{"role":"tool","tool_call_id":"call_1","content":"rain"}]`
	if n := prompt(`,"tools":`+weatherTools, conv); n <= withTools+10 {
		t.Errorf("conversation with a tool call and result: %d prompt tokens, the question alone %d", n, withTools)
	}
}

// TestOpenAIToolBadRequests: an invalid parameter schema, an unknown named
// function, tool_choice without tools, tools on completions, a bad
// tool_calls message: 400s naming the field.
func TestOpenAIToolBadRequests(t *testing.T) {
	f := loadLLMFixture(t, "qwen2")
	gs := startGen(t, f, serve.Options{})
	msgs := `"messages":[{"role":"user","content":"x"}]`
	for _, c := range []struct{ path, body, param, mention string }{
		{"/v1/chat/completions", msgs + `,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"string","format":"email"}}}}}]`, "tools", "format"},
		{"/v1/chat/completions", msgs + `,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"integer","minimum":3,"maximum":1}}}]`, "tools", "minimum"},
		{"/v1/chat/completions", msgs + `,"tools":[{"type":"function","function":{"name":"bad name"}}]`, "tools", "name"},
		{"/v1/chat/completions", msgs + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}`, "tool_choice", "g"},
		{"/v1/chat/completions", msgs + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"sometimes"`, "tool_choice", "sometimes"},
		{"/v1/chat/completions", msgs + `,"tool_choice":"required"`, "tool_choice", "tools"},
		{"/v1/chat/completions", msgs + `,"tools":{}`, "tools", "list"},
		{"/v1/completions", `"prompt":"x","tools":[{"type":"function","function":{"name":"f"}}]`, "tools", "chat"},
		{"/v1/chat/completions", `"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{not json"}}]}]`, "messages[0].tool_calls", "JSON"},
	} {
		body := fmt.Sprintf(`{"model":%q,%s}`, gs.name, c.body)
		e := oaiErrorBody(t, postJSON(t, gs.url+c.path, body), 400)
		if e.Param == nil || *e.Param != c.param || !strings.Contains(e.Message, c.mention) {
			t.Errorf("%s: error %+v, want param %s mentioning %q", c.body, e, c.param, c.mention)
		}
	}
}
