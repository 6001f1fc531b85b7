package llm

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"github.com/tensorbridge/tensorbridge/llm/peft"
)

// finetuneFixtureDir is scripts/setup-finetune-fixtures.sh's output.
func finetuneFixtureDir(t *testing.T) string {
	home, _ := os.UserHomeDir()
	dir := filepath.Join(home, ".cache", "tensorbridge", "finetune-fixtures")
	if _, err := os.Stat(filepath.Join(dir, "llama", "adapter0", "adapter_config.json")); err != nil {
		testreq.Skipf(t, "fine-tuning fixtures not installed (scripts/setup-finetune-fixtures.sh): %v", err)
	}
	return dir
}

// TestServedAdapters: one engine serving the base model and two PEFT
// adapters, with requests for all three in the same decode steps, gives
// the base model transformers' greedy ids and each adapter the greedy ids
// of that adapter merged into the weights (SaveCheckpoint, whose logits
// TestMergeMatchesPEFT checks against PEFT's merge_and_unload).
func TestServedAdapters(t *testing.T) {
	root, ft := fixtureDir(t), finetuneFixtureDir(t)
	b := testBackend(t)
	ctx := context.Background()
	for _, arch := range fixtureModels {
		t.Run(arch, func(t *testing.T) {
			dir := filepath.Join(root, arch)
			ref := readReference(t, dir)
			names := []string{"adapter0", "lora-text"}
			var srcs []AdapterSource
			for _, n := range names {
				srcs = append(srcs, AdapterSource{Name: n, Dir: filepath.Join(ft, arch, n)})
			}
			m, err := Load(ctx, b, dir, LoadOptions{Adapters: srcs})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			want := map[string][][]int{"": nil}
			for _, n := range names {
				want[n] = mergedGreedy(t, dir, srcs[slices.Index(names, n)].Dir, ref)
			}
			for _, r := range ref.References {
				want[""] = append(want[""], r.TokenIDs)
			}
			e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 8, MinPrefill: 16, MinDecodeContext: 16})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			type job struct {
				adapter string
				i       int
				ch      <-chan Token
			}
			var jobs []job
			for i, r := range ref.References {
				for _, a := range []string{"", "adapter0", "lora-text"} {
					ch, err := e.Generate(ctx, Request{Prompt: r.PromptIDs, MaxTokens: len(r.TokenIDs), Adapter: a, IgnoreEOS: true})
					if err != nil {
						t.Fatal(err)
					}
					jobs = append(jobs, job{a, i, ch})
				}
			}
			for _, j := range jobs {
				got, _, err := collect(j.ch)
				if err != nil {
					t.Fatal(err)
				}
				if w := want[j.adapter][j.i]; !slices.Equal(got, w) {
					t.Errorf("adapter %q, prompt %d: got %v, want %v", j.adapter, j.i, got, w)
				}
			}
			if _, err := e.Generate(ctx, Request{Prompt: ref.References[0].PromptIDs, Adapter: "nope"}); err == nil {
				t.Error("an unknown adapter was accepted")
			}
		})
	}
}

// mergedGreedy writes base + adapter merged and returns its greedy ids
// for every reference prompt.
func mergedGreedy(t *testing.T, dir, adapter string, ref *reference) [][]int {
	t.Helper()
	ctx := context.Background()
	c, err := LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	ad, err := peft.Read(adapter, c.PEFTModules())
	if err != nil {
		t.Fatal(err)
	}
	merged := filepath.Join(t.TempDir(), "merged")
	if err := SaveCheckpoint(ctx, dir, merged, nil, ad); err != nil {
		t.Fatal(err)
	}
	m, err := Load(ctx, testBackend(t), merged, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 4, MinPrefill: 16, MinDecodeContext: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var out [][]int
	for _, r := range ref.References {
		ch, err := e.Generate(ctx, Request{Prompt: r.PromptIDs, MaxTokens: len(r.TokenIDs), IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		ids, _, err := collect(ch)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ids)
	}
	return out
}
