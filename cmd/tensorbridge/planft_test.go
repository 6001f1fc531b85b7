package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

var llama3Dir = filepath.Join("..", "..", "plan", "testdata", "llm", "llama3-8b")

// plan --train --seq-len --json on the committed Llama 3 8B config: LoRA
// (r=8 on q and v, int8 base) fits one v5e chip with remat, a full AdamW
// fine-tune does not; the adapter is 32 layers x 8 x ((4096+4096) +
// (4096+1024)) = 3407872 parameters, by hand.
func TestPlanFineTuneCLI(t *testing.T) {
	type mem struct {
		Total *int64   `json:"total_bytes"`
		Fits  *bool    `json:"fits"`
		Step  *float64 `json:"step_seconds"`
	}
	type report struct {
		Method  string `json:"method"`
		Trained int64  `json:"trained_params"`
		LoRA    *struct {
			Modules map[string]int `json:"modules"`
			Params  int64          `json:"adapter_params"`
		} `json:"lora"`
		Without    mem   `json:"without_remat"`
		With       mem   `json:"with_remat"`
		Fits       *bool `json:"fits"`
		Checkpoint *struct {
			Dir string `json:"dir"`
		} `json:"checkpoint"`
	}
	args := func(extra ...string) []string {
		return append([]string{"plan", "--slice", "v5e-1", "--train", "--seq-len", "512", "--batch", "1", "--remat", "--json"}, extra...)
	}
	cases := []struct {
		name    string
		args    []string
		method  string
		trained int64
		fits    bool
	}{
		{"lora dir", args(llama3Dir, "--lora", "r=8,alpha=16,targets=q_proj,v_proj", "--base-precision", "int8"), "lora", 3407872, true},
		{"lora config.json", args(filepath.Join(llama3Dir, "config.json"), "--lora", "r=8,alpha=16,targets=q_proj,v_proj", "--base-precision", "int8"), "lora", 3407872, true},
		{"full", args(llama3Dir), "full", 8030261248, false},
		{"full flag", args(llama3Dir, "--full"), "full", 8030261248, false},
		{"generate", args("--generate", "llama-7b", "--lora", "r=16,alpha=32,targets=q_proj"), "lora", 32 * 16 * (4096 + 4096), false},
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
			if r.Method != c.method || r.Trained != c.trained || r.Fits == nil || *r.Fits != c.fits {
				t.Errorf("method %q trained %d fits %v; want %q %d %v", r.Method, r.Trained, r.Fits, c.method, c.trained, c.fits)
			}
			for _, m := range []mem{r.Without, r.With} {
				if m.Total == nil || m.Fits == nil || m.Step == nil || *m.Step <= 0 {
					t.Errorf("fields missing: %s", out)
				}
			}
			if c.method == "lora" && (r.LoRA == nil || r.LoRA.Params != c.trained) {
				t.Errorf("lora %+v", r.LoRA)
			}
			if (r.Checkpoint != nil) != (c.name == "lora dir" || c.name == "full" || c.name == "full flag") {
				t.Errorf("checkpoint %v", r.Checkpoint)
			}
		})
	}
	code, out, errOut := run(t, "plan", llama3Dir, "--slice", "v5e-1", "--train", "--seq-len", "2048", "--batch", "1",
		"--lora", "r=8,alpha=16,targets=q_proj,v_proj", "--base-precision", "int8")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"no remat", "does not fit", "fits with --remat", "AdamW state", "activations", "2205.05198"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

// Bad input exits 2 with a message naming what is wrong.
func TestPlanFineTuneCLIBadInput(t *testing.T) {
	ft := func(extra ...string) []string {
		return append([]string{"plan", llama3Dir, "--slice", "v5e-1", "--train", "--seq-len", "512", "--batch", "1"}, extra...)
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"r zero", ft("--lora", "r=0,alpha=16,targets=q_proj"), "r > 0"},
		{"r negative", ft("--lora", "r=-2,alpha=16,targets=q_proj"), "r > 0"},
		{"unknown target", ft("--lora", "r=8,alpha=16,targets=q_proj,qkv_proj"), `"qkv_proj"`},
		{"target names listed", ft("--lora", "r=8,alpha=16,targets=attn"), "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj"},
		{"seq over context", ft("--seq-len", "8193"), "max_position_embeddings 8192"},
		{"no seq-len", []string{"plan", llama3Dir, "--slice", "v5e-1", "--train", "--batch", "1"}, "needs --seq-len"},
		{"no batch", []string{"plan", llama3Dir, "--slice", "v5e-1", "--train", "--seq-len", "8"}, "needs --batch"},
		{"lora without train", []string{"plan", llama3Dir, "--slice", "v5e-1", "--lora", "r=8,alpha=16,targets=q_proj"}, "only apply with --train"},
		{"lora and full", ft("--full", "--lora", "r=8,alpha=16,targets=q_proj"), "one or the other"},
		{"base precision full", ft("--base-precision", "int8"), "is for LoRA"},
		{"batch over devices", []string{"plan", llama3Dir, "--slice", "v5e-8", "--train", "--seq-len", "8", "--batch", "4"}, "multiple of the data axis 8"},
		{"unknown strategy", ft("--strategy", "zero3"), `"zero3"`},
		{"tp not dividing", []string{"plan", llama3Dir, "--slice", "v5e-8", "--train", "--seq-len", "8", "--batch", "8", "--strategy", "tp=3"}, "divisor of the slice's 8 devices"},
		{"sgd", ft("--optimizer", "sgd"), "AdamW"},
		{"llm flags", ft("--context", "8"), "--context"},
		{"missing dir", []string{"plan", "no-such-dir", "--slice", "v5e-1", "--train", "--seq-len", "8", "--batch", "1"}, "no-such-dir"},
		{"mixtral", []string{"plan", filepath.Join("..", "..", "plan", "testdata", "llm", "mixtral"), "--slice", "v5e-1", "--train", "--seq-len", "8", "--batch", "1"}, "plan:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, errOut := run(t, c.args...)
			if code != 2 || !strings.Contains(errOut, c.want) {
				t.Fatalf("exit %d, stderr %q; want exit 2 with %q", code, errOut, c.want)
			}
		})
	}
}

// TestPlanFineTuneCLIMesh: --strategy fsdp, tp=M and auto reach the plan
// and its JSON and text: Llama 3 8B full AdamW over v5e-16 fsdp stores
// 8030261248/16 trained parameters a device and fits with remat; tp=4 on
// v5e-8 is a 2 x 4 mesh; auto on v5e-8 says why it chose.
func TestPlanFineTuneCLIMesh(t *testing.T) {
	type report struct {
		Strategy string  `json:"strategy"`
		Data     int     `json:"data_parallel"`
		Model    int     `json:"model_parallel"`
		PerDev   int64   `json:"trained_params_per_device"`
		Reason   string  `json:"strategy_reason"`
		Fits     bool    `json:"fits"`
		ICI      float64 `json:"ici_bandwidth_per_chip"`
		With     struct {
			Coll float64 `json:"collective_bytes_per_device"`
			Sec  float64 `json:"collective_seconds"`
		} `json:"with_remat"`
	}
	base := []string{"plan", llama3Dir, "--train", "--seq-len", "1024", "--remat", "--json"}
	cases := []struct {
		name        string
		args        []string
		strategy    string
		data, model int
		perDev      int64
		fits        bool
	}{
		{"fsdp v5e-16", []string{"--slice", "v5e-16", "--batch", "16", "--strategy", "fsdp"}, "fsdp", 16, 1, 8030261248 / 16, true},
		{"fsdp v5e-8", []string{"--slice", "v5e-8", "--batch", "8", "--strategy", "fsdp"}, "fsdp", 8, 1, 8030261248 / 8, false},
		{"tp=4 v5e-8", []string{"--slice", "v5e-8", "--batch", "8", "--strategy", "tp=4"}, "tp", 2, 4, (8030261248-266240)/4 + 266240, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := run(t, append(base, c.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var r report
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if r.Strategy != c.strategy || r.Data != c.data || r.Model != c.model || r.PerDev != c.perDev || r.Fits != c.fits {
				t.Errorf("got %+v; want %s %dx%d per device %d fits %v", r, c.strategy, c.data, c.model, c.perDev, c.fits)
			}
			if r.ICI != 400e9 || r.With.Coll <= 0 || r.With.Sec != r.With.Coll/400e9 {
				t.Errorf("collectives %+v at ICI %g", r.With, r.ICI)
			}
		})
	}
	code, out, errOut := run(t, "plan", llama3Dir, "--slice", "v5e-8", "--train", "--seq-len", "1024", "--batch", "8", "--remat")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"auto chose", "dp: ", "fsdp: ", "tp: ", "collectives", "data "} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}
