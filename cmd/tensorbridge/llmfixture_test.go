package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/tensorbridge/tensorbridge/internal/testreq"
)

// llmReference is one prompt of a fixture checkpoint's reference.json, as
// scripts/gen-llm-fixtures.py recorded it from transformers.
type llmReference struct {
	Text      string `json:"text"`
	Chat      bool   `json:"chat"`
	PromptIDs []int  `json:"prompt_ids"`
	TokenIDs  []int  `json:"token_ids"`
	Decoded   string `json:"decoded"`
}

// llmFixture returns the directory of the fixture checkpoint name
// (scripts/setup-llm-fixtures.sh; $TENSORBRIDGE_LLM_FIXTURES overrides the
// cache) and its transformers references. Missing fixtures skip, or fail
// under scripts/test.sh (testreq).
func llmFixture(t *testing.T, name string) (dir string, refs []llmReference) {
	t.Helper()
	root := os.Getenv("TENSORBRIDGE_LLM_FIXTURES")
	if root == "" {
		home, _ := os.UserHomeDir()
		root = filepath.Join(home, ".cache", "tensorbridge", "llm-fixtures")
	}
	dir = filepath.Join(root, name)
	raw, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		testreq.Skipf(t, "LLM fixtures not installed (scripts/setup-llm-fixtures.sh): %v", err)
	}
	var ref struct {
		References []llmReference `json:"references"`
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatalf("%s: %v", filepath.Join(dir, "reference.json"), err)
	}
	return dir, ref.References
}

// testBackend is the backend the CLI tests run on: $TENSORBRIDGE_TEST_BACKEND,
// else cpu.
func testBackend() string {
	if b := os.Getenv("TENSORBRIDGE_TEST_BACKEND"); b != "" {
		return b
	}
	return "cpu"
}
