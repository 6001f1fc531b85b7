package serve

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tensorbridge/tensorbridge/llm"
)

// Prefix-cache metric names: the counters vLLM exports as
// vllm:prefix_cache_queries and vllm:prefix_cache_hits, in tokens
// (https://docs.vllm.ai/en/stable/usage/metrics/), and the cached blocks
// evicted.
const (
	MetricPrefixQueries   = "tensorbridge_llm_prefix_cache_queries_total"
	MetricPrefixHits      = "tensorbridge_llm_prefix_cache_hits_total"
	MetricPrefixEvictions = "tensorbridge_llm_prefix_cache_evictions_total"
)

var (
	prefixQueriesDesc = prometheus.NewDesc(MetricPrefixQueries,
		"Prompt tokens looked up in the prefix cache (all but each prompt's last).", []string{"model"}, nil)
	prefixHitsDesc = prometheus.NewDesc(MetricPrefixHits,
		"Prompt tokens whose KV cache came from the prefix cache instead of being computed.", []string{"model"}, nil)
	prefixEvictionsDesc = prometheus.NewDesc(MetricPrefixEvictions,
		"Cached prefix blocks evicted (least recently used) for new ones.", []string{"model"}, nil)
)

// prefixCollector reads each generator's prefix-cache counters
// (llm.Engine.PrefixStats) when /metrics is scraped: the engine keeps
// them, so they are never copied between counters. A generator whose
// engine is not started yet (or runs without the cache) reports zeros, so
// each series exists from the first scrape.
type prefixCollector struct {
	mu   sync.Mutex
	gens []*generator
}

func (p *prefixCollector) add(g *generator) {
	p.mu.Lock()
	p.gens = append(p.gens, g)
	p.mu.Unlock()
}

// Describe sends the three descriptors.
func (p *prefixCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- prefixQueriesDesc
	ch <- prefixHitsDesc
	ch <- prefixEvictionsDesc
}

// Collect sends each generator's counters.
func (p *prefixCollector) Collect(ch chan<- prometheus.Metric) {
	p.mu.Lock()
	gens := append([]*generator(nil), p.gens...)
	p.mu.Unlock()
	for _, g := range gens {
		var st llm.PrefixStats
		if e := g.eng.Load(); e != nil {
			st = e.PrefixStats()
		}
		ch <- prometheus.MustNewConstMetric(prefixQueriesDesc, prometheus.CounterValue, float64(st.QueryTokens), g.name)
		ch <- prometheus.MustNewConstMetric(prefixHitsDesc, prometheus.CounterValue, float64(st.HitTokens), g.name)
		ch <- prometheus.MustNewConstMetric(prefixEvictionsDesc, prometheus.CounterValue, float64(st.Evictions), g.name)
	}
}
