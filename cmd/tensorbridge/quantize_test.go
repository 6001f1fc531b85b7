package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestGenerateQuantize: `generate --quantize int8` loads the projections
// as int8. The references are transformers' float32 greedy ids and what
// llm's TestQuantizedAgainstTransformers measured of int8 against them
// (the same on cpu and xla-cpu): on qwen2's "The quick brown fox" the int8
// ids are transformers' for the first 4 tokens and then differ (so the
// flag took effect: float32 gives all 48), on mistral's chat prompt they
// are transformers' for all 48. An unknown scheme is a usage error (exit 2).
// Injected fault: generate not passing the option to llm.Load fails the
// qwen2 case (all 48 ids then match).
func TestGenerateQuantize(t *testing.T) {
	backend := testBackend()
	for _, tc := range []struct {
		model  string
		prompt int
		same   int // leading ids equal to transformers'; -1: all
	}{{"qwen2", 0, 4}, {"mistral", 4, -1}} {
		dir, refs := llmFixture(t, tc.model)
		r := refs[tc.prompt]
		args := []string{"generate", dir, "--prompt", r.Text, "--temperature", "0", "--max-tokens", "48", "--json", "--backend", backend, "--quantize", "int8"}
		if r.Chat {
			args = append(args, "--chat")
		}
		code, out, errOut := run(t, args...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", tc.model, code, errOut)
		}
		var got generateResult
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &got); err != nil {
			t.Fatalf("%s: stdout is not one JSON object: %v\n%s", tc.model, err, out)
		}
		switch {
		case tc.same < 0 && !slices.Equal(got.TokenIDs, r.TokenIDs):
			t.Errorf("%s: int8 ids %v, want transformers' %v", tc.model, got.TokenIDs, r.TokenIDs)
		case tc.same >= 0 && (len(got.TokenIDs) <= tc.same || !slices.Equal(got.TokenIDs[:tc.same], r.TokenIDs[:tc.same]) || got.TokenIDs[tc.same] == r.TokenIDs[tc.same]):
			t.Errorf("%s: int8 ids %v, want transformers' %v for exactly the first %d", tc.model, got.TokenIDs, r.TokenIDs, tc.same)
		}
	}
	llama, _ := llmFixture(t, "llama")
	for _, args := range [][]string{
		{"generate", llama, "--prompt", "x", "--quantize", "int4"},
		{"serve", llama, "--http", "127.0.0.1:0", "--quantize", "int4"},
	} {
		code, _, errOut := run(t, args...)
		if code != 2 || !strings.Contains(errOut, "int4") {
			t.Errorf("%s --quantize int4: exit %d, %q; want a usage error naming it", args[0], code, errOut)
		}
	}
}
