package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	_ "github.com/tensorbridge/tensorbridge/pjrt" // xla-cpu for TENSORBRIDGE_TEST_BACKEND
)

// The references: checkpoints made and run by transformers
// (scripts/gen-llm-fixtures.py, installed by scripts/setup-llm-fixtures.sh
// into ~/.cache/tensorbridge/llm-fixtures).

type reference struct {
	Transformers string `json:"transformers"`
	References   []struct {
		Text      string      `json:"text"`
		Chat      bool        `json:"chat"`
		PromptIDs []int       `json:"prompt_ids"`
		TokenIDs  []int       `json:"token_ids"`
		Logits    [][]float64 `json:"logits"`
		Decoded   string      `json:"decoded"`
	} `json:"references"`
}

var fixtureModels = []string{"llama", "mistral", "qwen2", "qwen3"}

// fixtureDir returns the fixtures' directory, skipping (or failing under
// TENSORBRIDGE_REQUIRE_TESTDATA=1) when they are not installed.
func fixtureDir(t testing.TB) string {
	dir := os.Getenv("TENSORBRIDGE_LLM_FIXTURES")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "tensorbridge", "llm-fixtures")
	}
	if _, err := os.Stat(filepath.Join(dir, "llama", "reference.json")); err != nil {
		testreq.Skipf(t, "LLM fixtures not installed (scripts/setup-llm-fixtures.sh): %v", err)
	}
	return dir
}

func readReference(t testing.TB, dir string) *reference {
	raw, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r reference
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// testBackend opens TENSORBRIDGE_TEST_BACKEND (default cpu).
func testBackend(t testing.TB) *tensorbridge.Backend {
	name := os.Getenv("TENSORBRIDGE_TEST_BACKEND")
	if name == "" {
		name = "cpu"
	}
	b, err := tensorbridge.Open(context.Background(), name)
	if err != nil {
		testreq.Skipf(t, "backend %s: %v", name, err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// logitsTolerance: the largest |ours - transformers'| over a prompt's
// logits, relative to the largest |transformers'| of the prompt.
// Measured on cpu: up to 1.81e-6 (mistral, prompt 2); the issue asks
// 1e-4, this is within 3x of what is measured. Injected fault: the llama3
// frequency scaling left out of Rope.invFreq makes llama's logits differ
// by up to 0.75 relative.
const logitsTolerance = 5e-6

// TestAgainstTransformers: for each architecture, the prompt logits match
// transformers' and greedy generation gives exactly its token ids, every
// prompt running at once in the continuous batch.
func TestAgainstTransformers(t *testing.T) {
	root := fixtureDir(t)
	b := testBackend(t)
	ctx := context.Background()
	for _, name := range fixtureModels {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(root, name)
			ref := readReference(t, dir)
			m, err := Load(ctx, b, dir, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			checkPromptLogits(ctx, t, m, ref)
			e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 4, MinPrefill: 16, MinDecodeContext: 16}) // context buckets 16-128: sequences cross three
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			chans := make([]<-chan Token, len(ref.References))
			for i, r := range ref.References {
				if chans[i], err = e.Generate(ctx, Request{Prompt: r.PromptIDs, MaxTokens: len(r.TokenIDs)}); err != nil {
					t.Fatal(err)
				}
			}
			for i, r := range ref.References {
				got, finish, err := collect(chans[i])
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, r.TokenIDs) {
					t.Errorf("prompt %d (%q): got %v, transformers %v (finish %s)", i, r.Text, got, r.TokenIDs, finish)
				}
			}
		})
	}
}

// collect reads a stream to its end.
func collect(ch <-chan Token) (ids []int, finish string, err error) {
	for tk := range ch {
		if tk.ID >= 0 {
			ids = append(ids, tk.ID)
		}
		if tk.Finish != "" {
			finish, err = tk.Finish, tk.Err
		}
	}
	if finish == "" {
		return ids, "", fmt.Errorf("stream closed without a finish event")
	}
	return ids, finish, err
}

// checkPromptLogits compares m's logits for every reference prompt with
// transformers' recorded ones: the largest difference must be within
// logitsTolerance of the largest |logit| of that prompt.
func checkPromptLogits(ctx context.Context, t *testing.T, m *Model, ref *reference) {
	t.Helper()
	v := m.Config.Vocab
	for i, r := range ref.References {
		lg, err := m.PromptLogits(ctx, r.PromptIDs)
		if err != nil {
			t.Fatal(err)
		}
		worst, scale := 0.0, 0.0
		for p, row := range r.Logits {
			for j, want := range row {
				worst = math.Max(worst, math.Abs(float64(lg[p*v+j])-want))
				scale = math.Max(scale, math.Abs(want))
			}
		}
		t.Logf("prompt %d: logits max |diff| %.3g, relative %.3g", i, worst, worst/scale)
		if worst > logitsTolerance*scale {
			t.Errorf("prompt %d: logits differ by %g (relative %g > %g)", i, worst, worst/scale, logitsTolerance)
		}
	}
}

// penaltyReference is penalties.json: greedy ids under transformers'
// logits processors (scripts/gen-llm-fixtures.py, PENALTY_CASES).
type penaltyReference struct {
	References []struct {
		PromptIDs []int `json:"prompt_ids"`
		Settings  struct {
			RepetitionPenalty float32              `json:"repetition_penalty"`
			SequenceBias      [][2]json.RawMessage `json:"sequence_bias"` // [[id], value] pairs
			MinNewTokens      int                  `json:"min_new_tokens"`
		} `json:"settings"`
		TokenIDs []int `json:"token_ids"`
	} `json:"references"`
}

// TestPenaltiesAgainstTransformers: greedy generation with
// repetition_penalty, logit_bias (transformers' single-token
// sequence_bias) and min_tokens (min_new_tokens) gives transformers'
// token ids exactly, every case running at once in the batch.
//
// Injected faults: the repetition penalty over the generated tokens only
// (seen := count > 0) fails the repetition cases; the min_tokens mask
// off by one (r.index+1 < MinTokens) ends the min_new_tokens case a
// token early.
func TestPenaltiesAgainstTransformers(t *testing.T) {
	root := fixtureDir(t)
	b := testBackend(t)
	ctx := context.Background()
	for _, name := range fixtureModels {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(root, name)
			raw, err := os.ReadFile(filepath.Join(dir, "penalties.json"))
			if err != nil {
				testreq.Skipf(t, "penalty references not installed (re-run scripts/setup-llm-fixtures.sh): %v", err)
			}
			var ref penaltyReference
			if err := json.Unmarshal(raw, &ref); err != nil {
				t.Fatal(err)
			}
			m, err := Load(ctx, b, dir, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 4, MinPrefill: 16, MinDecodeContext: 16})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			chans := make([]<-chan Token, len(ref.References))
			for i, r := range ref.References {
				s := SamplingParams{RepetitionPenalty: r.Settings.RepetitionPenalty, MinTokens: r.Settings.MinNewTokens}
				for _, pair := range r.Settings.SequenceBias {
					var ids []int
					var v float64
					if err := errors.Join(json.Unmarshal(pair[0], &ids), json.Unmarshal(pair[1], &v)); err != nil || len(ids) != 1 {
						t.Fatalf("sequence_bias %s: %v", pair, err)
					}
					if s.LogitBias == nil {
						s.LogitBias = map[int]float32{}
					}
					s.LogitBias[ids[0]] = float32(v)
				}
				if chans[i], err = e.Generate(ctx, Request{Prompt: r.PromptIDs, MaxTokens: 24, Sampling: s}); err != nil {
					t.Fatal(err)
				}
			}
			for i, r := range ref.References {
				got, finish, err := collect(chans[i])
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, r.TokenIDs) {
					t.Errorf("case %d (%+v): got %v, transformers %v (finish %s)", i, r.Settings, got, r.TokenIDs, finish)
				}
			}
		})
	}
}
