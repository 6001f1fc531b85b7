package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/tensorbridge/tensorbridge/modelgen"
	"github.com/tensorbridge/tensorbridge/plan"
)

// genPlanFlags are plan's flags for planning LLM generation (--llm).
type genPlanFlags struct {
	llm      *bool
	context  *int
	prompt   *int
	kvDType  *string
	fraction *float64
}

func addGenPlanFlags(fs *flag.FlagSet) *genPlanFlags {
	return &genPlanFlags{
		llm: fs.Bool("llm", false, "plan serving LLM generation of a Hugging Face checkpoint DIR (or --generate shapes): weights and KV cache per device, "+
			"sequences that fit, roofline decode and prefill (arithmetic on the catalog's figures; nothing is compiled)"),
		context:  fs.Int("context", 0, "with --llm: tokens per sequence (prompt + generated) the KV cache holds"),
		prompt:   fs.Int("prompt", 0, "with --llm: prompt length prefill is timed for (default: the context)"),
		kvDType:  fs.String("kv-dtype", "bfloat16", "with --llm: KV cache dtype: bfloat16, float16, float32, int8 or float8"),
		fraction: fs.Float64("memory-fraction", plan.DefaultMemoryFraction, "with --llm: share of each device's HBM for weights and KV cache; the rest is reserved for activations, workspace and code"),
	}
}

// unused refuses the --llm flags without --llm.
func (g *genPlanFlags) unused(fs *flag.FlagSet) error {
	var set []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "context", "prompt", "kv-dtype", "memory-fraction":
			set = append(set, "--"+f.Name)
		}
	})
	if len(set) > 0 {
		return usageErr("%v only apply with --llm", set)
	}
	return nil
}

// runGenPlan plans generation for a checkpoint directory (the one
// argument) or --generate shapes. A plan that does not fit is a plan (exit
// 0); only input that cannot be planned is an error.
func runGenPlan(fs *flag.FlagSet, g *genPlanFlags, gen string, o plan.GenerateOptions, asJSON bool, stdout io.Writer) error {
	var refused []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "train", "optimizer", "loss", "momentum", "labels-dtype", "dim", "shard", "embed-hidden":
			refused = append(refused, "--"+f.Name)
		}
	})
	if len(refused) > 0 {
		return usageErr("%v do not apply with --llm", refused)
	}
	if *g.context <= 0 {
		return usageErr("--llm needs --context N, the tokens per sequence (prompt + generated), a positive integer")
	}
	o.Context, o.Prompt, o.KVDType, o.MemoryFraction = *g.context, *g.prompt, *g.kvDType, *g.fraction
	var cfg plan.LLMConfig
	var ck *plan.Checkpoint
	switch {
	case gen != "" && fs.NArg() == 0:
		c, err := modelgen.Parse(gen)
		if err != nil {
			return usageErr("%v", err)
		}
		if cfg, err = plan.LLMFromModelgen(c); err != nil {
			return err
		}
	case gen == "" && fs.NArg() == 1:
		dir := fs.Arg(0)
		if st, err := os.Stat(dir); err != nil {
			return err
		} else if !st.IsDir() {
			return usageErr("--llm plans a Hugging Face checkpoint directory (config.json, *.safetensors); %s is a file", dir)
		}
		var err error
		if ck, err = plan.LoadCheckpoint(dir); err != nil {
			return err
		}
		cfg = ck.Config
	default:
		return usageErr("--llm: give exactly one checkpoint DIR, or --generate PRESET")
	}
	r, err := plan.PlanGenerate(cfg, o)
	if err != nil {
		return err
	}
	if asJSON {
		out := struct {
			*plan.GenerateReport
			Checkpoint *plan.Checkpoint `json:"checkpoint,omitempty"`
		}{r, ck}
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	printGenPlan(stdout, r, ck)
	return nil
}

// size writes bytes in GiB, MiB or KiB, whichever reads best.
func size(n int64) string {
	switch {
	case n >= 1<<30:
		return gib(n)
	case n >= 1<<20:
		return fmt.Sprintf("%.4g MiB", float64(n)/(1<<20))
	}
	return kib(n)
}

func printGenPlan(w io.Writer, r *plan.GenerateReport, ck *plan.Checkpoint) {
	c := r.Model
	fmt.Fprintf(w, "model      %s (%s): %.4g parameters, %d layers, hidden %d, %d heads, %d kv heads of %d, ffn %d, vocab %d, tied %v\n",
		c.Name, c.Architecture, float64(r.Params), c.Layers, c.Hidden, c.Heads, c.KVHeads, c.HeadDim, c.FFN, c.Vocab, c.Tied)
	if ck != nil && len(ck.Files) > 0 {
		fmt.Fprintf(w, "checkpoint %d safetensors file(s), headers declare %d parameters (%s stored, %v): matches config.json\n",
			len(ck.Files), ck.HeaderParams, size(ck.HeaderBytes), ck.HeaderDTypes)
		for _, n := range ck.Notes {
			fmt.Fprintf(w, "           %s\n", n)
		}
	} else if ck != nil {
		fmt.Fprintf(w, "checkpoint config.json only (no safetensors files to cross-check)\n")
	}
	fmt.Fprintf(w, "slice      %s: %d chips, %d devices; %s, %s weights, %s KV cache, context %d tokens\n",
		r.Slice, r.Chips, r.Devices, r.Strategy, r.Precision, r.KVDType, r.Context)
	fmt.Fprintf(w, "weights    %s in all, %s per device (model axis %d)\n", size(r.WeightsBytes), size(r.WeightsBytesPerDevice), r.ModelParallel)
	if len(r.ReplicatedWeights) > 0 {
		fmt.Fprintf(w, "           replicated on every device: %v (the rest split)\n", r.ReplicatedWeights)
	}
	fmt.Fprintf(w, "kv cache   %s per token (%s per device, %d kv heads each), %s per %d-token sequence (%s per device)\n",
		kib(r.KVBytesPerToken), kib(r.KVBytesPerTokenDevice), r.KVHeadsPerDevice, size(r.KVBytesPerSequence), r.Context, size(r.KVBytesPerSeqDevice))
	fmt.Fprintf(w, "memory     %s HBM per device [%s]; reserve %s (%.0f%% kept for activations, workspace, code); %s left for the KV cache\n",
		gib(r.HBMBytesPerDevice), r.HBMSource, gib(r.ReserveBytesPerDevice), 100*(1-r.MemoryFraction), gib(max(0, r.KVBudgetBytesPerDevice)))
	fmt.Fprintf(w, "capacity   %d sequences of %d tokens (%d per replica x %d replicas; %d tokens per replica)\n",
		r.MaxSequences, r.Context, r.SequencesPerReplica, r.DataParallel, r.KVTokensPerReplica)
	fmt.Fprintf(w, "fit        %s\n", r.FitReason)
	fmt.Fprintf(w, "roofline   per chip %.4g FLOP/s bf16 [%s], %.4g B/s HBM [%s]\n", r.PeakFlopsChip, r.PeakSource, r.HBMBandwidth, r.BandwidthSource)
	fmt.Fprintf(w, "decode     %8s %10s %8s %12s %14s %14s\n", "batch", "step ms", "bound", "tokens/s", "tokens/s/chip", "$/M tokens")
	for _, d := range r.Decode {
		cost := "-"
		if d.CostPerMTokensUSD != nil {
			cost = fmt.Sprintf("%.4g", *d.CostPerMTokensUSD)
		}
		fit := ""
		if !d.Fits {
			fit = "  (does not fit)"
		}
		fmt.Fprintf(w, "           %8d %10.4g %8s %12.4g %14.4g %14s%s\n", d.Batch, 1e3*d.StepSeconds, d.Bound, d.TokensPerSecond, d.TokensPerSecChip, cost, fit)
	}
	if p := r.Prefill; p != nil {
		fmt.Fprintf(w, "prefill    %d-token prompt: %.4g ms (%s-bound: compute %.4g ms, memory %.4g ms), one replica\n",
			p.PromptTokens, 1e3*p.Seconds, p.Bound, 1e3*p.ComputeSeconds, 1e3*p.MemorySeconds)
	}
	if r.CostPerHourUSD != nil {
		fmt.Fprintf(w, "cost       $%.2f/hour ($%.2f per chip-hour); price: %s\n", *r.CostPerHourUSD, r.PricePerChipHour, r.PriceSource)
	} else {
		fmt.Fprintf(w, "cost       unknown: %s\n", r.PriceSource)
	}
	for _, x := range r.Rejected {
		fmt.Fprintf(w, "not chosen %s: %s\n", x.Strategy, x.Reason)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note       %s\n", n)
	}
}

func kib(n int64) string { return fmt.Sprintf("%.4g KiB", float64(n)/(1<<10)) }
