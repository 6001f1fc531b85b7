package plan

import (
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/catalog"
	"github.com/tensorbridge/tensorbridge/errs"
)

// Llama 3 8B, from testdata/llm/llama3-8b/config.json (Meta's published
// config): the numbers every expected figure below is computed from, by
// hand, independently of finetune.go.
const (
	l3Layers = 32
	l3Hidden = 4096
	l3Heads  = 32
	l3KV     = 8 * 128 // num_key_value_heads x head_dim
	l3FFN    = 14336
	l3Vocab  = 128256
	l3Params = 8030261248 // the published 8.03B, also checked below
)

// l3Proj is the elements of one layer's seven projections, and l3Rows
// their output rows.
const (
	l3Proj = l3Hidden*l3Hidden + 2*l3Hidden*l3KV + l3Hidden*l3Hidden + 3*l3Hidden*l3FFN
	l3Rows = l3Hidden + 2*l3KV + l3Hidden + 2*l3FFN + l3Hidden
)

// want is one device's expected bytes.
type ftWant struct {
	weights, adapter, grads, optim, acts, logits int64
}

func (w ftWant) total() int64 { return w.weights + w.adapter + w.grads + w.optim + w.acts + w.logits }

// l3Want computes the expected bytes: r is the LoRA rank (0: full), with
// q_proj and v_proj adapted; base the frozen bytes mode; b, tt the
// sequences per device and tokens; ab the activations' dtype bytes.
func l3Want(r int64, base string, b, tt int64, remat bool) ftWant {
	const ab = 2 // bfloat16 activations
	var w ftWant
	n := b * tt
	// Per layer per token: 4h + 2q + 2kv + 4f + heads x T (+ r per adapted module).
	perTok := int64(4*l3Hidden+2*l3Hidden+2*l3KV+4*l3FFN) + l3Heads*tt
	loraLayer := 2 * r // q_proj and v_proj
	if r > 0 {
		pa := int64(l3Layers) * r * ((l3Hidden + l3Hidden) + (l3Hidden + l3KV)) // q: 4096->4096, v: 4096->1024
		w.adapter, w.grads, w.optim = 4*pa, 4*pa, 8*pa
		switch base {
		case "int8":
			proj := int64(l3Layers) * l3Proj
			w.weights = proj + 4*l3Layers*l3Rows + 4*(l3Params-proj)
		case "bfloat16":
			w.weights = 2 * l3Params
		default:
			w.weights = 4 * l3Params
		}
	} else {
		w.weights, w.grads, w.optim = 4*l3Params, 4*l3Params, 8*l3Params
	}
	if remat {
		w.acts = n * (l3Layers*l3Hidden + perTok + loraLayer) * ab
	} else {
		w.acts = n * (l3Layers * (perTok + loraLayer)) * ab
	}
	w.acts += n * 2 * l3Hidden * ab
	w.logits = n * l3Vocab * 4 * 2
	if remat { // one chunk of at most 2^22 logits (32 rows of 128256)
		w.logits = min(n, 1<<22/l3Vocab) * l3Vocab * 4 * 2
	}
	return w
}

func loadL3(t *testing.T) LLMConfig {
	t.Helper()
	ck, err := LoadCheckpoint(filepath.Join("testdata", "llm", "llama3-8b"))
	if err != nil {
		t.Fatal(err)
	}
	return ck.Config
}

// TestFineTuneLlama3: issue 27's planning test. LoRA on Llama 3 8B fits on
// one 16 GiB v5e chip (int8 base) and one H100 (bfloat16 base), where a
// full AdamW fine-tune (16 bytes per parameter: 128 GB) fits on neither;
// and at 2048 tokens the LoRA step fits on the v5e only with remat. Every
// byte count is checked exactly against l3Want.
func TestFineTuneLlama3(t *testing.T) {
	c := loadL3(t)
	if got := c.Params(); got != l3Params {
		t.Fatalf("params %d, want %d", got, l3Params)
	}
	qv := &LoRASpec{Rank: 8, Alpha: 16, Targets: []string{"q_proj", "v_proj"}}
	cases := []struct {
		name        string
		o           FineTuneOptions
		r           int64
		fitsNoRemat bool
		fitsRemat   bool
	}{
		{"lora int8 v5e-1 T512", FineTuneOptions{Slice: "v5e-1", SeqLen: 512, Batch: 1, LoRA: qv, BasePrecision: "int8", Remat: true}, 8, true, true},
		{"full v5e-1 T512", FineTuneOptions{Slice: "v5e-1", SeqLen: 512, Batch: 1, Remat: true}, 0, false, false},
		{"lora int8 v5e-1 T2048", FineTuneOptions{Slice: "v5e-1", SeqLen: 2048, Batch: 1, LoRA: qv, BasePrecision: "int8"}, 8, false, true},
		{"lora bf16 h100-1 T2048 B4", FineTuneOptions{Slice: "h100-1", SeqLen: 2048, Batch: 4, LoRA: qv, BasePrecision: "bfloat16", Remat: true}, 8, false, true},
		{"full h100-1 T2048 B4", FineTuneOptions{Slice: "h100-1", SeqLen: 2048, Batch: 4, Remat: true}, 0, false, false},
		{"lora f32 v5e-8 dp B8", FineTuneOptions{Slice: "v5e-8", SeqLen: 256, Batch: 8, LoRA: qv}, 8, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := PlanFineTune(c, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			gen := map[bool]string{true: "h100-sxm", false: "v5e"}[strings.HasPrefix(tc.o.Slice, "h100")]
			acc, _ := catalog.Lookup(gen)
			usable := int64(math.Floor(float64(acc.Memory.Value) * 0.9))
			if r.UsableBytesPerDevice != usable {
				t.Errorf("usable %d, want %d", r.UsableBytesPerDevice, usable)
			}
			b := int64(tc.o.Batch / r.Devices)
			for _, remat := range []bool{false, true} {
				m := r.WithoutRemat
				fits := tc.fitsNoRemat
				if remat {
					m, fits = r.WithRemat, tc.fitsRemat
				}
				w := l3Want(tc.r, tc.o.BasePrecision, b, int64(tc.o.SeqLen), remat)
				got := ftWant{m.WeightsBytes, m.AdapterBytes, m.GradientBytes, m.OptimizerBytes, m.ActivationBytes, m.LogitsBytes}
				if got != w || m.TotalBytes != w.total() {
					t.Errorf("remat %v: bytes %+v total %d, want %+v total %d", remat, got, m.TotalBytes, w, w.total())
				}
				if m.Fits != fits || (w.total() <= usable) != fits {
					t.Errorf("remat %v: fits %v (total %d, usable %d), want %v", remat, m.Fits, w.total(), usable, fits)
				}
			}
			if r.Fits != r.Headline().Fits || r.Remat != tc.o.Remat {
				t.Errorf("headline fits %v remat %v", r.Fits, r.Remat)
			}
		})
	}
}

// TestFineTuneFlops: the step's FLOPs per device by the formulas in
// roofline's comment, from the config's numbers: full 6 Pm N + 3 A N,
// LoRA 4 Pm N + 3 A N + 6 Pa N, remat one more forward of the layers.
func TestFineTuneFlops(t *testing.T) {
	c := loadL3(t)
	const T, B = 1024, 2
	N := float64(T * B)
	pm := float64(l3Layers*l3Proj) + l3Hidden*l3Vocab // the untied head is a matmul, the embedding a gather
	head := float64(l3Hidden * l3Vocab)
	attn := 2.0 * l3Layers * l3Heads * 128 * T
	pa := float64(l3Layers * 8 * (2*l3Hidden + l3Hidden + l3KV))
	cases := []struct {
		name    string
		lora    *LoRASpec
		remat   bool
		want    float64
		trained int64
	}{
		{"full", nil, false, N * (6*pm + 3*attn), l3Params},
		{"full remat", nil, true, N * (6*pm + 3*attn + 2*(pm-head) + attn), l3Params},
		{"lora", &LoRASpec{Rank: 8, Alpha: 16, Targets: []string{"q_proj", "v_proj"}}, false, N * (4*pm + 3*attn + 6*pa), int64(pa)},
		{"lora remat", &LoRASpec{Rank: 8, Alpha: 16, Targets: []string{"q_proj", "v_proj"}}, true, N * (4*pm + 3*attn + 6*pa + 2*(pm-head) + attn + 2*pa), int64(pa)},
	}
	acc, _ := catalog.Lookup("v5e")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := PlanFineTune(c, FineTuneOptions{Slice: "v5e-1", SeqLen: T, Batch: B, LoRA: tc.lora, Remat: tc.remat})
			if err != nil {
				t.Fatal(err)
			}
			m := r.Headline()
			if math.Abs(m.FlopsPerDevice-tc.want) > 1e-12*tc.want || r.TrainedParams != tc.trained {
				t.Errorf("flops %g trained %d, want %g, %d", m.FlopsPerDevice, r.TrainedParams, tc.want, tc.trained)
			}
			if want := tc.want / acc.PeakBF16.Value; math.Abs(m.ComputeSeconds-want) > 1e-12*want || m.StepSeconds < m.ComputeSeconds {
				t.Errorf("compute %g s step %g s, want %g s", m.ComputeSeconds, m.StepSeconds, want)
			}
		})
	}
}

// TestFineTuneBadInput: each refusal is typed (errors.Is against errs'
// sentinels) and names what was wrong.
func TestFineTuneBadInput(t *testing.T) {
	c := loadL3(t)
	lora := func(r int, targets ...string) *LoRASpec { return &LoRASpec{Rank: r, Alpha: 16, Targets: targets} }
	ok := FineTuneOptions{Slice: "v5e-1", SeqLen: 512, Batch: 1}
	cases := []struct {
		name string
		edit func(*FineTuneOptions)
		is   error
		want string
	}{
		{"r zero", func(o *FineTuneOptions) { o.LoRA = lora(0, "q_proj") }, errs.ErrInvalidInput, `"lora r"`},
		{"r negative", func(o *FineTuneOptions) { o.LoRA = lora(-4, "q_proj") }, errs.ErrInvalidInput, "got -4"},
		{"alpha", func(o *FineTuneOptions) { o.LoRA = &LoRASpec{Rank: 8, Alpha: 0, Targets: []string{"q_proj"}} }, errs.ErrInvalidInput, "alpha"},
		{"no targets", func(o *FineTuneOptions) { o.LoRA = lora(8) }, errs.ErrInvalidInput, "lora targets"},
		{"unknown target", func(o *FineTuneOptions) { o.LoRA = lora(8, "q_proj", "qkv_proj") }, errs.ErrInvalidInput, `"qkv_proj"`},
		{"target lists names", func(o *FineTuneOptions) { o.LoRA = lora(8, "proj") }, errs.ErrInvalidInput, "gate_proj, up_proj, down_proj"},
		{"layer out of range", func(o *FineTuneOptions) { o.LoRA = lora(8, "model.layers.32.self_attn.q_proj") }, errs.ErrInvalidInput, "model.layers.32"},
		{"seq over context", func(o *FineTuneOptions) { o.SeqLen = 8193 }, errs.ErrInvalidInput, "max_position_embeddings 8192"},
		{"seq zero", func(o *FineTuneOptions) { o.SeqLen = 0 }, errs.ErrInvalidInput, "--seq-len"},
		{"batch zero", func(o *FineTuneOptions) { o.Batch = 0 }, errs.ErrInvalidInput, "--batch"},
		{"batch not multiple", func(o *FineTuneOptions) { o.Slice, o.Batch = "v5e-8", 4 }, errs.ErrInvalidInput, "multiple of the data axis 8"},
		{"base precision full", func(o *FineTuneOptions) { o.BasePrecision = "int8" }, errs.ErrInvalidInput, "is for LoRA"},
		{"base precision", func(o *FineTuneOptions) { o.LoRA, o.BasePrecision = lora(8, "q_proj"), "int4" }, errs.ErrInvalidInput, `"int4"`},
		{"precision", func(o *FineTuneOptions) { o.Precision = "float16" }, errs.ErrInvalidInput, `"float16"`},
		{"unknown strategy", func(o *FineTuneOptions) { o.Strategy = "zero3" }, errs.ErrInvalidInput, `"zero3"`},
		{"tp not dividing", func(o *FineTuneOptions) { o.Slice, o.Batch, o.Strategy = "v5e-8", 8, "tp=3" }, errs.ErrInvalidInput, "divisor of the slice's 8 devices"},
		{"tp zero", func(o *FineTuneOptions) { o.Slice, o.Batch, o.Strategy = "v5e-8", 8, "tp=0" }, errs.ErrInvalidInput, `"tp=0"`},
		{"tp batch vs data axis", func(o *FineTuneOptions) { o.Slice, o.Batch, o.Strategy = "v5e-8", 3, "tp=4" }, errs.ErrInvalidInput, "data axis 2"},
		{"slice", func(o *FineTuneOptions) { o.Slice = "v9z-1" }, errs.ErrInvalidInput, "v9z"},
		{"overflow", func(o *FineTuneOptions) { o.SeqLen, o.Batch = 8192, 1<<24 }, errs.ErrInvalidInput, "overflow"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			tc.edit(&o)
			_, err := PlanFineTune(c, o)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v; want %v naming %q", err, tc.is, tc.want)
			}
		})
	}
}

// TestAdapterPlanTargets: PEFT's matching (whole name or a suffix after a
// dot) on the tiny fixture (2 layers, hidden 64, 4 heads, 2 kv heads of
// 16, ffn 128): counts by hand.
func TestAdapterPlanTargets(t *testing.T) {
	c, err := LoadConfigFile(filepath.Join("testdata", "llm", "tiny", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	h, q, kv, f := int64(c.Hidden), int64(c.Heads*c.HeadDim), int64(c.KVHeads*c.HeadDim), int64(c.FFN)
	L := int64(c.Layers)
	cases := []struct {
		targets  []string
		modules  int
		params   int64 // at r = 4
		sum, top int64 // adapter elements per token over all layers, and in the fullest layer
	}{
		{[]string{"q_proj", "v_proj"}, 2 * int(L), 4 * L * (h + q + h + kv), 8 * L, 8},
		{[]string{"self_attn.o_proj"}, int(L), 4 * L * (q + h), 4 * L, 4},
		{[]string{"down_proj", "mlp.down_proj"}, int(L), 4 * L * (f + h), 4 * L, 4},
		{[]string{"model.layers.1.mlp.up_proj"}, 1, 4 * (h + f), 4, 4},
		{[]string{"layers.0.mlp.gate_proj", "0.mlp.up_proj", "gate_proj"}, int(L) + 1, 4 * (L*(h+f) + (h + f)), 4*L + 4, 8},
		{[]string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}, 7 * int(L), 4 * L * (2*(h+q) + 2*(h+kv) + 3*(h+f)), 28 * L, 28},
	}
	for _, tc := range cases {
		p, sum, top, err := adapterPlan(c, LoRASpec{Rank: 4, Alpha: 8, Targets: tc.targets})
		if err != nil {
			t.Fatalf("%v: %v", tc.targets, err)
		}
		if p.AdaptedModules != tc.modules || p.AdapterParams != tc.params || sum != tc.sum || top != tc.top || p.Scale != 2 {
			t.Errorf("%v: modules %d params %d sum %d top %d scale %g; want %d %d %d %d 2", tc.targets, p.AdaptedModules, p.AdapterParams, sum, top, p.Scale, tc.modules, tc.params, tc.sum, tc.top)
		}
	}
	// 2^20 layers with ffn 2^24 (5.3e13 parameters, within Validate's
	// bound): r = 2^20 on down_proj would be 2^64 adapter parameters.
	huge := LLMConfig{Name: "huge", Layers: 1 << 20, Hidden: 1, Heads: 1, KVHeads: 1, HeadDim: 1, FFN: 1 << 24, Vocab: 1}
	if _, _, _, err := adapterPlan(huge, LoRASpec{Rank: 1 << 20, Alpha: 1, Targets: []string{"down_proj"}}); !errors.Is(err, errs.ErrInvalidInput) || !strings.Contains(err.Error(), "adapter parameters") {
		t.Errorf("huge adapter: err %v, want ErrInvalidInput naming adapter parameters", err)
	}
	for _, bad := range []string{"", "proj", "model.1.mlp.up_proj", "01.mlp.up_proj", "2.mlp.up_proj", "-1.mlp.up_proj", "model.layers.0", "lm_head", "embed_tokens"} {
		if _, _, _, err := adapterPlan(c, LoRASpec{Rank: 4, Alpha: 8, Targets: []string{bad}}); !errors.Is(err, errs.ErrInvalidInput) {
			t.Errorf("target %q: err %v, want ErrInvalidInput", bad, err)
		}
	}
}

// FuzzPlanFineTune: any targets, rank, sizes and lengths are a report or a
// typed error, never a panic, and a report's totals are non-negative.
func FuzzPlanFineTune(f *testing.F) {
	f.Add("q_proj,v_proj", 8, 512, 1, 2, 64, 4, 2, 128, 256)
	f.Add("model.layers.0.self_attn.q_proj", 1, 1, 1, 1, 1, 1, 1, 1, 1)
	f.Add("", -3, 0, 0, 0, 0, 0, 0, 0, 0)
	f.Add("layers.9999999999999999999.mlp.up_proj", 1<<30, 1<<24, 1<<24, 1<<24, 1<<24, 1, 1, 1<<24, 1<<24)
	f.Add("down_proj", 1<<20, 1, 1, 1<<20, 1, 1, 1, 1<<24, 1)
	f.Fuzz(func(t *testing.T, targets string, r, seq, batch, layers, hidden, heads, kv, ffn, vocab int) {
		c := LLMConfig{Name: "fuzz", Layers: layers, Hidden: hidden, Heads: heads, KVHeads: kv, FFN: ffn, Vocab: vocab}
		if heads > 0 {
			c.HeadDim = hidden / heads
		}
		o := FineTuneOptions{Slice: "v5e-1", SeqLen: seq, Batch: batch, Remat: r%2 == 0}
		if k := uint(vocab) % 6; k > 0 { // the mesh strategies over v5e-8 too
			o.Slice, o.Strategy = "v5e-8", []string{"", "dp", "fsdp", "tp", "tp=2", "auto"}[k]
		}
		if targets != "" {
			o.LoRA = &LoRASpec{Rank: r, Alpha: 1, Targets: strings.Split(targets, ",")}
		}
		rep, err := PlanFineTune(c, o)
		if err != nil {
			if k := errs.KindOf(err); k != errs.InvalidArgument && k != errs.Unimplemented {
				t.Fatalf("error of kind %v: %v", k, err)
			}
			return
		}
		for _, m := range []FineTuneMemory{rep.WithoutRemat, rep.WithRemat} {
			if m.TotalBytes < 0 || m.ActivationBytes < 0 || m.WeightsBytes < 0 || math.IsNaN(m.StepSeconds) {
				t.Fatalf("negative or NaN figures: %+v", m)
			}
		}
	})
}

// l3Norms is Llama 3 8B's norm elements (two per layer and the final
// one): the only tensors tp keeps whole.
const l3Norms = 2*l3Layers*l3Hidden + l3Hidden

// TestFineTuneMesh: one device's bytes under fsdp and tp for Llama 3 8B
// on v5e-8, counted by hand from the config. fsdp over 8: every dimension
// of every tensor is a multiple of 8, so the trained tensors, gradients
// and AdamW state are exactly /8 and frozen ones whole. tp over M: every
// matrix is split (q 4096, kv 1024, f 14336, vocab 128256 are multiples
// of 8), the norms whole; activations 4h whole + (2q + 2kv + 4f)/M +
// heads/M x T; logits over vocab/M. A full AdamW fine-tune (16 bytes a
// parameter) does not fit v5e-8 under any strategy: split 8 ways it is
// still 16.06 GB a device, over the 15.46 GB usable; over v5e-16 fsdp and
// tp it fits. An int8-base LoRA fits fsdp (frozen base whole) and tp.
func TestFineTuneMesh(t *testing.T) {
	c := loadL3(t)
	const T = 1024
	const ab = 2
	qv := &LoRASpec{Rank: 8, Alpha: 16, Targets: []string{"q_proj", "v_proj"}}
	pa := int64(l3Layers * 8 * (2*l3Hidden + l3Hidden + l3KV))
	tpAct := func(m int64) int64 {
		return 4*l3Hidden + (2*l3Hidden+2*l3KV+4*l3FFN)/m + l3Heads/m*T
	}
	// acts: per-device tokens n, per-layer elements a, LoRA r per layer.
	acts := func(n, a, lora int64, remat bool) int64 {
		if remat {
			return n * (l3Layers*l3Hidden + a + lora + 2*l3Hidden) * ab
		}
		return n * (l3Layers*(a+lora) + 2*l3Hidden) * ab
	}
	fullAct := int64(4*l3Hidden+2*l3Hidden+2*l3KV+4*l3FFN) + l3Heads*T
	// rl: with remat, one chunk of logits (2^22 / vocab = 32 rows) over a
	// device's vocabulary v, twice.
	rl := func(v int64) int64 { return 2 * (1 << 22 / l3Vocab) * v * 4 }
	tpTrained := func(m int64) int64 { return (l3Params-l3Norms)/m + l3Norms }
	// LoRA under tp: B of q (4096x8) and v (1024x8) split by rows, A whole.
	tpAdapter := func(m int64) int64 { return l3Layers * 8 * (l3Hidden + l3Hidden/m + l3Hidden + l3KV/m) }
	int8Base := int64(l3Layers*l3Proj) + 4*l3Layers*l3Rows + 4*(l3Params-l3Layers*l3Proj) // whole on every device
	cases := []struct {
		name     string
		o        FineTuneOptions
		data     int
		want     [2]ftWant // without, with remat
		fitsNo   bool
		fitsWith bool
	}{
		{"full dp", FineTuneOptions{Slice: "v5e-8", SeqLen: T, Batch: 8, Strategy: "dp"}, 8,
			[2]ftWant{{4 * l3Params, 0, 4 * l3Params, 8 * l3Params, acts(T, fullAct, 0, false), 2 * T * l3Vocab * 4},
				{4 * l3Params, 0, 4 * l3Params, 8 * l3Params, acts(T, fullAct, 0, true), rl(l3Vocab)}}, false, false},
		{"full fsdp", FineTuneOptions{Slice: "v5e-8", SeqLen: T, Batch: 8, Strategy: "fsdp"}, 8,
			[2]ftWant{{4 * l3Params / 8, 0, 4 * l3Params / 8, 8 * l3Params / 8, acts(T, fullAct, 0, false), 2 * T * l3Vocab * 4},
				{4 * l3Params / 8, 0, 4 * l3Params / 8, 8 * l3Params / 8, acts(T, fullAct, 0, true), rl(l3Vocab)}}, false, false},
		{"full fsdp v5e-16", FineTuneOptions{Slice: "v5e-16", SeqLen: T, Batch: 16, Strategy: "fsdp"}, 16,
			[2]ftWant{{4 * l3Params / 16, 0, 4 * l3Params / 16, 8 * l3Params / 16, acts(T, fullAct, 0, false), 2 * T * l3Vocab * 4},
				{4 * l3Params / 16, 0, 4 * l3Params / 16, 8 * l3Params / 16, acts(T, fullAct, 0, true), rl(l3Vocab)}}, false, true},
		{"lora int8 fsdp", FineTuneOptions{Slice: "v5e-8", SeqLen: T, Batch: 8, Strategy: "fsdp", LoRA: qv, BasePrecision: "int8"}, 8,
			[2]ftWant{{int8Base, 4 * pa / 8, 4 * pa / 8, 8 * pa / 8, acts(T, fullAct, 16, false), 2 * T * l3Vocab * 4},
				{int8Base, 4 * pa / 8, 4 * pa / 8, 8 * pa / 8, acts(T, fullAct, 16, true), rl(l3Vocab)}}, false, true},
		{"full tp", FineTuneOptions{Slice: "v5e-8", SeqLen: T, Batch: 8, Strategy: "tp"}, 1,
			[2]ftWant{{4 * tpTrained(8), 0, 4 * tpTrained(8), 8 * tpTrained(8), acts(8*T, tpAct(8), 0, false), 2 * 8 * T * l3Vocab / 8 * 4},
				{4 * tpTrained(8), 0, 4 * tpTrained(8), 8 * tpTrained(8), acts(8*T, tpAct(8), 0, true), rl(l3Vocab / 8)}}, false, false},
		{"full tp v5e-16", FineTuneOptions{Slice: "v5e-16", SeqLen: T, Batch: 16, Strategy: "tp"}, 1,
			[2]ftWant{{4 * tpTrained(16), 0, 4 * tpTrained(16), 8 * tpTrained(16), acts(16*T, tpAct(16), 0, false), 2 * 16 * T * l3Vocab / 16 * 4},
				{4 * tpTrained(16), 0, 4 * tpTrained(16), 8 * tpTrained(16), acts(16*T, tpAct(16), 0, true), rl(l3Vocab / 16)}}, false, true},
		{"lora tp=4", FineTuneOptions{Slice: "v5e-8", SeqLen: T, Batch: 8, Strategy: "tp=4", LoRA: qv}, 2,
			[2]ftWant{{4 * tpTrained(4), 4 * tpAdapter(4), 4 * tpAdapter(4), 8 * tpAdapter(4), acts(4*T, tpAct(4), 16, false), 2 * 4 * T * l3Vocab / 4 * 4},
				{4 * tpTrained(4), 4 * tpAdapter(4), 4 * tpAdapter(4), 8 * tpAdapter(4), acts(4*T, tpAct(4), 16, true), rl(l3Vocab / 4)}}, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := PlanFineTune(c, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if r.DataParallel != tc.data || r.DataParallel*r.ModelParallel != r.Devices || len(r.Undivided) != 0 {
				t.Errorf("mesh data %d x model %d, undivided %v; want data %d", r.DataParallel, r.ModelParallel, r.Undivided, tc.data)
			}
			for i, m := range []FineTuneMemory{r.WithoutRemat, r.WithRemat} {
				got := ftWant{m.WeightsBytes, m.AdapterBytes, m.GradientBytes, m.OptimizerBytes, m.ActivationBytes, m.LogitsBytes}
				if got != tc.want[i] || m.TotalBytes != tc.want[i].total() {
					t.Errorf("remat %v: bytes %+v total %d, want %+v total %d", i == 1, got, m.TotalBytes, tc.want[i], tc.want[i].total())
				}
				if fits := []bool{tc.fitsNo, tc.fitsWith}[i]; m.Fits != fits {
					t.Errorf("remat %v: fits %v (%d of %d), want %v", i == 1, m.Fits, m.TotalBytes, r.UsableBytesPerDevice, fits)
				}
			}
		})
	}
}

// TestFineTuneUndivided: a dimension the axis does not divide stays
// whole. A hand-made decoder (hidden 64, 4 heads of 16, 2 kv heads, ffn
// 96, vocab 1001) under tp over 8: q 64, kv 32, f 96 split; the vocab
// (odd) is not, so embed_tokens and lm_head stay whole, and the 4 heads'
// scores too.
func TestFineTuneUndivided(t *testing.T) {
	c := LLMConfig{Name: "odd", Architecture: "LlamaForCausalLM", Layers: 2, Hidden: 64, Heads: 4, KVHeads: 2, HeadDim: 16, FFN: 96, Vocab: 1001}
	const h, q, kv, f, v, L, T, B = 64, 64, 32, 96, 1001, 2, 16, 1
	r, err := PlanFineTune(c, FineTuneOptions{Slice: "v5e-8", SeqLen: T, Batch: B, Strategy: "tp"})
	if err != nil {
		t.Fatal(err)
	}
	split := L * (q*h + 2*kv*h + h*q + 3*f*h) / 8
	whole := 2*v*h + 2*L*h + h
	if r.TrainedParamsPerDevice != int64(split+whole) {
		t.Errorf("trained per device %d, want %d", r.TrainedParamsPerDevice, split+whole)
	}
	if strings.Join(r.Undivided, ",") != "embed_tokens,lm_head" {
		t.Errorf("undivided %v, want embed_tokens, lm_head", r.Undivided)
	}
	m := r.WithoutRemat
	perTok := int64(4*h + (2*q+2*kv+4*f)/8 + 4*T) // 4 heads: not a multiple of 8, the scores whole
	if want := int64(B*T) * (L*perTok + 2*h) * 2; m.ActivationBytes != want {
		t.Errorf("activations %d, want %d", m.ActivationBytes, want)
	}
	if want := int64(2 * B * T * v * 4); m.LogitsBytes != want {
		t.Errorf("logits %d, want %d (vocab whole)", m.LogitsBytes, want)
	}
	// fsdp over 8 of a LoRA r=6 on q: A [6, 64] splits along 64, B [64, 6] along 64.
	r, err = PlanFineTune(c, FineTuneOptions{Slice: "v5e-8", SeqLen: T, Batch: 8, Strategy: "fsdp", LoRA: &LoRASpec{Rank: 6, Alpha: 1, Targets: []string{"q_proj"}}})
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(L * 6 * (h + q) / 8); r.TrainedParamsPerDevice != want {
		t.Errorf("fsdp adapter per device %d, want %d", r.TrainedParamsPerDevice, want)
	}
}

// TestFineTuneCollectives: the ICI term by the ring formulas at v5e's
// 400 GB/s per chip: fsdp sends 3(D-1)/D x 4P per device (ZeRO-3's
// gathers for forward and backward and the reduce-scatter), tp 4 x layers
// all-reduces of [tokens, hidden] bf16, 2(M-1)/M of them (6 with remat);
// both grow with the axis, and the step time adds them.
func TestFineTuneCollectives(t *testing.T) {
	c := loadL3(t)
	const T, ici = 1024, 400e9
	acc, _ := catalog.Lookup("v5e")
	if acc.Interconnect.BandwidthPerChip.Value != ici {
		t.Fatalf("v5e ICI %g, want %g", acc.Interconnect.BandwidthPerChip.Value, ici)
	}
	cases := []struct {
		slice, strategy string
		batch           int
		remat           bool
		want            float64
	}{
		{"v5e-4", "fsdp", 4, false, 3 * 3.0 / 4 * 4 * l3Params},
		{"v5e-8", "fsdp", 8, false, 3 * 7.0 / 8 * 4 * l3Params},
		{"v5e-8", "dp", 8, false, 2 * 7.0 / 8 * 4 * l3Params},
		{"v5e-4", "tp", 4, false, 4 * l3Layers * 2 * 3.0 / 4 * (4 * T * l3Hidden * 2)},
		{"v5e-8", "tp", 8, false, 4 * l3Layers * 2 * 7.0 / 8 * (8 * T * l3Hidden * 2)},
		{"v5e-8", "tp", 8, true, 6 * l3Layers * 2 * 7.0 / 8 * (8 * T * l3Hidden * 2)},
		{"v5e-1", "dp", 1, false, 0},
	}
	for _, tc := range cases {
		r, err := PlanFineTune(c, FineTuneOptions{Slice: tc.slice, SeqLen: T, Batch: tc.batch, Strategy: tc.strategy, Remat: tc.remat})
		if err != nil {
			t.Fatal(err)
		}
		m := r.Headline()
		if math.Abs(m.CollectiveBytes-tc.want) > 1e-9*tc.want || math.Abs(m.CollectiveSeconds-tc.want/ici) > 1e-9*tc.want/ici {
			t.Errorf("%s %s remat %v: collective %g bytes %g s, want %g bytes %g s", tc.slice, tc.strategy, tc.remat, m.CollectiveBytes, m.CollectiveSeconds, tc.want, tc.want/ici)
		}
		if want := max(m.ComputeSeconds, m.MemorySeconds) + tc.want/ici; math.Abs(m.StepSeconds-want) > 1e-9*want {
			t.Errorf("%s %s: step %g s, want roofline + collective %g s", tc.slice, tc.strategy, m.StepSeconds, want)
		}
	}
}

// TestFineTuneAuto: auto on v5e-16 for a full fine-tune rules dp out
// (does not fit), keeps the faster of fsdp and tp, and says why.
func TestFineTuneAuto(t *testing.T) {
	c := loadL3(t)
	o := FineTuneOptions{Slice: "v5e-16", SeqLen: 1024, Batch: 16, Remat: true}
	var steps []float64
	for _, s := range []string{"fsdp", "tp"} {
		o.Strategy = s
		r, err := PlanFineTune(c, o)
		if err != nil || !r.Fits {
			t.Fatalf("%s: fits %v err %v", s, r != nil && r.Fits, err)
		}
		steps = append(steps, r.Headline().StepSeconds)
	}
	o.Strategy = "auto"
	r, err := PlanFineTune(c, o)
	if err != nil {
		t.Fatal(err)
	}
	want := map[bool]string{true: "fsdp", false: "tp"}[steps[0] < steps[1]]
	if r.Strategy != want || !r.Fits || !strings.Contains(r.StrategyReason, "dp: ") || !strings.Contains(r.StrategyReason, "does not fit") {
		t.Errorf("auto chose %s (reason %q), want %s", r.Strategy, r.StrategyReason, want)
	}
}
