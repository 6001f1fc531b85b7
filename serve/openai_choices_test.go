package serve_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/llm/tokenizer"
	"github.com/tensorbridge/tensorbridge/serve"
)

// choicesAnswer is an answer's choices by index: text (completions) or
// message/delta content (chat), and finish reasons; and its usage.
type choicesAnswer struct {
	text   map[int]string
	finish map[int]string
	usage  *oaiUsage
}

// nChunk is a chunk or whole answer with each choice's index.
type nChunk struct {
	Choices []struct {
		Index   int     `json:"index"`
		Text    string  `json:"text"`
		Finish  *string `json:"finish_reason"`
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *oaiUsage `json:"usage"`
}

func (a *choicesAnswer) add(c nChunk) {
	for _, ch := range c.Choices {
		a.text[ch.Index] += ch.Text + ch.Message.Content + ch.Delta.Content
		if ch.Finish != nil {
			a.finish[ch.Index] = *ch.Finish
		}
	}
	if c.Usage != nil {
		a.usage = c.Usage
	}
}

// askChoices posts body whole or streamed (with the usage chunk) and
// gathers its choices.
func askChoices(t *testing.T, url, body string, stream bool) choicesAnswer {
	t.Helper()
	a := choicesAnswer{text: map[int]string{}, finish: map[int]string{}}
	if !stream {
		var c nChunk
		decodeJSON(t, postJSON(t, url, body+"}"), 200, &c)
		a.add(c)
		return a
	}
	resp := postJSON(t, url, body+`,"stream":true,"stream_options":{"include_usage":true}}`)
	defer resp.Body.Close()
	ev := sseEvents(t, resp.Body)
	if len(ev) == 0 || ev[len(ev)-1] != "[DONE]" {
		t.Fatalf("events %q", ev)
	}
	for _, e := range ev[:len(ev)-1] {
		var c nChunk
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Fatalf("%v: %s", err, e)
		}
		a.add(c)
	}
	return a
}

// TestOpenAIChoicesGreedy: n = 3 at temperature 0 on both endpoints,
// whole and streamed: choices 0, 1, 2, each transformers' greedy answer
// (completions: reference.json's ids decoded), usage counting the prompt
// once and every choice's tokens.
func TestOpenAIChoicesGreedy(t *testing.T) {
	f := loadLLMFixture(t, "qwen2")
	gs := startGen(t, f, serve.Options{})
	tok, err := tokenizer.Load(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	ref := f.refs[0]
	ids, _ := json.Marshal(ref.PromptID)
	want := tok.Decode(ref.TokenIDs, true)
	body := fmt.Sprintf(`{"model":%q,"prompt":%s,"max_tokens":%d,"temperature":0,"n":3`, gs.name, ids, len(ref.TokenIDs))
	chatBody := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],"max_tokens":6,"temperature":0,"n":3`, gs.name)
	var chatWant string
	for _, stream := range []bool{false, true} {
		a := askChoices(t, gs.url+"/v1/completions", body, stream)
		for i := range 3 {
			if a.text[i] != want {
				t.Errorf("stream %v choice %d: %q, transformers %q", stream, i, a.text[i], want)
			}
		}
		if len(a.text) != 3 || a.usage == nil || a.usage.Prompt != len(ref.PromptID) || a.usage.Completion != 3*len(ref.TokenIDs) {
			t.Errorf("stream %v: %d choices, usage %+v; want 3, prompt %d, completion %d", stream, len(a.text), a.usage, len(ref.PromptID), 3*len(ref.TokenIDs))
		}
		c := askChoices(t, gs.url+"/v1/chat/completions", chatBody, stream)
		if chatWant == "" {
			chatWant = c.text[0]
		}
		for i := range 3 {
			if c.text[i] != chatWant || c.finish[i] == "" {
				t.Errorf("chat stream %v choice %d: %q (finish %q), choice 0 whole %q", stream, i, c.text[i], c.finish[i], chatWant)
			}
		}
	}
}

// TestOpenAIChoicesSeeded: at temperature 1 with a seed, n choices are the
// same whole and streamed and on a second request, choice 0 is the n = 1
// answer with that seed, and they are not all equal.
func TestOpenAIChoicesSeeded(t *testing.T) {
	f := loadLLMFixture(t, "qwen2")
	gs := startGen(t, f, serve.Options{})
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],"max_tokens":10,"temperature":1,"seed":1234,"n":3`, gs.name)
	a := askChoices(t, gs.url+"/v1/chat/completions", body, false)
	b := askChoices(t, gs.url+"/v1/chat/completions", body, true)
	for i := range 3 {
		if a.text[i] != b.text[i] {
			t.Errorf("choice %d: whole %q, streamed %q", i, a.text[i], b.text[i])
		}
	}
	one := askChoices(t, gs.url+"/v1/chat/completions", strings.Replace(body, `"n":3`, `"n":1`, 1), false)
	if one.text[0] != a.text[0] {
		t.Errorf("n=1 %q, choice 0 of n=3 %q", one.text[0], a.text[0])
	}
	if a.text[0] == a.text[1] && a.text[1] == a.text[2] {
		t.Errorf("three choices at temperature 1 all equal: %q", a.text[0])
	}
}

// TestOpenAIChoicesBadRequests: n outside [1, limit] (the engine's 4
// sequences here) is a 400 naming n and the limit, on both endpoints;
// echo with logprobs takes n = 1.
func TestOpenAIChoicesBadRequests(t *testing.T) {
	f := loadLLMFixture(t, "qwen2")
	gs := startGen(t, f, serve.Options{})
	for _, c := range []struct {
		extra, mention string
		chat           bool
	}{
		{`"n":0`, "[1, 4]", true}, {`"n":-3`, "[1, 4]", true}, {`"n":5`, "[1, 4]", true}, {`"n":1000000000`, "[1, 4]", true},
		{`"n":2,"echo":true,"logprobs":2`, "echo", false},
	} {
		bodies := map[string]string{"/v1/completions": fmt.Sprintf(`{"model":%q,"prompt":"x",%s}`, gs.name, c.extra)}
		if c.chat {
			bodies["/v1/chat/completions"] = fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"x"}],%s}`, gs.name, c.extra)
		}
		for ep, body := range bodies {
			e := oaiErrorBody(t, postJSON(t, gs.url+ep, body), 400)
			if !strings.Contains(e.Message, c.mention) || e.Param == nil || *e.Param != "n" {
				t.Errorf("%s %s: error %+v, want param n mentioning %q", ep, c.extra, e, c.mention)
			}
		}
	}
}
