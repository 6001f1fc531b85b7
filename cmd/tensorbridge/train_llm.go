package main

// train DIR: fine-tuning a Hugging Face checkpoint (LoRA or every weight)
// on JSONL data, through the same Trainer and training loop as an ONNX
// model (checkpoints, --resume, SIGTERM, --log-json, evaluation).

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/config"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/llm"
	"github.com/tensorbridge/tensorbridge/llm/peft"
	"github.com/tensorbridge/tensorbridge/llm/tokenizer"
	"github.com/tensorbridge/tensorbridge/train"
)

// llmTrainFlags are the flags for a checkpoint directory.
type llmTrainFlags struct {
	seqLen        int
	lora          string
	loraInit      string
	full          bool
	basePrecision string
	merge         bool
	seed          int64
	chatTemplate  string
	remat         bool
}

func addLLMTrainFlags(fs *flag.FlagSet, f *llmTrainFlags) {
	fs.IntVar(&f.seqLen, "seq-len", 0, "checkpoint DIR: cut each JSONL row to its first N tokens (required)")
	fs.StringVar(&f.lora, "lora", "", "checkpoint DIR: train a LoRA adapter r=R,alpha=A,targets=M1,M2[,dropout=0] (PEFT's semantics)")
	fs.StringVar(&f.loraInit, "lora-init", "", "checkpoint DIR: start from this PEFT adapter directory (r, alpha, targets from its adapter_config.json)")
	fs.BoolVar(&f.full, "full", false, "checkpoint DIR: train every weight (a full fine-tune)")
	fs.StringVar(&f.basePrecision, "base-precision", "float32", "checkpoint DIR with LoRA: the frozen base weights in float32, bfloat16 or int8")
	fs.BoolVar(&f.merge, "merge", false, "checkpoint DIR with LoRA: --output is a whole checkpoint with the adapter merged into the weights")
	fs.Int64Var(&f.seed, "seed", 0, "checkpoint DIR with LoRA: the seed of new adapters' A matrices and of the dropout masks")
	fs.BoolVar(&f.remat, "remat", false, "checkpoint DIR: recompute each layer's activations in the backward pass (gradient checkpointing): less memory, about a third more compute; same losses")
	fs.StringVar(&f.chatTemplate, "chat-template", "", `checkpoint DIR: render {"messages": ...} rows with this Jinja template FILE instead of the checkpoint's (as TRL's chat_template_path)`)
}

// llmOnlyFlags are the flags that mean something for a checkpoint
// directory only.
var llmOnlyFlags = []string{"seq-len", "lora", "lora-init", "full", "base-precision", "merge", "seed", "remat", "chat-template"}

// refuseLLMFlags refuses a checkpoint directory's flags given for an ONNX
// model, which would otherwise be ignored.
func (f *trainFlags) refuseLLMFlags() error {
	for _, name := range llmOnlyFlags {
		if f.set[name] {
			return usageErr("--%s is for fine-tuning a checkpoint directory (config.json, safetensors), not an ONNX model", name)
		}
	}
	return nil
}

// isCheckpointDir reports whether path is a directory with a config.json
// (a Hugging Face checkpoint), which train fine-tunes as an LLM.
func isCheckpointDir(path string) bool {
	st, err := os.Stat(path)
	if err != nil || !st.IsDir() {
		return false
	}
	_, err = os.Stat(filepath.Join(path, "config.json"))
	return err == nil
}

// checkLLM refuses flag combinations for a checkpoint directory.
func (f *trainFlags) checkLLM() error {
	l := &f.llm
	modes := 0
	for _, on := range []bool{l.lora != "", l.loraInit != "", l.full} {
		if on {
			modes++
		}
	}
	switch {
	case l.seqLen <= 0:
		return usageErr("--seq-len N is required for a checkpoint directory (N > 0)")
	case modes != 1:
		return usageErr("a checkpoint directory trains with exactly one of --lora SPEC, --lora-init DIR or --full")
	case l.merge && l.full:
		return usageErr("--merge is for LoRA (a full fine-tune always writes a whole checkpoint)")
	case f.freeze != "" && !l.full:
		return usageErr("--freeze is for --full: LoRA trains its adapters only")
	case l.remat && !train.RematSupported():
		return usageErr("--remat: this build's GoMLX graph nodes lack the fields train.Remat sets (it was built for v0.26.0)")
	case f.set["loss"] && f.loss != "causal_lm":
		return usageErr("--loss for a checkpoint directory is causal_lm (transformers' causal-LM loss), got %q", f.loss)
	}
	switch l.basePrecision {
	case "float32", "bfloat16", "int8":
	default:
		return usageErr("--base-precision %q: want float32, bfloat16 or int8", l.basePrecision)
	}
	if f.output != "" {
		if _, err := os.Lstat(f.output); err == nil {
			return usageErr("--output %s exists: a checkpoint directory's run writes a new directory there (nothing is overwritten)", f.output)
		}
	}
	if l.basePrecision != "float32" && l.full {
		return usageErr("--base-precision is for LoRA: a full fine-tune trains float32 weights")
	}
	return nil
}

// loraSpec is a parsed --lora.
type loraSpec struct {
	r       int
	alpha   float64
	targets []string
	dropout float64
}

// parseLoRA parses --lora r=8,alpha=16,targets=q_proj,v_proj[,dropout=0.05]:
// a comma after targets= continues the target list until the next key.
func parseLoRA(s string) (loraSpec, error) {
	var sp loraSpec
	sp.alpha = -1
	key := ""
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			if key != "targets" || part == "" {
				return sp, usageErr("--lora %q: want r=R,alpha=A,targets=M1,M2[,dropout=P]", s)
			}
			sp.targets = append(sp.targets, part)
			continue
		}
		key = strings.TrimSpace(k)
		var err error
		switch key {
		case "r":
			sp.r, err = strconv.Atoi(v)
		case "alpha":
			sp.alpha, err = strconv.ParseFloat(v, 64)
		case "dropout":
			sp.dropout, err = strconv.ParseFloat(v, 64)
		case "targets":
			if v != "" {
				sp.targets = append(sp.targets, v)
			}
		default:
			return sp, usageErr("--lora: unknown key %q (want r, alpha, targets, dropout)", key)
		}
		if err != nil {
			return sp, usageErr("--lora %s=%q: %v", key, v, err)
		}
	}
	switch {
	case sp.r <= 0:
		return sp, usageErr("--lora r=%d: want r > 0", sp.r)
	case sp.alpha <= 0:
		return sp, usageErr("--lora: want alpha=A > 0")
	case len(sp.targets) == 0:
		return sp, usageErr("--lora: want targets=M1[,M2...] (module names such as q_proj,v_proj)")
	case !(sp.dropout >= 0 && sp.dropout < 1):
		return sp, usageErr("--lora dropout=%g: want 0 <= dropout < 1", sp.dropout)
	}
	return sp, nil
}

// trainLLM fine-tunes the checkpoint in dir.
func trainLLM(ctx context.Context, dir string, f *trainFlags, cfg train.Config, sf settingsFlags, stdout, stderr io.Writer) error {
	settings, err := sf.settings()
	if err != nil {
		return err
	}
	if f.threads > 0 {
		if _, err := limitThreads(f.threads); err != nil {
			return usageErr("%v", err)
		}
	}
	mcfg, err := llm.LoadConfig(dir)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if f.llm.seqLen > mcfg.MaxPositions {
		return usageErr("--seq-len %d: longer than the model's context (%d, max_position_embeddings)", f.llm.seqLen, mcfg.MaxPositions)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if f.llm.chatTemplate != "" {
		src, err := os.ReadFile(f.llm.chatTemplate)
		if err != nil {
			return usageErr("--chat-template: %v", err)
		}
		if tok, err = tok.WithChatTemplate(string(src)); err != nil {
			return &exitError{code: 2, err: fmt.Errorf("--chat-template %s: %w", f.llm.chatTemplate, err)}
		}
	}
	ds, err := openLLMData(ctx, f.data, tok, f.llm.seqLen, uint64(f.llm.seed))
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("--data: %w", err)}
	}
	var eval *llmData
	if f.evalData != "" {
		if eval, err = openLLMData(ctx, f.evalData, tok, f.llm.seqLen, uint64(f.llm.seed)); err != nil {
			return &exitError{code: 2, err: fmt.Errorf("--eval-data: %w", err)}
		}
	}
	warnBatchOverData(stderr, cfg, ds.Len())
	b, err := tensorbridge.Open(ctx, f.backend, tensorbridge.WithSettings(settings))
	if err != nil {
		return err
	}
	defer b.Close()
	// With tp the Trainer places each device's part of the weights from
	// host memory: no device holds the whole model, even while loading.
	lo := llm.LoadOptions{Precision: config.Float32, MaxContext: f.llm.seqLen, OnHost: f.strategy == "tp"}
	switch f.llm.basePrecision {
	case "bfloat16":
		lo.Precision = config.BFloat16
	case "int8":
		lo.Quantize = llm.QuantInt8
	}
	m, err := llm.Load(ctx, b, dir, lo)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	defer m.Close()
	ad, lora, err := f.llm.adapter(m)
	if err != nil {
		return err
	}
	var freeze *regexp.Regexp
	if f.freeze != "" {
		freeze = regexp.MustCompile(f.freeze) // checked by train.Config.Validate
	}
	ft, err := llm.NewFineTune(m, lora, freeze)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	ft.Remat = f.llm.remat
	ds.dropout = lora != nil && lora.Dropout > 0
	cfg.Data = ds.Digest()
	tr, err := b.NewTrainer(ctx, ft, cfg)
	if err != nil {
		return err
	}
	defer tr.Close()
	out := &llmOutput{dir: dir, adapter: ad, merge: f.llm.merge, tr: tr}
	loop := &trainLoop{f: f, cfg: cfg, tr: tr, ds: ds, stdout: stdout, stderr: stderr,
		pos: ds.Start(cfg.Shuffle, cfg.ShuffleSeed), progress: isTerminal(stderr), exit: os.Exit, export: out.write}
	if eval != nil {
		loop.eval = eval
	}
	if f.ckptDir != "" {
		if loop.rd, err = openRunDir(ctx, dir, f, tr, stderr); err != nil {
			return err
		}
		defer loop.rd.Close()
	}
	return loop.run(ctx)
}

// adapter is the LoRA adapter the run starts from: --lora-init's, a new
// one for --lora (A Kaiming-uniform seeded by --seed, B zero), or nil for
// --full.
func (f *llmTrainFlags) adapter(m *llm.Model) (*peft.Adapter, *llm.LoRA, error) {
	var ad *peft.Adapter
	var err error
	switch {
	case f.full:
		return nil, nil, nil
	case f.loraInit != "":
		if ad, err = peft.Read(f.loraInit, m.Config.PEFTModules()); err != nil {
			return nil, nil, &exitError{code: 2, err: fmt.Errorf("--lora-init: %w", err)}
		}
	default:
		sp, err := parseLoRA(f.lora)
		if err != nil {
			return nil, nil, err
		}
		cfg := &peft.Config{PeftType: "LORA", TaskType: "CAUSAL_LM", BaseModel: m.Dir, R: sp.r, Alpha: sp.alpha,
			Dropout: sp.dropout, TargetModules: peft.Targets{List: sp.targets}}
		if ad, err = peft.Init(cfg, m.Config.PEFTModules(), uint64(f.seed)); err != nil {
			return nil, nil, &exitError{code: 2, err: fmt.Errorf("--lora: %w", err)}
		}
	}
	lora := &llm.LoRA{Rank: ad.Config.R, Scale: ad.Config.Scale(), Dropout: ad.Config.Dropout}
	for _, l := range ad.Layers {
		lora.Modules = append(lora.Modules, llm.LoRAModule{Module: llm.Module{Name: l.Name}, A: l.A, B: l.B})
	}
	return ad, lora, nil
}

// llmOutput writes --output at the end of a run: the trained adapter in
// PEFT's files, or a whole checkpoint (a full fine-tune, or --merge).
type llmOutput struct {
	dir     string // the source checkpoint
	adapter *peft.Adapter
	merge   bool
	tr      *tensorbridge.Trainer
}

func (o *llmOutput) write(ctx context.Context, path string) error {
	w, err := o.tr.Weights()
	if err != nil {
		return err
	}
	if o.adapter == nil {
		return llm.SaveCheckpoint(ctx, o.dir, path, w, nil)
	}
	trained := *o.adapter
	trained.Layers = make([]peft.Layer, len(o.adapter.Layers))
	for i, l := range o.adapter.Layers {
		l.A, err = hostFloats(w[llm.PEFTName(l.Name, "A")])
		if err == nil {
			l.B, err = hostFloats(w[llm.PEFTName(l.Name, "B")])
		}
		if err != nil {
			return fmt.Errorf("%s: %w", l.Name, err)
		}
		trained.Layers[i] = l
	}
	if o.merge {
		return llm.SaveCheckpoint(ctx, o.dir, path, nil, &trained)
	}
	return writeAdapterDir(ctx, &trained, path)
}

// writeAdapterDir writes the adapter into a new directory at path,
// whole or not at all (a temporary directory beside it, renamed).
func writeAdapterDir(ctx context.Context, ad *peft.Adapter, path string) error {
	if _, err := os.Lstat(path); err == nil {
		return &errs.InputError{Name: "--output", Problem: "value", Expected: "a path that does not exist yet", Got: path + " exists"}
	}
	tmp, err := os.MkdirTemp(filepath.Dir(filepath.Clean(path)), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := ad.Write(ctx, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// hostFloats reads a host float32 tensor's values.
func hostFloats(t *ir.Tensor) ([]float32, error) {
	if t == nil {
		return nil, fmt.Errorf("no trained tensor")
	}
	var v []float32
	err := t.ConstFlatData(func(flat any) {
		if f, ok := flat.([]float32); ok {
			v = append([]float32(nil), f...)
		}
	})
	if err == nil && v == nil {
		err = fmt.Errorf("want float32, got %s", t.DType())
	}
	return v, err
}
