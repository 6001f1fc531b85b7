package plan

import (
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
	"github.com/tensorbridge/tensorbridge/safetensors"
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
		h, err := safetensors.Read(f)
		if err != nil {
			return nil, err
		}
		ck.Files = append(ck.Files, filepath.Base(f))
		if ck.HeaderDTypes == nil {
			ck.HeaderDTypes = map[string]int{}
		}
		for name, t := range h.Tensors {
			if strings.HasSuffix(name, "rotary_emb.inv_freq") {
				continue // a buffer some exports keep, not a weight
			}
			if cfg.Tied && name == "lm_head.weight" {
				// Some exports store the tied output projection too; the
				// model uses the embedding, so it is not a weight of its own.
				ck.Notes = append(ck.Notes, f+": lm_head.weight stored although tie_word_embeddings is true; not counted (the embedding is used)")
				continue
			}
			ck.HeaderParams += t.Elements
			ck.HeaderBytes += t.Bytes()
			ck.HeaderDTypes[string(t.DType)]++
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

// ErrSafetensors is matched by every error of a malformed safetensors
// header: package safetensors' ErrMalformed, whose rules (bounds, no
// overlap or hole, known dtypes, the header size limit) are llm's too.
// Planning accepts every dtype the format defines (integer buffers
// included): it needs only shapes, dtypes and sizes, and llm's loader
// refuses a weight it cannot convert when the checkpoint is loaded.
var ErrSafetensors = safetensors.ErrMalformed
