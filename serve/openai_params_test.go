package serve_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"github.com/tensorbridge/tensorbridge/llm/tokenizer"
	"github.com/tensorbridge/tensorbridge/serve"
)

// penaltyRefs reads the fixture's penalties.json (transformers' greedy ids
// under its logits processors, scripts/gen-llm-fixtures.py).
func penaltyRefs(t *testing.T, dir string) []struct {
	PromptIDs []int                      `json:"prompt_ids"`
	Settings  map[string]json.RawMessage `json:"settings"`
	TokenIDs  []int                      `json:"token_ids"`
} {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "penalties.json"))
	if err != nil {
		testreq.Skipf(t, "penalty references not installed (re-run scripts/setup-llm-fixtures.sh): %v", err)
	}
	var r struct {
		References []struct {
			PromptIDs []int                      `json:"prompt_ids"`
			Settings  map[string]json.RawMessage `json:"settings"`
			TokenIDs  []int                      `json:"token_ids"`
		} `json:"references"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return r.References
}

// oaiPenaltyFields turns transformers' settings into the request's
// fields: repetition_penalty as is, sequence_bias [[[id], v]...] as
// logit_bias, min_new_tokens as min_tokens.
func oaiPenaltyFields(t *testing.T, s map[string]json.RawMessage) string {
	t.Helper()
	var b strings.Builder
	if v, ok := s["repetition_penalty"]; ok {
		fmt.Fprintf(&b, `,"repetition_penalty":%s`, v)
	}
	if v, ok := s["min_new_tokens"]; ok {
		fmt.Fprintf(&b, `,"min_tokens":%s`, v)
	}
	if v, ok := s["sequence_bias"]; ok {
		var pairs [][2]json.RawMessage
		if err := json.Unmarshal(v, &pairs); err != nil {
			t.Fatal(err)
		}
		var kv []string
		for _, p := range pairs {
			kv = append(kv, fmt.Sprintf(`"%s":%s`, strings.Trim(string(p[0]), "[]"), p[1]))
		}
		fmt.Fprintf(&b, `,"logit_bias":{%s}`, strings.Join(kv, ","))
	}
	return b.String()
}

// TestOpenAIPenalties: repetition_penalty, logit_bias and min_tokens on
// /v1/completions, streamed and whole, give the text of transformers'
// greedy ids under the same logits processors (decoded by the
// checkpoint's tokenizer).
func TestOpenAIPenalties(t *testing.T) {
	f := loadLLMFixture(t, "qwen2")
	gs := startGen(t, f, serve.Options{})
	tok, err := tokenizer.Load(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	for i, ref := range penaltyRefs(t, f.dir) {
		ids, _ := json.Marshal(ref.PromptIDs)
		body := fmt.Sprintf(`{"model":%q,"prompt":%s,"max_tokens":24,"temperature":0%s`, gs.name, ids, oaiPenaltyFields(t, ref.Settings))
		want := tok.Decode(ref.TokenIDs, true)
		var c oaiChunk
		decodeJSON(t, postJSON(t, gs.url+"/v1/completions", body+"}"), 200, &c)
		if got := c.Choices[0].Text; got != want || c.Usage.Completion != len(ref.TokenIDs) {
			t.Errorf("case %d %s: got %q (%d tokens), transformers %q (%d)", i, body, got, c.Usage.Completion, want, len(ref.TokenIDs))
		}
		text, _, u := streamed(t, postJSON(t, gs.url+"/v1/completions", body+`,"stream":true,"stream_options":{"include_usage":true}}`))
		if text != want || u.Completion != len(ref.TokenIDs) {
			t.Errorf("case %d streamed: got %q (%d tokens), transformers %q", i, text, u.Completion, want)
		}
	}
}

// TestOpenAICheckpointRepetitionPenalty: a checkpoint whose
// generation_config.json sets repetition_penalty (Qwen2.5-Instruct ships
// 1.05) loads, and a request that sets none uses it: transformers' ids
// for that penalty; repetition_penalty 1 in the request turns it off
// (transformers' plain greedy ids).
func TestOpenAICheckpointRepetitionPenalty(t *testing.T) {
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
		if err := os.Symlink(filepath.Join(src.dir, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	_ = os.Remove(filepath.Join(dir, "generation_config.json"))
	if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"bos_token_id": 0, "eos_token_id": 1, "repetition_penalty": 1.3}`), 0o644); err != nil {
		t.Fatal(err)
	}
	f := *src
	f.dir = dir
	gs := startGen(t, &f, serve.Options{})
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ref13 []int
	var prompt []int
	for _, r := range penaltyRefs(t, dir) {
		if string(r.Settings["repetition_penalty"]) == "1.3" && len(r.Settings) == 1 {
			ref13, prompt = r.TokenIDs, r.PromptIDs
			break
		}
	}
	ids, _ := json.Marshal(prompt)
	for _, c := range []struct {
		extra string
		want  []int
	}{{"", ref13}, {`,"repetition_penalty":1`, src.refs[0].TokenIDs[:24]}} {
		var r oaiChunk
		decodeJSON(t, postJSON(t, gs.url+"/v1/completions", fmt.Sprintf(`{"model":"qwen2","prompt":%s,"max_tokens":24,"temperature":0%s}`, ids, c.extra)), 200, &r)
		if want := tok.Decode(c.want, true); r.Choices[0].Text != want {
			t.Errorf("extra %q: got %q, want %q", c.extra, r.Choices[0].Text, want)
		}
	}
}

// TestOpenAIStreamUsage: without stream_options a stream has no usage
// (no chunk with it, no "usage" key), as OpenAI streams; stream_options
// without stream is a 400 naming it; stop_token_ids end the sequence at
// that id with finish "stop".
func TestOpenAIStreamUsage(t *testing.T) {
	f := loadLLMFixture(t, "qwen2")
	gs := startGen(t, f, serve.Options{})
	ref := f.refs[0]
	resp := postJSON(t, gs.url+"/v1/chat/completions", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"stream":true}`, gs.name))
	ev := sseEvents(t, resp.Body)
	resp.Body.Close()
	if len(ev) < 2 || ev[len(ev)-1] != "[DONE]" {
		t.Fatalf("events %q", ev)
	}
	for _, e := range ev[:len(ev)-1] {
		var raw map[string]json.RawMessage
		if err := json.Unmarshal([]byte(e), &raw); err != nil {
			t.Fatal(err)
		}
		if _, ok := raw["usage"]; ok || string(raw["choices"]) == "[]" {
			t.Errorf("chunk with usage or without choices, not asked for: %s", e)
		}
	}
	e := oaiErrorBody(t, postJSON(t, gs.url+"/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":"x","stream_options":{"include_usage":true}}`, gs.name)), 400)
	if e.Param == nil || *e.Param != "stream_options" {
		t.Errorf("param %v, want stream_options", e.Param)
	}
	// The fifth greedy token as a stop id: four tokens and it.
	stopID := ref.TokenIDs[4]
	n := 0
	for n < 4 && ref.TokenIDs[n] != stopID {
		n++
	}
	var c oaiChunk
	decodeJSON(t, postJSON(t, gs.url+"/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":24,"temperature":0,"stop_token_ids":[%d]}`, gs.name, ref.Text, stopID)), 200, &c)
	if c.Usage.Completion != n+1 || *c.Choices[0].Finish != "stop" {
		t.Errorf("stop_token_ids [%d]: %d tokens, finish %s; want %d, stop", stopID, c.Usage.Completion, *c.Choices[0].Finish, n+1)
	}
}

// TestOpenAIPenaltyBadRequests: out-of-range penalties and token
// controls, and hostile sizes (n = 10^9, top_logprobs = 10^6, a million
// logit_bias entries, 200,000 stop_token_ids, schemas nested 70 and 100
// deep; a 10 MB schema is over the body limit: a 413), are 400s with OpenAI's
// error object naming the field, never a 500.
func TestOpenAIPenaltyBadRequests(t *testing.T) {
	f := loadLLMFixture(t, "qwen2")
	gs := startGen(t, f, serve.Options{})
	huge := func(n int, f func(i int) string) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = f(i)
		}
		return strings.Join(parts, ",")
	}
	cases := []struct {
		name, extra, param, mention string
	}{
		{"presence_penalty over 2", `"presence_penalty":2.5`, "presence_penalty", "[-2, 2]"},
		{"frequency_penalty under -2", `"frequency_penalty":-3`, "frequency_penalty", "[-2, 2]"},
		{"negative repetition_penalty", `"repetition_penalty":-1`, "repetition_penalty", "greater than 0"},
		{"zero repetition_penalty", `"repetition_penalty":0`, "repetition_penalty", "greater than 0"},
		{"logit_bias id outside the vocabulary", `"logit_bias":{"99999":1}`, "logit_bias", "vocabulary"},
		{"logit_bias negative id", `"logit_bias":{"-1":1}`, "logit_bias", "vocabulary"},
		{"logit_bias key not an id", `"logit_bias":{"abc":1}`, "logit_bias", "abc"},
		{"logit_bias over 100", `"logit_bias":{"5":100.5}`, "logit_bias", "[-100, 100]"},
		{"logit_bias 301 entries", `"logit_bias":{` + huge(301, func(i int) string { return fmt.Sprintf(`"%d":1`, i) }) + `}`, "logit_bias", "at most 300"},
		{"min_tokens negative", `"min_tokens":-1`, "min_tokens", "min_tokens"},
		{"min_tokens over max_tokens", `"min_tokens":9,"max_tokens":8`, "min_tokens", "[0, 8]"},
		{"stop_token_ids outside the vocabulary", `"stop_token_ids":[3,99999]`, "stop_token_ids", "vocabulary"},
		{"stop_token_ids 65", `"stop_token_ids":[` + huge(65, func(int) string { return "3" }) + `]`, "stop_token_ids", "at most 64"},
		{"n 10^9", `"n":1000000000`, "n", "n"},
		{"top_logprobs 10^6", `"top_logprobs":1000000`, "top_logprobs", "top_logprobs"},
		{"stop_token_ids 200000", `"stop_token_ids":[` + huge(200000, func(int) string { return "3" }) + `]`, "stop_token_ids", "at most 64"},
		// 20,000 keys: refused by the JSON shape limits before decoding
		// (a million are over the body limit: a 413, below).
		{"logit_bias 20000 entries", `"logit_bias":{` + huge(20000, func(i int) string { return fmt.Sprintf(`"%d":1`, i) }) + `}`, "", "keys"},
		// Structured output (openai_format_test.go has the rest).
		{"schema nested 100 deep", `"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":` +
			strings.Repeat(`{"type":"array","items":`, 100) + `true` + strings.Repeat(`}`, 100) + `}}`, "", "nested"},
		{"schema nested 70 deep", `"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":` +
			strings.Repeat(`{"type":"array","items":`, 70) + `true` + strings.Repeat(`}`, 70) + `}}`, "response_format", "64"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := oaiErrorBody(t, postJSON(t, gs.url+"/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":"x",%s}`, gs.name, c.extra)), 400)
			if !strings.Contains(e.Message, c.mention) {
				t.Errorf("error %+v does not mention %q", e, c.mention)
			}
			if c.param != "" && (e.Param == nil || *e.Param != c.param) {
				t.Errorf("param %v, want %s", e.Param, c.param)
			}
		})
	}
	t.Run("a 10 MB schema", func(t *testing.T) {
		body := fmt.Sprintf(`{"model":%q,"prompt":"x","response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"enum":[%s]}}}}`,
			gs.name, huge(1<<20, func(int) string { return `"abcdefgh"` }))
		if e := oaiErrorBody(t, postJSON(t, gs.url+"/v1/completions", body), http.StatusRequestEntityTooLarge); !strings.Contains(e.Message, "bytes") {
			t.Errorf("413 without the limit: %+v", e)
		}
	})
	t.Run("logit_bias 10^6 entries", func(t *testing.T) {
		body := fmt.Sprintf(`{"model":%q,"prompt":"x","logit_bias":{%s}}`, gs.name, huge(1000000, func(i int) string { return fmt.Sprintf(`"%d":1`, i) }))
		if e := oaiErrorBody(t, postJSON(t, gs.url+"/v1/completions", body), http.StatusRequestEntityTooLarge); !strings.Contains(e.Message, "bytes") {
			t.Errorf("413 without the limit: %+v", e)
		}
	})
}
