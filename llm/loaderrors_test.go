package llm

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/safetensors"
)

// writeTypedSafetensors writes zero-filled tensors of the given shapes,
// each in dtypes[name] (F32 when absent).
func writeTypedSafetensors(t *testing.T, path string, shapes map[string][]int, dtypes map[string]safetensors.DType) {
	t.Helper()
	names := make([]string, 0, len(shapes))
	for n := range shapes {
		names = append(names, n)
	}
	sort.Strings(names)
	head := map[string]any{}
	off := 0
	for _, n := range names {
		dt := dtypes[n]
		if dt == "" {
			dt = safetensors.F32
		}
		size := dt.Size()
		for _, d := range shapes[n] {
			size *= d
		}
		head[n] = map[string]any{"dtype": dt, "shape": shapes[n], "data_offsets": []int{off, off + size}}
		off += size
	}
	hj, err := json.Marshal(head)
	if err != nil {
		t.Fatal(err)
	}
	buf := binary.LittleEndian.AppendUint64(nil, uint64(len(hj)))
	buf = append(append(buf, hj...), make([]byte, off)...)
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestWeightDTypePolicy: the loader converts F32, F16 and BF16 weights;
// a tensor it reads in another dtype is refused by name with a
// *WeightDTypeError (errs.ErrUnsupported), while a tensor it does not
// read may have any dtype the format defines (an I64 position-ids
// buffer, as some exports keep). Overlapping tensors, which the former
// parser refused too, stay refused through the shared parser. (Fault
// injected: checkTensors' dtype check removed; the I32 weight loads as
// garbage.)
func TestWeightDTypePolicy(t *testing.T) {
	ctx := context.Background()
	b, err := tensorbridge.Open(ctx, "cpu")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const q = "model.layers.0.self_attn.q_proj.weight"
	for _, tc := range []struct {
		name   string
		extra  map[string][]int
		dtypes map[string]safetensors.DType
		want   string // "" loads
	}{
		{"half-precision weights", nil, map[string]safetensors.DType{q: safetensors.BF16, "model.norm.weight": safetensors.F16}, ""},
		{"an int64 buffer the decoder does not read", map[string][]int{"model.position_ids": {1, 64}}, map[string]safetensors.DType{"model.position_ids": safetensors.I64}, ""},
		{"an int32 weight", nil, map[string]safetensors.DType{q: safetensors.I32}, `tensor "` + q + `" is stored as I32; the weight loader reads [F32 F16 BF16]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeCheckpoint(t, tinyConfig(), "", nil)
			raw, _ := json.Marshal(tinyConfig())
			c, err := parseConfig("config.json", raw, nil)
			if err != nil {
				t.Fatal(err)
			}
			shapes := map[string][]int{}
			for _, w := range weightSpecs(c) {
				shapes[w.name] = w.shape
			}
			for k, v := range tc.extra {
				shapes[k] = v
			}
			writeTypedSafetensors(t, filepath.Join(dir, "model.safetensors"), shapes, tc.dtypes)
			m, err := Load(ctx, b, dir, LoadOptions{})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				_ = m.Close()
				return
			}
			var de *WeightDTypeError
			if !errors.As(err, &de) || !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), tc.want) {
				if err == nil {
					_ = m.Close()
				}
				t.Fatalf("got %v, want a *WeightDTypeError with %q", err, tc.want)
			}
		})
	}
	t.Run("overlap", func(t *testing.T) {
		dir := writeCheckpoint(t, tinyConfig(), "", nil)
		p := filepath.Join(dir, "model.safetensors")
		raw, _ := os.ReadFile(p)
		n := binary.LittleEndian.Uint64(raw)
		var h map[string]any
		if err := json.Unmarshal(raw[8:8+n], &h); err != nil {
			t.Fatal(err)
		}
		h["model.norm.weight"].(map[string]any)["data_offsets"] = []int{0, 64} // the bytes of the first tensor
		hj, _ := json.Marshal(h)
		out := binary.LittleEndian.AppendUint64(nil, uint64(len(hj)))
		if err := os.WriteFile(p, append(append(out, hj...), raw[8+n:]...), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load(ctx, b, dir, LoadOptions{})
		if !errors.Is(err, safetensors.ErrMalformed) || !strings.Contains(err.Error(), "overlap") {
			t.Fatalf("got %v, want a malformed-header error naming the overlap", err)
		}
	})
}

// TestConfigSizeErrors: a size outside (0, 2^24] in config.json is a
// *ConfigError naming the file, the key, the value and the bound it
// breaks: a size too large is no longer reported as "want a positive
// size". (Fault injected: both bounds given the "positive size" message;
// the too-large cases fail.)
func TestConfigSizeErrors(t *testing.T) {
	for _, tc := range []struct {
		key  string
		v    int
		want string
	}{
		{"hidden_size", 1 << 25, "hidden_size = 33554432: expected at most 16777216 (2^24)"},
		{"vocab_size", 1<<24 + 1, "vocab_size = 16777217: expected at most 16777216 (2^24)"},
		{"num_hidden_layers", 0, "num_hidden_layers = 0: expected a positive size"},
		{"intermediate_size", -4, "intermediate_size = -4: expected a positive size"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			dir := t.TempDir()
			c := tinyConfig()
			c[tc.key] = tc.v
			raw, _ := json.Marshal(c)
			path := filepath.Join(dir, "config.json")
			if err := os.WriteFile(path, raw, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := LoadConfig(dir)
			var ce *ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, errs.ErrInvalidInput) {
				t.Fatalf("got %v, want a *ConfigError", err)
			}
			if ce.File != path || ce.Field != tc.key || !strings.Contains(err.Error(), path+": "+tc.want) {
				t.Errorf("got %q, want %q", err, path+": "+tc.want)
			}
		})
	}
}

// TestMissingCheckpointDir: a checkpoint path that does not exist, or is
// a file, is reported as that directory (an *fs.PathError), not as the
// first file looked for in it. (Fault injected: LoadConfig without
// checkpointDir; the error names config.json.)
func TestMissingCheckpointDir(t *testing.T) {
	ctx := context.Background()
	b, err := tensorbridge.Open(ctx, "cpu")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	missing := filepath.Join(t.TempDir(), "no-such-checkpoint")
	file := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(file, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir, want string
		notExist  bool
	}{
		{missing, "checkpoint directory " + missing + ": ", true},
		{file, "checkpoint directory " + file + ": not a directory", false},
	} {
		_, err := Load(ctx, b, tc.dir, LoadOptions{})
		var pe *fs.PathError
		if !errors.As(err, &pe) || pe.Path != tc.dir || !strings.HasPrefix(err.Error(), tc.want) || errors.Is(err, fs.ErrNotExist) != tc.notExist {
			t.Errorf("Load(%s): got %v, want %q", tc.dir, err, tc.want)
		}
	}
}
