package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// plan --llm --json: the named fields, by hand for Llama 2 7B on a v5e-8
// (32 layers x 32 kv heads x 128 x 2 x 2 bytes = 512 KiB per token) and
// for the committed Llama 3 8B config.json (8 kv heads: 128 KiB).
func TestPlanLLMCLI(t *testing.T) {
	type step struct {
		Batch     *int     `json:"batch"`
		Step      *float64 `json:"step_seconds"`
		TokPerSec *float64 `json:"tokens_per_second"`
		PerChip   *float64 `json:"tokens_per_second_per_chip"`
		Bound     string   `json:"bound"`
	}
	type report struct {
		Strategy      string `json:"strategy"`
		KVPerToken    *int64 `json:"kv_bytes_per_token"`
		KVPerTokenDev *int64 `json:"kv_bytes_per_token_per_device"`
		KVPerSeqDev   *int64 `json:"kv_bytes_per_sequence_per_device"`
		WeightsDev    *int64 `json:"weights_bytes_per_device"`
		MaxSequences  *int   `json:"max_sequences"`
		Fits          *bool  `json:"fits"`
		Decode        []step `json:"decode"`
		Prefill       *struct {
			Seconds *float64 `json:"seconds"`
		} `json:"prefill"`
		Checkpoint *struct {
			Dir string `json:"dir"`
		} `json:"checkpoint"`
	}
	cases := []struct {
		name       string
		args       []string
		kv, kvDev  int64
		checkpoint bool
	}{
		{"llama-7b", []string{"plan", "--generate", "llama-7b", "--slice", "v5e-8", "--llm", "--context", "4096", "--strategy", "tp=8", "--json"}, 512 << 10, 64 << 10, false},
		{"llama3-8b dir", []string{"plan", filepath.Join("..", "..", "plan", "testdata", "llm", "llama3-8b"), "--slice", "v5e-8", "--llm", "--context", "8192", "--batch", "8", "--json"}, 128 << 10, 16 << 10, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := run(t, c.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var r report
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if r.KVPerToken == nil || *r.KVPerToken != c.kv || r.KVPerTokenDev == nil || *r.KVPerTokenDev != c.kvDev {
				t.Errorf("kv per token %v, per device %v; want %d, %d", r.KVPerToken, r.KVPerTokenDev, c.kv, c.kvDev)
			}
			if r.WeightsDev == nil || r.MaxSequences == nil || r.Fits == nil || !*r.Fits || len(r.Decode) == 0 || r.Prefill == nil || r.Prefill.Seconds == nil {
				t.Fatalf("fields missing: %s", out)
			}
			for _, d := range r.Decode {
				if d.Batch == nil || d.Step == nil || d.TokPerSec == nil || d.PerChip == nil || d.Bound == "" {
					t.Errorf("decode step fields missing: %+v", d)
				}
			}
			if (r.Checkpoint != nil) != c.checkpoint {
				t.Errorf("checkpoint %v, want present %v", r.Checkpoint, c.checkpoint)
			}
		})
	}
	// The text report names what a reader looks for.
	code, out, errOut := run(t, "plan", "--generate", "llama-7b", "--slice", "v5e-8", "--llm", "--context", "4096")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"512 KiB per token", "2.00 GiB per 4096-token sequence", "51 sequences of 4096 tokens", "decode", "prefill", "tokens/s/chip"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

func TestPlanLLMCLIBadFlags(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no context", []string{"plan", "--generate", "llama-7b", "--slice", "v5e-8", "--llm"}, "--llm needs --context"},
		{"context without llm", []string{"plan", "--generate", "llama-7b", "--slice", "v5e-8", "--context", "8"}, "only apply with --llm"},
		{"train flags", []string{"plan", "--generate", "llama-7b", "--slice", "v5e-8", "--llm", "--context", "8", "--optimizer", "sgd"}, "do not apply with --llm"},
		{"dim", []string{"plan", "--generate", "llama-7b", "--slice", "v5e-8", "--llm", "--context", "8", "--dim", "batch=2"}, "do not apply with --llm"},
		{"encoder", []string{"plan", "--generate", "bert-base", "--slice", "v5e-8", "--llm", "--context", "8"}, "is an encoder"},
		{"file not dir", []string{"plan", filepath.Join("..", "..", "plan", "testdata", "llm", "tiny", "config.json"), "--slice", "v5e-8", "--llm", "--context", "8"}, "is a file"},
		{"both", []string{"plan", "x", "--generate", "llama-7b", "--slice", "v5e-8", "--llm", "--context", "8"}, "exactly one checkpoint DIR"},
		{"kv dtype", []string{"plan", "--generate", "llama-7b", "--slice", "v5e-8", "--llm", "--context", "8", "--kv-dtype", "int3"}, `kv dtype "int3"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, errOut := run(t, c.args...)
			if code == 0 || !strings.Contains(errOut, c.want) {
				t.Fatalf("exit %d, stderr %q; want failure with %q", code, errOut, c.want)
			}
		})
	}
}
