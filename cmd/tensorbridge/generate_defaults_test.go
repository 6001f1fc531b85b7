package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestGenerateDefaults: flags left unset take generation_config.json's
// defaults. The fixture's file sets no do_sample, so no --temperature is
// greedy (transformers' generate ids); do_sample with top_k 1 from the
// file is greedy too (with the file's top_k ignored, temperature 1 would
// sample other tokens); max_new_tokens from the file bounds the output;
// no_repeat_ngram_size 3 (not implemented) is refused by name.
//
// Injected fault: GenerationConfig.Sampling dropping the file's top_k
// (TopK: 0) made "do_sample, top_k 1" sample other tokens and fail.
func TestGenerateDefaults(t *testing.T) {
	src, refs := llmFixture(t, "llama")
	r := refs[0]
	if r.Chat || len(r.TokenIDs) < 8 {
		t.Fatalf("reference 0: want a plain prompt with 8 or more tokens")
	}
	backend := os.Getenv("TENSORBRIDGE_TEST_BACKEND")
	if backend == "" {
		backend = "cpu"
	}
	// withGen is the fixture with its generation_config.json replaced.
	withGen := func(gen string) string {
		dir := t.TempDir()
		entries, err := os.ReadDir(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Name() != "generation_config.json" {
				if err := os.Symlink(filepath.Join(src, e.Name()), filepath.Join(dir, e.Name())); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(gen), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	for _, c := range []struct {
		name    string
		dir     string
		flags   []string
		want    []int
		refused string
	}{
		{"fixture's file: greedy", src, []string{"--max-tokens", "48"}, r.TokenIDs, ""},
		{"do_sample, top_k 1", withGen(`{"do_sample": true, "top_k": 1, "eos_token_id": 1}`), []string{"--max-tokens", "48", "--seed", "5"}, r.TokenIDs, ""},
		{"max_new_tokens", withGen(`{"max_new_tokens": 5, "eos_token_id": 1}`), nil, r.TokenIDs[:5], ""},
		{"no_repeat_ngram_size", withGen(`{"no_repeat_ngram_size": 3}`), []string{"--max-tokens", "4"}, nil, "no_repeat_ngram_size"},
	} {
		args := append([]string{"generate", c.dir, "--prompt", r.Text, "--json", "--backend", backend}, c.flags...)
		code, out, errOut := run(t, args...)
		if c.refused != "" {
			if code == 0 || !strings.Contains(errOut, c.refused) {
				t.Errorf("%s: exit %d, stderr %q: want a refusal naming %s", c.name, code, errOut, c.refused)
			}
			continue
		}
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", c.name, code, errOut)
		}
		var got generateResult
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &got); err != nil {
			t.Fatalf("%s: stdout is not one JSON object: %v\n%s", c.name, err, out)
		}
		if !slices.Equal(got.TokenIDs, c.want) {
			t.Errorf("%s: token_ids %v, want %v", c.name, got.TokenIDs, c.want)
		}
	}
}
