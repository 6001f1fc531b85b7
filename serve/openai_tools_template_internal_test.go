package serve

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"github.com/tensorbridge/tensorbridge/llm/tokenizer"
)

// TestToolTemplateAgainstTransformers: a chat template that renders tools
// gets them, and an assistant's tool_calls (OpenAI's arguments text turned
// into an object) and a tool result, exactly as transformers'
// apply_chat_template(messages, tools=...) renders and tokenizes them
// (testdata/tool_template.json, scripts/gen-tool-template-ref.py on the
// qwen2 fixture). Injected fault: arguments passed as OpenAI's JSON text
// (not turned into an object) makes the text differ (a quoted string).
func TestToolTemplateAgainstTransformers(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "tool_template.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Template string          `json:"template"`
		Tools    json.RawMessage `json:"tools"`
		Text     string          `json:"text"`
		IDs      []int           `json:"ids"`
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	home, _ := os.UserHomeDir()
	src := filepath.Join(home, ".cache", "tensorbridge", "llm-fixtures", "qwen2")
	if d := os.Getenv("TENSORBRIDGE_LLM_FIXTURES"); d != "" {
		src = filepath.Join(d, "qwen2")
	}
	tj, err := os.ReadFile(filepath.Join(src, "tokenizer.json"))
	if err != nil {
		testreq.Skipf(t, "LLM fixtures not installed (scripts/setup-llm-fixtures.sh): %v", err)
	}
	dir := t.TempDir()
	var cfg map[string]any
	cj, err := os.ReadFile(filepath.Join(src, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(cj, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["chat_template"] = ref.Template
	cj, _ = json.Marshal(cfg)
	for name, b := range map[string][]byte{"tokenizer.json": tj, "tokenizer_config.json": cj} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	g := &generator{tok: tok}
	q := &oaiRequest{}
	body := `{"messages":[{"role":"user","content":"weather in Oslo?"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"weather","arguments":"{\"city\": \"Oslo\", \"days\": 2}"}}]},
		{"role":"tool","tool_call_id":"call_1","content":"rain"}],"tools":` + string(ref.Tools) + `}`
	if err := json.Unmarshal([]byte(body), q); err != nil {
		t.Fatal(err)
	}
	if err := q.readTools(g, true); err != nil {
		t.Fatal(err)
	}
	msgs, err := q.toolMessages(false)
	if err != nil {
		t.Fatal(err)
	}
	mj, _ := json.Marshal(msgs)
	tools, _ := json.Marshal(q.plan.raw)
	text, err := tok.ApplyChatTemplateTools(mj, tools, true)
	if err != nil || text != ref.Text {
		t.Fatalf("text %q (%v),\ntransformers %q", text, err, ref.Text)
	}
	ids, ok, err := q.toolPromptIDs(g)
	if err != nil || !ok || !slices.Equal(ids, ref.IDs) {
		t.Errorf("ids %v (ok %v, %v), transformers %v", ids, ok, err, ref.IDs)
	}
}
