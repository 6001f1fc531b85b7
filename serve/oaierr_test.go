package serve_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/serve"
)

// oaiErr is the inner object of an OpenAI error body.
type oaiErr struct {
	Message string
	Type    string
	Param   *string
	Code    string
}

// oaiErrorBody reads an error answer and checks it against OpenAI's error
// object as its API reference and client libraries define it: a JSON body
// {"error": {...}} with exactly the keys message (a non-empty string),
// type (a string), param (a string or null) and code (here always a
// string), and the status want.
func oaiErrorBody(t testing.TB, resp *http.Response, want int) oaiErr {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != want {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, want, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q: %s", ct, b)
	}
	var top map[string]map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&top); err != nil || len(top) != 1 || top["error"] == nil {
		t.Fatalf("not an OpenAI error object (%v): %s", err, b)
	}
	inner := top["error"]
	keys := make([]string, 0, len(inner))
	for k := range inner {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"code", "message", "param", "type"}) {
		t.Fatalf("error keys %v, want code, message, param, type: %s", keys, b)
	}
	var e oaiErr
	for k, dst := range map[string]any{"message": &e.Message, "type": &e.Type, "param": &e.Param, "code": &e.Code} {
		if err := json.Unmarshal(inner[k], dst); err != nil {
			t.Fatalf("%s: %v (want a string%s): %s", k, err, map[bool]string{true: " or null"}[k == "param"], b)
		}
	}
	if e.Message == "" || e.Type == "" || e.Code == "" {
		t.Fatalf("empty message, type or code: %s", b)
	}
	return e
}

// Every error of a path under /v1 is OpenAI's error object with a string
// code, whatever refuses the request: the token check (401), routing (404
// for an unknown path, 405 for another method, with Allow), the body
// limits (413, 415), the model lookup (404 model_not_found; this server
// serves an ONNX model and no checkpoint). Proved once by answering the
// 401 with writeErr, as before: the test failed on its plain-string body
// ("not an OpenAI error object").
func TestOpenAIErrorObjects(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := openBackend(t, batchBuckets(t, "batch=1,2,4,8"))
	ts := startWith(t, b, serve.Options{Logger: quietLogger(t), AuthTokenFile: tok, MaxMessageBytes: 1 << 20})
	auth := "Bearer s3cret"
	cases := []struct {
		name, method, path, authz, body string
		header                          map[string]string
		status                          int
		typ, code, mention              string
	}{
		{"no token", "POST", "/v1/completions", "", `{}`, nil, 401, "authentication_error", "invalid_api_key", "missing"},
		{"wrong token", "GET", "/v1/models", "Bearer nope", "", nil, 401, "authentication_error", "invalid_api_key", "wrong token"},
		{"no token, unknown path", "GET", "/v1/audio/speech", "", "", nil, 401, "authentication_error", "invalid_api_key", "missing"},
		{"unknown path", "POST", "/v1/audio/speech", auth, `{}`, nil, 404, "invalid_request_error", "unknown_url", "no such endpoint: POST /v1/audio/speech"},
		{"the API root", "GET", "/v1", auth, "", nil, 404, "invalid_request_error", "unknown_url", "no such endpoint"},
		{"GET on completions", "GET", "/v1/completions", auth, "", nil, 405, "invalid_request_error", "method_not_allowed", "takes POST"},
		{"POST on models", "POST", "/v1/models", auth, `{}`, nil, 405, "invalid_request_error", "method_not_allowed", "takes GET"},
		{"unknown model", "POST", "/v1/chat/completions", auth, `{"model":"mlp","messages":[{"role":"user","content":"x"}]}`, nil, 404, "invalid_request_error", "model_not_found", `"mlp"`},
		{"malformed JSON", "POST", "/v1/completions", auth, `{"model":`, nil, 400, "invalid_request_error", "invalid_request", "malformed JSON"},
		{"compressed body", "POST", "/v1/completions", auth, `{}`, map[string]string{"Content-Encoding": "gzip"}, 415, "invalid_request_error", "unsupported_media_type", "gzip"},
		{"body over the limit", "POST", "/v1/completions", auth, `{"prompt":"` + strings.Repeat("a", 2<<20) + `"}`, nil, 413, "invalid_request_error", "request_too_large", "over the limit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequest(c.method, "http://"+ts.httpAddr+c.path, strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			if c.authz != "" {
				req.Header.Set("Authorization", c.authz)
			}
			for k, v := range c.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			e := oaiErrorBody(t, resp, c.status)
			if e.Type != c.typ || e.Code != c.code || !strings.Contains(e.Message, c.mention) {
				t.Errorf("got %+v, want type %s, code %s, a message with %q", e, c.typ, c.code, c.mention)
			}
			if c.status == 405 && resp.Header.Get("Allow") == "" {
				t.Error("405 without Allow")
			}
			if c.status == 401 && resp.Header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
}
