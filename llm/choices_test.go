package llm

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/llm/grammar"
	"github.com/tensorbridge/tensorbridge/llm/tokenizer"
)

// TestGenerateNGreedy: n choices at temperature 0 are each transformers'
// greedy ids (the prompt prefilled once, its full blocks shared and its
// partial last block copied into the other choices' tables), for every
// architecture, with a slot too few for two requests at once (the second
// waits for its n slots). Injected fault: copyKV skipped (the followers'
// partial block keeps whatever it held) makes choices 1.. differ from
// transformers.
func TestGenerateNGreedy(t *testing.T) {
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
			e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 4, MinPrefill: 16, MinDecodeContext: 16})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			var all [][]<-chan Token
			for _, r := range ref.References[:2] {
				chans, err := e.GenerateN(ctx, Request{Prompt: r.PromptIDs, MaxTokens: len(r.TokenIDs)}, 3)
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, chans)
			}
			for i, chans := range all {
				want := ref.References[i].TokenIDs
				for c, ch := range chans {
					got, finish, err := collect(ch)
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(got, want) {
						t.Errorf("prompt %d choice %d: got %v, transformers %v (finish %s)", i, c, got, want, finish)
					}
				}
			}
		})
	}
}

// TestGenerateNSeeds: at temperature 1 the same seed gives the same n
// answers, choice 0 is the n = 1 answer with that seed, choice i is the
// n = 1 answer with ChoiceSeed(seed, i) (each choice's stream is its own),
// and n outside 1..min(16, slots) is a RequestError.
func TestGenerateNSeeds(t *testing.T) {
	root := fixtureDir(t)
	b := testBackend(t)
	ctx := context.Background()
	dir := filepath.Join(root, "qwen2")
	ref := readReference(t, dir)
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
	req := Request{Prompt: ref.References[0].PromptIDs, MaxTokens: 12, Sampling: SamplingParams{Temperature: 1, Seed: 77}}
	run := func(n int, r Request) [][]int {
		chans, err := e.GenerateN(ctx, r, n)
		if err != nil {
			t.Fatal(err)
		}
		out := make([][]int, n)
		for i, ch := range chans {
			if out[i], _, err = collect(ch); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	a, bb := run(3, req), run(3, req)
	for i := range a {
		if !slices.Equal(a[i], bb[i]) {
			t.Errorf("choice %d differs between runs with the same seed: %v, %v", i, a[i], bb[i])
		}
		one := req
		one.Sampling.Seed = ChoiceSeed(req.Sampling.Seed, i)
		if s := run(1, one)[0]; !slices.Equal(s, a[i]) {
			t.Errorf("choice %d %v, the n=1 answer with its seed %v", i, a[i], s)
		}
	}
	if slices.Equal(a[0], a[1]) && slices.Equal(a[1], a[2]) {
		t.Errorf("three choices at temperature 1 all equal: %v", a[0])
	}
	for _, n := range []int{0, -1, 5, 17, 1 << 30} {
		if _, err := e.GenerateN(ctx, req, n); err == nil {
			t.Errorf("n = %d accepted (4 slots)", n)
		}
	}
}

// TestConstrainedEngine: with a grammar constraint, at temperature 1 and
// several seeds, every sequence of every architecture's random model is a
// JSON document of the schema (checked by encoding/json and by hand),
// ends "stop", and its text is its tokens' bytes; the n-choice path too.
func TestConstrainedEngine(t *testing.T) {
	root := fixtureDir(t)
	b := testBackend(t)
	ctx := context.Background()
	schema := []byte(`{"type":"object","properties":{"a":{"type":"integer","minimum":-5,"maximum":5},"b":{"type":"array","items":{"enum":["x","y"]},"maxItems":3},"c":{"type":"string","maxLength":5}},"required":["a","b","c"],"additionalProperties":false}`)
	gr, err := grammar.Compile(schema)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range fixtureModels {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(root, name)
			m, err := Load(ctx, b, dir, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			tok, err := tokenizer.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			v, err := grammar.FromTokenizer(tok, m.Config.EOS)
			if err != nil {
				t.Fatal(err)
			}
			e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 4, MinPrefill: 16, MinDecodeContext: 16})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			prompt, _ := tok.Encode("json:", true)
			for seed := range uint32(3) {
				// Whitespace tokens biased down: the grammar allows runs of
				// 12 bytes between JSON tokens, which would take a random
				// model past the fixtures' 128-token context.
				r := Request{Prompt: prompt, MaxTokens: 100, Sampling: SamplingParams{Temperature: 1, Seed: seed, LogitBias: whitespaceBias(v)},
					NewConstraint:  func() Constraint { return grammar.NewMatcher(gr, v) },
					NewDetokenizer: func() Detokenizer { return NewByteDetokenizer(v.Token) }}
				chans, err := e.GenerateN(ctx, r, 2)
				if err != nil {
					t.Fatal(err)
				}
				for c, ch := range chans {
					var text strings.Builder
					var ids []int
					finish := ""
					for tk := range ch {
						text.WriteString(tk.Text)
						if tk.ID >= 0 {
							ids = append(ids, tk.ID)
						}
						if tk.Finish != "" {
							finish = tk.Finish
							if tk.Err != nil {
								t.Fatalf("seed %d choice %d: %v", seed, c, tk.Err)
							}
						}
					}
					var raw []byte
					for _, id := range ids {
						raw = append(raw, v.Token(id)...)
					}
					if text.String() != string(raw) {
						t.Errorf("seed %d choice %d: text %q, tokens' bytes %q", seed, c, text.String(), raw)
					}
					if err := checkSmallDoc(text.String()); err != nil || finish != "stop" {
						t.Errorf("seed %d choice %d: %q (finish %s): %v", seed, c, text.String(), finish, err)
					}
				}
			}
		})
	}
}

// whitespaceBias is -100 on every token made of JSON whitespace only.
func whitespaceBias(v *grammar.Vocab) map[int]float32 {
	bias := map[int]float32{}
	for id := range v.Size() {
		b := v.Token(id)
		if len(b) > 0 && strings.Trim(string(b), " \t\r\n") == "" {
			bias[id] = -100
		}
	}
	return bias
}

// checkSmallDoc validates doc against TestConstrainedEngine's schema,
// independently of llm/grammar.
func checkSmallDoc(doc string) error {
	var v struct {
		A *json.Number `json:"a"`
		B *[]string    `json:"b"`
		C *string      `json:"c"`
	}
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return err
	}
	if dec.More() || v.A == nil || v.B == nil || v.C == nil {
		return errBadDoc
	}
	a, err := v.A.Int64()
	if err != nil || a < -5 || a > 5 || len(*v.B) > 3 || len([]rune(*v.C)) > 5 {
		return errBadDoc
	}
	for _, s := range *v.B {
		if s != "x" && s != "y" {
			return errBadDoc
		}
	}
	return nil
}

var errBadDoc = &RequestError{Problem: "document does not validate"}

// TestByteDetokenizer: the bytes come out whole, a character split
// across tokens held back until complete (the expected strings written
// by hand).
func TestByteDetokenizer(t *testing.T) {
	toks := map[int][]byte{0: []byte(`{"a":"`), 1: {0xC3}, 2: {0xA9, '"'}, 3: {0xE2, 0x82}, 4: {0xAC}, 5: {0xF0}}
	d := NewByteDetokenizer(func(id int) []byte { return toks[id] })
	for _, c := range []struct {
		id   int
		want string
	}{{0, `{"a":"`}, {1, ""}, {2, "é\""}, {3, ""}, {4, "€"}, {5, ""}} {
		if got := d.Add(c.id); got != c.want {
			t.Errorf("Add(%d) = %q, want %q", c.id, got, c.want)
		}
	}
	if got := d.Flush(); got != "\xF0" {
		t.Errorf("Flush = %q, want the held byte", got)
	}
}
