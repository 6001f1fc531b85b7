package plan

// Planning LLM fine-tuning (tensorbridge plan --train on a Hugging Face
// checkpoint or --generate shapes): what one training step of a decoder
// needs per device, LoRA or full, by arithmetic on its shapes and the
// catalog's cited per-chip figures. Nothing is compiled.
//
// Memory per device is the sum of five parts, each counted exactly from
// the config (FineTuneMemory documents each), with and without
// rematerialisation (gradient checkpointing) of the decoder layers:
//
//   - weights: the frozen base (LoRA: --base-precision bytes per element,
//     as train DIR loads it) or the float32 master weights (full);
//   - adapters (LoRA): r x (in + out) float32 per targeted module;
//   - gradients: float32, one per trained parameter;
//   - AdamW state: two float32 tensors per trained parameter;
//   - activations the backward pass keeps (activationsPerToken), and the
//     logits: B x T x V float32, twice (the logits and their log-softmax);
//     with remat one chunk of at most 2^22 of them, twice.
//
// The step time is a roofline, max(FLOPs / bf16 peak, bytes / HBM
// bandwidth) per device, at 100% of the catalog's peak as every plan mode
// computes it, plus the strategy's collectives at the ICI bandwidth
// (dp, fsdp, tp: finetune_mesh.go says what each device stores and sends).

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tensorbridge/tensorbridge/errs"
)

// LoRASpec is the adapter a LoRA fine-tune trains (PEFT's r, lora_alpha
// and target_modules).
type LoRASpec struct {
	Rank    int      `json:"r"`
	Alpha   float64  `json:"alpha"`
	Targets []string `json:"targets"`
}

// FineTuneOptions say what fine-tuning step PlanFineTune plans.
type FineTuneOptions struct {
	// Slice is a Cloud TPU accelerator type ("v5e-1") or a GPU count
	// ("h100-1"), as for GenerateOptions.
	Slice string
	// Strategy is "" or "dp" (data parallel: each device holds the whole
	// model), "fsdp" (trained tensors and their state split over the data
	// axis), "tp" (Megatron over every device), "tp=M" (a model axis of M,
	// the data axis the rest) or "auto" (the fastest that fits):
	// finetune_mesh.go says what each stores per device.
	Strategy string
	// SeqLen is the tokens per sequence (train DIR's --seq-len); Batch the
	// sequences per step over the whole slice.
	SeqLen, Batch int
	// LoRA is the adapter to train; nil plans a full fine-tune.
	LoRA *LoRASpec
	// BasePrecision is the frozen weights' storage with LoRA: float32 (the
	// default), bfloat16 or int8. A full fine-tune holds float32 masters.
	BasePrecision string
	// Precision is the compute dtype, which the activations are kept in:
	// bfloat16 (the default) or float32.
	Precision string
	// Remat picks the headline (fit, step time): with rematerialisation of
	// each decoder layer or without. Both are always reported.
	Remat bool
	// MemoryFraction is the share of HBM the step may take; 0 means
	// DefaultMemoryFraction (the rest: compiler workspace, the backward's
	// transient gradients, code, libtpu's reservation).
	MemoryFraction float64
	// PricePerChipHour overrides the price table, in USD; 0 uses it.
	PricePerChipHour float64
}

// FineTuneMemory is one device's bytes and step for one setting of remat.
type FineTuneMemory struct {
	Remat bool `json:"remat"`
	// WeightsBytes: LoRA, the frozen base as train DIR holds it (float32 4,
	// bfloat16 2 bytes per element; int8: one byte per element of the
	// q/k/v/o/gate/up/down projections plus a float32 scale per output
	// row, every other weight float32); full, float32 master weights.
	WeightsBytes int64 `json:"weights_bytes"`
	// AdapterBytes: float32 A and B of every adapted module (LoRA).
	AdapterBytes int64 `json:"adapter_bytes"`
	// GradientBytes and OptimizerBytes: float32, one and two (AdamW's
	// exp_avg and exp_avg_sq) per trained parameter.
	GradientBytes  int64 `json:"gradient_bytes"`
	OptimizerBytes int64 `json:"optimizer_bytes"`
	// ActivationBytes: what the decoder layers' backward keeps (all of it
	// without remat; the layers' inputs plus one layer's working set with
	// it) and the final norm's and output projection's inputs.
	ActivationBytes int64 `json:"activation_bytes"`
	// LogitsBytes: B x T x V float32, twice (logits and log-softmax).
	LogitsBytes int64 `json:"logits_bytes"`
	TotalBytes  int64 `json:"total_bytes"`
	// CollectiveBytes is what one device sends per step over ICI (ring
	// collectives, finetune_mesh.go); CollectiveSeconds at the ICI
	// bandwidth, added to the roofline (not overlapped).
	CollectiveBytes   float64 `json:"collective_bytes_per_device"`
	CollectiveSeconds float64 `json:"collective_seconds"`
	Fits              bool    `json:"fits"`

	FlopsPerDevice    float64  `json:"flops_per_device"`
	BytesPerDevice    float64  `json:"bytes_accessed_per_device"`
	ComputeSeconds    float64  `json:"compute_seconds"`
	MemorySeconds     float64  `json:"memory_seconds"`
	StepSeconds       float64  `json:"step_seconds"`
	Bound             string   `json:"bound"`
	TokensPerSecond   float64  `json:"tokens_per_second"` // whole slice
	TokensPerSecChip  float64  `json:"tokens_per_second_per_chip"`
	CostPerMTokensUSD *float64 `json:"cost_per_million_tokens_usd,omitempty"`
}

// LoRAPlan is the adapter a LoRA plan trains.
type LoRAPlan struct {
	LoRASpec
	Scale float64 `json:"scale"` // alpha / r
	// Modules counts the adapted modules by their name within a layer
	// (self_attn.q_proj ...), over all layers.
	Modules map[string]int `json:"modules"`
	// AdaptedModules is their total; AdapterParams is Σ r x (in + out).
	AdaptedModules int   `json:"adapted_modules"`
	AdapterParams  int64 `json:"adapter_params"`
}

// FineTuneReport is the plan of one fine-tuning step on one slice.
type FineTuneReport struct {
	Model          LLMConfig `json:"model"`
	Params         int64     `json:"params"`
	MatmulParams   int64     `json:"matmul_params"` // in matrix products: every projection and the output head
	Method         string    `json:"method"`        // "lora" or "full"
	LoRA           *LoRAPlan `json:"lora,omitempty"`
	TrainedParams  int64     `json:"trained_params"`
	Optimizer      string    `json:"optimizer"`
	OptimizerSlots int       `json:"optimizer_slots"`
	BasePrecision  string    `json:"base_precision"`
	Precision      string    `json:"precision"` // compute; activations are kept in it

	Slice          string `json:"slice"`
	Generation     string `json:"generation"`
	Chips          int    `json:"chips"`
	Devices        int    `json:"devices"`
	DevicesPerChip int    `json:"devices_per_chip"`
	Strategy       string `json:"strategy"`
	DataParallel   int    `json:"data_parallel"`
	ModelParallel  int    `json:"model_parallel"`
	StrategyReason string `json:"strategy_reason,omitempty"` // why auto chose it
	// TrainedParamsPerDevice is the trained elements one device stores
	// (and its gradients and AdamW state); Undivided names the tensors a
	// split of which the strategy's axis does not divide (kept whole).
	TrainedParamsPerDevice int64    `json:"trained_params_per_device"`
	Undivided              []string `json:"undivided,omitempty"`
	SeqLen                 int      `json:"seq_len"`
	Batch                  int      `json:"batch"` // sequences per step, whole slice
	BatchPerDevice         int      `json:"batch_per_device"`

	// ActivationElementsPerTokenLayer is activationsPerToken: the elements
	// one decoder layer keeps per token for its backward pass.
	ActivationElementsPerTokenLayer int64  `json:"activation_elements_per_token_per_layer"`
	ActivationFormula               string `json:"activation_formula"`

	HBMBytesPerDevice    int64   `json:"hbm_bytes_per_device"`
	HBMSource            string  `json:"hbm_source"`
	MemoryFraction       float64 `json:"memory_fraction"`
	UsableBytesPerDevice int64   `json:"usable_bytes_per_device"`

	WithoutRemat FineTuneMemory `json:"without_remat"`
	WithRemat    FineTuneMemory `json:"with_remat"`
	Remat        bool           `json:"remat"` // the headline setting
	Fits         bool           `json:"fits"`  // at the headline setting
	FitReason    string         `json:"fit_reason"`

	PeakFlopsChip    float64  `json:"peak_flops_per_chip"`
	PeakSource       string   `json:"peak_source"`
	HBMBandwidth     float64  `json:"hbm_bandwidth_per_chip"`
	BandwidthSource  string   `json:"hbm_bandwidth_source"`
	ICIBandwidth     float64  `json:"ici_bandwidth_per_chip"` // 0: unknown, collectives not timed
	ICISource        string   `json:"ici_bandwidth_source,omitempty"`
	PricePerChipHour float64  `json:"price_per_chip_hour_usd,omitempty"`
	CostPerHourUSD   *float64 `json:"cost_per_hour_usd"`
	PriceSource      string   `json:"price_source"`
	Notes            []string `json:"notes,omitempty"`

	mesh                         ftMesh
	baseDev, matmulDev, headDev  int64 // one device's frozen base, matrix-product and output-head elements
	adapterDev, actPerTokenLayer int64 // one device's adapter elements; its activationsPerToken
}

// Headline is the setting the report is judged by (--remat or not).
func (r *FineTuneReport) Headline() *FineTuneMemory {
	if r.Remat {
		return &r.WithRemat
	}
	return &r.WithoutRemat
}

// ActivationFormula states activationsPerToken.
const ActivationFormula = "per decoder layer and token, in the compute dtype: 4h + 2q + 2kv + 4f + heads*T (+ r per LoRA module); " +
	"h hidden, q = heads*head_dim, kv = kv_heads*head_dim, f intermediate, T sequence length " +
	"(method of Korthikanti et al., https://arxiv.org/abs/2205.05198, section 4.1, for a Llama layer without dropout)"

// activationsPerToken is the elements one decoder layer keeps for its
// backward pass per token, counted tensor by tensor as Korthikanti et al.
// count a GPT layer (https://arxiv.org/abs/2205.05198, section 4.1: each
// op keeps the inputs its backward reads), for a Llama layer with no
// dropout (so no masks): input_layernorm's input h; q/k/v's input h; the
// rotated q and k for q·kᵀ, q + kv; v for p·v, kv; the softmax output,
// heads x T (it serves both the softmax's and p·v's backward); o_proj's
// input q; post_attention_layernorm's input h; gate/up's input h; SiLU's
// input (gate) f; the product's operands silu(gate) and up, 2f;
// down_proj's input f; and per LoRA module A·x, r (its A reads the base
// module's input, already counted). The norms' per-token reciprocal RMS
// (one float32 each) is left out. A frozen projection's backward does not
// need its input; the count keeps it anyway (a small upper bound for LoRA).
func activationsPerToken(c LLMConfig, seqLen int, loraPerLayer int64) int64 {
	h, f := int64(c.Hidden), int64(c.FFN)
	q, kv := int64(c.Heads)*int64(c.HeadDim), int64(c.KVHeads)*int64(c.HeadDim)
	return 4*h + 2*q + 2*kv + 4*f + int64(c.Heads)*int64(seqLen) + loraPerLayer
}

// ftModule is one projection of a decoder layer LoRA can adapt.
type ftModule struct {
	name    string // within the layer, as Hugging Face names it
	in, out int64
}

// layerModules lists a layer's projections with their shapes.
func layerModules(c LLMConfig) []ftModule {
	h, f := int64(c.Hidden), int64(c.FFN)
	q, kv := int64(c.Heads)*int64(c.HeadDim), int64(c.KVHeads)*int64(c.HeadDim)
	return []ftModule{{"self_attn.q_proj", h, q}, {"self_attn.k_proj", h, kv}, {"self_attn.v_proj", h, kv},
		{"self_attn.o_proj", q, h}, {"mlp.gate_proj", h, f}, {"mlp.up_proj", h, f}, {"mlp.down_proj", f, h}}
}

// maxRank bounds the LoRA rank (the largest published decoders' hidden
// sizes are under 2^15).
const maxRank = 1 << 20

// adapterPlan matches the LoRA targets to c's modules by PEFT's rule for
// a list of target_modules (a module matches a target that is its whole
// name, model.layers.N.self_attn.q_proj, or a suffix of it after a dot)
// and counts the adapter. It returns the plan, the adapter's elements per
// token over all layers (the A·x each module keeps) and the most of them
// in one layer. A target that matches nothing is an error listing the
// real module names.
func adapterPlan(c LLMConfig, sp LoRASpec) (*LoRAPlan, int64, int64, error) {
	if err := sp.validate(); err != nil {
		return nil, 0, 0, err
	}
	mods := layerModules(c)
	var perRank float64 // elements per unit of rank with every module of every layer adapted
	for _, m := range mods {
		perRank += float64(c.Layers) * float64(m.in+m.out)
	}
	if float64(sp.Rank)*perRank > maxPlanParams {
		return nil, 0, 0, invalid("plan: %s: LoRA r=%d: up to %.3g adapter parameters, over the %g this plans", c.Name, sp.Rank, float64(sp.Rank)*perRank, float64(maxPlanParams))
	}
	every := make([]bool, len(mods)) // adapted in every layer
	some := map[[2]int]bool{}        // {layer, module} named with a layer
	for _, t := range sp.Targets {
		n := 0
		for i, m := range mods {
			if m.name == t || strings.HasSuffix(m.name, "."+t) {
				every[i] = true
				n++
			} else if l, ok := layerOf(t, m.name, c.Layers); ok {
				some[[2]int{l, i}] = true
				n++
			}
		}
		if n == 0 {
			return nil, 0, 0, &errs.InputError{Name: "lora target", Problem: "name", Got: strconv.Quote(t),
				Expected: "a module of the model (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj; or a full name like model.layers.0.self_attn.q_proj)"}
		}
	}
	p := &LoRAPlan{LoRASpec: sp, Scale: sp.Alpha / float64(sp.Rank), Modules: map[string]int{}}
	r := int64(sp.Rank)
	var perLayer int64 // every layer's adapted modules' r
	for i, m := range mods {
		if every[i] {
			p.Modules[m.name] += c.Layers
			p.AdaptedModules += c.Layers
			p.AdapterParams += int64(c.Layers) * r * (m.in + m.out)
			perLayer += r
		}
	}
	sum, most := int64(c.Layers)*perLayer, perLayer
	extra := map[int]int64{}
	for k := range some {
		if every[k[1]] {
			continue
		}
		m := mods[k[1]]
		p.Modules[m.name]++
		p.AdaptedModules++
		p.AdapterParams += r * (m.in + m.out)
		sum += r
		extra[k[0]] += r
		most = max(most, perLayer+extra[k[0]])
	}
	return p, sum, most, nil
}

// layerOf reports whether target names module (a layer's module name,
// self_attn.q_proj) of one layer, as a suffix after a dot of
// model.layers.N.module (N.module, layers.N.module or the whole name), and
// which layer (N, in [0, layers)).
func layerOf(target, module string, layers int) (int, bool) {
	x, ok := strings.CutSuffix(target, "."+module)
	if !ok {
		return 0, false
	}
	if y, ok := strings.CutPrefix(x, "model.layers."); ok {
		x = y
	} else if y, ok := strings.CutPrefix(x, "layers."); ok {
		x = y
	}
	n, err := strconv.Atoi(x)
	if err != nil || n < 0 || n >= layers || strconv.Itoa(n) != x {
		return 0, false
	}
	return n, true
}

// validate checks r, alpha and that there are targets.
func (sp LoRASpec) validate() error {
	switch {
	case sp.Rank <= 0 || sp.Rank > maxRank:
		return &errs.InputError{Name: "lora r", Problem: "value", Expected: fmt.Sprintf("a rank from 1 to %d", maxRank), Got: strconv.Itoa(sp.Rank)}
	case !(sp.Alpha > 0) || math.IsInf(sp.Alpha, 0):
		return &errs.InputError{Name: "lora alpha", Problem: "value", Expected: "a finite alpha > 0", Got: fmt.Sprint(sp.Alpha)}
	case len(sp.Targets) == 0:
		return &errs.InputError{Name: "lora targets", Problem: "value", Expected: "at least one module (q_proj, v_proj, ...)", Got: "none"}
	}
	return nil
}

// check validates the options against c, filling the defaults.
func (o FineTuneOptions) check(c LLMConfig) (FineTuneOptions, error) {
	if err := c.Validate(); err != nil {
		return o, err
	}
	switch {
	case o.SeqLen <= 0 || o.SeqLen > maxContext:
		return o, &errs.InputError{Name: "--seq-len", Problem: "value", Expected: fmt.Sprintf("tokens per sequence, 1 to %d", maxContext), Got: strconv.Itoa(o.SeqLen)}
	case c.MaxPositions > 0 && o.SeqLen > c.MaxPositions:
		return o, &errs.InputError{Name: "--seq-len", Problem: "value",
			Expected: fmt.Sprintf("at most the model's context (max_position_embeddings %d of %s)", c.MaxPositions, c.Name), Got: strconv.Itoa(o.SeqLen)}
	case o.Batch <= 0 || o.Batch > maxContext:
		return o, &errs.InputError{Name: "--batch", Problem: "value", Expected: fmt.Sprintf("sequences per step, 1 to %d", maxContext), Got: strconv.Itoa(o.Batch)}
	}
	if o.Precision == "" {
		o.Precision = "bfloat16"
	}
	if o.Precision != "bfloat16" && o.Precision != "float32" {
		return o, invalid("plan: --precision %q: the compute dtype of a fine-tune is bfloat16 or float32", o.Precision)
	}
	if o.BasePrecision == "" {
		o.BasePrecision = "float32"
	}
	switch {
	case o.LoRA == nil && o.BasePrecision != "float32":
		return o, invalid("plan: --base-precision %s is for LoRA: a full fine-tune trains float32 master weights", o.BasePrecision)
	case o.BasePrecision != "float32" && o.BasePrecision != "bfloat16" && o.BasePrecision != "int8":
		return o, invalid("plan: --base-precision %q: want float32, bfloat16 or int8", o.BasePrecision)
	}
	if o.MemoryFraction == 0 {
		o.MemoryFraction = DefaultMemoryFraction
	}
	if !(o.MemoryFraction > 0 && o.MemoryFraction <= 1) {
		return o, invalid("plan: memory fraction %v: want a share of HBM in (0, 1]", o.MemoryFraction)
	}
	if o.PricePerChipHour < 0 || math.IsNaN(o.PricePerChipHour) || math.IsInf(o.PricePerChipHour, 0) {
		return o, invalid("plan: price %v: want a positive USD per chip-hour", o.PricePerChipHour)
	}
	return o, nil
}

// PlanFineTune plans one step of fine-tuning c (LoRA when o.LoRA is set,
// else every weight) with AdamW on a slice, under o.Strategy (auto: each
// strategy, keeping the fastest step that fits). A step that does not fit
// is a report with Fits false; errors mean it could not be planned.
func PlanFineTune(c LLMConfig, o FineTuneOptions) (*FineTuneReport, error) {
	o, err := o.check(c)
	if err != nil {
		return nil, err
	}
	t, err := generationTarget(o.Slice)
	if err != nil {
		return nil, err
	}
	meshes, err := parseFTStrategy(o.Strategy, t.devices)
	if err != nil {
		return nil, err
	}
	var best *FineTuneReport
	var why []string
	for _, ms := range meshes {
		r, err := planOn(c, o, t, ms)
		if err != nil {
			return nil, err
		}
		hm := r.Headline()
		why = append(why, fmt.Sprintf("%s: %s per device, %s, step %.3g s", ms.Strategy, fmtBytes(hm.TotalBytes),
			map[bool]string{true: "fits", false: "does not fit"}[hm.Fits], hm.StepSeconds))
		if best == nil || ftBetter(r, best) {
			best = r
		}
	}
	if len(meshes) > 1 {
		best.StrategyReason = "auto chose " + best.Strategy + " (the fastest step that fits, else the smallest): " + strings.Join(why, "; ")
	}
	return best, nil
}

// ftBetter says whether a beats b for auto: fitting first, then the faster
// step, then (neither fitting) the fewer bytes per device.
func ftBetter(a, b *FineTuneReport) bool {
	x, y := a.Headline(), b.Headline()
	switch {
	case x.Fits != y.Fits:
		return x.Fits
	case x.Fits:
		return x.StepSeconds < y.StepSeconds
	}
	return x.TotalBytes < y.TotalBytes
}

// planOn plans the step on target t under one strategy.
func planOn(c LLMConfig, o FineTuneOptions, t genTarget, ms ftMesh) (*FineTuneReport, error) {
	if o.Batch%ms.Data != 0 {
		return nil, &errs.InputError{Name: "--batch", Problem: "value",
			Expected: fmt.Sprintf("a multiple of the data axis %d of %s under %s (each data index takes batch/%d sequences)", ms.Data, t.name, ms.Strategy, ms.Data), Got: strconv.Itoa(o.Batch)}
	}
	s := c.shards(1)
	r := &FineTuneReport{Model: c, Params: s.total, MatmulParams: s.matmul, Method: "full", Optimizer: "adamw", OptimizerSlots: 2,
		BasePrecision: o.BasePrecision, Precision: o.Precision, Slice: t.name, Generation: t.generation, Chips: t.chips,
		Devices: t.devices, DevicesPerChip: t.perChip, Strategy: ms.Strategy, DataParallel: ms.Data, ModelParallel: ms.Model, SeqLen: o.SeqLen, Batch: o.Batch,
		BatchPerDevice: o.Batch / ms.Data, ActivationFormula: ActivationFormula, HBMBytesPerDevice: t.hbm, HBMSource: t.hbmSource,
		MemoryFraction: o.MemoryFraction, Remat: o.Remat, PeakFlopsChip: t.acc.PeakBF16.Value, PeakSource: t.acc.PeakBF16.Source,
		HBMBandwidth: t.acc.MemoryBandwidth.Value, BandwidthSource: t.acc.MemoryBandwidth.Source, mesh: ms}
	if ici := t.acc.Interconnect.BandwidthPerChip; ici.Known() {
		r.ICIBandwidth, r.ICISource = ici.Value, ici.Source
	}
	r.Notes = append(r.Notes, t.notes...)
	var loraSum, loraMost int64
	var err error
	if o.LoRA != nil {
		if r.LoRA, loraSum, loraMost, err = adapterPlan(c, *o.LoRA); err != nil {
			return nil, err
		}
		r.Method, r.TrainedParams = "lora", r.LoRA.AdapterParams
	} else {
		r.TrainedParams = s.total
	}
	r.ActivationElementsPerTokenLayer = activationsPerToken(c, o.SeqLen, 0)
	if tooLarge(c, r, loraSum) {
		return nil, invalid("plan: %s at --batch %d --seq-len %d: the step's bytes overflow what this plans (2^62)", c.Name, o.Batch, o.SeqLen)
	}
	r.split(c)
	r.UsableBytesPerDevice = int64(math.Floor(float64(t.hbm) * o.MemoryFraction))
	fillPrice(r, o)
	r.WithoutRemat = r.step(c, false, loraSum, loraMost)
	r.WithRemat = r.step(c, true, loraSum, loraMost)
	r.fitReason()
	r.notes(c)
	return r, nil
}

// split counts one device's elements under r.mesh: trained, frozen base,
// matrix-product, output head, adapters, and activations per token.
func (r *FineTuneReport) split(c LLMConfig) {
	base := ftTensors(c)
	var und []string
	r.baseDev, und = meshElems(base, r.mesh, r.LoRA == nil)
	r.TrainedParamsPerDevice = r.baseDev
	if r.LoRA != nil {
		var ua []string
		r.adapterDev, ua = meshElems(adapterTensors(c, r.LoRA), r.mesh, true)
		r.TrainedParamsPerDevice, und = r.adapterDev, append(und, ua...)
	}
	r.Undivided = und
	tp := ftMesh{Strategy: StrategyTP, Data: 1, Model: r.mesh.Model}
	if r.mesh.Strategy != StrategyTP {
		tp.Model = 1
	}
	for _, x := range base {
		if x.matmul {
			n, _ := meshElems([]ftTensor{x}, tp, false)
			r.matmulDev += n
			if x.name == "lm_head" || (c.Tied && x.name == "embed_tokens") {
				r.headDev = n
			}
		}
	}
	r.actPerTokenLayer = r.ActivationElementsPerTokenLayer
	if tp.Model > 1 {
		r.actPerTokenLayer = tpActivationsPerToken(c, r.SeqLen, tp.Model)
	}
}

// baseBytesDev is one device's frozen base with LoRA: its elements at
// --base-precision; int8 (llm/quant.go) keeps the seven projections one
// byte per element with a float32 scale per output row (the scales, 1-D,
// whole on every device) and every other weight float32.
func (r *FineTuneReport) baseBytesDev(c LLMConfig) int64 {
	switch r.BasePrecision {
	case "bfloat16":
		return 2 * r.baseDev
	case "int8":
		tp := ftMesh{Strategy: r.mesh.Strategy, Model: r.mesh.Model}
		var proj, rows int64
		for _, x := range ftTensors(c) {
			if x.matmul && x.name != "lm_head" && x.name != "embed_tokens" {
				n, _ := meshElems([]ftTensor{x}, tp, false)
				proj += n
				rows += x.count * x.dims[0]
			}
		}
		return proj + 4*rows + 4*(r.baseDev-proj)
	}
	return 4 * r.baseDev
}

// tooLarge bounds the byte counts before they are computed in int64.
func tooLarge(c LLMConfig, r *FineTuneReport, loraSum int64) bool {
	n := float64(r.BatchPerDevice) * float64(r.SeqLen)
	acts := n * (float64(c.Layers)*float64(r.ActivationElementsPerTokenLayer) + float64(loraSum) + 2*float64(c.Hidden)) * 4
	logits := n * float64(c.Vocab) * 8
	return acts+logits+16*float64(r.Params) > 1<<62
}

// step counts one device's bytes and roofline with or without remat.
func (r *FineTuneReport) step(c LLMConfig, remat bool, loraSum, loraMost int64) FineTuneMemory {
	m := FineTuneMemory{Remat: remat}
	ab := int64(dtypeBytes[r.Precision])
	n := int64(r.BatchPerDevice) * int64(r.SeqLen) // tokens on the device
	h, l := int64(c.Hidden), int64(c.Layers)
	if r.LoRA != nil {
		m.WeightsBytes = r.baseBytesDev(c)
		m.AdapterBytes = 4 * r.adapterDev
	} else {
		m.WeightsBytes = 4 * r.baseDev
	}
	m.GradientBytes = 4 * r.TrainedParamsPerDevice
	m.OptimizerBytes = 8 * r.TrainedParamsPerDevice
	a := r.actPerTokenLayer
	if remat {
		// Each layer's input, and one layer's working set rebuilt in turn.
		m.ActivationBytes = n * (l*h + a + loraMost) * ab
	} else {
		m.ActivationBytes = n * (l*a + loraSum) * ab
	}
	m.ActivationBytes += n * 2 * h * ab // the final norm's and the output projection's inputs
	m.LogitsBytes = 2 * logitRows(c, n, remat) * r.vocabDev(c) * 4
	m.TotalBytes = m.WeightsBytes + m.AdapterBytes + m.GradientBytes + m.OptimizerBytes + m.ActivationBytes + m.LogitsBytes
	m.Fits = m.TotalBytes <= r.UsableBytesPerDevice
	r.collectives(c, &m, n, ab)
	r.roofline(c, &m, n)
	return m
}

// rematLogitElems is how many float32 logits train DIR --remat holds at
// once: it runs the head and the loss in chunks of at most 2^22 values of
// the whole vocabulary (16 MiB; llm/remat.go), each recomputed in the
// backward pass.
const rematLogitElems = 1 << 22

// logitRows is the rows of logits a step holds at once: every token's
// without remat, one chunk's with it.
func logitRows(c LLMConfig, n int64, remat bool) int64 {
	if !remat {
		return n
	}
	return min(n, max(1, rematLogitElems/int64(c.Vocab)))
}

// vocabDev is the vocabulary one device's logits span (tp splits
// lm_head's rows when its axis divides them).
func (r *FineTuneReport) vocabDev(c LLMConfig) int64 {
	if r.mesh.Strategy == StrategyTP {
		return divIf(int64(c.Vocab), int64(r.mesh.Model))
	}
	return int64(c.Vocab)
}

// collectives counts what one device sends per step (ring collectives:
// all-reduce 2(n-1)/n of the bytes, all-gather and reduce-scatter
// (n-1)/n; https://jax-ml.github.io/scaling-book/sharding/) and times it
// at the ICI bandwidth. dp: the trained gradients all-reduced over the
// data axis. fsdp: the trained weights all-gathered for the forward and
// again for the backward and their gradients reduce-scattered, 3(D-1)/D
// of them (ZeRO stage 3, https://arxiv.org/abs/1910.02054 section 7.2.2).
// tp: two all-reduces of [tokens, hidden] per layer forward and two
// backward (Megatron, https://arxiv.org/abs/1909.08053 section 3), two
// more with remat's second forward, plus the data axis's gradient
// all-reduce of the device's trained part. LoRA's row-parallel A·x
// reductions ([tokens, r]) are left out.
func (r *FineTuneReport) collectives(c LLMConfig, m *FineTuneMemory, n, ab int64) {
	d, md := float64(r.mesh.Data), float64(r.mesh.Model)
	grads := 4 * float64(r.TrainedParamsPerDevice)
	switch r.mesh.Strategy {
	case StrategyFSDP:
		m.CollectiveBytes = 3 * (d - 1) / d * 4 * float64(r.TrainedParams)
	case StrategyTP:
		per := 4.0
		if m.Remat {
			per = 6
		}
		m.CollectiveBytes = per * float64(c.Layers) * 2 * (md - 1) / md * float64(n*int64(c.Hidden)*ab)
		m.CollectiveBytes += 2 * (d - 1) / d * grads
	default:
		m.CollectiveBytes = 2 * (d - 1) / d * grads
	}
	if r.ICIBandwidth > 0 {
		m.CollectiveSeconds = m.CollectiveBytes / (r.ICIBandwidth / float64(r.DevicesPerChip))
	}
}

// roofline fills the step's FLOPs, bytes and time per device for n tokens.
// FLOPs, 2 per multiply-add: with Pm the matmul parameters, H the output
// head's (vocab x hidden), Pa the adapters' and A = 2 x layers x q x T the
// causal attention's forward per token (q·k and p·v over half the square),
// a full fine-tune is n(6Pm + 3A) (forward 2Pm + A, backward twice it);
// LoRA is n(2Pm + A) forward + n(2Pm + 2A) for the activation gradients
// through the frozen weights + 6nPa for the adapters (forward 2, input and
// weight gradients 2 each); remat adds one more forward of the layers,
// n(2(Pm - H) + A) (+ 2nPa with LoRA). Bytes: the weights (and adapters)
// read once per pass (2, or 3 with remat), 32 per trained parameter
// (gradient write; AdamW reads gradient, weight and both moments and
// writes the last three), the activations and logits written and read.
func (r *FineTuneReport) roofline(c LLMConfig, m *FineTuneMemory, n int64) {
	N := float64(n)
	pm, head := float64(r.matmulDev), float64(r.headDev)
	heads := float64(divIf(int64(c.Heads), int64(r.ModelParallel)))
	attn := 2 * float64(c.Layers) * heads * float64(c.HeadDim) * float64(r.SeqLen)
	pa, passes := 0.0, 2.0
	read := float64(m.WeightsBytes + m.AdapterBytes) // the weights each pass reads
	if r.LoRA != nil {
		pa = float64(r.LoRA.AdapterParams)
		if r.mesh.Strategy == StrategyTP {
			pa = float64(r.adapterDev)
		} else {
			read = float64(m.WeightsBytes) + 4*pa // fsdp reads the gathered adapters
		}
		m.FlopsPerDevice = N * (4*pm + 3*attn + 6*pa)
	} else {
		m.FlopsPerDevice = N * (6*pm + 3*attn)
		if r.mesh.Strategy == StrategyFSDP {
			read = 4 * float64(r.Params)
		}
	}
	if m.Remat {
		m.FlopsPerDevice += N * (2*(pm-head) + attn + 2*pa)
		passes = 3
	}
	m.BytesPerDevice = passes*read + 32*float64(r.TrainedParamsPerDevice) +
		2*float64(m.ActivationBytes+m.LogitsBytes)
	perChip := float64(r.DevicesPerChip)
	m.ComputeSeconds = m.FlopsPerDevice / (r.PeakFlopsChip / perChip)
	m.MemorySeconds = m.BytesPerDevice / (r.HBMBandwidth / perChip)
	m.StepSeconds = max(m.ComputeSeconds, m.MemorySeconds) + m.CollectiveSeconds
	m.Bound = "compute"
	if m.MemorySeconds > m.ComputeSeconds {
		m.Bound = "memory"
	}
	m.TokensPerSecond = float64(r.Batch) * float64(r.SeqLen) / m.StepSeconds
	m.TokensPerSecChip = m.TokensPerSecond / float64(r.Chips)
	if r.CostPerHourUSD != nil {
		v := *r.CostPerHourUSD / (m.TokensPerSecond * 3600) * 1e6
		m.CostPerMTokensUSD = &v
	}
}

// fillPrice fills the slice's hourly cost.
func fillPrice(r *FineTuneReport, o FineTuneOptions) {
	p, src := o.PricePerChipHour, "--price"
	if p == 0 {
		if pr, ok := Prices[r.Generation]; ok {
			p, src = pr.OnDemand, pr.Source
		} else {
			src = "no price known for " + r.Generation + ": give one with --price (USD per chip-hour)"
		}
	}
	r.PriceSource = src
	if p > 0 {
		r.PricePerChipHour = p
		h := p * float64(r.Chips)
		r.CostPerHourUSD = &h
	}
}

// fitReason words the headline's fit.
func (r *FineTuneReport) fitReason() {
	m := r.Headline()
	r.Fits = m.Fits
	setting := "without remat"
	if r.Remat {
		setting = "with remat"
	}
	verb := "fits"
	if !m.Fits {
		verb = "does not fit"
	}
	r.FitReason = fmt.Sprintf("%s %s: %s per device (weights %s + adapters %s + gradients %s + AdamW state %s + activations %s + logits %s), usable %s (%.0f%% of %s)",
		verb, setting, fmtBytes(m.TotalBytes), fmtBytes(m.WeightsBytes), fmtBytes(m.AdapterBytes), fmtBytes(m.GradientBytes),
		fmtBytes(m.OptimizerBytes), fmtBytes(m.ActivationBytes), fmtBytes(m.LogitsBytes), fmtBytes(r.UsableBytesPerDevice),
		100*r.MemoryFraction, fmtBytes(r.HBMBytesPerDevice))
	if other := r.otherSetting(); !m.Fits && other.Fits {
		r.FitReason += fmt.Sprintf("; it fits %s (%s)", map[bool]string{true: "with --remat", false: "without --remat"}[other.Remat], fmtBytes(other.TotalBytes))
	}
}

func (r *FineTuneReport) otherSetting() *FineTuneMemory {
	if r.Remat {
		return &r.WithoutRemat
	}
	return &r.WithRemat
}

// notes says what the figures leave out.
func (r *FineTuneReport) notes(c LLMConfig) {
	if c.MaxPositions == 0 {
		r.Notes = append(r.Notes, "the model's context (max_position_embeddings) is not known for --generate shapes: --seq-len is not checked against it")
	}
	switch {
	case r.Strategy == StrategyFSDP:
		r.Notes = append(r.Notes, fmt.Sprintf("fsdp over %d devices: trained tensors, gradients and AdamW state split along their first dimension %d divides, frozen tensors whole; "+
			"the gathered weights a layer uses while it runs are not counted", r.DataParallel, r.DataParallel))
	case r.Strategy == StrategyTP:
		r.Notes = append(r.Notes, fmt.Sprintf("tp over a model axis of %d (data axis %d): Megatron's splits; layer inputs and the residual stream whole on every device", r.ModelParallel, r.DataParallel))
	case r.DataParallel > 1:
		r.Notes = append(r.Notes, fmt.Sprintf("data parallel over %d devices: every device holds the whole model and its state", r.DataParallel))
	}
	if len(r.Undivided) > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("kept whole (the axis does not divide the split dimension): %s", strings.Join(r.Undivided, ", ")))
	}
	if r.ICIBandwidth == 0 && r.Devices > 1 {
		r.Notes = append(r.Notes, "no ICI bandwidth known for "+r.Generation+": collectives are counted in bytes but not timed")
	}
	if r.LoRA == nil && r.Precision == "bfloat16" {
		r.Notes = append(r.Notes, "bfloat16 compute with float32 master weights: the bfloat16 copies the compiler may keep of weights in use are not counted")
	}
	if r.Precision == "float32" {
		r.Notes = append(r.Notes, "float32 compute is timed at the bf16 peak; float32 matrix products run slower on TPUs")
	}
	r.Notes = append(r.Notes, "not counted: the backward's transient activation gradients, the compiler's workspace and code (the memory fraction's reserve covers them); "+
		"the step is a roofline at 100% of peak plus the collectives at 100% of ICI bandwidth, not overlapped")
}

// LoadConfigFile reads a decoder's sizes from a config.json given as a
// file (a checkpoint directory goes through LoadCheckpoint, which also
// checks the safetensors headers). The model is named after the file's
// directory, as LoadCheckpoint names it.
func LoadConfigFile(path string) (LLMConfig, error) {
	raw, err := readBounded(path, maxConfigBytes)
	if err != nil {
		return LLMConfig{}, err
	}
	c, err := parseLLMConfig(path, raw)
	if err != nil {
		return LLMConfig{}, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return LLMConfig{}, err
	}
	c.Name = filepath.Base(filepath.Dir(abs))
	return c, nil
}
