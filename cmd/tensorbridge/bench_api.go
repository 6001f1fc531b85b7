package main

// The parts of `tensorbridge bench` that depend on Model API features
// added alongside it (precision, warm-up, the disk compile cache).

import (
	"context"
	"fmt"
	"time"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/config"
	"github.com/tensorbridge/tensorbridge/ir"
)

// cacheDirEnv is the environment variable that sets the compile cache
// directory (package cache's EnvDir); --restart gives its children a fresh
// one.
const cacheDirEnv = "TENSORBRIDGE_CACHE_DIR"

// tensorbridgeCS is the compile-cache part of a report.
type tensorbridgeCS struct {
	Dir    string `json:"dir,omitempty"`
	Hits   int64  `json:"hits"`
	Misses int64  `json:"misses"`
}

// cacheStats returns the backend's disk compile cache figures, nil when it
// has none.
func cacheStats(b *tensorbridge.Backend) *tensorbridgeCS {
	s := b.CacheStats()
	if s.Dir == "" {
		return nil
	}
	return &tensorbridgeCS{Dir: s.Dir, Hits: s.Hits, Misses: s.Misses}
}

// precisionOptions returns the LoadModel options for --precision and
// --mixed. "auto" leaves the choice to the backend's settings.
func precisionOptions(p string, mixed bool) []tensorbridge.ModelOption {
	if p == "auto" {
		return nil
	}
	return []tensorbridge.ModelOption{tensorbridge.WithPrecision(config.Precision(p), mixed && p != "float32")}
}

// float32Options are the LoadModel options of the float32 reference the
// accuracy cost is measured against.
func float32Options() []tensorbridge.ModelOption {
	return []tensorbridge.ModelOption{tensorbridge.WithPrecision(config.Float32, false)}
}

// aheadCompile is what compileAhead did.
type aheadCompile struct {
	done    bool
	seconds float64
	method  string
}

// compileAhead compiles the specialisation the inputs need with
// Model.Warmup, so the first Run is a run only and the compile time is
// measured by itself. It does nothing (done false) when a symbolic
// dimension is unnamed, which Warmup cannot address.
func compileAhead(ctx context.Context, m *tensorbridge.Model, in map[string]*ir.Tensor) (aheadCompile, error) {
	assign := map[string]int{}
	for _, s := range m.Inputs() {
		t := in[s.Name]
		if t == nil {
			continue
		}
		dims := t.Shape().Dimensions
		for k, d := range s.Dims {
			if d.Value >= 0 || k >= len(dims) {
				continue
			}
			if d.Param == "" {
				return aheadCompile{}, nil
			}
			assign[d.Param] = dims[k]
		}
	}
	t0 := time.Now()
	if _, err := m.Warmup(ctx, []map[string]int{assign}, nil); err != nil {
		return aheadCompile{}, fmt.Errorf("compiling for %v: %w", assign, err)
	}
	return aheadCompile{done: true, seconds: time.Since(t0).Seconds(),
		method: "measured: Model.Warmup for these shapes, before the first run"}, nil
}
