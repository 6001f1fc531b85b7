package main

// plan --train for a Hugging Face checkpoint (or --generate shapes): the
// per-device memory and roofline step of a LoRA or full fine-tune, by
// arithmetic (plan.PlanFineTune); nothing is compiled.

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/modelgen"
	"github.com/tensorbridge/tensorbridge/plan"
)

// ftPlanFlags are plan's flags for planning an LLM fine-tune.
type ftPlanFlags struct {
	seqLen        *int
	lora          *string
	full          *bool
	remat         *bool
	basePrecision *string
}

func addFineTunePlanFlags(fs *flag.FlagSet) *ftPlanFlags {
	return &ftPlanFlags{
		seqLen:        fs.Int("seq-len", 0, "with --train on a checkpoint DIR, its config.json or --generate shapes: tokens per sequence (plans an LLM fine-tune by arithmetic)"),
		lora:          fs.String("lora", "", "with --train --seq-len: plan a LoRA fine-tune r=R,alpha=A,targets=M1,M2 (as train DIR --lora); without it, a full fine-tune"),
		full:          fs.Bool("full", false, "with --train --seq-len: a full fine-tune (the default without --lora; as train DIR --full)"),
		remat:         fs.Bool("remat", false, "with --train --seq-len: judge fit and step time with each decoder layer rematerialised (both are reported)"),
		basePrecision: fs.String("base-precision", "float32", "with --train --seq-len and --lora: the frozen base weights in float32, bfloat16 or int8 (as train DIR)"),
	}
}

// ftFlagNames are the flags that only a fine-tune plan takes.
var ftFlagNames = map[string]bool{"seq-len": true, "lora": true, "full": true, "remat": true, "base-precision": true}

// fineTunePlanWanted says whether runPlan's arguments ask for a fine-tune
// plan: --train with a checkpoint directory or a .json config, or with any
// fine-tune flag. Fine-tune flags without --train are a usage error.
func fineTunePlanWanted(fs *flag.FlagSet, train bool) (bool, error) {
	var set []string
	fs.Visit(func(f *flag.Flag) {
		if ftFlagNames[f.Name] {
			set = append(set, "--"+f.Name)
		}
	})
	if !train {
		if len(set) > 0 {
			return false, usageErr("%v only apply with --train (an LLM fine-tune plan)", set)
		}
		return false, nil
	}
	if len(set) > 0 {
		return true, nil
	}
	if fs.NArg() == 1 {
		p := fs.Arg(0)
		if st, err := os.Stat(p); err == nil && st.IsDir() || strings.HasSuffix(p, ".json") {
			return true, nil
		}
	}
	return false, nil
}

// ftPlanArgs are the shared plan flags a fine-tune plan reads.
type ftPlanArgs struct {
	gen, slice, strategy, precision string
	price, fraction                 float64
	batch                           int
	asJSON                          bool
}

// runFineTunePlan plans a fine-tune and prints it. A step that does not
// fit is a plan (exit 0); input that cannot be planned exits 2.
func runFineTunePlan(fs *flag.FlagSet, f *ftPlanFlags, a ftPlanArgs, stdout io.Writer) error {
	o, err := f.options(fs, a)
	if err != nil {
		return err
	}
	cfg, ck, err := fineTuneModel(fs, a.gen)
	if err != nil {
		return err
	}
	r, err := plan.PlanFineTune(cfg, o)
	if err != nil {
		return exit2(err)
	}
	if a.asJSON {
		out := struct {
			*plan.FineTuneReport
			Checkpoint *plan.Checkpoint `json:"checkpoint,omitempty"`
		}{r, ck}
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	printFineTunePlan(stdout, r, ck)
	return nil
}

// options reads the flags, refusing those a fine-tune plan does not take.
func (f *ftPlanFlags) options(fs *flag.FlagSet, a ftPlanArgs) (plan.FineTuneOptions, error) {
	var o plan.FineTuneOptions
	var refused []string
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "loss", "momentum", "labels-dtype", "freeze", "dim", "shard", "embed-hidden", "llm", "context", "prompt", "kv-dtype":
			refused = append(refused, "--"+fl.Name)
		case "optimizer":
			if fl.Value.String() != "adamw" {
				refused = append(refused, "--optimizer "+fl.Value.String()+" (the fine-tune plan is AdamW's)")
			}
		}
	})
	switch {
	case len(refused) > 0:
		return o, usageErr("%v do not apply to an LLM fine-tune plan (--train with --seq-len)", refused)
	case *f.seqLen <= 0:
		return o, usageErr("--train on an LLM needs --seq-len N, the tokens per sequence (N > 0)")
	case a.batch <= 0:
		return o, usageErr("--train needs --batch B, the sequences per step over the slice (B > 0)")
	case *f.full && *f.lora != "":
		return o, usageErr("--full and --lora: a fine-tune is one or the other")
	}
	o = plan.FineTuneOptions{Slice: a.slice, Strategy: a.strategy, SeqLen: *f.seqLen, Batch: a.batch, BasePrecision: *f.basePrecision,
		Precision: a.precision, Remat: *f.remat, MemoryFraction: a.fraction, PricePerChipHour: a.price}
	if *f.lora != "" {
		sp, err := parseLoRA(*f.lora) // train_llm.go: the same syntax as train DIR --lora
		if err != nil {
			return o, err
		}
		o.LoRA = &plan.LoRASpec{Rank: sp.r, Alpha: sp.alpha, Targets: sp.targets}
	}
	return o, nil
}

// fineTuneModel reads the decoder: a checkpoint directory (its
// safetensors headers checked against config.json), a config.json file,
// or --generate shapes.
func fineTuneModel(fs *flag.FlagSet, gen string) (plan.LLMConfig, *plan.Checkpoint, error) {
	switch {
	case gen != "" && fs.NArg() == 0:
		c, err := modelgen.Parse(gen)
		if err != nil {
			return plan.LLMConfig{}, nil, usageErr("%v", err)
		}
		cfg, err := plan.LLMFromModelgen(c)
		return cfg, nil, exit2(err)
	case gen == "" && fs.NArg() == 1:
		p := fs.Arg(0)
		st, err := os.Stat(p)
		if err != nil {
			return plan.LLMConfig{}, nil, exit2(err)
		}
		if !st.IsDir() {
			cfg, err := plan.LoadConfigFile(p)
			return cfg, nil, exit2(err)
		}
		ck, err := plan.LoadCheckpoint(p)
		if err != nil {
			return plan.LLMConfig{}, nil, exit2(err)
		}
		return ck.Config, ck, nil
	}
	return plan.LLMConfig{}, nil, usageErr("--train --seq-len: give exactly one checkpoint DIR or config.json, or --generate PRESET")
}

// exit2 makes an error of the caller's input (invalid, not implemented,
// a missing file) exit 2; others are returned as they are.
func exit2(err error) error {
	if err == nil {
		return nil
	}
	switch k := errs.KindOf(err); {
	case k == errs.InvalidArgument, k == errs.Unimplemented, errors.Is(err, os.ErrNotExist):
		return &exitError{code: 2, err: err}
	}
	return err
}

func printFineTunePlan(w io.Writer, r *plan.FineTuneReport, ck *plan.Checkpoint) {
	c := r.Model
	fmt.Fprintf(w, "model      %s (%s): %.4g parameters, %d layers, hidden %d, %d heads, %d kv heads of %d, ffn %d, vocab %d\n",
		c.Name, c.Architecture, float64(r.Params), c.Layers, c.Hidden, c.Heads, c.KVHeads, c.HeadDim, c.FFN, c.Vocab)
	if ck != nil && len(ck.Files) > 0 {
		fmt.Fprintf(w, "checkpoint %d safetensors file(s), headers declare %d parameters: matches config.json\n", len(ck.Files), ck.HeaderParams)
	}
	if l := r.LoRA; l != nil {
		fmt.Fprintf(w, "method     LoRA r=%d alpha=%g (scale %g) on %d modules %v: %d adapter parameters; base %s\n",
			l.Rank, l.Alpha, l.Scale, l.AdaptedModules, l.Modules, l.AdapterParams, r.BasePrecision)
	} else {
		fmt.Fprintf(w, "method     full fine-tune: %.4g parameters trained, float32 master weights\n", float64(r.TrainedParams))
	}
	fmt.Fprintf(w, "step       AdamW, %d sequences of %d tokens (%d per data index), %s compute; slice %s: %d chips, %d devices, %s (data %d x model %d)\n",
		r.Batch, r.SeqLen, r.BatchPerDevice, r.Precision, r.Slice, r.Chips, r.Devices, r.Strategy, r.DataParallel, r.ModelParallel)
	if r.StrategyReason != "" {
		fmt.Fprintf(w, "strategy   %s\n", r.StrategyReason)
	}
	fmt.Fprintf(w, "trained    %d parameters, %d stored per device\n", r.TrainedParams, r.TrainedParamsPerDevice)
	fmt.Fprintf(w, "per device %14s %14s\n", "no remat", "remat")
	m0, m1 := r.WithoutRemat, r.WithRemat
	for _, row := range []struct {
		name string
		a, b int64
	}{{"weights", m0.WeightsBytes, m1.WeightsBytes}, {"adapters", m0.AdapterBytes, m1.AdapterBytes},
		{"gradients", m0.GradientBytes, m1.GradientBytes}, {"AdamW state", m0.OptimizerBytes, m1.OptimizerBytes},
		{"activations", m0.ActivationBytes, m1.ActivationBytes}, {"logits", m0.LogitsBytes, m1.LogitsBytes}, {"total", m0.TotalBytes, m1.TotalBytes}} {
		if row.a == 0 && row.b == 0 {
			fmt.Fprintf(w, "  %-12s %12s %14s\n", row.name, "-", "-")
			continue
		}
		fmt.Fprintf(w, "  %-12s %12s %14s\n", row.name, size(row.a), size(row.b))
	}
	fit := func(m plan.FineTuneMemory) string {
		return map[bool]string{true: "fits", false: "does not fit"}[m.Fits]
	}
	fmt.Fprintf(w, "  %-12s %12s %14s (usable %s: %.0f%% of %s HBM [%s])\n", "fit", fit(m0), fit(m1),
		size(r.UsableBytesPerDevice), 100*r.MemoryFraction, size(r.HBMBytesPerDevice), r.HBMSource)
	fmt.Fprintf(w, "  %-12s %12s %14s (sent per device per step over ICI)\n", "collectives", size(int64(m0.CollectiveBytes)), size(int64(m1.CollectiveBytes)))
	fmt.Fprintf(w, "  %-12s %12.4g %14.4g (at %.4g B/s ICI per chip)\n", "coll. ms", 1e3*m0.CollectiveSeconds, 1e3*m1.CollectiveSeconds, r.ICIBandwidth)
	fmt.Fprintf(w, "  %-12s %12.4g %14.4g (%s-bound / %s-bound, + collectives)\n", "step ms", 1e3*m0.StepSeconds, 1e3*m1.StepSeconds, m0.Bound, m1.Bound)
	fmt.Fprintf(w, "  %-12s %12.4g %14.4g (whole slice)\n", "tokens/s", m0.TokensPerSecond, m1.TokensPerSecond)
	fmt.Fprintf(w, "fit        %s\n", r.FitReason)
	fmt.Fprintf(w, "roofline   per chip %.4g FLOP/s bf16 [%s], %.4g B/s HBM [%s]\n", r.PeakFlopsChip, r.PeakSource, r.HBMBandwidth, r.BandwidthSource)
	if h := r.Headline(); r.CostPerHourUSD != nil && h.CostPerMTokensUSD != nil {
		fmt.Fprintf(w, "cost       $%.2f/hour, $%.4g per million tokens trained; price: %s\n", *r.CostPerHourUSD, *h.CostPerMTokensUSD, r.PriceSource)
	} else {
		fmt.Fprintf(w, "cost       unknown: %s\n", r.PriceSource)
	}
	fmt.Fprintf(w, "activations %s\n", r.ActivationFormula)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note       %s\n", n)
	}
}

// hook runs a fine-tune plan when runPlan's arguments ask for one
// (fineTunePlanWanted), reporting whether it handled them.
func (f *ftPlanFlags) hook(fs *flag.FlagSet, train bool, a ftPlanArgs, stdout io.Writer) (bool, error) {
	ok, err := fineTunePlanWanted(fs, train)
	if err != nil || !ok {
		return err != nil, err
	}
	return true, runFineTunePlan(fs, f, a, stdout)
}

// fineTuneUsage is plan's usage line for an LLM fine-tune.
const fineTuneUsage = "       tensorbridge plan CHECKPOINT_DIR|config.json|--generate PRESET --slice TYPE --train --seq-len N --batch B [--lora r=R,alpha=A,targets=M1,M2 [--base-precision float32|bfloat16|int8]|--full] [--remat] [--strategy auto|dp|fsdp|tp|tp=M] [--precision ...] [--memory-fraction F] [--json]"
