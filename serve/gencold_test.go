package serve_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tensorbridge/tensorbridge/serve"
)

// TestGeneratorColdStart: with BackgroundWarmup a checkpoint is ready
// once its smallest prefill and decode programs are compiled (the log's
// summary says 2 of 7), and /v2/health/ready's body lists its programs,
// compiled and pending, until every one is compiled. The names are the
// buckets' (context 128, 4 sequences: prompt buckets 16..128, batch
// buckets 1, 2, 4, one context bucket), counted by hand. Injected fault:
// the server not passing BackgroundWarmup on to the engine makes the log
// say "ready: compiled 7 of 7".
func TestGeneratorColdStart(t *testing.T) {
	f := loadLLMFixture(t, "qwen2")
	var logBuf lockedBuffer
	gs := startGen(t, f, serve.Options{BackgroundWarmup: true, Logger: slog.New(slog.NewTextHandler(&logBuf, nil))})
	all := []string{"prefill-16", "prefill-32", "prefill-64", "prefill-128", "decode-1x128", "decode-2x128", "decode-4x128"}
	type progress struct {
		Ready    bool     `json:"ready"`
		Compiled []string `json:"programs_compiled"`
		Pending  []string `json:"programs_pending"`
	}
	read := func() progress {
		resp, err := http.Get(gs.url + "/v2/health/ready")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Ready      bool                `json:"ready"`
			Generators map[string]progress `json:"generators"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != 200 || !body.Ready {
			t.Fatalf("/v2/health/ready: %d %v %+v", resp.StatusCode, err, body)
		}
		return body.Generators[gs.name]
	}
	p := read()
	if !p.Ready || len(p.Compiled) < 2 || !slices.Equal(p.Compiled[:2], []string{"prefill-16", "decode-1x128"}) {
		t.Errorf("at ready: %+v, want prefill-16 and decode-1x128 compiled first", p)
	}
	if got := slices.Sorted(slices.Values(append(p.Compiled, p.Pending...))); !slices.Equal(got, slices.Sorted(slices.Values(all))) {
		t.Errorf("programs %v, want %v", got, all)
	}
	resp := postJSON(t, gs.url+"/v1/completions", `{"model":"`+gs.name+`","prompt":"hello","max_tokens":4}`)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("completion while compiling: %d", resp.StatusCode)
	}
	for deadline := time.Now().Add(2 * time.Minute); len(p.Pending) > 0; p = read() {
		if time.Now().After(deadline) {
			t.Fatalf("still pending after 2 minutes: %+v", p)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(p.Compiled) != len(all) {
		t.Errorf("all compiled: %v", p.Compiled)
	}
	for deadline := time.Now().Add(time.Minute); !strings.Contains(logBuf.String(), "background compiles done"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			break
		}
	}
	for _, want := range []string{"ready: compiled 2 of 7 programs", "background compiles done: compiled 7 of 7 programs", "program=decode-4x128"} {
		if !strings.Contains(logBuf.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, logBuf.String())
		}
	}
}
