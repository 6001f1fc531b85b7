package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestGenerateJSON drives `tensorbridge generate --json` greedily on every
// fixture checkpoint and prompt (plain and --chat): the prompt ids are
// transformers' tokenizer's, token_ids are transformers' generate's, and
// text is its tokenizer.decode(token_ids, skip_special_tokens=True).
func TestGenerateJSON(t *testing.T) {
	backend := testBackend()
	for _, name := range []string{"llama", "mistral", "qwen2", "qwen3"} {
		dir, refs := llmFixture(t, name)
		for i, r := range refs {
			args := []string{"generate", dir, "--prompt", r.Text, "--temperature", "0", "--max-tokens", "48", "--json", "--backend", backend}
			if r.Chat {
				args = append(args, "--chat")
			}
			code, out, errOut := run(t, args...)
			if code != 0 {
				t.Fatalf("%s prompt %d: exit %d: %s", name, i, code, errOut)
			}
			var got generateResult
			if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &got); err != nil {
				t.Fatalf("%s prompt %d: stdout is not one JSON object: %v\n%s", name, i, err, out)
			}
			if !slices.Equal(got.PromptIDs, r.PromptIDs) {
				t.Errorf("%s prompt %d: prompt_ids %v, transformers %v", name, i, got.PromptIDs, r.PromptIDs)
			}
			if !slices.Equal(got.TokenIDs, r.TokenIDs) {
				t.Errorf("%s prompt %d: token_ids %v, transformers %v", name, i, got.TokenIDs, r.TokenIDs)
			}
			if got.Text != r.Decoded {
				t.Errorf("%s prompt %d: text %q, transformers %q", name, i, got.Text, r.Decoded)
			}
		}
	}
}

// TestGenerateCheckpointErrors: a checkpoint directory that does not
// exist is reported as that directory, not as a missing tokenizer.json;
// a hidden_size over the limit is reported with the file, the value and
// the limit, not as "want a positive size". (Faults injected: the
// directory check removed from tokenizer.Load, which generate calls
// first, and the size bound's own message; each case fails.)
func TestGenerateCheckpointErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-checkpoint")
	code, _, errOut := run(t, "generate", missing, "--prompt", "hi", "--backend", "cpu")
	if code != 1 || !strings.Contains(errOut, "checkpoint directory "+missing+": ") || strings.Contains(errOut, "tokenizer.json") {
		t.Errorf("missing directory: exit %d, stderr %q; want exit 1 naming the directory", code, errOut)
	}

	src, _ := llmFixture(t, "qwen2")
	dir := t.TempDir()
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		raw, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var cfg map[string]any
	raw, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err == nil {
		err = json.Unmarshal(raw, &cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	cfg["hidden_size"] = 1 << 25
	raw, _ = json.Marshal(cfg)
	path := filepath.Join(dir, "config.json")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = run(t, "generate", dir, "--prompt", "hi", "--backend", "cpu")
	want := path + ": hidden_size = 33554432: expected at most 16777216 (2^24)"
	if code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("hidden_size too large: exit %d, stderr %q; want exit 1 with %q", code, errOut, want)
	}
}
