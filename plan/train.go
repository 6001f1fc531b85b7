package plan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/tensorbridge/tensorbridge/catalog"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/internal/capi"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
	"github.com/tensorbridge/tensorbridge/pjrt/lower"
	"github.com/tensorbridge/tensorbridge/shard"
	"github.com/tensorbridge/tensorbridge/train"
)

// TrainOptions say what training step RunTrain plans, besides Options
// (slice, strategy, dimensions, precision, price).
type TrainOptions struct {
	// Optimizer and its hyper-parameters; a zero Kind is AdamW with
	// torch.optim's defaults.
	Optimizer train.Optimizer
	// Loss is where the loss comes from (train.ParseLoss). Zero means next-
	// token cross entropy of a generated decoder: the output "logits"
	// against a labels parameter "labels" of shape [batch, sequence] (the
	// input ids shifted by one, as the data pipeline supplies them).
	Loss train.Loss
	// Batch is the global batch: the size of the "batch" dimension.
	Batch int
	// LabelsDType is the dtype of cross-entropy labels: ir.Int64 (the
	// default) or ir.Int32.
	LabelsDType ir.DType
	// Freeze is a Go regexp on initializer names: the floating-point
	// initializers it matches are not trained (train.TrainableNames, the
	// Trainer's rule); "" trains every floating-point initializer.
	Freeze string
}

// TrainDevice is one device's figures for a training step. The compiler
// reports argument, output, temporary and peak bytes; it does not split
// the arguments into weights and optimizer state, nor the temporaries into
// gradients and activations. Those splits are arithmetic over the layout
// the compiler was given (documented per field):
type TrainDevice struct {
	Device
	// WeightsBytes (in Device) is the float32 master weights this device
	// holds: per trained weight, elements x 4 / the ways it is split.
	// GradientBytes is the same figure for the float32 gradients. They are
	// not arguments: they live in the compiler's temporaries (TempBytes).
	GradientBytes int64 `json:"gradient_bytes"`
	// OptimizerBytes is the optimizer state this device holds: the weights'
	// figure times the optimizer's tensors per weight (2 for Adam/AdamW).
	OptimizerBytes int64 `json:"optimizer_bytes"`
	// BatchBytes is the inputs and labels this device holds.
	BatchBytes int64 `json:"batch_bytes"`
	// StateArgumentBytes is the compiler's argument bytes less the batch's
	// and the step number's: what the compiler allots to weights and
	// optimizer state (in the device's tiled layout, so a little above
	// their arithmetic sum for small or odd-sized tensors).
	StateArgumentBytes int64 `json:"state_argument_bytes"`
}

// TrainReport is the plan of one training step on one slice.
type TrainReport struct {
	Report
	PerDevice TrainDevice `json:"per_device"`
	// Optimizer names the optimizer; OptimizerSlots its float32 tensors per
	// weight.
	Optimizer      string `json:"optimizer"`
	OptimizerSlots int    `json:"optimizer_slots"`
	Loss           string `json:"loss"`
	// TrainableParams are the parameters trained: every floating-point
	// initializer the graph reads that TrainOptions.Freeze does not match
	// (the Trainer's rule, train.TrainableNames).
	TrainableParams  int64    `json:"trainable_params"`
	TrainableTensors int      `json:"trainable_tensors"`
	SamplesPerSecond float64  `json:"samples_per_second"`
	CostPerMTokens   *float64 `json:"cost_per_million_tokens_usd,omitempty"`
	CostPerMSamples  *float64 `json:"cost_per_million_samples_usd,omitempty"`
	// Compiled is false for a plan the arithmetic ruled out without
	// compiling (--strategy auto only); its peak is then a lower bound.
	Compiled bool `json:"compiled"`
}

// MarshalJSON writes the report without the inference-only figures of the
// embedded Report (inferences per second and their cost).
func (r *TrainReport) MarshalJSON() ([]byte, error) {
	base, err := json.Marshal(r.Report)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(base, &m); err != nil {
		return nil, err
	}
	delete(m, "inferences_per_second")
	delete(m, "cost_per_million_inferences_usd")
	extra, err := json.Marshal(struct {
		PerDevice        TrainDevice `json:"per_device"`
		Optimizer        string      `json:"optimizer"`
		OptimizerSlots   int         `json:"optimizer_slots"`
		Loss             string      `json:"loss"`
		TrainableParams  int64       `json:"trainable_params"`
		TrainableTensors int         `json:"trainable_tensors"`
		SamplesPerSecond float64     `json:"samples_per_second"`
		CostPerMTokens   *float64    `json:"cost_per_million_tokens_usd,omitempty"`
		CostPerMSamples  *float64    `json:"cost_per_million_samples_usd,omitempty"`
		Compiled         bool        `json:"compiled"`
	}{r.PerDevice, r.Optimizer, r.OptimizerSlots, r.Loss, r.TrainableParams, r.TrainableTensors,
		r.SamplesPerSecond, r.CostPerMTokens, r.CostPerMSamples, r.Compiled})
	if err != nil {
		return nil, err
	}
	var m2 map[string]json.RawMessage
	if err := json.Unmarshal(extra, &m2); err != nil {
		return nil, err
	}
	for k, v := range m2 {
		m[k] = v
	}
	return json.Marshal(m)
}

// TrainStrategies are the strategies --strategy auto tries, in order.
var TrainStrategies = []string{StrategyDP, StrategyTP, StrategyFSDP}

// trainMesh is a training strategy's mesh over n devices.
func trainMesh(strategy string, n int) (shard.Mesh, error) {
	switch strategy {
	case StrategyDP, StrategyFSDP:
		return shard.Mesh{Data: n, Model: 1}, nil
	case StrategyTP:
		return shard.Mesh{Data: 1, Model: n}, nil
	}
	return shard.Mesh{}, &errs.Error{Kind: errs.InvalidArgument, Op: "plan",
		Err: fmt.Errorf("plan: training strategy %q: want dp, tp, fsdp or auto", strategy)}
}

// defaults fills the zero options: AdamW with torch's defaults, next-token
// cross entropy, int64 labels.
func (t TrainOptions) defaults() (TrainOptions, error) {
	if t.Optimizer.Kind == "" {
		o, err := train.DefaultOptimizer(train.AdamW)
		if err != nil {
			return t, err
		}
		t.Optimizer = o
	}
	if err := t.Optimizer.Validate(); err != nil {
		return t, err
	}
	if t.Loss.Kind == "" {
		t.Loss = train.Loss{Kind: train.LossCrossEntropy, Output: "logits", Target: "labels"}
	}
	switch t.LabelsDType {
	case ir.InvalidDType:
		t.LabelsDType = ir.Int64
	case ir.Int32, ir.Int64:
	default:
		return t, &errs.Error{Kind: errs.InvalidArgument, Op: "plan", Err: fmt.Errorf("plan: labels dtype %s: want int32 or int64", t.LabelsDType)}
	}
	if t.Batch <= 0 {
		return t, &errs.Error{Kind: errs.InvalidArgument, Op: "plan", Err: fmt.Errorf("plan: --batch %d: want a positive global batch", t.Batch)}
	}
	return t, nil
}

// batchDims returns dims with the global batch as the size of the first
// input's leading dimension: its symbolic name ("batch" in the generated
// models), or, when that dimension is fixed, a check that it is the batch.
func batchDims(m *onnx.Model, dims map[string]int, batch int) (map[string]int, error) {
	out := map[string]int{}
	for k, v := range dims {
		out[k] = v
	}
	ins := m.Inputs()
	if len(ins) == 0 || len(ins[0].Dims) == 0 {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Op: "plan",
			Err: fmt.Errorf("plan: --train needs a model whose first input has a leading batch dimension")}
	}
	in := ins[0]
	switch d := in.Dims[0]; {
	case d.Param != "":
		out[d.Param] = batch
	case d.Value < 0:
		return nil, &errs.Error{Kind: errs.InvalidArgument, Op: "plan",
			Err: fmt.Errorf("plan: input %q has an unnamed leading dimension: --batch cannot size it", in.Name)}
	case d.Value != batch:
		return nil, &errs.Error{Kind: errs.InvalidArgument, Op: "plan",
			Err: fmt.Errorf("plan: input %q has a fixed batch dimension of %d; --batch is %d", in.Name, d.Value, batch)}
	}
	return out, nil
}

// openSlice opens the slice's topology (a TPU slice through libtpu, or a
// GPU one through the CUDA plugin), as Run does.
func openSlice(ctx context.Context, name string) (catalog.Slice, catalog.Accelerator, *topology, error) {
	if g, ok := gpuSlice(name); ok {
		return openGPU(ctx, g)
	}
	sl, acc, err := Slice(name)
	if err != nil {
		return sl, acc, nil, err
	}
	p, err := libTPU()
	if err != nil {
		return sl, acc, nil, err
	}
	top, err := openTopology(ctx, p, sl)
	return sl, acc, top, err
}

// RunTrain plans one whole training step of m (forward, loss, backward
// with graph.Gradient, optimizer update) on the slice: it compiles the
// step ahead of time with the slice's compiler and reports memory per
// device (weights, gradients, optimizer state, temporaries, peak against
// HBM), whether it fits, FLOPs, a roofline step time, throughput and cost.
//
// o.Strategy is "dp", "tp", "fsdp" or "auto" (also ""): auto compiles
// each strategy the arithmetic does not already rule out and keeps the
// fastest that fits, saying why each other lost. A step that does not fit
// is a report with Fits false, not an error; errors mean the step could
// not be planned.
func RunTrain(ctx context.Context, m *onnx.Model, o Options, t TrainOptions) (*TrainReport, error) {
	if err := checkEnv(o.Slice); err != nil {
		return nil, err
	}
	t, err := t.defaults()
	if err != nil {
		return nil, err
	}
	if o.Dims, err = batchDims(m, o.Dims, t.Batch); err != nil {
		return nil, err
	}
	sl, acc, top, err := openSlice(ctx, o.Slice)
	if err != nil {
		return nil, err
	}
	defer top.t.Destroy()
	n := len(top.ids)
	strategies := TrainStrategies
	auto := o.Strategy == "" || o.Strategy == "auto"
	if !auto {
		if _, err := trainMesh(o.Strategy, n); err != nil {
			return nil, err
		}
		strategies = []string{o.Strategy}
	}
	spec, shapes, err := specialise(m, o)
	if err != nil {
		return nil, err
	}
	frozen, err := trainWeights(m, &spec, t.Freeze)
	if err != nil {
		return nil, err
	}
	p, err := m.SpecializeWith(shapes, nil, spec)
	if err != nil {
		return nil, err
	}
	var reports []*TrainReport
	var rejected []Rejected
	var ruledOut []*TrainReport
	for _, strat := range strategies {
		mesh, _ := trainMesh(strat, n)
		if b := t.Batch; mesh.Data > 1 && b%mesh.Data != 0 {
			reason := fmt.Sprintf("the batch (%d) is not a multiple of the data axis (%d)", b, mesh.Data)
			if !auto {
				return nil, &errs.Error{Kind: errs.InvalidArgument, Op: "plan", Err: fmt.Errorf("plan: %s on %d devices: %s", strat, n, reason)}
			}
			rejected = append(rejected, Rejected{Strategy: strat, Reason: reason})
			continue
		}
		ss := stepSpec{Mesh: mesh, Strategy: strat, Shard: o.Shard, Optimizer: t.Optimizer, Loss: t.Loss, LabelsDType: t.LabelsDType, Frozen: frozen}
		if auto {
			if r := ruleOut(p, ss, o, t, sl, acc, top); r != nil {
				rejected = append(rejected, Rejected{Strategy: strat, Reason: r.FitReason})
				ruledOut = append(ruledOut, r)
				continue
			}
		}
		r, err := planTrainOne(ctx, p, ss, o, t, sl, acc, top)
		if err != nil {
			if !auto {
				return nil, err
			}
			rejected = append(rejected, Rejected{Strategy: strat, Reason: err.Error()})
			continue
		}
		reports = append(reports, r)
	}
	if len(reports) == 0 && len(ruledOut) == 0 {
		return nil, fmt.Errorf("plan: no training strategy could be compiled: %v", rejected)
	}
	if len(reports) == 0 {
		// Every strategy needs more than HBM by the arithmetic alone: report
		// the one that comes closest, uncompiled.
		sort.SliceStable(ruledOut, func(i, j int) bool { return ruledOut[i].PerDevice.PeakBytes < ruledOut[j].PerDevice.PeakBytes })
		best := ruledOut[0]
		best.Rejected = dropStrategy(rejected, best.Strategy)
		best.Notes = append(best.Notes, "no strategy was compiled: each was ruled out before compiling (see why each other lost)")
		return best, nil
	}
	sort.SliceStable(reports, func(i, j int) bool { return better(&reports[i].Report, &reports[j].Report) })
	best := reports[0]
	for _, r := range reports[1:] {
		rejected = append(rejected, Rejected{Strategy: r.Strategy, Reason: lostBecause(&r.Report, &best.Report)})
	}
	if auto {
		best.Rejected = rejected
		best.Notes = append(best.Notes, "strategy chosen by auto: the fastest step (so the cheapest per token on this slice) among those that fit")
	}
	return best, nil
}

// trainWeights sets spec.Weights to the weight parameters of the step:
// the initializers the Trainer trains (train.TrainableNames with freeze)
// and those the size rule makes parameters anyway (onnx.WeightMinElements:
// a model loaded by shape only holds no values for them to fold). It
// returns the latter that are not trained: the step's frozen parameters.
func trainWeights(m *onnx.Model, spec *onnx.SpecializeOptions, freeze string) (map[string]bool, error) {
	names, _, _, err := train.TrainableNames(m, freeze)
	if err != nil {
		return nil, err
	}
	bySize, err := m.WeightParams(*spec)
	if err != nil {
		return nil, err
	}
	trained := make(map[string]bool, len(names))
	for _, n := range names {
		trained[n] = true
	}
	frozen := map[string]bool{}
	for _, w := range bySize {
		if !trained[w.Name] {
			frozen[w.Name] = true
			names = append(names, w.Name)
		}
	}
	spec.Weights = names
	if _, err := m.WeightParams(*spec); err != nil {
		var ie *errs.InputError
		if errors.As(err, &ie) {
			return nil, fmt.Errorf("plan: weight %q cannot be trained: the importer needs its value when it builds the graph; freeze it (--freeze): %w", ie.Name, err)
		}
		return nil, err
	}
	return frozen, nil
}

func dropStrategy(rs []Rejected, s string) []Rejected {
	var out []Rejected
	for _, r := range rs {
		if r.Strategy != s {
			out = append(out, r)
		}
	}
	return out
}

// layoutOf is the arithmetic of a step's layout without building it.
func layoutOf(p *onnx.Plan, s stepSpec) (weights, optim int64, params int64, tensors int) {
	slots := int64(optimizerSlots(s.Optimizer))
	for _, w := range p.Weights() {
		if s.Frozen[w.Name] {
			continue
		}
		pl, _ := weightSplit(w.Name, w.Shape.Dimensions, s)
		b := int64(w.Shape.Size()) * 4 / int64(shardsOf(pl, s.Mesh))
		weights += b
		optim += slots * b
		params += int64(w.Shape.Size())
		tensors++
	}
	return weights, optim, params, tensors
}

// ruleOut returns an uncompiled report that does not fit when the float32
// weights, gradients and optimizer state one device must hold under the
// strategy exceed its HBM by themselves, else nil.
func ruleOut(p *onnx.Plan, s stepSpec, o Options, t TrainOptions, sl catalog.Slice, acc catalog.Accelerator, top *topology) *TrainReport {
	w, opt, params, tensors := layoutOf(p, s)
	need := 2*w + opt
	if top.hbm <= 0 || need <= top.hbm {
		return nil
	}
	r := newTrainReport(p, s, o, t, sl, acc, top)
	r.TrainableParams, r.TrainableTensors = params, tensors
	d := &r.PerDevice
	d.WeightsBytes, d.GradientBytes, d.OptimizerBytes = w, w, opt
	d.PeakBytes = need
	r.FitReason = fmt.Sprintf("does not fit by arithmetic alone: float32 weights %s + gradients %s + %s optimizer state %s = %s per device, HBM %s (not compiled)",
		fmtBytes(w), fmtBytes(w), t.Optimizer.Kind, fmtBytes(opt), fmtBytes(need), fmtBytes(top.hbm))
	r.Notes = append(r.Notes, "peak is a lower bound from the arithmetic: the step was not compiled")
	finishTrain(r, acc, o)
	return r
}

// newTrainReport fills what a training report knows before compiling.
func newTrainReport(p *onnx.Plan, s stepSpec, o Options, t TrainOptions, sl catalog.Slice, acc catalog.Accelerator, top *topology) *TrainReport {
	n := len(top.ids)
	r := &TrainReport{Report: Report{Model: o.Model, Slice: o.Slice, Topology: top.name, Chips: sl.Chips, Hosts: top.hosts,
		Devices: n, DeviceKind: top.kind, Strategy: s.Strategy, DataParallel: s.Mesh.Data, ModelParallel: s.Mesh.Model,
		MeshDevices: top.ids, Precision: p.Options().Compute.String(), Dims: o.Dims, Batch: t.Batch},
		Optimizer: string(t.Optimizer.Kind), OptimizerSlots: optimizerSlots(t.Optimizer), Loss: t.Loss.String()}
	for _, w := range p.Weights() {
		r.Params += int64(w.Shape.Size())
		r.WeightsBytes += int64(w.Shape.Size()) * 4
	}
	if top.hosts > 1 {
		r.MultiHostNote = fmt.Sprintf("the compiler compiles the whole %d-host slice from one process without a TPU: the program is the per-device SPMD program every host runs", top.hosts)
	}
	r.PerDevice.HBMBytes = top.hbm
	if acc.Memory.Known() {
		r.HBMChipBytes = acc.Memory.Value
	}
	return r
}

// planTrainOne builds, compiles and measures one strategy's step.
func planTrainOne(ctx context.Context, p *onnx.Plan, s stepSpec, o Options, t TrainOptions,
	sl catalog.Slice, acc catalog.Accelerator, top *topology) (*TrainReport, error) {
	n := len(top.ids)
	eng := lower.NewEngine("plan", n) // lowers only: nothing runs
	g := ir.NewGraph(eng, "train_step")
	defer g.Finalize()
	l, err := buildStep(g, p, s)
	if err != nil {
		return nil, err
	}
	r := newTrainReport(p, s, o, t, sl, acc, top)
	r.Compiled = true
	r.TrainableParams, r.TrainableTensors = l.Params, l.Trainable
	r.Notes = append(r.Notes, l.Notes...)
	d := &r.PerDevice
	d.WeightsBytes, d.GradientBytes, d.OptimizerBytes, d.BatchBytes = l.WeightsPerDev, l.WeightsPerDev, l.OptimPerDev, l.BatchPerDev
	prog := eng.Program()
	prog.Donated = l.Donated
	text, err := prog.CompileText()
	if err != nil {
		return nil, err
	}
	opts := capi.CompileOptions{NumReplicas: 1, NumPartitions: n, DeviceAssignment: [][]int{top.ids[:n]}}
	if n > 1 {
		opts.UseSPMDPartitioning, opts.UseShardyPartitioner = true, true
	}
	start := time.Now()
	exe, err := top.t.Compile(ctx, capi.MLIR(string(text)), opts, nil)
	r.CompileSeconds = time.Since(start).Seconds()
	if err != nil {
		if !outOfMemory(err) {
			return nil, fmt.Errorf("plan: compiling the training step for %s (%s): %w", top.name, s.Strategy, err)
		}
		r.Fits = false
		r.FitReason, d.PeakBytes = oomReason(err)
		r.Notes = append(r.Notes, "the compiler refused the step for lack of memory; memory and cost figures other than the need it reported are unknown")
		finishTrain(r, acc, o)
		return r, nil
	}
	defer exe.Destroy()
	ms, err := exe.CompiledMemoryStats()
	if err != nil {
		return nil, fmt.Errorf("plan: compiled memory stats: %w", err)
	}
	d.ArgumentBytes, d.OutputBytes, d.AliasBytes, d.TempBytes, d.GeneratedCodeBytes = ms.Argument, ms.Output, ms.Alias, ms.Temp, ms.GeneratedCode
	d.StateArgumentBytes = ms.Argument - l.BatchPerDev - 4*train.NumHyper // less the batch and the float32 hyper-parameters
	d.PeakBytes = ms.Peak
	if d.PeakBytes == 0 {
		d.PeakBytes = ms.Argument + ms.Output - ms.Alias + ms.Temp
		r.Notes = append(r.Notes, "the compiler gave no peak: peak is argument + output - alias + temp")
	}
	if cost, err := exe.CostAnalysis(); err == nil && len(cost) > 0 {
		d.Flops = number(capi.Lookup(cost, "flops"))
		d.BytesAccessed = number(capi.Lookup(cost, "bytes accessed"))
	} else {
		r.Notes = append(r.Notes, fmt.Sprintf("no cost analysis: %v", err))
	}
	total := d.PeakBytes + d.GeneratedCodeBytes
	r.Fits = total <= d.HBMBytes
	verb := "fits"
	if !r.Fits {
		verb = "does not fit: needs"
	}
	r.FitReason = fmt.Sprintf("%s %s of %s per device (peak %s + code %s)", verb, fmtBytes(total), fmtBytes(d.HBMBytes), fmtBytes(d.PeakBytes), fmtBytes(d.GeneratedCodeBytes))
	r.Notes = append(r.Notes, "gradient bytes are float32, one per trained parameter, split as the weights are; they are part of the compiler's temporaries, with the activations")
	finishTrain(r, acc, o)
	return r, nil
}

// outOfMemory says whether a compile error is the compiler's refusal for
// lack of device memory, by the PJRT error code (RESOURCE_EXHAUSTED) or a
// tensorbridge error of kind ResourceExhausted; never by message text.
func outOfMemory(err error) bool {
	return errors.Is(err, capi.ErrResourceExhausted) || errs.KindOf(err) == errs.ResourceExhausted
}

// oomReason words an out-of-memory refusal, with the need and capacity
// the compiler's message gives when it gives them (the message is read
// for those figures only, after outOfMemory classified the error).
func oomReason(err error) (string, int64) {
	msg := err.Error()
	var pe *capi.Error
	if errors.As(err, &pe) {
		msg = pe.Message
	}
	for _, re := range oomREs {
		if mm := re.FindStringSubmatch(msg); mm != nil {
			return fmt.Sprintf("does not fit: needs %s%s of %s%s per device (compiler: %s)", mm[1], mm[2], mm[3], mm[4], firstLine(msg)), int64(parseSize(mm[1], mm[2]))
		}
	}
	return "does not fit: " + firstLine(msg), 0
}

// finishTrain fills the roofline and costs of a training report: finish's
// figures, with samples and tokens per second in place of inferences.
func finishTrain(r *TrainReport, acc catalog.Accelerator, o Options) {
	r.Report.PerDevice = r.PerDevice.Device
	finish(&r.Report, acc, o)
	r.PerDevice.Device = r.Report.PerDevice
	r.SamplesPerSecond = r.InferencesPerSecond
	r.InferencesPerSecond, r.CostPerMillionUSD = 0, nil
	if r.StepSeconds == 0 {
		r.Bound = "" // no FLOPs or bytes (not compiled, or refused): no roofline
	}
	if r.CostPerHourUSD == nil || r.SamplesPerSecond <= 0 {
		return
	}
	perSecond := func(rate float64) *float64 {
		c := *r.CostPerHourUSD / (rate * 3600) * 1e6
		return &c
	}
	if r.TokensPerSecond > 0 {
		r.CostPerMTokens = perSecond(r.TokensPerSecond)
	} else {
		r.CostPerMSamples = perSecond(r.SamplesPerSecond)
	}
}
