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
	"github.com/tensorbridge/tensorbridge/llm"
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

// parseLLMConfig reads the sizes of a decoder from config.json with the
// generation engine's own parser (llm.ParseConfig), in its ShapesOnly
// mode: what changes the weights' shapes or count and is not implemented
// (mixture of experts, quantization, other architectures) is refused by
// name as Unimplemented; malformed values are InvalidArgument.
func parseLLMConfig(path string, raw []byte) (LLMConfig, error) {
	c, err := llm.ParseConfig(path, raw, llm.ParseOptions{ShapesOnly: true})
	if err != nil {
		kind := errs.InvalidArgument
		var ue *llm.UnsupportedError
		if errors.As(err, &ue) {
			kind = errs.Unimplemented
		}
		return LLMConfig{}, &errs.Error{Kind: kind, Op: "plan", Err: fmt.Errorf("plan: %w", err)}
	}
	cfg := LLMConfig{Architecture: c.Architecture, Vocab: c.Vocab, Hidden: c.Hidden, FFN: c.Intermediate, Layers: c.Layers,
		Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: c.HeadDim, MaxPositions: c.MaxPositions, Tied: c.TiedEmbeddings,
		QKNorm: c.QKNorm, MLPBias: c.MLPBias, SlidingWindow: c.SlidingWindow}
	// Qwen2: q, k and v with bias, o without; Llama, Mistral and Qwen3's
	// attention_bias: all four projections.
	cfg.QKVBias = c.QKVBias || c.AttentionBias
	cfg.OBias = c.AttentionBias
	if err := cfg.Validate(); err != nil {
		return LLMConfig{}, &errs.Error{Kind: errs.InvalidArgument, Op: "plan", Err: fmt.Errorf("plan: %s: %v", path, err)}
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
