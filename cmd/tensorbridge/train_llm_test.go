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
		{"tp without a model axis", append(with("--mesh", "data=1", "--strategy", "tp"), lora...), "--strategy"},
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

// TestTrainLLMTPWhole: with a model axis that divides none of a tensor's
// dimensions (3 devices, hidden size 64), tp keeps it whole on every device
// and train says so, tensor by tensor, instead of replicating it silently;
// the run still trains. Proved by dropping the lines: the test fails.
func TestTrainLLMTPWhole(t *testing.T) {
	b, err := tensorbridge.Open(context.Background(), "xla-cpu:devices=3")
	if err != nil {
		testreq.Skipf(t, "xla-cpu: %v", err)
	}
	b.Close()
	base, _ := llmFixture(t, "llama")
	code, stdout, stderr := run(t, "train", base, "--data", filepath.Join("..", "..", "llm", "sft", "testdata", "text.jsonl"),
		"--seq-len", "32", "--batch", "2", "--steps", "1", "--lora", "r=4,alpha=8,targets=q_proj,v_proj",
		"--backend", "xla-cpu:devices=3", "--mesh", "data=1,model=3", "--strategy", "tp")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"tp: model.layers.0.self_attn.q_proj.weight: dimension 0 (64) is not a multiple of 3; replicated",
		"tp: base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight: dimension 0 (32) is not a multiple of 3; replicated",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
}

// TestTrainONNXRefusesLLMFlags: a checkpoint directory's flags given for
// an ONNX model are a usage error naming the flag, not ignored (they were
// before: --remat and --lora trained the model without either).
func TestTrainONNXRefusesLLMFlags(t *testing.T) {
	model := filepath.Join("..", "..", "testdata", "train", "mlp_ce")
	values := map[string]string{"seq-len": "8", "lora": "r=4,alpha=8,targets=q_proj", "lora-init": t.TempDir(),
		"base-precision": "bfloat16", "seed": "1", "chat-template": "t.jinja"}
	for _, name := range llmOnlyFlags {
		t.Run(name, func(t *testing.T) {
			flag := "--" + name
			if v, ok := values[name]; ok {
				flag += "=" + v
			}
			code, _, stderr := run(t, "train", filepath.Join(model, "model.onnx"), "--data", filepath.Join(model, "data"),
				"--steps", "1", "--batch", "8", "--loss", "cross_entropy:logits:labels", flag)
			if code != 2 || !strings.Contains(stderr, "--"+name) || !strings.Contains(stderr, "ONNX") {
				t.Errorf("exit %d, stderr %q; want exit 2 naming --%s", code, stderr, name)
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

// TestTrainLLMMesh: LoRA and a full fine-tune over meshes of xla-cpu host
// devices (data-parallel, fsdp, and tensor-parallel: data=1,model=2 and
// data=2,model=2) give transformers + PEFT's losses (within 1e-5, as one
// device does) and the one-device run's losses and written tensors within
// float rounding (meshTol: partial sums reduced in another order). The tp
// rows stop at step 3 with a checkpoint and resume, so the checkpoint
// gathers the split weights and optimizer state and the resumed run
// splits them again.
func TestTrainLLMMesh(t *testing.T) {
	ctx := context.Background()
	b, err := tensorbridge.Open(ctx, "xla-cpu:devices=4")
	if err != nil {
		testreq.Skipf(t, "xla-cpu: %v", err)
	}
	b.Close()
	base, _ := llmFixture(t, "llama")
	fix, refs := finetuneFixture(t, "llama")
	for _, mode := range []string{"lora", "full"} {
		ref := refs.Runs[mode+"-text"]
		train := func(t *testing.T, backend string, steps int, extra ...string) []float64 {
			t.Helper()
			logPath := filepath.Join(t.TempDir(), "log.jsonl")
			args := []string{"train", base, "--data", filepath.Join("..", "..", "llm", "sft", "testdata", ref.Data),
				"--seq-len", "64", "--batch", "2", "--steps", fmt.Sprint(steps), "--lr", "1e-3", "--weight-decay", "0.01",
				"--backend", backend, "--log-json", logPath}
			if mode == "lora" {
				args = append(args, "--lora-init", filepath.Join(fix, ref.Init))
			} else {
				args = append(args, "--full")
			}
			if code, _, stderr := run(t, append(args, extra...)...); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var out []float64
			for _, l := range readLog(t, logPath) {
				out = append(out, *l.Loss)
			}
			return out
		}
		oneOut := filepath.Join(t.TempDir(), "one")
		one := train(t, "xla-cpu", len(ref.Losses), "--output", oneOut)
		for _, row := range []struct{ strategy, mesh, backend string }{
			{"dp", "data=2", "xla-cpu:devices=2"},
			{"fsdp", "data=2", "xla-cpu:devices=2"},
			{"tp", "data=1,model=2", "xla-cpu:devices=2"},
			{"tp", "data=2,model=2", "xla-cpu:devices=4"},
		} {
			t.Run(mode+"/"+row.strategy+"/"+row.mesh, func(t *testing.T) {
				out := filepath.Join(t.TempDir(), "out")
				flags := []string{"--mesh", row.mesh, "--strategy", row.strategy, "--output", out}
				var got []float64
				if row.strategy == "tp" {
					ckpt := filepath.Join(t.TempDir(), "ckpt")
					got = train(t, row.backend, 3, append(flags[:4:4], "--checkpoint-dir", ckpt, "--checkpoint-every", "3")...)
					got = append(got, train(t, row.backend, len(ref.Losses), append(flags, "--checkpoint-dir", ckpt, "--resume")...)...)
				} else {
					got = train(t, row.backend, len(ref.Losses), flags...)
				}
				if len(got) != len(ref.Losses) {
					t.Fatalf("%d logged steps, want %d", len(got), len(ref.Losses))
				}
				var gap float64
				for i, want := range ref.Losses {
					if d := math.Abs(got[i]-want) / want; d > 1e-5 {
						t.Errorf("step %d: loss %.9g, PEFT %.9g (relative %.2g)", i+1, got[i], want, d)
					}
					gap = max(gap, math.Abs(got[i]-one[i])/one[i])
				}
				if gap > meshTol.loss {
					t.Errorf("losses %v, one device %v: relative gap %.3g > %.3g", got, one, gap, meshTol.loss)
				}
				wgap := compareMeshOutputs(t, mode, oneOut, out)
				t.Logf("loss gap %.3g relative, written tensors %.3g of the largest", gap, wgap)
			})
		}
	}
}

// meshTol bounds a mesh run's difference from the one-device run: each
// step's loss (relative) and each written tensor (absolute, relative to
// the tensor's largest element; per mode). Measured (go test -run
// TestTrainLLMMesh -v, xla-cpu, 2026-11-28): losses at most 3.4e-7;
// adapters at most 8.2e-7; whole checkpoints at most 6.0e-5 (fsdp and tp
// alike; the cpu engine's one-device run differs from xla-cpu's by 8.0e-5:
// AdamW's m/sqrt(v) turns a rounding-sized change in a near-zero gradient
// into a change of order lr). The bounds are within 10x of these.
var meshTol = struct {
	loss   float64
	tensor map[string]float64
}{loss: 3e-6, tensor: map[string]float64{"lora": 8e-6, "full": 6e-4}}

// compareMeshOutputs checks the tensors a mesh run wrote (adapter or whole
// checkpoint) against the one-device run's, within meshTol.tensor of each
// tensor's largest magnitude, and returns the largest such gap.
func compareMeshOutputs(t *testing.T, mode, oneDir, meshDir string) float64 {
	t.Helper()
	read := func(dir string) map[string][]float32 {
		if mode == "lora" {
			return readSafetensors(t, filepath.Join(dir, "adapter_model.safetensors"))
		}
		return readTensors(t, dir)
	}
	want, got := read(oneDir), read(meshDir)
	if len(got) != len(want) || len(want) == 0 {
		t.Fatalf("%d tensors written, one device wrote %d", len(got), len(want))
	}
	var worst float64
	for name, w := range want {
		g := got[name]
		if len(g) != len(w) {
			t.Fatalf("%s: %d elements, one device %d", name, len(g), len(w))
		}
		var big, d float64
		for i := range w {
			big = max(big, math.Abs(float64(w[i])))
			d = max(d, math.Abs(float64(g[i]-w[i])))
		}
		if big > 0 {
			d /= big
		}
		if d > meshTol.tensor[mode] {
			t.Errorf("%s: differs from one device's by %.3g of its largest element (> %.3g)", name, d, meshTol.tensor[mode])
		}
		worst = max(worst, d)
	}
	return worst
}

// readSafetensors reads every float32 tensor of a safetensors file.
func readSafetensors(t *testing.T, path string) map[string][]float32 {
	t.Helper()
	h, err := safetensors.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
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

// TestTrainLLMTPEval: with --strategy tp the evaluation runs as one SPMD
// program over each device's parts of the base model (device 0 no longer
// keeps the whole model for it, FineTune.ReleaseConstants), and its losses
// equal the one-device run's within float rounding (meshTol.loss), LoRA
// and full. Fault injected once: the one-device evaluation after the
// release fails the run ("finalized").
func TestTrainLLMTPEval(t *testing.T) {
	b, err := tensorbridge.Open(context.Background(), "xla-cpu:devices=2")
	if err != nil {
		testreq.Skipf(t, "xla-cpu: %v", err)
	}
	b.Close()
	base, _ := llmFixture(t, "llama")
	fix, refs := finetuneFixture(t, "llama")
	data := filepath.Join("..", "..", "llm", "sft", "testdata", "text.jsonl")
	for _, mode := range []string{"lora", "full"} {
		t.Run(mode, func(t *testing.T) {
			evals := func(backend string, extra ...string) []float64 {
				t.Helper()
				logPath := filepath.Join(t.TempDir(), "log.jsonl")
				args := []string{"train", base, "--data", data, "--eval-data", data, "--eval-every", "2",
					"--seq-len", "64", "--batch", "2", "--steps", "4", "--backend", backend, "--log-json", logPath}
				if mode == "lora" {
					args = append(args, "--lora-init", filepath.Join(fix, refs.Runs["lora-text"].Init))
				} else {
					args = append(args, "--full")
				}
				if code, _, stderr := run(t, append(args, extra...)...); code != 0 {
					t.Fatalf("exit %d: %s", code, stderr)
				}
				var out []float64
				for _, l := range readLog(t, logPath) {
					if l.EvalLoss != nil {
						out = append(out, *l.EvalLoss)
					}
				}
				return out
			}
			one := evals("xla-cpu")
			tp := evals("xla-cpu:devices=2", "--mesh", "data=1,model=2", "--strategy", "tp")
			if len(one) != 2 || len(tp) != len(one) {
				t.Fatalf("eval losses: one device %v, tp %v; want 2 each", one, tp)
			}
			for i := range one {
				if d := math.Abs(tp[i]-one[i]) / one[i]; d > meshTol.loss {
					t.Errorf("eval %d: tp %.9g, one device %.9g (relative %.2g > %.2g)", i+1, tp[i], one[i], d, meshTol.loss)
				}
			}
		})
	}
}
