package serve_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/llm"
	"github.com/tensorbridge/tensorbridge/serve"
)

// TestPrefixCacheMetrics: /metrics counts the prompt tokens looked up in
// the prefix cache and those reused, by exact arithmetic: a 50-token
// prompt looks up its first 49 (nothing cached yet), then a 51-token
// prompt starting with the same 50 looks up 50 and reuses the first
// request's 3 whole blocks of 16 (48 tokens). Fault injected once:
// counting the hit blocks instead of their tokens fails the hits.
func TestPrefixCacheMetrics(t *testing.T) {
	f := loadLLMFixture(t, "qwen2")
	gs := startGen(t, f, serve.Options{Generators: []serve.GeneratorSource{{Dir: f.dir,
		Engine: llm.EngineOptions{MaxSequences: 2, MaxQueue: 4, PrefillChunk: 16, PrefixCache: true}}}})
	ids := make([]string, 51)
	for i := range ids {
		ids[i] = fmt.Sprint(2 + (i*37)%90)
	}
	for _, n := range []int{50, 51} {
		body := fmt.Sprintf(`{"model":"qwen2","prompt":[%s],"max_tokens":2,"temperature":0}`, strings.Join(ids[:n], ","))
		var c oaiChunk
		decodeJSON(t, postJSON(t, gs.url+"/v1/completions", body), 200, &c)
	}
	if got := metricValue(t, gs.url, serve.MetricPrefixQueries); got != 49+50 {
		t.Errorf("%s = %v, want 99 (49 + 50 prompt tokens looked up)", serve.MetricPrefixQueries, got)
	}
	if got := metricValue(t, gs.url, serve.MetricPrefixHits); got != 48 {
		t.Errorf("%s = %v, want 48 (3 blocks of 16 reused)", serve.MetricPrefixHits, got)
	}
	if got := metricValue(t, gs.url, serve.MetricPrefixEvictions); got != 0 {
		t.Errorf("%s = %v, want 0", serve.MetricPrefixEvictions, got)
	}
}
