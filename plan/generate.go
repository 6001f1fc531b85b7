package plan

// Planning LLM generation (tensorbridge plan --llm): what a decoder needs to
// serve autoregressive generation on a slice, by arithmetic on its shapes
// and the catalog's cited per-chip figures. Nothing is compiled and no
// plugin is loaded: the weights, the KV cache, how many sequences fit and
// a roofline decode step follow from the shapes alone.
//
// Tensor parallelism follows the Megatron pattern package shard uses:
// q/k/v, gate and up projections split by output columns, o and down
// projections by input rows, the embedding and the untied output
// projection by vocabulary; norms are replicated. A dimension that is not a
// multiple of the model axis is replicated, as shard does. Key/value heads
// are split whole: with fewer key/value heads than the model axis, each
// device keeps the one head its query heads use (its weights and its KV
// cache), so the head is replicated model/kv_heads times, as vLLM does.

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/tensorbridge/tensorbridge/catalog"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/modelgen"
	"github.com/tensorbridge/tensorbridge/shard"
)

// LLMConfig is the shape of a Llama-family decoder, as planning needs it.
type LLMConfig struct {
	Name          string `json:"name"`
	Architecture  string `json:"architecture"`
	Layers        int    `json:"layers"`
	Hidden        int    `json:"hidden_size"`
	Heads         int    `json:"heads"`
	KVHeads       int    `json:"kv_heads"`
	HeadDim       int    `json:"head_dim"`
	FFN           int    `json:"intermediate_size"`
	Vocab         int    `json:"vocab_size"`
	Tied          bool   `json:"tie_word_embeddings"`
	QKVBias       bool   `json:"qkv_bias,omitempty"` // Qwen2, attention_bias
	QKNorm        bool   `json:"qk_norm,omitempty"`  // Qwen3: RMSNorm of q and k per head
	MLPBias       bool   `json:"mlp_bias,omitempty"` // mlp_bias: biases on gate, up and down
	OBias         bool   `json:"o_bias,omitempty"`   // attention_bias on Llama also biases o_proj
	SlidingWindow int    `json:"sliding_window,omitempty"`
	MaxPositions  int    `json:"max_position_embeddings,omitempty"`
}

// LLMFromModelgen is the decoder modelgen generates for c: untied, no
// biases, head_dim = hidden / heads.
func LLMFromModelgen(c modelgen.Config) (LLMConfig, error) {
	if err := c.Validate(); err != nil {
		return LLMConfig{}, invalid("%v", err)
	}
	if c.Encoder {
		return LLMConfig{}, invalid("plan: --llm plans a decoder's generation; %s is an encoder", c.Name)
	}
	kv := c.KVHeads
	if kv == 0 {
		kv = c.Heads
	}
	return LLMConfig{Name: c.Name, Architecture: "LlamaForCausalLM (modelgen)", Layers: c.Layers, Hidden: c.Hidden,
		Heads: c.Heads, KVHeads: kv, HeadDim: c.Hidden / c.Heads, FFN: c.FFN, Vocab: c.Vocab}, nil
}

// Validate checks the sizes.
func (c LLMConfig) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"num_hidden_layers", c.Layers}, {"hidden_size", c.Hidden}, {"num_attention_heads", c.Heads},
		{"num_key_value_heads", c.KVHeads}, {"head_dim", c.HeadDim}, {"intermediate_size", c.FFN}, {"vocab_size", c.Vocab}} {
		if f.v <= 0 || f.v > 1<<24 {
			return invalid("plan: %s: %s = %d, want a positive size up to 2^24", c.Name, f.name, f.v)
		}
	}
	if c.Heads%c.KVHeads != 0 {
		return invalid("plan: %s: num_attention_heads %d is not a multiple of num_key_value_heads %d", c.Name, c.Heads, c.KVHeads)
	}
	// Bound the counts before they are multiplied in int64: the largest
	// published decoders have under 2e12 parameters.
	h, l := float64(c.Hidden), float64(c.Layers)
	if p := 2*float64(c.Vocab)*h + l*(h*float64(c.Heads+2*c.KVHeads)*float64(c.HeadDim)*2+3*h*float64(c.FFN)); p > maxPlanParams {
		return invalid("plan: %s: about %.3g parameters, over the %g this plans", c.Name, p, float64(maxPlanParams))
	}
	return nil
}

// maxPlanParams bounds the decoders planned, so that every count fits an
// int64 with room for bytes x tokens.
const maxPlanParams = 1e14

// maxContext bounds --context (16M tokens).
const maxContext = 1 << 24

// Params counts the weights' elements.
func (c LLMConfig) Params() int64 {
	return c.shards(1).total
}

// KVBytesPerToken is the whole model's key and value cache for one token:
// 2 x layers x kv_heads x head_dim x bytes.
func (c LLMConfig) KVBytesPerToken(dtypeBytes int) int64 {
	return 2 * int64(c.Layers) * int64(c.KVHeads) * int64(c.HeadDim) * int64(dtypeBytes)
}

// kvHeadsPerDevice is the most key/value heads one device of a model axis
// of m needs: each device holds heads/m contiguous query heads (heads is a
// multiple of m, checked by PlanGenerate) and the kv heads of their groups,
// heads/kv_heads query heads to a group. That is kv/m when m divides kv,
// one (the head replicated m/kv times) when kv divides m, and otherwise
// the largest number of groups a device's query heads touch.
func (c LLMConfig) kvHeadsPerDevice(m int) int {
	q, g := c.Heads/m, c.Heads/c.KVHeads
	most := 0
	for d := range m {
		first, last := d*q, d*q+q-1
		most = max(most, last/g-first/g+1)
	}
	return most
}

// split is the elements of one weight on one device of a model axis of m:
// n/m when dim (the split dimension's size) is a multiple of m, else all
// of it (replicated, as shard does).
func split(n int64, dim, m int) (int64, bool) {
	if dim%m == 0 {
		return n / int64(m), true
	}
	return n, false
}

// shardCount is a decoder's element counts: total, per device of a model
// axis of m, and what decode reads and multiplies.
type shardCount struct {
	total      int64 // whole model
	perDevice  int64 // on one device
	matmul     int64 // per device, in matrix products per token (lm_head once)
	embedTable int64 // per device, the embedding table (read by rows when untied)
	replicated []string
}

// shards counts the weights on one device of a model axis of m. Heads
// must be a multiple of m (checked by PlanGenerate).
func (c LLMConfig) shards(m int) shardCount {
	h, f, v, hd := int64(c.Hidden), int64(c.FFN), int64(c.Vocab), int64(c.HeadDim)
	q, kvd := int64(c.Heads)*hd, int64(c.KVHeads)*hd
	kvDev := int64(c.kvHeadsPerDevice(m)) * hd
	var s shardCount
	repl := map[string]bool{}
	times := int64(1) // the layers' weights are counted once, times the layers
	add := func(name string, n, dev int64, mm bool) {
		s.total += n * times
		s.perDevice += dev * times
		if mm {
			s.matmul += dev * times
		}
		if m > 1 && dev == n && !strings.HasSuffix(name, "norm") {
			repl[name] = true
		}
	}
	addSplit := func(name string, n int64, dim int, mm bool) {
		d, _ := split(n, dim, m)
		add(name, n, d, mm)
	}
	// Embedding, split by vocabulary.
	embed, _ := split(v*h, c.Vocab, m)
	s.embedTable = embed
	add("embed_tokens", v*h, embed, c.Tied) // tied: it is also the output projection
	times = int64(c.Layers)
	{
		add("input_layernorm", h, h, false)
		add("post_attention_layernorm", h, h, false)
		addSplit("q_proj", h*q, c.Heads, true)
		add("k_proj", h*kvd, h*kvDev, true)
		add("v_proj", h*kvd, h*kvDev, true)
		addSplit("o_proj", q*h, c.Heads, true)
		if c.QKVBias {
			addSplit("q_proj.bias", q, c.Heads, false)
			add("k_proj.bias", kvd, kvDev, false)
			add("v_proj.bias", kvd, kvDev, false)
		}
		if c.OBias {
			add("o_proj.bias", h, h, false) // added after the reduction: replicated
		}
		if c.QKNorm {
			add("q_norm", hd, hd, false)
			add("k_norm", hd, hd, false)
		}
		addSplit("gate_proj", h*f, c.FFN, true)
		addSplit("up_proj", h*f, c.FFN, true)
		addSplit("down_proj", f*h, c.FFN, true)
		if c.MLPBias {
			addSplit("gate_proj.bias", f, c.FFN, false)
			addSplit("up_proj.bias", f, c.FFN, false)
			add("down_proj.bias", h, h, false)
		}
	}
	times = 1
	add("norm", h, h, false)
	if !c.Tied {
		addSplit("lm_head", h*v, c.Vocab, true)
	}
	for k := range repl {
		s.replicated = append(s.replicated, k)
	}
	sort.Strings(s.replicated)
	return s
}

// GenerateOptions choose the slice, the layout and the serving shape.
type GenerateOptions struct {
	// Slice is a Cloud TPU accelerator type ("v5e-8") or a GPU count
	// ("h100-8").
	Slice string
	// Strategy is "auto", "tp", "dp", "tp=M", "model=M" or "dp=D,tp=M":
	// D replicas of the model, each tensor parallel over M devices. Auto
	// tries every split and keeps the most tokens/s that fits.
	Strategy string
	// Context is the tokens one sequence may hold (prompt plus
	// generated): the KV cache is sized for it.
	Context int
	// Prompt is the prompt length prefill is timed for; 0 means Context.
	Prompt int
	// Batch is the number of concurrent sequences over the whole slice the
	// decode step is timed for; 0 times 1, 2, 4, ... up to what fits.
	Batch int
	// Precision is the weights' dtype on the device: bfloat16 (default),
	// float16 or float32.
	Precision string
	// KVDType is the KV cache's dtype: bfloat16 (default), float16,
	// float32, int8 or float8.
	KVDType string
	// MemoryFraction is the share of each device's HBM weights and the KV
	// cache may take; the rest is reserved for activations, the compiler's
	// workspace and code. 0 means DefaultMemoryFraction.
	MemoryFraction float64
	// PricePerChipHour overrides the price table, in USD; 0 uses it.
	PricePerChipHour float64
}

// DefaultMemoryFraction is the share of HBM given to weights and the KV
// cache when GenerateOptions.MemoryFraction is 0: 0.9, the default of
// vLLM's gpu_memory_utilization
// (https://docs.vllm.ai/en/latest/configuration/engine_args.html). The
// 10% left covers a decode step's activations (a few MiB: batch x
// (hidden + intermediate/M + vocab/M) values), libtpu's own reservation
// (it reports 15.75 GiB usable of a v5e's 16 GiB) and the compiled code.
const DefaultMemoryFraction = 0.9

// DecodeStep is the roofline of one decode step at one batch.
type DecodeStep struct {
	Batch             int      `json:"batch"`             // sequences over the whole slice
	BatchPerReplica   int      `json:"batch_per_replica"` // sequences one model replica decodes
	BytesPerDevice    float64  `json:"bytes_read_per_device"`
	FlopsPerDevice    float64  `json:"flops_per_device"`
	MemorySeconds     float64  `json:"memory_seconds"`
	ComputeSeconds    float64  `json:"compute_seconds"`
	StepSeconds       float64  `json:"step_seconds"`
	Bound             string   `json:"bound"`
	TokensPerSecond   float64  `json:"tokens_per_second"` // whole slice
	TokensPerSecChip  float64  `json:"tokens_per_second_per_chip"`
	PerSequenceTokens float64  `json:"tokens_per_second_per_sequence"`
	Fits              bool     `json:"fits"`
	CostPerMTokensUSD *float64 `json:"cost_per_million_tokens_usd,omitempty"`
}

// Prefill is the roofline of one prompt's prefill on one replica.
type Prefill struct {
	PromptTokens   int     `json:"prompt_tokens"`
	FlopsPerDevice float64 `json:"flops_per_device"`
	BytesPerDevice float64 `json:"bytes_per_device"`
	ComputeSeconds float64 `json:"compute_seconds"`
	MemorySeconds  float64 `json:"memory_seconds"`
	Seconds        float64 `json:"seconds"`
	Bound          string  `json:"bound"`
}

// GenerateReport is the generation plan of one decoder on one slice.
type GenerateReport struct {
	Model          LLMConfig `json:"model"`
	Params         int64     `json:"params"`
	Slice          string    `json:"slice"`
	Generation     string    `json:"generation"`
	Chips          int       `json:"chips"`
	Devices        int       `json:"devices"`
	DevicesPerChip int       `json:"devices_per_chip"`
	Strategy       string    `json:"strategy"`
	DataParallel   int       `json:"data_parallel"`  // model replicas
	ModelParallel  int       `json:"model_parallel"` // devices per replica
	Precision      string    `json:"precision"`
	WeightBytes    int       `json:"weight_dtype_bytes"`
	KVDType        string    `json:"kv_dtype"`
	KVBytes        int       `json:"kv_dtype_bytes"`
	Context        int       `json:"context_tokens"`

	WeightsBytes           int64    `json:"weights_bytes"` // whole model, once
	WeightsBytesPerDevice  int64    `json:"weights_bytes_per_device"`
	ReplicatedWeights      []string `json:"replicated_weights,omitempty"`
	KVHeadsPerDevice       int      `json:"kv_heads_per_device"`
	KVHeadReplication      int      `json:"kv_head_replication"` // copies of each kv head over the model axis
	KVBytesPerToken        int64    `json:"kv_bytes_per_token"`  // whole model
	KVBytesPerTokenDevice  int64    `json:"kv_bytes_per_token_per_device"`
	KVBytesPerSequence     int64    `json:"kv_bytes_per_sequence"` // at the context length, whole model
	KVBytesPerSeqDevice    int64    `json:"kv_bytes_per_sequence_per_device"`
	HBMBytesPerDevice      int64    `json:"hbm_bytes_per_device"`
	HBMSource              string   `json:"hbm_source"`
	MemoryFraction         float64  `json:"memory_fraction"`
	ReserveBytesPerDevice  int64    `json:"reserve_bytes_per_device"`
	KVBudgetBytesPerDevice int64    `json:"kv_budget_bytes_per_device"`
	SequencesPerReplica    int      `json:"max_sequences_per_replica"`
	MaxSequences           int      `json:"max_sequences"` // whole slice
	KVTokensPerReplica     int64    `json:"kv_tokens_per_replica"`
	Fits                   bool     `json:"fits"`
	FitReason              string   `json:"fit_reason"`

	PeakFlopsChip   float64 `json:"peak_flops_per_chip"`
	PeakSource      string  `json:"peak_source"`
	HBMBandwidth    float64 `json:"hbm_bandwidth_per_chip"`
	BandwidthSource string  `json:"hbm_bandwidth_source"`

	Decode           []DecodeStep `json:"decode"`
	Prefill          *Prefill     `json:"prefill,omitempty"`
	PricePerChipHour float64      `json:"price_per_chip_hour_usd,omitempty"`
	CostPerHourUSD   *float64     `json:"cost_per_hour_usd"`
	PriceSource      string       `json:"price_source"`
	Rejected         []Rejected   `json:"rejected,omitempty"`
	Notes            []string     `json:"notes,omitempty"`
}

func invalid(format string, a ...any) error {
	return &errs.Error{Kind: errs.InvalidArgument, Op: "plan", Err: fmt.Errorf(format, a...)}
}

// dtypeBytes are the element sizes plan --llm knows.
var dtypeBytes = map[string]int{"bfloat16": 2, "float16": 2, "float32": 4, "int8": 1, "float8": 1}

// genTarget is a slice's per-device resources.
type genTarget struct {
	name, generation string
	chips, devices   int
	perChip          int
	hbm              int64 // per device
	hbmSource        string
	acc              catalog.Accelerator
	notes            []string
}

// generationTarget resolves a slice by the catalog alone (no plugin).
func generationTarget(s string) (genTarget, error) {
	var t genTarget
	if g, ok := gpuSlice(s); ok {
		acc, ok := catalog.Lookup(g.key)
		if !ok {
			return t, invalid("plan: no catalog entry %q", g.key)
		}
		t = genTarget{name: s, generation: acc.Generation, chips: g.n, acc: acc}
	} else {
		sl, acc, err := Slice(s)
		if err != nil {
			return t, &errs.Error{Kind: errs.InvalidArgument, Op: "plan", Err: err}
		}
		t = genTarget{name: sl.Name, generation: sl.Generation, chips: sl.Chips, acc: acc}
	}
	acc := t.acc
	if !acc.Memory.Known() || !acc.MemoryBandwidth.Known() || !acc.PeakBF16.Known() {
		return t, invalid("plan: the catalog lacks %s's HBM, bandwidth or bf16 peak; cannot plan generation on it", acc.Generation)
	}
	t.perChip = 1
	if acc.DevicesPerChip.Known() {
		t.perChip = acc.DevicesPerChip.Value
	} else {
		t.notes = append(t.notes, fmt.Sprintf("the catalog does not know how many devices a %s chip is (%s): planned as one device per chip",
			acc.Generation, acc.DevicesPerChip.Note))
	}
	t.devices = t.chips * t.perChip
	t.hbm = int64(acc.Memory.Value) / int64(t.perChip)
	t.hbmSource = acc.Memory.Source
	return t, nil
}

// PlanGenerate plans serving generation of c on a slice.
func PlanGenerate(c LLMConfig, o GenerateOptions) (*GenerateReport, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if o.Context <= 0 || o.Context > maxContext {
		return nil, invalid("plan: --context %d: want the tokens one sequence may hold (prompt + generated), from 1 to %d", o.Context, maxContext)
	}
	if c.MaxPositions > 0 && o.Context > c.MaxPositions {
		return nil, invalid("plan: --context %d exceeds the model's max_position_embeddings %d", o.Context, c.MaxPositions)
	}
	if o.Prompt < 0 || o.Prompt > o.Context {
		return nil, invalid("plan: --prompt %d: want a prompt length from 1 to the context (%d)", o.Prompt, o.Context)
	}
	if o.Batch < 0 {
		return nil, invalid("plan: --batch %d: want a positive number of concurrent sequences", o.Batch)
	}
	if o.Precision == "" {
		o.Precision = "bfloat16"
	}
	if o.KVDType == "" {
		o.KVDType = "bfloat16"
	}
	wb, ok := dtypeBytes[o.Precision]
	if !ok || o.Precision == "int8" || o.Precision == "float8" {
		return nil, invalid("plan: precision %q: bfloat16, float16 or float32", o.Precision)
	}
	kb, ok := dtypeBytes[o.KVDType]
	if !ok {
		return nil, invalid("plan: kv dtype %q: bfloat16, float16, float32, int8 or float8", o.KVDType)
	}
	if o.MemoryFraction == 0 {
		o.MemoryFraction = DefaultMemoryFraction
	}
	if !(o.MemoryFraction > 0 && o.MemoryFraction <= 1) {
		return nil, invalid("plan: memory fraction %v: want a share of HBM in (0, 1]", o.MemoryFraction)
	}
	if o.PricePerChipHour < 0 || math.IsNaN(o.PricePerChipHour) || math.IsInf(o.PricePerChipHour, 0) {
		return nil, invalid("plan: price %v: want a positive USD per chip-hour", o.PricePerChipHour)
	}
	t, err := generationTarget(o.Slice)
	if err != nil {
		return nil, err
	}
	meshes, err := ParseStrategy(o.Strategy, t.devices)
	if err != nil {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Op: "plan", Err: err}
	}
	auto := meshes == nil
	if auto {
		meshes = Strategies(t.devices)
	}
	var reports []*GenerateReport
	var rejected []Rejected
	for _, mesh := range meshes {
		if c.Heads%mesh.Model != 0 {
			reason := fmt.Sprintf("num_attention_heads %d is not a multiple of the model axis %d", c.Heads, mesh.Model)
			if !auto {
				return nil, invalid("plan: %s: %s", strategyName(mesh), reason)
			}
			rejected = append(rejected, Rejected{Strategy: strategyName(mesh), Reason: reason})
			continue
		}
		if o.Batch > 0 && o.Batch < mesh.Data {
			reason := fmt.Sprintf("--batch %d leaves replicas of the data axis (%d) idle", o.Batch, mesh.Data)
			if !auto {
				return nil, invalid("plan: %s: %s", strategyName(mesh), reason)
			}
			rejected = append(rejected, Rejected{Strategy: strategyName(mesh), Reason: reason})
			continue
		}
		reports = append(reports, planGenOne(c, o, t, mesh, wb, kb))
	}
	if len(reports) == 0 {
		return nil, invalid("plan: no strategy suits %s on %s: %v", c.Name, o.Slice, rejected)
	}
	sort.SliceStable(reports, func(i, j int) bool { return betterGen(reports[i], reports[j]) })
	best := reports[0]
	for _, r := range reports[1:] {
		rejected = append(rejected, Rejected{Strategy: r.Strategy, Reason: genLostBecause(r, best)})
	}
	if auto {
		best.Rejected = rejected
		best.Notes = append(best.Notes, "strategy chosen by auto: the most decode tokens/s among the layouts that fit (at --batch, or at the most sequences that fit)")
	}
	return best, nil
}

// headline is the decode step a report is judged by: the one at --batch,
// else the largest batch that fits.
func (r *GenerateReport) headline() *DecodeStep {
	if len(r.Decode) == 0 {
		return nil
	}
	return &r.Decode[len(r.Decode)-1]
}

func betterGen(a, b *GenerateReport) bool {
	ha, hb := a.headline(), b.headline()
	fa, fb := a.Fits && ha != nil && ha.Fits, b.Fits && hb != nil && hb.Fits
	if fa != fb {
		return fa
	}
	if !fa {
		return a.WeightsBytesPerDevice < b.WeightsBytesPerDevice
	}
	if ha.TokensPerSecond != hb.TokensPerSecond {
		return ha.TokensPerSecond > hb.TokensPerSecond
	}
	return a.ModelParallel < b.ModelParallel
}

func genLostBecause(r, best *GenerateReport) string {
	h := r.headline()
	if !r.Fits || h == nil || !h.Fits {
		return r.FitReason
	}
	return fmt.Sprintf("fits %d sequences, decoding %.4g tokens/s at batch %d against %.4g", r.MaxSequences, h.TokensPerSecond, h.Batch, best.headline().TokensPerSecond)
}

// planGenOne plans one mesh.
func planGenOne(c LLMConfig, o GenerateOptions, t genTarget, mesh shard.Mesh, wb, kb int) *GenerateReport {
	m := mesh.Model
	s := c.shards(m)
	r := &GenerateReport{Model: c, Params: s.total, Slice: t.name, Generation: t.generation, Chips: t.chips,
		Devices: t.devices, DevicesPerChip: t.perChip, Strategy: strategyName(mesh), DataParallel: mesh.Data,
		ModelParallel: m, Precision: o.Precision, WeightBytes: wb, KVDType: o.KVDType, KVBytes: kb, Context: o.Context,
		HBMBytesPerDevice: t.hbm, HBMSource: t.hbmSource, MemoryFraction: o.MemoryFraction,
		PeakFlopsChip: t.acc.PeakBF16.Value, PeakSource: t.acc.PeakBF16.Source,
		HBMBandwidth: t.acc.MemoryBandwidth.Value, BandwidthSource: t.acc.MemoryBandwidth.Source}
	r.Notes = append(r.Notes, t.notes...)
	r.WeightsBytes = s.total * int64(wb)
	r.WeightsBytesPerDevice = s.perDevice * int64(wb)
	r.ReplicatedWeights = s.replicated
	r.KVHeadsPerDevice = c.kvHeadsPerDevice(m)
	r.KVHeadReplication = r.KVHeadsPerDevice * m / c.KVHeads
	if r.KVHeadReplication < 1 {
		r.KVHeadReplication = 1
	}
	if c.KVHeads < m {
		r.Notes = append(r.Notes, fmt.Sprintf("%d key/value heads < model axis %d: each device keeps one kv head (k_proj, v_proj and its KV cache), replicated %d times",
			c.KVHeads, m, r.KVHeadReplication))
	} else if c.KVHeads%m != 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d key/value heads do not split evenly over model axis %d: a device keeps up to %d (counted for every device)", c.KVHeads, m, r.KVHeadsPerDevice))
	}
	r.KVBytesPerToken = c.KVBytesPerToken(kb)
	r.KVBytesPerTokenDevice = 2 * int64(c.Layers) * int64(r.KVHeadsPerDevice) * int64(c.HeadDim) * int64(kb)
	r.KVBytesPerSequence = r.KVBytesPerToken * int64(o.Context)
	r.KVBytesPerSeqDevice = r.KVBytesPerTokenDevice * int64(o.Context)
	usable := int64(math.Floor(float64(t.hbm) * o.MemoryFraction))
	r.ReserveBytesPerDevice = t.hbm - usable
	r.KVBudgetBytesPerDevice = usable - r.WeightsBytesPerDevice
	if r.KVBudgetBytesPerDevice > 0 {
		r.SequencesPerReplica = int(r.KVBudgetBytesPerDevice / r.KVBytesPerSeqDevice)
		r.KVTokensPerReplica = r.KVBudgetBytesPerDevice / r.KVBytesPerTokenDevice
	}
	r.MaxSequences = r.SequencesPerReplica * mesh.Data
	switch {
	case r.KVBudgetBytesPerDevice <= 0:
		r.FitReason = fmt.Sprintf("does not fit: weights take %s per device, more than the %s usable (%.0f%% of %s)",
			fmtBytes(r.WeightsBytesPerDevice), fmtBytes(usable), 100*o.MemoryFraction, fmtBytes(t.hbm))
	case r.SequencesPerReplica == 0:
		r.FitReason = fmt.Sprintf("does not fit: the weights leave %s per device for the KV cache, less than one %d-token sequence (%s per device)",
			fmtBytes(r.KVBudgetBytesPerDevice), o.Context, fmtBytes(r.KVBytesPerSeqDevice))
	case o.Batch > r.MaxSequences:
		r.FitReason = fmt.Sprintf("does not fit --batch %d: %d sequences of %d tokens fit (%d per replica, %s of KV cache each per device, %s free per device after weights)",
			o.Batch, r.MaxSequences, o.Context, r.SequencesPerReplica, fmtBytes(r.KVBytesPerSeqDevice), fmtBytes(r.KVBudgetBytesPerDevice))
	default:
		r.Fits = true
		r.FitReason = fmt.Sprintf("fits: weights %s + KV cache for %d sequences of %d tokens (%s each) per device, within %s (%.0f%% of %s)",
			fmtBytes(r.WeightsBytesPerDevice), r.SequencesPerReplica, o.Context, fmtBytes(r.KVBytesPerSeqDevice),
			fmtBytes(usable), 100*o.MemoryFraction, fmtBytes(t.hbm))
	}
	if kb == 1 {
		r.Notes = append(r.Notes, fmt.Sprintf("%s KV cache: one byte per element; the scales a quantized cache keeps are not counted", o.KVDType))
	}
	if c.SlidingWindow > 0 && c.SlidingWindow < o.Context {
		r.Notes = append(r.Notes, fmt.Sprintf("sliding_window %d < context %d: the KV cache is sized for the whole context; an engine that keeps only the window needs less",
			c.SlidingWindow, o.Context))
	}
	price(r, t.acc, o)
	batches := decodeBatches(o.Batch, r.MaxSequences, mesh.Data)
	for _, b := range batches {
		r.Decode = append(r.Decode, r.decodeStep(c, s, b, t, o))
	}
	p := o.Prompt
	if p == 0 {
		p = o.Context
	}
	r.Prefill = r.prefill(c, s, p, t)
	r.Notes = append(r.Notes, "roofline: step time = max(bytes / HBM bandwidth, FLOPs / bf16 peak) per device, a lower bound: "+
		"collectives over ICI, kernel launch and sampling are not counted; decode reads every sequence's KV cache at the full context (the worst case)")
	return r
}

// decodeBatches lists the batches to time: --batch alone, else powers of
// two (multiples of the data axis) up to the most that fit, and that most.
func decodeBatches(batch, most, data int) []int {
	if batch > 0 {
		return []int{batch}
	}
	if most == 0 {
		return []int{data} // one sequence per replica, which does not fit
	}
	var out []int
	for b := data; b < most; b *= 2 {
		out = append(out, b)
	}
	return append(out, most)
}

// decodeStep is the roofline of one decode step over the slice with batch
// sequences, each replica decoding ceil(batch/data).
func (r *GenerateReport) decodeStep(c LLMConfig, s shardCount, batch int, t genTarget, o GenerateOptions) DecodeStep {
	per := (batch + r.DataParallel - 1) / r.DataParallel
	b := float64(per)
	wb := float64(r.WeightBytes)
	// Bytes: every weight on the device once, except an untied embedding
	// table, of which only the batch's rows are read; plus every live
	// sequence's KV cache on the device at the full context.
	weights := float64(s.perDevice) * wb
	if !c.Tied {
		rows := min(float64(per), float64(s.embedTable/int64(c.Hidden)))
		weights -= float64(s.embedTable)*wb - rows*float64(c.Hidden)*wb
	}
	kv := b * float64(r.KVBytesPerSeqDevice)
	// FLOPs: 2 per multiply-add of every matrix on the device, per token;
	// attention: q.k and p.v over the context, 2 x 2 x head_dim per query
	// head per position per layer, the query heads split over the model axis.
	mm := 2 * float64(s.matmul) * b
	attn := 4 * float64(c.Layers) * float64(c.Heads/r.ModelParallel) * float64(c.HeadDim) * float64(o.Context) * b
	d := DecodeStep{Batch: batch, BatchPerReplica: per, BytesPerDevice: weights + kv, FlopsPerDevice: mm + attn,
		Fits: r.Fits && per <= r.SequencesPerReplica}
	bw := r.HBMBandwidth / float64(t.perChip)
	peak := r.PeakFlopsChip / float64(t.perChip)
	d.MemorySeconds = d.BytesPerDevice / bw
	d.ComputeSeconds = d.FlopsPerDevice / peak
	d.StepSeconds = max(d.MemorySeconds, d.ComputeSeconds)
	d.Bound = "memory"
	if d.ComputeSeconds > d.MemorySeconds {
		d.Bound = "compute"
	}
	d.TokensPerSecond = float64(per*r.DataParallel) / d.StepSeconds
	d.TokensPerSecChip = d.TokensPerSecond / float64(r.Chips)
	d.PerSequenceTokens = 1 / d.StepSeconds
	if r.CostPerHourUSD != nil {
		v := *r.CostPerHourUSD / (d.TokensPerSecond * 3600) * 1e6
		d.CostPerMTokensUSD = &v
	}
	return d
}

// prefill is the roofline of one prompt of p tokens on one replica: every
// weight read once, the prompt's KV cache written, 2 FLOPs per
// multiply-add for each token (the output projection for the last token
// only, as generation needs) and causal attention, 2 x head_dim x p^2 per
// query head per layer (q.k and p.v over half the square each).
func (r *GenerateReport) prefill(c LLMConfig, s shardCount, p int, t genTarget) *Prefill {
	wb := float64(r.WeightBytes)
	head := float64(0)
	if !c.Tied {
		head, _ = splitF(float64(c.Hidden)*float64(c.Vocab), c.Vocab, r.ModelParallel)
	} else {
		head = float64(s.embedTable)
	}
	body := float64(s.matmul) - head
	mm := 2 * (body*float64(p) + head)
	attn := 2 * float64(c.Layers) * float64(c.Heads/r.ModelParallel) * float64(c.HeadDim) * float64(p) * float64(p)
	pf := &Prefill{PromptTokens: p, FlopsPerDevice: mm + attn,
		BytesPerDevice: float64(s.perDevice)*wb + float64(p)*float64(r.KVBytesPerTokenDevice)}
	pf.ComputeSeconds = pf.FlopsPerDevice / (r.PeakFlopsChip / float64(t.perChip))
	pf.MemorySeconds = pf.BytesPerDevice / (r.HBMBandwidth / float64(t.perChip))
	pf.Seconds = max(pf.ComputeSeconds, pf.MemorySeconds)
	pf.Bound = "compute"
	if pf.MemorySeconds > pf.ComputeSeconds {
		pf.Bound = "memory"
	}
	return pf
}

func splitF(n float64, dim, m int) (float64, bool) {
	if dim%m == 0 {
		return n / float64(m), true
	}
	return n, false
}

// price fills the slice's hourly cost.
func price(r *GenerateReport, acc catalog.Accelerator, o GenerateOptions) {
	p, src := o.PricePerChipHour, "--price"
	if p == 0 {
		if pr, ok := Prices[acc.Generation]; ok {
			p, src = pr.OnDemand, pr.Source
		} else {
			src = "no price known for " + acc.Generation + ": give one with --price (USD per chip-hour)"
		}
	}
	r.PriceSource = src
	if p > 0 {
		r.PricePerChipHour = p
		h := p * float64(r.Chips)
		r.CostPerHourUSD = &h
	}
}
