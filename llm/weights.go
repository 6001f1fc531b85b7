package llm

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/config"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/safetensors"
	"github.com/x448/float16"
)

// weightSpec is one tensor the decoder takes, in graph-parameter order.
type weightSpec struct {
	name  string // the checkpoint's name; "" for derived tensors (rope)
	shape []int
}

// weightSpecs lists every checkpoint tensor the decoder reads, in the order
// the programs take them.
func weightSpecs(c *Config) []weightSpec {
	h, d := c.Hidden, c.HeadDim
	qd, kvd := c.Heads*d, c.KVHeads*d
	ws := []weightSpec{{"model.embed_tokens.weight", []int{c.Vocab, h}}}
	for l := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		ws = append(ws,
			weightSpec{p + "input_layernorm.weight", []int{h}},
			weightSpec{p + "self_attn.q_proj.weight", []int{qd, h}},
			weightSpec{p + "self_attn.k_proj.weight", []int{kvd, h}},
			weightSpec{p + "self_attn.v_proj.weight", []int{kvd, h}},
			weightSpec{p + "self_attn.o_proj.weight", []int{h, qd}},
			weightSpec{p + "post_attention_layernorm.weight", []int{h}},
			weightSpec{p + "mlp.gate_proj.weight", []int{c.Intermediate, h}},
			weightSpec{p + "mlp.up_proj.weight", []int{c.Intermediate, h}},
			weightSpec{p + "mlp.down_proj.weight", []int{h, c.Intermediate}},
		)
		if c.QKVBias {
			ws = append(ws,
				weightSpec{p + "self_attn.q_proj.bias", []int{qd}},
				weightSpec{p + "self_attn.k_proj.bias", []int{kvd}},
				weightSpec{p + "self_attn.v_proj.bias", []int{kvd}})
		}
		if c.QKNorm {
			ws = append(ws,
				weightSpec{p + "self_attn.q_norm.weight", []int{d}},
				weightSpec{p + "self_attn.k_norm.weight", []int{d}})
		}
	}
	ws = append(ws, weightSpec{"model.norm.weight", []int{h}})
	if !c.TiedEmbeddings {
		ws = append(ws, weightSpec{"lm_head.weight", []int{c.Vocab, h}})
	}
	return ws
}

// perLayer is how many weights each layer has in weightSpecs' order.
func (c *Config) perLayer() int {
	n := 9
	if c.QKVBias {
		n += 3
	}
	if c.QKNorm {
		n += 2
	}
	return n
}

// MissingTensorError says a checkpoint lacks a tensor the architecture needs.
type MissingTensorError struct {
	Dir, Tensor string
}

func (e *MissingTensorError) Error() string {
	return fmt.Sprintf("%s: tensor %q missing from the checkpoint", e.Dir, e.Tensor)
}

// ShapeError says a checkpoint tensor's shape is not the config's.
type ShapeError struct {
	File, Tensor  string
	Expected, Got []int
}

func (e *ShapeError) Error() string {
	return fmt.Sprintf("%s: tensor %q has shape %v, config.json implies %v", e.File, e.Tensor, e.Got, e.Expected)
}

// WeightDTypeError says a tensor the decoder reads is stored in a dtype
// the weight loader does not convert (it converts weightDTypes: F32, F16,
// BF16). Tensors the decoder does not read may have any dtype.
type WeightDTypeError struct {
	File, Tensor string
	DType        safetensors.DType
	Accepted     []safetensors.DType
}

func (e *WeightDTypeError) Error() string {
	return fmt.Sprintf("%s: tensor %q is stored as %s; the weight loader reads %v", e.File, e.Tensor, e.DType, e.Accepted)
}

// Is makes a WeightDTypeError match errs.ErrUnsupported.
func (e *WeightDTypeError) Is(target error) bool { return target == errs.ErrUnsupported }

// checkTensors checks that every tensor the decoder reads is present with
// the right shape and a dtype the loader converts, before anything is
// allocated.
func checkTensors(dir string, c *Config, ct *checkpointTensors) error {
	for _, w := range weightSpecs(c) {
		t, ok := ct.tensors[w.name]
		if !ok {
			return &MissingTensorError{Dir: dir, Tensor: w.name}
		}
		if !slices.Contains(weightDTypes, t.DType) {
			return &WeightDTypeError{File: t.file.path, Tensor: w.name, DType: t.DType, Accepted: weightDTypes}
		}
		if !equalInts(t.Shape, w.shape) {
			return &ShapeError{File: t.file.path, Tensor: w.name, Expected: w.shape, Got: t.Shape}
		}
	}
	return nil
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// dtypeFor maps a precision to the dtype weights and activations take.
func dtypeFor(p config.Precision) (ir.DType, error) {
	switch p {
	case config.Float32, "", config.Auto:
		return ir.Float32, nil
	case config.BFloat16:
		return ir.BFloat16, nil
	case config.Float16:
		return ir.Float16, nil
	}
	return ir.InvalidDType, fmt.Errorf("precision %q not supported for generation", p)
}

// convert returns t's elements as dt's little-endian bytes. t's dtype is
// one of weightDTypes (checkTensors). When it is dt already, the bytes are
// the checkpoint's own (a read-only view of the mapped file, valid while
// it is open): callers copy what they keep, and no copy of the weights
// is made only to be dropped (the 100M Llama's 381 MB at load).
func convert(t *stTensor, dt ir.DType) []byte {
	src := t.bytes()
	n := len(src) / t.DType.Size()
	if (t.DType == safetensors.F32 && dt == ir.Float32) || (t.DType == safetensors.BF16 && dt == ir.BFloat16) || (t.DType == safetensors.F16 && dt == ir.Float16) {
		return src
	}
	out := make([]byte, n*dt.Size())
	for i := range n {
		var f float32
		switch t.DType {
		case safetensors.F32:
			f = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		case safetensors.BF16:
			f = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
		case safetensors.F16:
			f = float16.Frombits(binary.LittleEndian.Uint16(src[2*i:])).Float32()
		}
		putFloat(out, i, f, dt)
	}
	return out
}

// putFloat stores f as element i of dt in out.
func putFloat(out []byte, i int, f float32, dt ir.DType) {
	switch dt {
	case ir.Float32:
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(f))
	case ir.BFloat16:
		binary.LittleEndian.PutUint16(out[2*i:], bf16Bits(f))
	case ir.Float16:
		binary.LittleEndian.PutUint16(out[2*i:], float16.Fromfloat32(f).Bits())
	}
}

// bf16Bits rounds f to bfloat16, to nearest even (NaN stays NaN).
func bf16Bits(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// placeWeights converts and transfers every decoder weight to device 0, in
// weightSpecs' order, then the rope tables (float32 cos and sin,
// [maxContext, headDim/2]); with onHost they stay host tensors. On failure
// nothing stays placed.
func placeWeights(ctx context.Context, b *tensorbridge.Backend, c *Config, ct *checkpointTensors, dt ir.DType, maxContext int, onHost bool) (ws []*ir.Tensor, bytes int64, err error) {
	defer func() {
		if err != nil {
			freeAll(ws)
			ws = nil
		}
	}()
	put := func(name string, d ir.DType, dims []int, raw []byte) error {
		h, err := ir.TensorFromBytes(d, dims, raw)
		if err != nil {
			return fmt.Errorf("weight %q: %w", name, err)
		}
		if onHost { // h is a copy of raw (which may view the mapping)
			ws = append(ws, h)
			bytes += int64(len(raw))
			return nil
		}
		t, err := ir.ToDevice(h, b.Engine(), 0)
		_ = h.FinalizeAll()
		if err != nil {
			return fmt.Errorf("placing weight %q: %w", name, err)
		}
		ws = append(ws, t)
		bytes += int64(len(raw))
		return nil
	}
	var scales [][]byte // int8 projections' scales, placed after the rope tables
	for i, w := range weightSpecs(c) {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		if quantizedSpec(c, i) {
			q, s, err := quantizeTensor(ct.tensors[w.name], w.shape[0], w.shape[1])
			if err != nil {
				return nil, 0, err
			}
			if err := put(w.name, ir.Int8, w.shape, q); err != nil {
				return nil, 0, err
			}
			ct.tensors[w.name].release()
			scales = append(scales, s)
			continue
		}
		if err := put(w.name, dt, w.shape, convert(ct.tensors[w.name], dt)); err != nil {
			return nil, 0, err
		}
		ct.tensors[w.name].release()
	}
	cos, sin := ropeTables(c, maxContext)
	half := c.HeadDim / 2
	if err := put("rope.cos", ir.Float32, []int{maxContext, half}, cos); err != nil {
		return nil, 0, err
	}
	if err := put("rope.sin", ir.Float32, []int{maxContext, half}, sin); err != nil {
		return nil, 0, err
	}
	for i, s := range scales {
		if err := put(fmt.Sprintf("scale.%d", i), ir.Float32, []int{len(s) / 4}, s); err != nil {
			return nil, 0, err
		}
	}
	return ws, bytes, nil
}

// ropeTables returns cos and sin of position × inverse frequency for every
// position below n, float32 bytes, as transformers' rotary embedding
// computes them (the product in float32, then cos and sin).
func ropeTables(c *Config, n int) (cos, sin []byte) {
	inv := c.Rope.invFreq(c.HeadDim)
	half := len(inv)
	cos, sin = make([]byte, 4*n*half), make([]byte, 4*n*half)
	for p := range n {
		for i, f := range inv {
			a := float32(p) * f
			k := p*half + i
			binary.LittleEndian.PutUint32(cos[4*k:], math.Float32bits(float32(math.Cos(float64(a)))))
			binary.LittleEndian.PutUint32(sin[4*k:], math.Float32bits(float32(math.Sin(float64(a)))))
		}
	}
	return cos, sin
}

// freeAll frees device tensors.
func freeAll(ts []*ir.Tensor) {
	for _, t := range ts {
		if t != nil {
			_ = t.FinalizeAll()
		}
	}
}
