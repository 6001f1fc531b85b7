package llm

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/llm/tokenizer"
)

// TestSampling: filters that keep only the most likely token (top-k 1,
// top-p near 0, min-p 1) give transformers' greedy ids at temperature 1;
// a seeded request draws the same tokens alone and batched with others,
// and another seed draws other tokens.
func TestSampling(t *testing.T) {
	dir := filepath.Join(fixtureDir(t), "llama")
	ref := readReference(t, dir)
	b := testBackend(t)
	ctx := context.Background()
	m, err := Load(ctx, b, dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 4, MinPrefill: 32})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r := ref.References[0]
	gen := func(s SamplingParams, prompt []int, n int) []int {
		ch, err := e.Generate(ctx, Request{Prompt: prompt, MaxTokens: n, Sampling: s, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		ids, _, err := collect(ch)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	for _, s := range []SamplingParams{{Temperature: 1, TopK: 1, Seed: 7}, {Temperature: 1, TopP: 1e-6, Seed: 7}, {Temperature: 1, MinP: 1, Seed: 7}} {
		if got := gen(s, r.PromptIDs, len(r.TokenIDs)); !slices.Equal(got, r.TokenIDs[:len(got)]) {
			t.Errorf("%+v: got %v, greedy %v", s, got, r.TokenIDs)
		}
	}
	seeded := SamplingParams{Temperature: 1, TopK: 50, TopP: 0.95, Seed: 1234}
	alone := gen(seeded, r.PromptIDs, 32)
	// The same request beside others, started at once.
	chans := make([]<-chan Token, 4)
	for i := range chans {
		s := seeded
		s.Seed += uint32(i)
		if chans[i], err = e.Generate(ctx, Request{Prompt: ref.References[i].PromptIDs, MaxTokens: 32, Sampling: s, IgnoreEOS: true}); err != nil {
			t.Fatal(err)
		}
	}
	for i, ch := range chans {
		ids, _, err := collect(ch)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 && !slices.Equal(ids, alone) {
			t.Errorf("seeded request: alone %v, batched %v", alone, ids)
		}
	}
	s2 := seeded
	s2.Seed = 99
	if other := gen(s2, r.PromptIDs, 32); slices.Equal(other, alone) {
		t.Errorf("seeds 1234 and 99 drew the same 32 tokens %v", alone)
	}
	if slices.Equal(alone, r.TokenIDs[:32]) {
		t.Errorf("temperature 1 drew the greedy tokens")
	}
}

// TestStopStrings: with the checkpoint's detokenizer, a stop string ends
// the sequence and the streamed text is transformers' decoded text up to
// it; without one, the streamed text is the whole decoded text.
func TestStopStrings(t *testing.T) {
	dir := filepath.Join(fixtureDir(t), "mistral")
	ref := readReference(t, dir)
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	b := testBackend(t)
	ctx := context.Background()
	m, err := Load(ctx, b, dir, LoadOptions{MaxContext: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 2, MinPrefill: 32,
		NewDetokenizer: func() Detokenizer { return tok.NewDecoder(true) }})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r := ref.References[1]
	text := func(stops []string) (string, string) {
		ch, err := e.Generate(ctx, Request{Prompt: r.PromptIDs, MaxTokens: len(r.TokenIDs), StopStrings: stops})
		if err != nil {
			t.Fatal(err)
		}
		var sb strings.Builder
		finish := ""
		for tk := range ch {
			sb.WriteString(tk.Text)
			if tk.Finish != "" {
				finish = tk.Finish
			}
		}
		return sb.String(), finish
	}
	if got, _ := text(nil); got != r.Decoded {
		t.Errorf("streamed %q, transformers decoded %q", got, r.Decoded)
	}
	// A stop string from the middle of the reference text.
	runes := []rune(r.Decoded)
	stop := string(runes[len(runes)/2 : len(runes)/2+3])
	want := r.Decoded[:strings.Index(r.Decoded, stop)]
	if got, finish := text([]string{stop}); got != want || finish != "stop" {
		t.Errorf("stop %q: streamed %q (finish %s), want %q", stop, got, finish, want)
	}
}
