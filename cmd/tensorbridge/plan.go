package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/tensorbridge/tensorbridge/modelgen"
	"github.com/tensorbridge/tensorbridge/onnx"
	"github.com/tensorbridge/tensorbridge/plan"
	"github.com/tensorbridge/tensorbridge/shard"
)

func init() {
	register(command{name: "plan", summary: "what a model needs on a TPU slice: compile ahead of time with libtpu, memory per device, fit, FLOPs, step time, cost", run: runPlan})
}

func runPlan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("plan", stderr, "MODEL|--generate PRESET --slice TYPE [--strategy auto|dp|tp|tp=N|dp=N,tp=M] [--dim NAME=N ...] [--precision bfloat16|float32] [--price USD] [--json]\n"+
		"       tensorbridge plan MODEL|--generate PRESET --slice TYPE --train --batch B [--optimizer adamw|adam|sgd] [--loss SPEC] [--freeze REGEXP] [--strategy auto|dp|tp|fsdp] [--dim ...] [--precision ...] [--json]\n"+
		"       tensorbridge plan CHECKPOINT_DIR|--generate PRESET --slice TYPE --llm --context N [--batch N] [--prompt N] [--strategy auto|tp=M|dp=D,tp=M] [--precision ...] [--kv-dtype ...] [--memory-fraction F] [--json]\n"+fineTuneUsage)
	slice := fs.String("slice", "", "Cloud TPU accelerator type: v5e-8 (= v5litepod-8), v5p-8, v6e-4, v4-8, tpu7x-8, ...")
	strategy := fs.String("strategy", "auto", "auto (try each, keep the cheapest that fits), dp, tp, tp=N, dp=N,tp=M")
	var dims inputFlags
	fs.Var(&dims, "dim", "size of a symbolic dimension, e.g. batch=1 or sequence=2048 (repeat per dimension)")
	precision := fs.String("precision", "bfloat16", "compute and weight precision: bfloat16 or float32")
	price := fs.Float64("price", 0, "USD per chip-hour, overriding the price table")
	gen := fs.String("generate", "", "plan a generated weightless transformer instead of a file: "+strings.Join(modelgen.PresetNames(), ", ")+", or layers=,hidden=,heads=,kv_heads=,ffn=,vocab=")
	var rules inputFlags
	fs.Var(&rules, "shard", "per-weight override PATTERN=DIM (regexp on the initializer name; DIM split over the model axis, or r to replicate); repeatable")
	embedHidden := fs.Bool("embed-hidden", false, "split embeddings over the hidden dimension instead of the vocabulary")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	tf := addTrainPlanFlags(fs)
	gf := addGenPlanFlags(fs)      // plangen.go
	ff := addFineTunePlanFlags(fs) // planft.go
	if err := parse(fs, reorder(fs, args)); err != nil {
		return err
	}
	if *slice == "" {
		return usageErr("--slice is required, e.g. --slice v5e-8")
	}
	if *price < 0 || math.IsNaN(*price) || math.IsInf(*price, 0) {
		return usageErr("--price %v: want a positive price in USD per chip-hour (or leave it out for the price table)", *price)
	}
	if done, err := ff.hook(fs, *tf.train, ftPlanArgs{gen: *gen, slice: *slice, strategy: *strategy, precision: *precision,
		price: *price, fraction: *gf.fraction, batch: *tf.batch, asJSON: *asJSON}, stdout); done {
		return err // planft.go: an LLM fine-tune
	}
	if *gf.llm {
		return runGenPlan(fs, gf, *gen, plan.GenerateOptions{Slice: *slice, Strategy: *strategy, Batch: *tf.batch,
			Precision: *precision, PricePerChipHour: *price}, *asJSON, stdout)
	}
	if err := gf.unused(fs); err != nil {
		return err
	}
	var m *onnx.Model
	var name string
	var err error
	d := map[string]int{}
	switch {
	case *gen != "" && fs.NArg() == 0:
		c, err := modelgen.Parse(*gen)
		if err != nil {
			return usageErr("%v", err)
		}
		pb, err := modelgen.Generate(c)
		if err != nil {
			return err
		}
		if m, err = onnx.FromProtoWith(pb, onnx.LoadOptions{ShapesOnly: true}); err != nil {
			return err
		}
		name = fmt.Sprintf("%s (generated, %.3g parameters)", c.Name, float64(c.Params()))
		d["batch"], d["sequence"] = 1, 2048 // defaults for generated models; --dim overrides
		if *tf.train && c.Encoder {
			return usageErr("--train plans a decoder's next-token loss; %s is an encoder", c.Name)
		}
	case *gen == "" && fs.NArg() == 1:
		name = fs.Arg(0)
		if m, err = onnx.LoadWith(fs.Arg(0), onnx.LoadOptions{ShapesOnly: true}); err != nil {
			return err
		}
	default:
		return usageErr("give exactly one MODEL file, or --generate PRESET")
	}
	for _, s := range dims {
		k, v, ok := strings.Cut(s, "=")
		n, err := strconv.Atoi(v)
		if !ok || k == "" || err != nil || n <= 0 {
			return usageErr("--dim %q: want NAME=SIZE with a positive size", s)
		}
		d[k] = n
	}
	so := shard.Options{EmbedHidden: *embedHidden}
	for _, r := range rules {
		rule, err := shard.ParseRule(r)
		if err != nil {
			return usageErr("%v", err)
		}
		so.Rules = append(so.Rules, rule)
	}
	setPlanEnv(*slice) // procenv.go: before libtpu or the CUDA plugin loads
	po := plan.Options{Slice: *slice, Strategy: *strategy, Dims: d, Precision: *precision,
		PricePerChipHour: *price, Shard: so, Model: name}
	if *tf.train {
		return runTrainPlan(ctx, m, po, tf, *asJSON, stdout)
	}
	if err := tf.unused(fs); err != nil {
		return err
	}
	r, err := plan.Run(ctx, m, po)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	printPlan(stdout, r)
	return nil
}

func gib(n int64) string { return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30)) }

func printPlan(w io.Writer, r *plan.Report) {
	fmt.Fprintf(w, "model      %s\n", r.Model)
	fmt.Fprintf(w, "slice      %s: topology %s, %d chips, %d devices (%s), %d host(s)\n", r.Slice, r.Topology, r.Chips, r.Devices, r.DeviceKind, r.Hosts)
	if r.MultiHostNote != "" {
		fmt.Fprintf(w, "           %s\n", r.MultiHostNote)
	}
	fmt.Fprintf(w, "shapes     %v, %s, %.4g parameters (%s of weights)\n", r.Dims, r.Precision, float64(r.Params), gib(r.WeightsBytes))
	fmt.Fprintf(w, "strategy   %s (data %d x model %d), devices in mesh order %v\n", r.Strategy, r.DataParallel, r.ModelParallel, r.MeshDevices)
	d := r.PerDevice
	fmt.Fprintf(w, "per device (from the compiler)\n")
	if d.PeakBytes > 0 {
		fmt.Fprintf(w, "  weights        %s (%.1f%% of peak)\n", gib(d.WeightsBytes), 100*float64(d.WeightsBytes)/float64(d.PeakBytes))
	} else {
		fmt.Fprintf(w, "  weights        %s\n", gib(d.WeightsBytes))
	}
	fmt.Fprintf(w, "  arguments      %s\n  outputs        %s\n  temporaries    %s\n  code           %s\n  peak           %s\n  HBM            %s (the compiler's limit; catalog: %s per chip)\n",
		gib(d.ArgumentBytes), gib(d.OutputBytes), gib(d.TempBytes), gib(d.GeneratedCodeBytes), gib(d.PeakBytes), gib(d.HBMBytes), gib(int64(r.HBMChipBytes)))
	fmt.Fprintf(w, "fit        %s\n", r.FitReason)
	fmt.Fprintf(w, "work       %.4g FLOP and %.4g bytes per step (per device %.4g FLOP, %.4g bytes)\n", r.Flops, r.BytesAccessed, d.Flops, d.BytesAccessed)
	fmt.Fprintf(w, "roofline   %.4g s per step (%s-bound: compute %.4g s at %.4g FLOP/s per chip [%s], memory %.4g s at %.4g B/s per chip [%s])\n",
		r.StepSeconds, r.Bound, r.ComputeSeconds, r.PeakFlopsChip, r.PeakSource, r.MemorySeconds, r.HBMBandwidth, r.BandwidthSource)
	fmt.Fprintf(w, "throughput %.4g inferences/s", r.InferencesPerSecond)
	if r.TokensPerSecond > 0 {
		fmt.Fprintf(w, ", %.4g tokens/s", r.TokensPerSecond)
	}
	fmt.Fprintln(w)
	if r.CostPerHourUSD != nil {
		fmt.Fprintf(w, "cost       $%.2f/hour ($%.2f per chip-hour)", *r.CostPerHourUSD, r.PricePerChipHour)
		if r.CostPerMillionUSD != nil {
			fmt.Fprintf(w, ", $%.4g per million inferences", *r.CostPerMillionUSD)
		}
		fmt.Fprintf(w, "\n           price: %s\n", r.PriceSource)
	} else {
		fmt.Fprintf(w, "cost       unknown: %s\n", r.PriceSource)
	}
	fmt.Fprintf(w, "compile    %.1f s\n", r.CompileSeconds)
	for _, x := range r.Rejected {
		fmt.Fprintf(w, "not chosen %s: %s\n", x.Strategy, x.Reason)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note       %s\n", n)
	}
}
