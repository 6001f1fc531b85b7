package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"github.com/tensorbridge/tensorbridge/llm"
	"github.com/tensorbridge/tensorbridge/llm/peft"
	"github.com/tensorbridge/tensorbridge/safetensors"
)

// TestTrainLLMBadInput: what train DIR refuses, each with exit code 2, a
// one-line message naming the problem, and nothing left at --output.
func TestTrainLLMBadInput(t *testing.T) {
	dir, _ := llmFixture(t, "llama")
	other, _ := llmFixture(t, "qwen3")
	tmp := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(tmp, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.jsonl", "{\"text\": \"The quick brown fox jumps over the lazy dog.\"}\n")
	notJSON := write("bad.jsonl", "{\"text\": \"fine\"}\n{\"text\": \"fine\"}\nnot json\n")
	noShape := write("shape.jsonl", "{\"question\": \"no shape\"}\n")
	noWeights := filepath.Join(tmp, "noweights")
	if err := os.MkdirAll(noWeights, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "tokenizer.json", "tokenizer_config.json"} {
		raw, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		write(filepath.Join("noweights", f), string(raw))
	}
	// An adapter for another base model (qwen3: other module shapes).
	otherAdapter := filepath.Join(tmp, "other-adapter")
	if code, _, stderr := run(t, "train", other, "--data", good, "--seq-len", "32", "--batch", "1", "--steps", "1",
		"--lora", "r=2,alpha=4,targets=q_proj", "--backend", testBackend(), "--output", otherAdapter); code != 0 {
		t.Fatalf("making the qwen3 adapter: exit %d: %s", code, stderr)
	}
	out := filepath.Join(tmp, "out")
	base := []string{"train", dir, "--data", good, "--seq-len", "32", "--batch", "1", "--steps", "1",
		"--backend", testBackend(), "--output", out}
	with := func(extra ...string) []string { return append(append([]string(nil), base...), extra...) }
	lora := []string{"--lora", "r=4,alpha=8,targets=q_proj,v_proj"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"line that is not JSON", append(setFlag(base, "--data", notJSON), lora...), "bad.jsonl:3"},
		{"line with none of the shapes", append(setFlag(base, "--data", noShape), lora...), "shape.jsonl:1"},
		{"directory without safetensors", append(append([]string{"train", noWeights}, base[2:]...), lora...), "safetensors"},
		{"target naming no module", with("--lora", "r=4,alpha=8,targets=qproj"), "qproj"},
		{"r of zero", with("--lora", "r=0,alpha=8,targets=q_proj"), "r=0"},
		{"seq-len over the context", append(setFlag(base, "--seq-len", "100000"), lora...), "context"},
		{"adapter of another base model", with("--lora-init", otherAdapter), "q_proj"},
		{"no mode", base, "--lora"},
		{"two modes", with("--full", "--lora", "r=4,alpha=8,targets=q_proj"), "exactly one"},
		{"dropout of 1 or more", with("--lora", "r=4,alpha=8,targets=q_proj,dropout=1.5"), "dropout"},
		{"merge with full", with("--full", "--merge"), "--merge"},
		{"tp", append(with("--mesh", "data=1,model=2", "--strategy", "tp"), lora...), "--strategy tp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := run(t, tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "panic") {
				t.Errorf("exit %d, stderr %q; want exit 2 mentioning %q", code, stderr, tc.want)
			}
			oneLineStderr(t, tc.name, stderr)
			if _, err := os.Lstat(out); err == nil {
				t.Errorf("%s left %s", tc.name, out)
			}
		})
	}
}

// finetuneRefs is a fixture checkpoint's refs.json from
// scripts/gen-finetune-fixtures.py (transformers + PEFT).
type finetuneRefs struct {
	ChatTemplate string `json:"messages_chat_template"`
	Runs         map[string]struct {
		Data        string      `json:"data"`
		Init        string      `json:"init"`
		Losses      []float64   `json:"losses"`
		ProbeIDs    []int       `json:"probe_ids"`
		ProbeLogits [][]float64 `json:"probe_logits"`
	} `json:"runs"`
	Merged struct {
		ProbeIDs []int       `json:"probe_ids"`
		Logits   [][]float64 `json:"logits"`
	} `json:"merged"`
}

// finetuneFixture returns the references of arch and their directory
// (scripts/setup-finetune-fixtures.sh), skipping when they are missing.
func finetuneFixture(t *testing.T, arch string) (string, *finetuneRefs) {
	t.Helper()
	home, _ := os.UserHomeDir()
	dir := filepath.Join(home, ".cache", "tensorbridge", "finetune-fixtures", arch)
	raw, err := os.ReadFile(filepath.Join(dir, "refs.json"))
	if err != nil {
		testreq.Skipf(t, "fine-tuning references not installed (scripts/setup-finetune-fixtures.sh): %v", err)
	}
	var r finetuneRefs
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return dir, &r
}

// TestTrainLLMMatchesPEFT: train DIR, from the adapter PEFT saved
// (--lora-init) or on every weight (--full), 6 AdamW steps on each of the
// three JSONL shapes, gives every step's loss within 1e-5 relative of
// transformers + PEFT's, and the model it writes gives their final
// logits within 1e-4 of the largest (the adapter merged into the base:
// SaveCheckpoint, then llm.Load).
func TestTrainLLMMatchesPEFT(t *testing.T) {
	for _, arch := range []string{"llama", "mistral", "qwen2", "qwen3"} {
		for _, mode := range []string{"lora", "full"} {
			for _, shape := range []string{"text", "prompt", "messages"} {
				t.Run(arch+"/"+mode+"-"+shape, func(t *testing.T) { trainMatchesPEFT(t, arch, mode, shape) })
			}
		}
	}
}

// TestTrainLLMRemat: with --remat (each layer recomputed in the backward
// pass) the runs of TestTrainLLMMatchesPEFT on chat rows still give PEFT's
// losses and logits, for every architecture, LoRA and full. The guard was
// proved by injecting a fault: with the layer's LoRA B left out of the
// recomputation's gradients (llm/remat.go) every LoRA row fails.
func TestTrainLLMRemat(t *testing.T) {
	for _, arch := range []string{"llama", "mistral", "qwen2", "qwen3"} {
		for _, mode := range []string{"lora", "full"} {
			t.Run(arch+"/"+mode, func(t *testing.T) { trainMatchesPEFT(t, arch, mode, "messages", "--remat") })
		}
	}
}

// trainMatchesPEFT runs train DIR as PEFT's reference run mode-shape of
// the arch fixture did, with extra flags, and compares every step's loss
// and the written model's logits with the reference's.
func trainMatchesPEFT(t *testing.T, arch, mode, shape string, extra ...string) {
	base, _ := llmFixture(t, arch)
	fix, refs := finetuneFixture(t, arch)
	name := mode + "-" + shape
	ref, ok := refs.Runs[name]
	if !ok {
		t.Fatalf("refs.json has no run %q", name)
	}
	out := filepath.Join(t.TempDir(), "out")
	logPath := filepath.Join(t.TempDir(), "log.jsonl")
	args := []string{"train", base, "--data", filepath.Join("..", "..", "llm", "sft", "testdata", ref.Data),
		"--seq-len", "64", "--batch", "2", "--steps", fmt.Sprint(len(ref.Losses)), "--lr", "1e-3", "--weight-decay", "0.01",
		"--backend", testBackend(), "--log-json", logPath, "--output", out}
	if mode == "lora" {
		args = append(args, "--lora-init", filepath.Join(fix, ref.Init))
	} else {
		args = append(args, "--full")
	}
	if shape == "messages" {
		tmpl := filepath.Join(t.TempDir(), "chatml.jinja")
		if err := os.WriteFile(tmpl, []byte(refs.ChatTemplate), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--chat-template", tmpl)
	}
	if code, _, stderr := run(t, append(args, extra...)...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got := readLog(t, logPath)
	if len(got) != len(ref.Losses) {
		t.Fatalf("%d logged steps, want %d", len(got), len(ref.Losses))
	}
	for i, want := range ref.Losses {
		if got[i].Loss == nil {
			t.Fatalf("step %d: no loss logged", i+1)
		}
		if d := math.Abs(*got[i].Loss-want) / math.Abs(want); d > 1e-5 {
			t.Errorf("step %d: loss %.9g, PEFT %.9g (relative %.2g)", i+1, *got[i].Loss, want, d)
		}
	}
	model := out
	if mode == "lora" {
		model = filepath.Join(t.TempDir(), "merged")
		ad, err := peft.Read(out, peftModulesOf(t, base))
		if err != nil {
			t.Fatal(err)
		}
		if err := llm.SaveCheckpoint(context.Background(), base, model, nil, ad); err != nil {
			t.Fatal(err)
		}
	}
	checkLogits(t, model, ref.ProbeIDs, ref.ProbeLogits)
}

// TestMergeMatchesPEFT: the adapter PEFT saved, merged by train --merge's
// writer, gives merge_and_unload's logits.
func TestMergeMatchesPEFT(t *testing.T) {
	for _, arch := range []string{"llama", "mistral", "qwen2", "qwen3"} {
		t.Run(arch, func(t *testing.T) {
			base, _ := llmFixture(t, arch)
			fix, refs := finetuneFixture(t, arch)
			ad, err := peft.Read(filepath.Join(fix, "adapter0"), peftModulesOf(t, base))
			if err != nil {
				t.Fatal(err)
			}
			model := filepath.Join(t.TempDir(), "merged")
			if err := llm.SaveCheckpoint(context.Background(), base, model, nil, ad); err != nil {
				t.Fatal(err)
			}
			checkLogits(t, model, refs.Merged.ProbeIDs, refs.Merged.Logits)
		})
	}
}

func peftModulesOf(t *testing.T, dir string) []peft.Module {
	c, err := llm.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	return c.PEFTModules()
}

// checkLogits loads the checkpoint in dir and compares its logits of ids
// with want, within 1e-4 of the largest |logit|.
func checkLogits(t *testing.T, dir string, ids []int, want [][]float64) {
	t.Helper()
	ctx := context.Background()
	b, err := tensorbridge.Open(ctx, testBackend())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m, err := llm.Load(ctx, b, dir, llm.LoadOptions{Precision: "float32"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	got, err := m.PromptLogits(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	v := len(want[0])
	var scale, worst float64
	for i := range want {
		for j, w := range want[i] {
			scale = max(scale, math.Abs(w))
			worst = max(worst, math.Abs(float64(got[i*v+j])-w))
		}
	}
	if worst > 1e-4*scale {
		t.Errorf("logits differ from the reference by %.3g (largest |logit| %.3g)", worst, scale)
	}
}

// TestTrainLLMMesh: LoRA over a mesh of two xla-cpu devices, data-parallel
// and fsdp, gives PEFT's losses as one device does (within 1e-5).
func TestTrainLLMMesh(t *testing.T) {
	ctx := context.Background()
	b, err := tensorbridge.Open(ctx, "xla-cpu:devices=2")
	if err != nil {
		testreq.Skipf(t, "xla-cpu: %v", err)
	}
	b.Close()
	base, _ := llmFixture(t, "llama")
	fix, refs := finetuneFixture(t, "llama")
	ref := refs.Runs["lora-text"]
	for _, strategy := range []string{"dp", "fsdp"} {
		t.Run(strategy, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "log.jsonl")
			code, _, stderr := run(t, "train", base, "--data", filepath.Join("..", "..", "llm", "sft", "testdata", ref.Data),
				"--seq-len", "64", "--batch", "2", "--steps", fmt.Sprint(len(ref.Losses)), "--lr", "1e-3", "--weight-decay", "0.01",
				"--lora-init", filepath.Join(fix, ref.Init), "--backend", "xla-cpu:devices=2", "--mesh", "data=2", "--strategy", strategy,
				"--log-json", logPath)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			for i, l := range readLog(t, logPath) {
				if d := math.Abs(*l.Loss-ref.Losses[i]) / ref.Losses[i]; d > 1e-5 {
					t.Errorf("step %d: loss %.9g, PEFT %.9g (relative %.2g)", i+1, *l.Loss, ref.Losses[i], d)
				}
			}
		})
	}
}

// TestTrainLLMDropout: LoRA dropout draws its masks from --seed and the
// step's position: the same seed gives the same losses, another seed
// others, dropout changes the loss of step 2 (taken with the masks),
// a run stopped at step 3 and resumed gives the uninterrupted run's
// losses bitwise, and so does a run with --remat (the recomputed layers
// draw the masks their forward pass drew; proved by recomputing from the
// state the layer ended with: step 2 differs).
func TestTrainLLMDropout(t *testing.T) {
	base, _ := llmFixture(t, "llama")
	_, refs := finetuneFixture(t, "llama")
	ref := refs.Runs["lora-text"]
	losses := func(t *testing.T, steps int, extra ...string) []float64 {
		t.Helper()
		logPath := filepath.Join(t.TempDir(), "log.jsonl")
		args := append([]string{"train", base, "--data", filepath.Join("..", "..", "llm", "sft", "testdata", ref.Data),
			"--seq-len", "64", "--batch", "2", "--steps", fmt.Sprint(steps), "--backend", testBackend(),
			"--log-json", logPath}, extra...)
		if code, _, stderr := run(t, args...); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var out []float64
		for _, l := range readLog(t, logPath) {
			out = append(out, *l.Loss)
		}
		return out
	}
	drop := func(seed string) []string {
		return []string{"--lora", "r=8,alpha=16,targets=q_proj,v_proj,dropout=0.3", "--seed", seed}
	}
	a, b, c := losses(t, 6, drop("1")...), losses(t, 6, drop("1")...), losses(t, 6, drop("2")...)
	none := losses(t, 2, "--lora", "r=8,alpha=16,targets=q_proj,v_proj", "--seed", "1")
	if !slices.Equal(a, b) {
		t.Errorf("same seed, other losses: %v and %v", a, b)
	}
	if slices.Equal(a, c) {
		t.Errorf("seeds 1 and 2 gave the same losses %v", a)
	}
	// A new adapter's B is zero, so step 1 is the base model's loss either
	// way; after one update the adapter reads dropped inputs.
	if a[0] != none[0] || a[1] == none[1] {
		t.Errorf("losses with dropout %v, without %v: want step 1 equal and step 2 different", a[:2], none)
	}
	ckpt := t.TempDir()
	first := losses(t, 3, append(drop("1"), "--checkpoint-dir", ckpt, "--checkpoint-every", "3")...)
	rest := losses(t, 6, append(drop("1"), "--checkpoint-dir", ckpt, "--resume")...)
	if got := append(first, rest...); !slices.Equal(got, a) {
		t.Errorf("stopped at 3 and resumed: %v, uninterrupted %v", got, a)
	}
	if r := losses(t, 6, append(drop("1"), "--remat")...); !slices.Equal(r, a) {
		t.Errorf("with --remat: %v, without %v", r, a)
	}
}

// TestTrainLLMFreeze: --full --freeze REGEXP trains every weight but those
// it matches, which come out bitwise as they went in; the first step's
// loss (before any update) is the full fine-tune's.
func TestTrainLLMFreeze(t *testing.T) {
	base, _ := llmFixture(t, "llama")
	_, refs := finetuneFixture(t, "llama")
	ref := refs.Runs["full-text"]
	out := filepath.Join(t.TempDir(), "out")
	logPath := filepath.Join(t.TempDir(), "log.jsonl")
	code, stdout, stderr := run(t, "train", base, "--data", filepath.Join("..", "..", "llm", "sft", "testdata", ref.Data),
		"--seq-len", "64", "--batch", "2", "--steps", "2", "--full", "--freeze", `embed_tokens|layers\.0\.`,
		"--backend", testBackend(), "--log-json", logPath, "--output", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if l := *readLog(t, logPath)[0].Loss; math.Abs(l-ref.Losses[0])/ref.Losses[0] > 1e-5 {
		t.Errorf("step 1: loss %.9g, transformers %.9g", l, ref.Losses[0])
	}
	before, after := readTensors(t, base), readTensors(t, out)
	for name, w := range before {
		frozen := strings.Contains(name, "embed_tokens") || strings.Contains(name, "layers.0.")
		if same := slices.Equal(w, after[name]); same != frozen {
			t.Errorf("%s: unchanged %v, frozen %v", name, same, frozen)
		}
	}
	if !strings.Contains(stdout, "freezing 10 tensors") {
		t.Errorf("stdout %q: want 10 frozen tensors (embed_tokens and layer 0's 9)", stdout)
	}
}

// readTensors reads every float32 tensor of a checkpoint directory
// through llm (the decoder's view: SaveCheckpoint with nothing trained).
func readTensors(t *testing.T, dir string) map[string][]float32 {
	t.Helper()
	tmp := filepath.Join(t.TempDir(), "copy")
	if err := llm.SaveCheckpoint(context.Background(), dir, tmp, nil, nil); err != nil {
		t.Fatal(err)
	}
	h, err := safetensors.Read(filepath.Join(tmp, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(tmp, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	for name, ts := range h.Tensors {
		b := raw[ts.Begin:ts.End]
		v := make([]float32, len(b)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		out[name] = v
	}
	return out
}
