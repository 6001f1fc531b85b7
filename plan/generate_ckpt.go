package plan

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tensorbridge/tensorbridge/errs"
)

// Checkpoint is what planning read from a Hugging Face checkpoint
// directory.
type Checkpoint struct {
	Dir    string    `json:"dir"`
	Config LLMConfig `json:"config"`
	// Files are the safetensors files whose headers were read; empty when
	// the directory holds none (config.json alone plans the same).
	Files []string `json:"safetensors_files,omitempty"`
	// HeaderParams counts the elements the headers declare (0 without
	// files); HeaderBytes is their stored size, in the files' own dtypes.
	HeaderParams int64 `json:"header_params,omitempty"`
	HeaderBytes  int64 `json:"header_bytes,omitempty"`
	// HeaderDTypes counts the tensors of each stored dtype.
	HeaderDTypes map[string]int `json:"header_dtypes,omitempty"`
	// Notes say what of the headers was left out of the count and why.
	Notes []string `json:"notes,omitempty"`
}

// planArchitectures are the decoders whose weights the arithmetic of
// LLMConfig.shards describes: Llama's layout, with Qwen2's q/k/v biases
// and Qwen3's q/k norms.
var planArchitectures = map[string]bool{
	"LlamaForCausalLM": true, "MistralForCausalLM": true, "Qwen2ForCausalLM": true, "Qwen3ForCausalLM": true,
}

// maxConfigBytes bounds config.json; real ones are a few KiB.
const maxConfigBytes = 1 << 20

// LoadCheckpoint reads dir/config.json and, when present, the headers
// (never the tensors) of dir's safetensors files, and checks that the
// parameter count the config implies is the one the headers declare.
func LoadCheckpoint(dir string) (*Checkpoint, error) {
	path := filepath.Join(dir, "config.json")
	raw, err := readBounded(path, maxConfigBytes)
	if err != nil {
		return nil, err
	}
	cfg, err := parseLLMConfig(path, raw)
	if err != nil {
		return nil, err
	}
	cfg.Name = filepath.Base(filepath.Clean(dir))
	ck := &Checkpoint{Dir: dir, Config: cfg}
	files, err := safetensorsFiles(dir)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		h, err := readSafetensorsHeader(f)
		if err != nil {
			return nil, err
		}
		ck.Files = append(ck.Files, filepath.Base(f))
		if ck.HeaderDTypes == nil {
			ck.HeaderDTypes = map[string]int{}
		}
		for name, t := range h {
			if strings.HasSuffix(name, "rotary_emb.inv_freq") {
				continue // a buffer some exports keep, not a weight
			}
			if cfg.Tied && name == "lm_head.weight" {
				// Some exports store the tied output projection too; the
				// model uses the embedding, so it is not a weight of its own.
				ck.Notes = append(ck.Notes, f+": lm_head.weight stored although tie_word_embeddings is true; not counted (the embedding is used)")
				continue
			}
			ck.HeaderParams += t.elements
			ck.HeaderBytes += t.end - t.begin
			ck.HeaderDTypes[t.dtype]++
		}
	}
	if len(files) > 0 && ck.HeaderParams != cfg.Params() {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Op: "plan", Err: fmt.Errorf(
			"plan: %s: config.json implies %d parameters, the safetensors headers (%s) declare %d: the config does not describe these weights",
			dir, cfg.Params(), strings.Join(ck.Files, ", "), ck.HeaderParams)}
	}
	return ck, nil
}

// safetensorsFiles lists the checkpoint's weight files: those
// model.safetensors.index.json maps tensors to when it is there (a
// directory may hold others, such as Mistral's consolidated.safetensors,
// that repeat the weights), else every *.safetensors.
func safetensorsFiles(dir string) ([]string, error) {
	index := filepath.Join(dir, "model.safetensors.index.json")
	raw, err := readBounded(index, maxIndexBytes)
	if errors.Is(err, os.ErrNotExist) {
		files, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
		sort.Strings(files)
		return files, err
	}
	if err != nil {
		return nil, err
	}
	var ix struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &ix); err != nil {
		return nil, invalid("plan: %s: %v", index, err)
	}
	seen := map[string]bool{}
	var files []string
	for _, f := range ix.WeightMap {
		if f != filepath.Base(f) || !strings.HasSuffix(f, ".safetensors") {
			return nil, invalid("plan: %s: weight file %q is not a .safetensors file in the checkpoint directory", index, f)
		}
		if !seen[f] {
			seen[f] = true
			files = append(files, filepath.Join(dir, f))
		}
	}
	if len(files) == 0 {
		return nil, invalid("plan: %s: weight_map names no files", index)
	}
	sort.Strings(files)
	return files, nil
}

// maxIndexBytes bounds model.safetensors.index.json (a tensor name and a
// file name per weight: well under 1 MiB for the largest models).
const maxIndexBytes = 16 << 20

func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, invalid("plan: %s is over %d bytes", path, limit)
	}
	return b, nil
}

// parseLLMConfig reads the sizes of a decoder from config.json. Keys that
// change the weights' shapes or count and that the arithmetic does not
// implement are refused by name.
func parseLLMConfig(path string, raw []byte) (LLMConfig, error) {
	var c struct {
		Architectures []string `json:"architectures"`
		Vocab         int      `json:"vocab_size"`
		Hidden        int      `json:"hidden_size"`
		Intermediate  int      `json:"intermediate_size"`
		Layers        int      `json:"num_hidden_layers"`
		Heads         int      `json:"num_attention_heads"`
		KVHeads       *int     `json:"num_key_value_heads"`
		HeadDim       *int     `json:"head_dim"`
		MaxPositions  int      `json:"max_position_embeddings"`
		Tie           *bool    `json:"tie_word_embeddings"`
		AttentionBias *bool    `json:"attention_bias"`
		MLPBias       *bool    `json:"mlp_bias"`
		SlidingWindow *int     `json:"sliding_window"`
		UseSliding    *bool    `json:"use_sliding_window"`
		// Keys that would change the weights: mixture of experts.
		Experts      *int `json:"num_local_experts"`
		Experts2     *int `json:"num_experts"`
		Quantization any  `json:"quantization_config"`
	}
	bad := func(format string, a ...any) error {
		return &errs.Error{Kind: errs.InvalidArgument, Op: "plan", Err: fmt.Errorf("plan: %s: "+format, append([]any{path}, a...)...)}
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return LLMConfig{}, bad("%v", err)
	}
	if len(c.Architectures) != 1 {
		return LLMConfig{}, bad("architectures = %v: want exactly one", c.Architectures)
	}
	arch := c.Architectures[0]
	if !planArchitectures[arch] {
		return LLMConfig{}, &errs.Error{Kind: errs.Unimplemented, Op: "plan", Err: fmt.Errorf(
			"plan: %s: architecture %s is not planned (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)", path, arch)}
	}
	if (c.Experts != nil && *c.Experts > 0) || (c.Experts2 != nil && *c.Experts2 > 0) {
		return LLMConfig{}, &errs.Error{Kind: errs.Unimplemented, Op: "plan", Err: fmt.Errorf("plan: %s: mixture-of-experts configs are not planned", path)}
	}
	if c.Quantization != nil {
		return LLMConfig{}, &errs.Error{Kind: errs.Unimplemented, Op: "plan", Err: fmt.Errorf("plan: %s: quantization_config is not planned (quantized weights change the bytes)", path)}
	}
	cfg := LLMConfig{Architecture: arch, Vocab: c.Vocab, Hidden: c.Hidden, FFN: c.Intermediate, Layers: c.Layers,
		Heads: c.Heads, KVHeads: c.Heads, MaxPositions: c.MaxPositions}
	if c.KVHeads != nil {
		cfg.KVHeads = *c.KVHeads
	}
	switch {
	case c.HeadDim != nil:
		cfg.HeadDim = *c.HeadDim
	case c.Heads > 0 && c.Hidden%c.Heads == 0:
		cfg.HeadDim = c.Hidden / c.Heads
	default:
		return LLMConfig{}, bad("hidden_size %d is not a multiple of num_attention_heads %d and head_dim is absent", c.Hidden, c.Heads)
	}
	// Llama, Mistral, Qwen2 and Qwen3 configs default tie_word_embeddings
	// to false in transformers.
	cfg.Tied = c.Tie != nil && *c.Tie
	attnBias := c.AttentionBias != nil && *c.AttentionBias
	switch arch {
	case "Qwen2ForCausalLM":
		cfg.QKVBias = true // Qwen2Attention: q, k, v with bias, o without
	case "Qwen3ForCausalLM":
		cfg.QKNorm = true
		cfg.QKVBias, cfg.OBias = attnBias, attnBias
	default:
		cfg.QKVBias, cfg.OBias = attnBias, attnBias // LlamaAttention: all four projections
	}
	cfg.MLPBias = c.MLPBias != nil && *c.MLPBias
	if c.SlidingWindow != nil && *c.SlidingWindow > 0 && (c.UseSliding == nil || *c.UseSliding) {
		cfg.SlidingWindow = *c.SlidingWindow
	}
	if err := cfg.Validate(); err != nil {
		return LLMConfig{}, bad("%v", err)
	}
	return cfg, nil
}

// stTensor is one safetensors header entry.
type stTensor struct {
	dtype      string
	elements   int64
	begin, end int64
}

// stDTypeBytes are the safetensors dtypes
// (https://github.com/huggingface/safetensors, Dtype in safetensors/src/tensor.rs).
var stDTypeBytes = map[string]int64{
	"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
	"I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}

// maxHeaderBytes bounds a safetensors header; the format's own reference
// implementation refuses headers over 100 MB.
const maxHeaderBytes = 100 << 20

// ErrSafetensors is matched by every error of a malformed safetensors
// header.
var ErrSafetensors = errors.New("plan: malformed safetensors header")

// readSafetensorsHeader reads the 8-byte little-endian header length and
// the JSON header of a safetensors file, and checks each tensor's byte
// range against its dtype and shape and against the file's size. The
// tensors themselves are never read.
func readSafetensorsHeader(path string) (map[string]stTensor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var n [8]byte
	if _, err := io.ReadFull(f, n[:]); err != nil {
		return nil, fmt.Errorf("%w: %s: reading the header length: %v", ErrSafetensors, path, err)
	}
	hl := binary.LittleEndian.Uint64(n[:])
	if hl > maxHeaderBytes || int64(hl) > st.Size()-8 {
		return nil, fmt.Errorf("%w: %s: header length %d, file is %d bytes (limit %d)", ErrSafetensors, path, hl, st.Size(), maxHeaderBytes)
	}
	buf := make([]byte, hl)
	if _, err := io.ReadFull(f, buf); err != nil {
		return nil, fmt.Errorf("%w: %s: reading the header: %v", ErrSafetensors, path, err)
	}
	return parseSafetensorsHeader(path, buf, st.Size()-8-int64(hl))
}

// parseSafetensorsHeader checks a header against a data section of
// dataBytes.
func parseSafetensorsHeader(path string, buf []byte, dataBytes int64) (map[string]stTensor, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(buf, &raw); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrSafetensors, path, err)
	}
	out := make(map[string]stTensor, len(raw))
	for name, v := range raw {
		if name == "__metadata__" {
			continue
		}
		var t struct {
			DType   string  `json:"dtype"`
			Shape   []int64 `json:"shape"`
			Offsets []int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(v, &t); err != nil {
			return nil, fmt.Errorf("%w: %s: tensor %q: %v", ErrSafetensors, path, name, err)
		}
		size, ok := stDTypeBytes[t.DType]
		if !ok {
			return nil, fmt.Errorf("%w: %s: tensor %q: dtype %q unknown", ErrSafetensors, path, name, t.DType)
		}
		if len(t.Offsets) != 2 || t.Offsets[0] < 0 || t.Offsets[1] < t.Offsets[0] || t.Offsets[1] > dataBytes {
			return nil, fmt.Errorf("%w: %s: tensor %q: data_offsets %v outside the %d data bytes", ErrSafetensors, path, name, t.Offsets, dataBytes)
		}
		elems := int64(1)
		for _, d := range t.Shape {
			if d < 0 || (d > 0 && elems > dataBytes/d) {
				return nil, fmt.Errorf("%w: %s: tensor %q: shape %v does not fit the %d data bytes", ErrSafetensors, path, name, t.Shape, dataBytes)
			}
			elems *= d
		}
		if elems*size != t.Offsets[1]-t.Offsets[0] {
			return nil, fmt.Errorf("%w: %s: tensor %q: %s %v is %d bytes, data_offsets %v span %d", ErrSafetensors, path, name,
				t.DType, t.Shape, elems*size, t.Offsets, t.Offsets[1]-t.Offsets[0])
		}
		out[name] = stTensor{dtype: t.DType, elements: elems, begin: t.Offsets[0], end: t.Offsets[1]}
	}
	return out, nil
}
