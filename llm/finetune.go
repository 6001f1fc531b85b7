package llm

// Fine-tuning a checkpoint: FineTune is a tensorbridge.Trainable, so the
// one Trainer (the step program of train.BuildStep, AdamW exact to
// torch, checkpoints, resume, the non-finite guard) trains a decoder as it
// trains an ONNX model. With LoRA the trained tensors are the adapters'
// A and B matrices (PEFT's semantics: W x + (alpha/r)·B(A x) on each
// targeted projection) and the base weights are the Model's device
// buffers, read by every step and never copied; a full fine-tune trains
// every checkpoint tensor.

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:staticcheck // graph-building code reads as math
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
	"github.com/tensorbridge/tensorbridge/train"
)

// Batch tensor names a FineTune takes: token ids [B, T] int32 and labels
// [B, T] int32, where labels[b][t] is the token position t predicts
// (input_ids[b][t+1]) when that token is a target, and -1 elsewhere
// (padding, prompts, the last position).
const (
	InputIDs = "input_ids"
	Labels   = "labels"
	// DropoutSeed [B, 3] uint64 (with LoRA dropout): row 0 is the step's
	// random-number state (GoMLX's RNGStateShape), which the data source
	// derives from the run's seed and the step's position, so that a
	// resumed run draws the same masks.
	DropoutSeed = "dropout_seed"
)

// Module is a linear projection of the decoder, named as transformers
// names the module (model.layers.0.self_attn.q_proj), with its weight's
// input and output sizes.
type Module struct {
	Name    string
	In, Out int
	layer   int
	slot    int // the weight's index within its layer (wQ...wDown)
}

// projectionSlots are the layer projections LoRA can adapt, by the
// suffix of their module name.
var projectionSlots = []struct {
	name string
	slot int
}{
	{"self_attn.q_proj", wQ}, {"self_attn.k_proj", wK}, {"self_attn.v_proj", wV}, {"self_attn.o_proj", wO},
	{"mlp.gate_proj", wGate}, {"mlp.up_proj", wUp}, {"mlp.down_proj", wDown},
}

// Modules lists the decoder's linear projections, layer by layer, in
// weightSpecs order.
func (c *Config) Modules() []Module {
	specs := weightSpecs(c)
	var out []Module
	for l := range c.Layers {
		for _, p := range projectionSlots {
			s := specs[1+l*c.perLayer()+p.slot]
			out = append(out, Module{Name: fmt.Sprintf("model.layers.%d.%s", l, p.name),
				Out: s.shape[0], In: s.shape[1], layer: l, slot: p.slot})
		}
	}
	return out
}

// LoRAModule is one adapted projection: A [R, In] and B [Out, R],
// row-major float32.
type LoRAModule struct {
	Module
	A, B []float32
}

// LoRA is an adapter to train: its rank, its scale (alpha/r) and its
// modules, each with its starting A and B.
type LoRA struct {
	Rank    int
	Scale   float64
	Modules []LoRAModule
	// Dropout is PEFT's lora_dropout: in training, the adapter reads its
	// input x with each element zeroed with this probability and the
	// others scaled by 1/(1-Dropout) (torch.nn.Dropout), B(A·dropout(x)).
	Dropout float64
}

// FineTune trains a Model's adapter (LoRA) or every weight (LoRA nil).
// It implements tensorbridge.Trainable; the Model must outlive it.
type FineTune struct {
	m      *Model
	lora   *LoRA
	params []onnx.Param
	digest string
	// A full fine-tune's trained and frozen tensors: indices into the
	// model's weights (weightSpecs order).
	trainedIdx, frozenIdx []int
	// Remat recomputes each decoder layer's activations in the backward
	// pass instead of keeping them (gradient checkpointing, llm/remat.go):
	// the layers' inputs plus one layer's working set are held instead of
	// every layer's, for about one more forward pass. Same loss and
	// gradients. Set it before the Trainer is made.
	Remat bool
}

// NewFineTune prepares m for training: lora's modules (validated against
// m's projections) or, with lora nil, every checkpoint tensor whose name
// freeze (when not nil) does not match. The model must be on one device,
// unquantized and in float32 for a full fine-tune (the trained tensors are
// float32 masters).
func NewFineTune(m *Model, lora *LoRA, freeze *regexp.Regexp) (*FineTune, error) {
	if lora != nil && freeze != nil {
		return nil, &errs.InputError{Name: "--freeze", Problem: "value", Expected: "a full fine-tune (LoRA trains its adapters only)", Got: freeze.String()}
	}
	if m.tp != nil {
		return nil, &errs.UnsupportedError{What: "feature", Name: "fine-tuning a model loaded on a mesh", Detail: "load it on one device"}
	}
	if lora == nil && m.Config.quantized() {
		return nil, &errs.UnsupportedError{What: "feature", Name: "full fine-tune of int8 weights", Detail: "int8 base weights are for LoRA only"}
	}
	if lora == nil && m.dtype != ir.Float32 {
		return nil, &errs.UnsupportedError{What: "feature", Name: "full fine-tune in " + m.dtype.String(), Detail: "load the model in float32"}
	}
	f := &FineTune{m: m, lora: lora}
	h := sha256.New()
	fmt.Fprintf(h, "llm fine-tune %s\n", m.Dir)
	if lora == nil {
		for i, w := range weightSpecs(m.Config) {
			if freeze != nil && freeze.MatchString(w.name) {
				f.frozenIdx = append(f.frozenIdx, i)
				continue
			}
			f.trainedIdx = append(f.trainedIdx, i)
			f.params = append(f.params, onnx.Param{Name: w.name, Shape: ir.MakeShape(ir.Float32, w.shape...)})
		}
		if len(f.params) == 0 {
			return nil, &errs.InputError{Name: "--freeze", Problem: "value", Expected: "a pattern leaving some weight to train", Got: freeze.String() + " matches every weight"}
		}
	} else if err := f.addLoRA(h); err != nil {
		return nil, err
	}
	for _, p := range f.params {
		fmt.Fprintf(h, "%s %v\n", p.Name, p.Shape.Dimensions)
	}
	f.digest = hex.EncodeToString(h.Sum(nil))
	return f, nil
}

// addLoRA checks the adapter's modules against the model's and lists
// their A and B as the trained tensors, named as PEFT names them.
func (f *FineTune) addLoRA(h interface{ Write([]byte) (int, error) }) error {
	l := f.lora
	if l.Rank <= 0 {
		return &errs.InputError{Name: "lora r", Problem: "value", Expected: "> 0", Got: fmt.Sprint(l.Rank)}
	}
	if len(l.Modules) == 0 {
		return &errs.InputError{Name: "lora targets", Problem: "value", Expected: "at least one module", Got: "none"}
	}
	byName := map[string]Module{}
	for _, mod := range f.m.Config.Modules() {
		byName[mod.Name] = mod
	}
	seen := map[string]bool{}
	for i := range l.Modules {
		lm := &l.Modules[i]
		mod, ok := byName[lm.Name]
		if !ok {
			return &errs.InputError{Name: "lora module", Problem: "name", Expected: "a projection of this model, e.g. " + f.m.Config.Modules()[0].Name, Got: lm.Name}
		}
		if seen[lm.Name] {
			return &errs.InputError{Name: "lora module", Problem: "name", Expected: "each module once", Got: lm.Name + " twice"}
		}
		seen[lm.Name] = true
		lm.Module = mod
		if len(lm.A) != l.Rank*mod.In || len(lm.B) != mod.Out*l.Rank {
			return &errs.InputError{Name: lm.Name, Problem: "shape",
				Expected: fmt.Sprintf("lora_A [%d, %d] and lora_B [%d, %d]", l.Rank, mod.In, mod.Out, l.Rank),
				Got:      fmt.Sprintf("%d and %d elements", len(lm.A), len(lm.B))}
		}
		f.params = append(f.params,
			onnx.Param{Name: PEFTName(lm.Name, "A"), Shape: ir.MakeShape(ir.Float32, l.Rank, mod.In)},
			onnx.Param{Name: PEFTName(lm.Name, "B"), Shape: ir.MakeShape(ir.Float32, mod.Out, l.Rank)})
	}
	var sc [8]byte
	binary.LittleEndian.PutUint64(sc[:], math.Float64bits(l.Scale))
	fmt.Fprintf(h, "lora r=%d scale=%x\n", l.Rank, sc)
	return nil
}

// PEFTName is the name PEFT gives an adapter tensor of module ("A" or
// "B") in adapter_model.safetensors.
func PEFTName(module, which string) string {
	return "base_model.model." + module + ".lora_" + which + ".weight"
}

// TrainName is the checkpoint directory.
func (f *FineTune) TrainName() string { return f.m.Dir }

// TrainDigest identifies the checkpoint directory and what is trained.
func (f *FineTune) TrainDigest() string { return f.digest }

// TrainParams are the trained tensors: the adapters' A and B (module by
// module), or every checkpoint tensor in weightSpecs order.
func (f *FineTune) TrainParams() []onnx.Param { return f.params }

// TrainInputs are InputIDs and Labels, and DropoutSeed with LoRA dropout.
func (f *FineTune) TrainInputs() []string {
	if f.lora != nil && f.lora.Dropout > 0 {
		return []string{InputIDs, Labels, DropoutSeed}
	}
	return []string{InputIDs, Labels}
}

// TrainInitial is trained tensor i's starting value: the adapter's, or
// the checkpoint's (read back from the model's device buffer).
func (f *FineTune) TrainInitial(ctx context.Context, i int) (*ir.Tensor, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p := f.params[i]
	if f.lora == nil {
		f.m.mu.Lock()
		defer f.m.mu.Unlock()
		if f.m.weights == nil {
			return nil, &errs.Error{Kind: errs.FailedPrecondition, Op: "fine-tune", Err: fmt.Errorf("model %s is closed", f.m.Dir)}
		}
		return hostCopy(f.m.weights[f.trainedIdx[i]])
	}
	lm := f.lora.Modules[i/2]
	data := lm.A
	if i%2 == 1 {
		data = lm.B
	}
	return ir.TensorFromFlat(append([]float32(nil), data...), p.Shape.Dimensions...)
}

// TrainConstants are the model's device buffers the loss reads but does
// not train: every weight with LoRA; otherwise the frozen weights, then
// the rope tables.
func (f *FineTune) TrainConstants() []*ir.Tensor {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.lora != nil {
		return append([]*ir.Tensor(nil), f.m.weights...)
	}
	var out []*ir.Tensor
	for _, i := range f.frozenIdx {
		out = append(out, f.m.weights[i])
	}
	return append(out, f.m.weights[len(weightSpecs(f.m.Config)):]...)
}

// TrainFrozen counts the checkpoint tensors read but not trained (for
// Trainer.Stats): every one with LoRA, the frozen ones otherwise.
func (f *FineTune) TrainFrozen() (tensors int, elements int64) {
	specs := weightSpecs(f.m.Config)
	idx := f.frozenIdx
	if f.lora != nil {
		idx = make([]int, len(specs))
		for i := range idx {
			idx[i] = i
		}
	}
	for _, i := range idx {
		n := int64(1)
		for _, d := range specs[i].shape {
			n *= int64(d)
		}
		tensors, elements = tensors+1, elements+n
	}
	return tensors, elements
}

// fullWeights puts a full fine-tune's trained and frozen nodes back in the
// order the decoder takes them.
func (f *FineTune) fullWeights(trained, constants []*Node) []*Node {
	n := len(weightSpecs(f.m.Config))
	p := make([]*Node, n, n+len(constants))
	for k, i := range f.trainedIdx {
		p[i] = trained[k]
	}
	for k, i := range f.frozenIdx {
		p[i] = constants[k]
	}
	return append(p, constants[len(f.frozenIdx):]...)
}

// TrainCheckBatch refuses token ids or labels outside the vocabulary and
// batches of other shapes or dtypes.
func (f *FineTune) TrainCheckBatch(batch map[string]*ir.Tensor) error {
	ids, lab := batch[InputIDs], batch[Labels]
	if s := batch[DropoutSeed]; s != nil && (s.DType() != ir.Uint64 || s.Shape().Rank() != 2 || s.Shape().Dimensions[1] != 3) {
		return &errs.InputError{Name: DropoutSeed, Problem: "shape", Expected: "uint64 [batch, 3]", Got: s.Shape().String()}
	}
	if ids == nil || lab == nil {
		return &errs.InputError{Name: "batch", Problem: "name", Expected: InputIDs + " and " + Labels, Got: "a batch without them"}
	}
	for _, t := range []struct {
		name string
		v    *ir.Tensor
		lo   int32
	}{{InputIDs, ids, 0}, {Labels, lab, -1}} {
		if t.v.DType() != ir.Int32 || t.v.Shape().Rank() != 2 || !t.v.Shape().Equal(ids.Shape()) {
			return &errs.InputError{Name: t.name, Problem: "shape", Expected: "int32 [batch, tokens], both alike", Got: t.v.Shape().String()}
		}
		if t.v.Shape().Dimensions[1] > f.m.maxContext {
			return &errs.InputError{Name: t.name, Problem: "shape", Expected: fmt.Sprintf("at most %d tokens (the context)", f.m.maxContext), Got: t.v.Shape().String()}
		}
		var bad error
		err := t.v.ConstFlatData(func(flat any) {
			for i, v := range flat.([]int32) {
				if v < t.lo || int(v) >= f.m.Config.Vocab {
					bad = &errs.InputError{Name: t.name, Problem: "value", Expected: fmt.Sprintf("token ids in [%d, %d)", t.lo, f.m.Config.Vocab), Got: fmt.Sprintf("%d at element %d", v, i)}
					return
				}
			}
		})
		if err != nil {
			return err
		}
		if bad != nil {
			return bad
		}
	}
	return nil
}

// TrainLoss is transformers' causal-LM loss: the mean over every label
// of the batch that is not -1 of -log_softmax(logits)[label], the logits
// in float32 (transformers' ForCausalLMLoss upcasts them), with the
// positions 0..T-1 of each right-padded row (padding comes after a row's
// tokens, so causal attention keeps it out of every real token's view).
func (f *FineTune) TrainLoss(g *ir.Graph, trained, constants []*ir.Node, batch map[string]*ir.Node, training bool) (*ir.Node, error) {
	c := f.m.Config
	var w netWeights
	if f.lora == nil {
		w = newNetWeights(c, f.fullWeights(trained, constants))
	} else {
		w = newNetWeights(c, constants)
		w.lora = map[int][2]*Node{}
		w.loraScale = f.lora.Scale
		if s := batch[DropoutSeed]; s != nil && training && f.lora.Dropout > 0 {
			w.drop = &loraDropout{p: f.lora.Dropout, state: Reshape(Slice(s, AxisRange(0, 1)), 3)}
		}
		for i, lm := range f.lora.Modules {
			w.lora[loraKey(lm.layer, lm.slot)] = [2]*Node{trained[2*i], trained[2*i+1]}
		}
	}
	if f.Remat && training {
		if !train.RematSupported() {
			return nil, &errs.UnsupportedError{What: "feature", Name: "--remat", Detail: "this GoMLX's graph nodes lack the fields train.Remat sets (it was built for v0.26.0)"}
		}
		w.remat = map[*Node]bool{}
		for _, n := range trained {
			w.remat[n] = true
		}
	}
	tokens, labels := batch[InputIDs], batch[Labels]
	dims := tokens.Shape().Dimensions
	b, t := dims[0], dims[1]
	pos := Iota(g, ir.MakeShape(ir.Int32, b, t), 1)
	hidden, _, _ := step(c, w, tokens, pos, nil)
	lab := Reshape(labels, b*t)
	valid := GreaterOrEqual(lab, ConstAsDType(g, ir.Int32, 0))
	picked := w.labelLogProbs(hidden, Where(valid, lab, ZerosLike(lab))) // [B*T]
	mask := ConvertDType(valid, ir.Float32)
	count := ReduceAllSum(mask)
	sum := ReduceAllSum(Mul(Reshape(picked, b*t), mask))
	return Neg(Div(sum, Max(count, OnesLike(count)))), nil
}

// loraDropout is the random-number state the adapters' dropout masks
// are drawn from, one after another.
type loraDropout struct {
	p     float64
	state *Node
}

// apply is torch.nn.Dropout(p) in training on x.
func (d *loraDropout) apply(x *Node) *Node {
	var u *Node
	d.state, u = RandomUniform(d.state, ir.MakeShape(ir.Float32, x.Shape().Dimensions...))
	keep := GreaterOrEqual(u, ConstAsDType(x.Graph(), ir.Float32, d.p))
	return Where(keep, MulScalar(x, 1/(1-d.p)), ZerosLike(x))
}

// loraKey indexes netWeights.lora by layer and projection.
func loraKey(layer, slot int) int { return layer*64 + slot }

// hostCopy copies a device tensor into a new host tensor.
func hostCopy(t *ir.Tensor) (*ir.Tensor, error) {
	var out *ir.Tensor
	var cerr error
	err := t.ConstBytes(func(data []byte) {
		out, cerr = ir.TensorFromBytes(t.DType(), t.Shape().Dimensions, append([]byte(nil), data...))
	})
	if err != nil {
		return nil, err
	}
	return out, cerr
}

// MatchModules returns the model's projections whose names end in one of
// targets (PEFT's rule for a list of target_modules: the whole name, or
// a suffix after a dot), in model order. A target that matches nothing is
// an error listing the model's module names.
func (c *Config) MatchModules(targets []string) ([]Module, error) {
	all := c.Modules()
	var out []Module
	for _, t := range targets {
		n := 0
		for _, m := range all {
			if m.Name == t || strings.HasSuffix(m.Name, "."+t) {
				n++
			}
		}
		if n == 0 {
			names := map[string]bool{}
			for _, m := range all {
				names[m.Name[strings.LastIndex(m.Name, ".")+1:]] = true
			}
			list := make([]string, 0, len(names))
			for k := range names {
				list = append(list, k)
			}
			sort.Strings(list)
			return nil, &errs.InputError{Name: "lora target", Problem: "name",
				Expected: "a module of the model (" + strings.Join(list, ", ") + ", or a full name like " + all[0].Name + ")", Got: t}
		}
	}
	for _, m := range all {
		for _, t := range targets {
			if m.Name == t || strings.HasSuffix(m.Name, "."+t) {
				out = append(out, m)
				break
			}
		}
	}
	return out, nil
}
