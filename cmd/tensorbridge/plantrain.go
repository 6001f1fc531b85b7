package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
	"github.com/tensorbridge/tensorbridge/plan"
	"github.com/tensorbridge/tensorbridge/train"
)

// trainPlanFlags are plan's flags for planning a training step.
type trainPlanFlags struct {
	train     *bool
	optimizer *string
	batch     *int
	loss      *string
	momentum  *float64
	labels    *string
	freeze    *string
}

func addTrainPlanFlags(fs *flag.FlagSet) *trainPlanFlags {
	return &trainPlanFlags{
		train:     fs.Bool("train", false, "plan a whole training step (forward, loss, backward, optimizer update) instead of inference"),
		optimizer: fs.String("optimizer", "adamw", "with --train: adamw, adam or sgd (torch.optim's defaults)"),
		batch:     fs.Int("batch", 0, "with --train: the global batch (the model's batch dimension); with --llm: concurrent sequences over the slice"),
		loss:      fs.String("loss", "", "with --train: an output that is the loss, cross_entropy:OUTPUT:LABELS or mse:OUTPUT:TARGETS (default: next-token cross entropy of the output logits)"),
		momentum:  fs.Float64("momentum", 0, "with --train and --optimizer sgd: momentum (a momentum buffer per weight when not 0)"),
		labels:    fs.String("labels-dtype", "int64", "with --train: the dtype of cross-entropy labels, int64 or int32"),
		freeze:    fs.String("freeze", "", "with --train: a Go regexp on initializer names; the floating-point initializers it matches are not trained (as train --freeze)"),
	}
}

// unused refuses the training flags without --train.
func (t *trainPlanFlags) unused(fs *flag.FlagSet) error {
	var set []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "optimizer", "batch", "loss", "momentum", "labels-dtype", "freeze":
			set = append(set, "--"+f.Name)
		}
	})
	if len(set) > 0 {
		return usageErr("%v only apply with --train", set)
	}
	return nil
}

// options reads the training flags.
func (t *trainPlanFlags) options(m *onnx.Model) (plan.TrainOptions, error) {
	var o plan.TrainOptions
	if *t.batch <= 0 {
		return o, usageErr("--train needs --batch B, the global batch (a positive integer)")
	}
	o.Batch = *t.batch
	opt, err := train.DefaultOptimizer(train.OptimizerKind(*t.optimizer))
	if err != nil {
		return o, usageErr("--optimizer: %v", err)
	}
	opt.Momentum = *t.momentum
	if err := opt.Validate(); err != nil {
		return o, usageErr("%v", err)
	}
	o.Optimizer = opt
	o.Freeze = *t.freeze
	switch *t.labels {
	case "int64":
		o.LabelsDType = ir.Int64
	case "int32":
		o.LabelsDType = ir.Int32
	default:
		return o, usageErr("--labels-dtype %q: int64 or int32", *t.labels)
	}
	if *t.loss != "" {
		if o.Loss, err = train.ParseLoss(*t.loss); err != nil {
			return o, usageErr("%v", err)
		}
	} else if !hasOutput(m, "logits") {
		return o, usageErr("--train: the model has no output named logits: say which loss with --loss (an output that is the loss, cross_entropy:OUTPUT:LABELS or mse:OUTPUT:TARGETS)")
	}
	return o, nil
}

func hasOutput(m *onnx.Model, name string) bool {
	for _, o := range m.Outputs() {
		if o.Name == name {
			return true
		}
	}
	return false
}

// runTrainPlan plans a training step and prints it. A step that does not
// fit is a plan (exit 0); only a step that cannot be planned is an error.
func runTrainPlan(ctx context.Context, m *onnx.Model, po plan.Options, tf *trainPlanFlags, asJSON bool, stdout io.Writer) error {
	to, err := tf.options(m)
	if err != nil {
		return err
	}
	r, err := plan.RunTrain(ctx, m, po, to)
	if err != nil {
		return err
	}
	if asJSON {
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	printTrainPlan(stdout, r)
	return nil
}

func printTrainPlan(w io.Writer, r *plan.TrainReport) {
	fmt.Fprintf(w, "model      %s\n", r.Model)
	fmt.Fprintf(w, "slice      %s: topology %s, %d chips, %d devices (%s), %d host(s)\n", r.Slice, r.Topology, r.Chips, r.Devices, r.DeviceKind, r.Hosts)
	fmt.Fprintf(w, "training   %s, loss %s, global batch %d, %v, %s compute, float32 master weights\n", r.Optimizer, r.Loss, r.Batch, r.Dims, r.Precision)
	fmt.Fprintf(w, "trains     %.4g parameters in %d tensors (%s of float32 weights)\n", float64(r.TrainableParams), r.TrainableTensors, gib(r.TrainableParams*4))
	fmt.Fprintf(w, "strategy   %s (data %d x model %d), devices in mesh order %v\n", r.Strategy, r.DataParallel, r.ModelParallel, r.MeshDevices)
	d := r.PerDevice
	if r.Compiled {
		fmt.Fprintf(w, "per device (arguments, outputs, temporaries, peak from the compiler; the split of the state by arithmetic)\n")
	} else {
		fmt.Fprintf(w, "per device (arithmetic only: not compiled)\n")
	}
	fmt.Fprintf(w, "  weights        %s (float32 master weights)\n  optimizer      %s (%d tensors per weight)\n  gradients      %s (float32; within temporaries)\n  batch          %s\n",
		gib(d.WeightsBytes), gib(d.OptimizerBytes), r.OptimizerSlots, gib(d.GradientBytes), gib(d.BatchBytes))
	if r.Compiled {
		fmt.Fprintf(w, "  arguments      %s (weights and optimizer state: %s)\n  outputs        %s (aliased to arguments: %s)\n  temporaries    %s\n  code           %s\n",
			gib(d.ArgumentBytes), gib(d.StateArgumentBytes), gib(d.OutputBytes), gib(d.AliasBytes), gib(d.TempBytes), gib(d.GeneratedCodeBytes))
	}
	fmt.Fprintf(w, "  peak           %s\n  HBM            %s (the compiler's limit; catalog: %s per chip)\n", gib(d.PeakBytes), gib(d.HBMBytes), gib(int64(r.HBMChipBytes)))
	fmt.Fprintf(w, "fit        %s\n", r.FitReason)
	if r.StepSeconds > 0 {
		fmt.Fprintf(w, "work       %.4g FLOP and %.4g bytes per step (per device %.4g FLOP, %.4g bytes)\n", r.Flops, r.BytesAccessed, d.Flops, d.BytesAccessed)
		fmt.Fprintf(w, "roofline   %.4g s per step (%s-bound: compute %.4g s, memory %.4g s; collectives not counted)\n", r.StepSeconds, r.Bound, r.ComputeSeconds, r.MemorySeconds)
		fmt.Fprintf(w, "throughput %.4g samples/s", r.SamplesPerSecond)
		if r.TokensPerSecond > 0 {
			fmt.Fprintf(w, ", %.4g tokens/s", r.TokensPerSecond)
		}
		fmt.Fprintln(w)
	}
	switch {
	case r.CostPerHourUSD == nil:
		fmt.Fprintf(w, "cost       unknown: %s\n", r.PriceSource)
	case r.CostPerMTokens != nil:
		fmt.Fprintf(w, "cost       $%.2f/hour, $%.4g per million tokens trained\n           price: %s\n", *r.CostPerHourUSD, *r.CostPerMTokens, r.PriceSource)
	case r.CostPerMSamples != nil:
		fmt.Fprintf(w, "cost       $%.2f/hour, $%.4g per million samples trained\n           price: %s\n", *r.CostPerHourUSD, *r.CostPerMSamples, r.PriceSource)
	default:
		fmt.Fprintf(w, "cost       $%.2f/hour\n           price: %s\n", *r.CostPerHourUSD, r.PriceSource)
	}
	if r.Compiled {
		fmt.Fprintf(w, "compile    %.1f s\n", r.CompileSeconds)
	}
	for _, x := range r.Rejected {
		fmt.Fprintf(w, "not chosen %s: %s\n", x.Strategy, x.Reason)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note       %s\n", n)
	}
}
