package llm

// Writing a fine-tuned checkpoint: the decoder's tensors (trained, or the
// source checkpoint's with a LoRA adapter merged in) as model.safetensors
// in float32, beside copies of the source's config and tokenizer files,
// so that transformers' from_pretrained and tensorbridge generate load it.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/llm/peft"
	"github.com/tensorbridge/tensorbridge/safetensors"
)

// checkpointFiles are the files of a checkpoint directory SaveCheckpoint
// copies when the source has them.
var checkpointFiles = []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
	"special_tokens_map.json", "chat_template.jinja", "tokenizer.model"}

// SaveCheckpoint writes a whole checkpoint at dst for the decoder of the
// checkpoint in src: each tensor the decoder reads (tied embeddings once,
// as transformers saves them) from trained when it holds it (host float32
// tensors by checkpoint name: a full fine-tune's weights), else from
// src's files converted to float32; then adapter, when not nil, merged
// into its modules (peft.Merge). dst must not exist: the checkpoint is
// written into a temporary directory beside it and renamed, so dst
// appears whole or not at all.
func SaveCheckpoint(ctx context.Context, src, dst string, trained map[string]*ir.Tensor, adapter *peft.Adapter) error {
	if _, err := os.Lstat(dst); err == nil {
		return &errs.InputError{Name: "--output", Problem: "value", Expected: "a path that does not exist yet", Got: dst + " exists"}
	}
	cfg, err := LoadConfig(src)
	if err != nil {
		return err
	}
	values, err := checkpointValues(src, cfg, trained)
	if err != nil {
		return err
	}
	if adapter != nil {
		byModule := map[string][]float32{} // the same slices: Merge changes values
		for _, m := range cfg.Modules() {
			byModule[m.Name] = values[m.Name+".weight"]
		}
		if err := adapter.Merge(byModule); err != nil {
			return err
		}
	}
	tmp, err := os.MkdirTemp(filepath.Dir(filepath.Clean(dst)), "."+filepath.Base(dst)+".tmp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // after the rename, nothing is left there
	var ts []safetensors.NamedTensor
	for _, w := range weightSpecs(cfg) {
		shape := make([]int64, len(w.shape))
		for i, d := range w.shape {
			shape[i] = int64(d)
		}
		ts = append(ts, safetensors.Float32Tensor(w.name, shape, values[w.name]))
	}
	if err := safetensors.WriteContext(ctx, filepath.Join(tmp, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
		return err
	}
	for _, name := range checkpointFiles {
		if err := copyFile(filepath.Join(src, name), filepath.Join(tmp, name)); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// checkpointValues are the float32 values of every tensor the decoder
// reads, by checkpoint name: trained's, or the checkpoint's.
func checkpointValues(src string, cfg *Config, trained map[string]*ir.Tensor) (map[string][]float32, error) {
	ct, err := openCheckpointTensors(src)
	if err != nil {
		return nil, err
	}
	defer ct.close()
	if err := checkTensors(src, cfg, ct); err != nil {
		return nil, err
	}
	out := map[string][]float32{}
	for _, w := range weightSpecs(cfg) {
		if t, ok := trained[w.name]; ok {
			var v []float32
			err := t.ConstFlatData(func(flat any) {
				if f, ok := flat.([]float32); ok {
					v = append([]float32(nil), f...)
				}
			})
			if err != nil || v == nil {
				return nil, fmt.Errorf("trained tensor %q (%s): want float32 on the host: %v", w.name, t.Shape(), err)
			}
			out[w.name] = v
			continue
		}
		raw := convert(ct.tensors[w.name], ir.Float32)
		v := make([]float32, len(raw)/4)
		for i := range v {
			v[i] = getFloat32(raw, i)
		}
		ct.tensors[w.name].release()
		out[w.name] = v
	}
	return out, nil
}

func getFloat32(raw []byte, i int) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
}

// copyFile copies src to dst when src exists.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
