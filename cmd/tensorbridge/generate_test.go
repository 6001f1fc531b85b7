package main

import (
	"encoding/json"
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
