package llm

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func ptr[T any](v T) *T { return &v }

// TestGenerationConfig: generation_config.json files as published
// checkpoints ship them give exactly transformers' resolved defaults
// (keys the file leaves out keep GenerationConfig's own: top_k 50,
// top_p 1, temperature 1, do_sample false); keys that would change the
// output and are not implemented are refused by name.
//
// Injected fault: dropping the genNeutral check (treating every known key
// as harmless) let "num_beams": 4 load, and these cases failed.
func TestGenerationConfig(t *testing.T) {
	for _, c := range []struct {
		name  string
		json  string
		want  *GenerationConfig
		field string // refused: the *UnsupportedError's field
		err   string // other errors: a part of the message
	}{
		{name: "llama 3.1 instruct", // meta-llama/Llama-3.1-8B-Instruct's file
			json: `{"bos_token_id": 128000, "do_sample": true, "eos_token_id": [128001, 128008, 128009], "temperature": 0.6, "top_p": 0.9, "transformers_version": "4.42.3"}`,
			want: &GenerationConfig{DoSample: true, Temperature: 0.6, TopK: 50, TopP: 0.9, BOS: 128000, Pad: -1, EOS: []int{128001, 128008, 128009}}},
		{name: "fixture", json: `{"_from_model_config": true, "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2, "transformers_version": "4.51.3"}`,
			want: &GenerationConfig{Temperature: 1, TopK: 50, TopP: 1, BOS: 0, Pad: 2, EOS: []int{1}}},
		{name: "neutral values", json: `{"num_beams": 1, "repetition_penalty": 1.0, "typical_p": 1, "bad_words_ids": null, "renormalize_logits": false, "min_p": 0.05, "top_k": 20, "max_new_tokens": 256, "max_length": 4096}`,
			want: &GenerationConfig{Temperature: 1, TopK: 20, TopP: 1, MinP: 0.05, RepetitionPenalty: 1, MaxNewTokens: 256, MaxLength: 4096, BOS: -1, Pad: -1}},
		{name: "qwen2.5 instruct", // Qwen/Qwen2.5-7B-Instruct's file
			json: `{"bos_token_id": 151643, "pad_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643], "repetition_penalty": 1.05, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "transformers_version": "4.37.0"}`,
			want: &GenerationConfig{DoSample: true, Temperature: 0.7, TopK: 20, TopP: 0.8, RepetitionPenalty: 1.05, BOS: 151643, Pad: 151643, EOS: []int{151645, 151643}}},
		{name: "bad repetition_penalty", json: `{"repetition_penalty": 0}`, err: "repetition_penalty = 0, want > 0"},
		{name: "negative repetition_penalty", json: `{"repetition_penalty": -1.1}`, err: "repetition_penalty = -1.1"},
		{name: "beams", json: `{"num_beams": 4}`, field: "num_beams"},
		{name: "no repeat ngram", json: `{"no_repeat_ngram_size": 3}`, field: "no_repeat_ngram_size"},
		{name: "suppress tokens", json: `{"suppress_tokens": [1, 2]}`, field: "suppress_tokens"},
		{name: "unknown key", json: `{"frobnicate": 1, "do_sample": true}`, field: "frobnicate"},
		{name: "bad temperature", json: `{"temperature": 0}`, err: "temperature = 0, want > 0"},
		{name: "bad top_p", json: `{"top_p": 1.5}`, err: "top_p = 1.5"},
		{name: "bad top_k", json: `{"top_k": -1}`, err: "top_k = -1"},
		{name: "bad eos", json: `{"eos_token_id": "x"}`, err: "eos_token_id"},
		{name: "not json", json: `{`, err: "generation_config.json"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, err := parseGenerationConfig("generation_config.json", []byte(c.json))
			var ue *UnsupportedError
			switch {
			case c.field != "":
				if !errors.As(err, &ue) || ue.Field != c.field {
					t.Fatalf("got %v, want an *UnsupportedError for %s", err, c.field)
				}
			case c.err != "":
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %v, want an error containing %q", err, c.err)
				}
			case err != nil:
				t.Fatal(err)
			case !reflect.DeepEqual(g, c.want):
				t.Fatalf("got %+v, want %+v", g, c.want)
			}
		})
	}
}

// TestGenerationDefaults: a request's unset fields take the checkpoint's
// defaults, its set fields win, as in transformers' generate.
func TestGenerationDefaults(t *testing.T) {
	llama3 := GenerationConfig{DoSample: true, Temperature: 0.6, TopK: 50, TopP: 0.9, BOS: -1, Pad: -1}
	greedyCfg := GenerationConfig{Temperature: 0.7, TopK: 50, TopP: 0.8, BOS: -1, Pad: -1} // do_sample false
	qwen := GenerationConfig{DoSample: true, Temperature: 0.7, TopK: 20, TopP: 0.8, RepetitionPenalty: 1.05, BOS: -1, Pad: -1}
	for _, c := range []struct {
		name string
		g    GenerationConfig
		o    SamplingOptions
		want SamplingParams
	}{
		{"all unset, sampling checkpoint", llama3, SamplingOptions{Seed: 3}, SamplingParams{Temperature: 0.6, TopK: 50, TopP: 0.9, Seed: 3}},
		{"request temperature wins", llama3, SamplingOptions{Temperature: ptr(1.2)}, SamplingParams{Temperature: 1.2, TopK: 50, TopP: 0.9}},
		{"request greedy", llama3, SamplingOptions{Temperature: ptr(0.0), TopK: ptr(5)}, SamplingParams{}},
		{"request top-k off, top-p 1", llama3, SamplingOptions{TopK: ptr(0), TopP: ptr(1.0), MinP: ptr(0.1)}, SamplingParams{Temperature: 0.6, TopP: 1, MinP: 0.1}},
		{"do_sample false: greedy", greedyCfg, SamplingOptions{TopP: ptr(0.5)}, SamplingParams{}},
		{"do_sample false, request samples", greedyCfg, SamplingOptions{Temperature: ptr(1.0)}, SamplingParams{Temperature: 1, TopK: 50, TopP: 0.8}},
		{"checkpoint repetition penalty, greedy", qwen, SamplingOptions{Temperature: ptr(0.0)}, SamplingParams{RepetitionPenalty: 1.05}},
		{"checkpoint repetition penalty, sampled", qwen, SamplingOptions{Seed: 2}, SamplingParams{Temperature: 0.7, TopK: 20, TopP: 0.8, Seed: 2, RepetitionPenalty: 1.05}},
		{"request repetition penalty wins", qwen, SamplingOptions{Temperature: ptr(0.0), RepetitionPenalty: ptr(1.3)}, SamplingParams{RepetitionPenalty: 1.3}},
		{"request repetition penalty 1: off", qwen, SamplingOptions{Temperature: ptr(0.0), RepetitionPenalty: ptr(1.0)}, SamplingParams{}},
	} {
		if got := c.g.Sampling(c.o); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
	for _, c := range []struct {
		name           string
		g              GenerationConfig
		req            *int
		prompt, ctxLen int
		want           int
	}{
		{"request", GenerationConfig{MaxNewTokens: 10}, ptr(7), 5, 64, 7},
		{"max_new_tokens", GenerationConfig{MaxNewTokens: 10, MaxLength: 12}, nil, 5, 64, 10},
		{"max_length less the prompt", GenerationConfig{MaxLength: 12}, nil, 5, 64, 7},
		{"max_length under the prompt: one token", GenerationConfig{MaxLength: 4}, nil, 5, 64, 1},
		{"capped by the context", GenerationConfig{MaxNewTokens: 100}, nil, 5, 64, 59},
		{"unset: the engine's default", GenerationConfig{}, nil, 5, 64, 0},
	} {
		if got := c.g.MaxTokens(c.req, c.prompt, c.ctxLen); got != c.want {
			t.Errorf("%s: got %d, want %d", c.name, got, c.want)
		}
	}
}

// TestLoadConfigGeneration: LoadConfig merges generation_config.json
// (its eos list and bos win over config.json's) and refuses a checkpoint
// whose generation_config.json asks for what is not implemented.
func TestLoadConfigGeneration(t *testing.T) {
	write := func(gen string) string {
		dir := t.TempDir()
		raw, _ := json.Marshal(tinyConfig())
		if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
			t.Fatal(err)
		}
		if gen != "" {
			if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(gen), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	cfg, err := LoadConfig(write(`{"do_sample": true, "temperature": 0.5, "eos_token_id": [1, 7], "bos_token_id": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg.EOS, []int{1, 7}) || cfg.BOS != 3 || !reflect.DeepEqual(cfg.Generation.EOS, []int{1, 7}) ||
		!reflect.DeepEqual(cfg.Generation.Sampling(SamplingOptions{}), SamplingParams{Temperature: 0.5, TopK: 50, TopP: 1}) {
		t.Errorf("got EOS %v BOS %d generation %+v", cfg.EOS, cfg.BOS, cfg.Generation)
	}
	cfg, err = LoadConfig(write(""))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg.EOS, []int{1}) || !reflect.DeepEqual(cfg.Generation.Sampling(SamplingOptions{}), SamplingParams{}) {
		t.Errorf("no generation_config.json: EOS %v, sampling %+v; want [1], greedy", cfg.EOS, cfg.Generation.Sampling(SamplingOptions{}))
	}
	var ue *UnsupportedError
	if _, err := LoadConfig(write(`{"no_repeat_ngram_size": 2}`)); !errors.As(err, &ue) || ue.Field != "no_repeat_ngram_size" {
		t.Errorf("no_repeat_ngram_size 2: got %v", err)
	}
	if c, err := LoadConfig(write(`{"repetition_penalty": 1.1}`)); err != nil || c.Generation.RepetitionPenalty != 1.1 {
		t.Errorf("repetition_penalty 1.1: got %v", err)
	}
	if _, err := LoadConfig(write(`{"eos_token_id": [1, 99]}`)); err == nil || !strings.Contains(err.Error(), "eos token id 99") {
		t.Errorf("eos 99 in a 32-token vocabulary: got %v", err)
	}
	if _, err := LoadConfig(write(`{"pad_token_id": 40}`)); err == nil || !strings.Contains(err.Error(), "pad_token_id 40") {
		t.Errorf("pad 40 in a 32-token vocabulary: got %v", err)
	}
}

// FuzzGenerationConfig: any generation_config.json is refused with an
// error or gives settings in their ranges, never a panic.
func FuzzGenerationConfig(f *testing.F) {
	for _, s := range []string{
		`{"bos_token_id": 128000, "do_sample": true, "eos_token_id": [128001, 128008, 128009], "temperature": 0.6, "top_p": 0.9}`,
		`{"repetition_penalty": 1.05, "top_k": 20}`, `{"num_beams": 1, "max_length": 20}`, `{"eos_token_id": null}`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		g, err := parseGenerationConfig("generation_config.json", raw)
		if err != nil {
			return
		}
		if !(g.Temperature > 0) || g.TopK < 0 || !(g.TopP > 0 && g.TopP <= 1) || !(g.MinP >= 0 && g.MinP <= 1) || g.MaxNewTokens < 0 || g.MaxLength < 0 {
			t.Fatalf("out of range: %+v", g)
		}
		s := g.Sampling(SamplingOptions{})
		if s.Temperature < 0 || s.TopK < 0 {
			t.Fatalf("resolved sampling out of range: %+v", s)
		}
	})
}
