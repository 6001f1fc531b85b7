package serve_test

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tensorbridge/tensorbridge/llm/tokenizer"
	"github.com/tensorbridge/tensorbridge/serve"
)

// formatSchema is a mid-size schema: a nested object, an array of enum
// strings, bounded strings, integers and numbers, a boolean, an anyOf,
// additionalProperties false. Sizes are kept small for the fixtures'
// 128-token context.
const formatSchema = `{"type":"object","properties":{
 "name":{"type":"string","minLength":1,"maxLength":6},
 "age":{"type":"integer","minimum":0,"maximum":120},
 "tags":{"type":"array","items":{"enum":["red","green",7]},"minItems":1,"maxItems":2},
 "ok":{"type":"boolean"},
 "kind":{"anyOf":[{"const":"cat"},{"type":"null"}]},
 "pos":{"type":"object","properties":{"x":{"type":"number","exclusiveMinimum":-1,"maximum":1}},"required":["x"],"additionalProperties":false}
},"required":["name","age","tags","pos"],"additionalProperties":false}`

// checkFormatDoc validates doc against formatSchema independently of
// llm/grammar: written from the JSON Schema validation specification
// (https://json-schema.org/draft/2020-12/json-schema-validation) for the
// keywords formatSchema uses.
func checkFormatDoc(doc string) error {
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("not a JSON object: %v", err)
	}
	if dec.More() {
		return fmt.Errorf("data after the value")
	}
	allowed := []string{"name", "age", "tags", "ok", "kind", "pos"}
	for k := range v {
		if !slices.Contains(allowed, k) {
			return fmt.Errorf("property %q not allowed", k)
		}
	}
	for _, k := range []string{"name", "age", "tags", "pos"} {
		if _, ok := v[k]; !ok {
			return fmt.Errorf("required %q missing", k)
		}
	}
	name, ok := v["name"].(string)
	if n := utf8.RuneCountInString(name); !ok || n < 1 || n > 6 {
		return fmt.Errorf("name %v: want a string of 1..6 characters", v["name"])
	}
	age, ok := v["age"].(json.Number)
	if ai, err := age.Int64(); !ok || err != nil || ai < 0 || ai > 120 {
		return fmt.Errorf("age %v: want an integer in [0, 120]", v["age"])
	}
	tags, ok := v["tags"].([]any)
	if !ok || len(tags) < 1 || len(tags) > 2 {
		return fmt.Errorf("tags %v: want 1..2 items", v["tags"])
	}
	for _, t := range tags {
		if n, isNum := t.(json.Number); !(t == "red" || t == "green" || (isNum && n.String() == "7")) {
			return fmt.Errorf("tag %v not in the enum", t)
		}
	}
	if b, ok := v["ok"]; ok {
		if _, isBool := b.(bool); !isBool {
			return fmt.Errorf("ok %v: want a boolean", b)
		}
	}
	if k, ok := v["kind"]; ok && k != nil && k != "cat" {
		return fmt.Errorf("kind %v: want \"cat\" or null", k)
	}
	pos, ok := v["pos"].(map[string]any)
	if !ok || len(pos) != 1 {
		return fmt.Errorf("pos %v: want an object with x only", v["pos"])
	}
	xn, ok := pos["x"].(json.Number)
	x, err := xn.Float64()
	if !ok || err != nil || !(x > -1 && x <= 1) || math.IsNaN(x) {
		return fmt.Errorf("pos.x %v: want a number in (-1, 1]", pos["x"])
	}
	return nil
}

// whitespaceBias is a logit_bias field of -100 on every token of the
// fixture's tokenizer made of JSON whitespace only: the grammar allows
// runs of 12 bytes between JSON tokens, which would take a random model
// past the fixtures' 128-token context.
func whitespaceBias(t testing.TB, dir string) string {
	t.Helper()
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var kv []string
	for id := range tok.VocabSize() {
		if b, ok := tok.TokenBytes(id); ok && !tok.IsSpecial(id) && len(b) > 0 && strings.Trim(string(b), " \t\r\n") == "" {
			kv = append(kv, fmt.Sprintf(`"%d":-100`, id))
		}
	}
	return `,"logit_bias":{` + strings.Join(kv, ",") + `}`
}

func formatBody(name, extra string) string {
	return fmt.Sprintf(`{"model":%q,"max_tokens":100,"temperature":1%s,"response_format":{"type":"json_schema","json_schema":{"name":"person","strict":true,"schema":%s}}}`,
		name, extra, formatSchema)
}

// TestOpenAIResponseFormat: with response_format json_schema, at
// temperature 1 from a random model, every answer (several seeds, all four
// architectures, both endpoints, whole and streamed) parses and validates
// against the schema, and ends with finish "stop". Injected fault: the
// mask not applied on the device (sampleLSM ignoring sp.mask) makes
// answers fail validation (and the engine report the forbidden token).
func TestOpenAIResponseFormat(t *testing.T) {
	for _, arch := range []string{"qwen2", "llama", "mistral", "qwen3"} {
		t.Run(arch, func(t *testing.T) {
			f := loadLLMFixture(t, arch)
			gs := startGen(t, f, serve.Options{})
			bias := whitespaceBias(t, f.dir)
			for seed := range 4 {
				for _, ep := range []struct{ path, field string }{{"/v1/completions", `,"prompt":"hi"`}, {"/v1/chat/completions", `,"messages":[{"role":"user","content":"a person"}]`}} {
					body := formatBody(gs.name, fmt.Sprintf(`,"seed":%d%s%s`, seed, ep.field, bias))
					var c oaiChunk
					decodeJSON(t, postJSON(t, gs.url+ep.path, body), 200, &c)
					text := c.Choices[0].Text + c.Choices[0].Message.Content
					if err := checkFormatDoc(text); err != nil || *c.Choices[0].Finish != "stop" {
						t.Errorf("%s seed %d: %q (finish %s): %v", ep.path, seed, text, *c.Choices[0].Finish, err)
					}
					stext, finish, _ := streamed(t, postJSON(t, gs.url+ep.path, strings.TrimSuffix(body, "}")+`,"stream":true,"stream_options":{"include_usage":true}}`))
					if stext != text || finish != "stop" {
						t.Errorf("%s seed %d streamed: %q (finish %s), whole %q", ep.path, seed, stext, finish, text)
					}
				}
			}
		})
	}
}

// TestOpenAIResponseFormatJSONObject: json_object gives JSON objects (at
// temperature 0, so that a random model closes its strings: a document
// cut by max_tokens is refused by the check), and "text" is no
// constraint.
func TestOpenAIResponseFormatJSONObject(t *testing.T) {
	f := loadLLMFixture(t, "qwen2")
	gs := startGen(t, f, serve.Options{})
	bias := whitespaceBias(t, f.dir)
	for seed := range 3 {
		var c oaiChunk
		decodeJSON(t, postJSON(t, gs.url+"/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":"x%d","max_tokens":100,"temperature":1,"top_k":3,"seed":%d,"response_format":{"type":"json_object"}%s}`, gs.name, seed, seed, bias)), 200, &c)
		text := c.Choices[0].Text
		if !strings.HasPrefix(text, "{") {
			t.Errorf("seed %d: %q does not start an object", seed, text)
		}
		if *c.Choices[0].Finish == "stop" {
			var m map[string]any
			if err := json.Unmarshal([]byte(text), &m); err != nil {
				t.Errorf("seed %d: %q finished but is not a JSON object: %v", seed, text, err)
			}
		}
	}
	var c oaiChunk
	decodeJSON(t, postJSON(t, gs.url+"/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":"x","max_tokens":5,"temperature":0,"response_format":{"type":"text"}}`, gs.name)), 200, &c)
	if want := f.refs[0]; c.Usage.Completion != 5 {
		t.Errorf("text format: %d tokens (ref %v)", c.Usage.Completion, want.Text)
	}
}

// TestOpenAIResponseFormatBadRequests: schemas that do not compile, bad
// response_format shapes, a 100-deep schema and a 10 MB schema are
// 400s (413 for the body over the request limit) with OpenAI's error
// object naming response_format (and the keyword at fault), never a 500.
func TestOpenAIResponseFormatBadRequests(t *testing.T) {
	f := loadLLMFixture(t, "qwen2")
	gs := startGen(t, f, serve.Options{})
	deep := strings.Repeat(`{"type":"object","properties":{"a":`, 100) + `{"type":"string"}` + strings.Repeat(`}}`, 100)
	deep70 := strings.Repeat(`{"type":"array","items":`, 70) + `{"type":"string"}` + strings.Repeat(`}`, 70)
	cases := []struct {
		name, format, param, mention string
		code                         int
	}{
		{"unsupported keyword", `{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","pattern":"a+"}}}`, "response_format", "pattern", 400},
		{"unsatisfiable", `{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"integer","minimum":5,"maximum":1}}}`, "response_format", "minimum", 400},
		{"no schema", `{"type":"json_schema","json_schema":{"name":"x"}}`, "response_format", "schema", 400},
		{"no json_schema", `{"type":"json_schema"}`, "response_format", "json_schema", 400},
		{"unknown type", `{"type":"yaml"}`, "response_format", "yaml", 400},
		{"not an object", `"json"`, "response_format", "response_format", 400},
		{"schema not an object", `{"type":"json_schema","json_schema":{"name":"x","schema":5}}`, "response_format", "schema", 400},
		{"100-deep schema", `{"type":"json_schema","json_schema":{"name":"x","schema":` + deep + `}}`, "", "nested", 400},
		{"70-deep schema", `{"type":"json_schema","json_schema":{"name":"x","schema":` + deep70 + `}}`, "response_format", "64", 400},
		{"10 MB schema", `{"type":"json_schema","json_schema":{"name":"x","schema":{"description":"` + strings.Repeat("a", 10<<20) + `"}}}`, "", "bytes", http.StatusRequestEntityTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, ep := range []string{`"prompt":"x"`, `"messages":[{"role":"user","content":"x"}]`} {
				path := "/v1/completions"
				if strings.HasPrefix(ep, `"messages"`) {
					path = "/v1/chat/completions"
				}
				e := oaiErrorBody(t, postJSON(t, gs.url+path, fmt.Sprintf(`{"model":%q,%s,"response_format":%s}`, gs.name, ep, c.format)), c.code)
				if !strings.Contains(e.Message, c.mention) {
					t.Errorf("%s: error %+v does not mention %q", path, e, c.mention)
				}
				if c.param != "" && (e.Param == nil || *e.Param != c.param) {
					t.Errorf("%s: param %v, want %s", path, e.Param, c.param)
				}
			}
		})
	}
}
