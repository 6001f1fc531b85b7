package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/internal/testreq"
)

// TestGenerateMesh drives `tensorbridge generate --mesh model=2` on
// xla-cpu with two host devices: greedy token ids and text equal
// transformers' for the llama fixture's prompts; --mesh model=4 (the
// fixture has 2 KV heads) and a --strategy other than tp are refused.
func TestGenerateMesh(t *testing.T) {
	dir, refs := llmFixture(t, "llama")
	for i, r := range refs[:2] {
		args := []string{"generate", dir, "--prompt", r.Text, "--temperature", "0", "--max-tokens", "48", "--json",
			"--backend", "xla-cpu:devices=2", "--mesh", "model=2"}
		if r.Chat {
			args = append(args, "--chat")
		}
		code, out, errOut := run(t, args...)
		if code != 0 {
			if strings.Contains(errOut, "xla-cpu") && strings.Contains(errOut, "plugin") {
				testreq.Skipf(t, "xla-cpu: %s", errOut)
			}
			t.Fatalf("prompt %d: exit %d: %s", i, code, errOut)
		}
		var got generateResult
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &got); err != nil {
			t.Fatalf("prompt %d: stdout is not one JSON object: %v\n%s", i, err, out)
		}
		if !slices.Equal(got.TokenIDs, r.TokenIDs) || got.Text != r.Decoded {
			t.Errorf("prompt %d: token_ids %v text %q, transformers %v %q", i, got.TokenIDs, got.Text, r.TokenIDs, r.Decoded)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--backend", "xla-cpu:devices=4", "--mesh", "model=4"}, "num_key_value_heads = 2"},
		{[]string{"--backend", "xla-cpu:devices=2", "--strategy", "dp"}, "--strategy"},
	} {
		args := append([]string{"generate", dir, "--prompt", "hi", "--temperature", "0", "--max-tokens", "4"}, tc.args...)
		code, _, errOut := run(t, args...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want a refusal naming %q", tc.args, code, errOut, tc.want)
		}
	}
}
