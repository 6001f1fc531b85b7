package llm

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/errs"
)

// writeSafetensors writes zero-filled F32 tensors of the given shapes.
func writeSafetensors(t *testing.T, path string, shapes map[string][]int) {
	t.Helper()
	names := make([]string, 0, len(shapes))
	for n := range shapes {
		names = append(names, n)
	}
	sort.Strings(names)
	head := map[string]any{}
	off := 0
	for _, n := range names {
		size := 4
		for _, d := range shapes[n] {
			size *= d
		}
		head[n] = map[string]any{"dtype": "F32", "shape": shapes[n], "data_offsets": []int{off, off + size}}
		off += size
	}
	hj, err := json.Marshal(head)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8, 8+len(hj)+off)
	binary.LittleEndian.PutUint64(buf, uint64(len(hj)))
	buf = append(buf, hj...)
	buf = append(buf, make([]byte, off)...)
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Fatal(err)
	}
}

// tinyConfig is a valid Llama config.json of a two-layer toy model.
func tinyConfig() map[string]any {
	return map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "vocab_size": 32, "hidden_size": 16,
		"intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
		"num_key_value_heads": 2, "rms_norm_eps": 1e-5, "max_position_embeddings": 64,
		"rope_theta": 10000.0, "eos_token_id": 1, "torch_dtype": "float32",
	}
}

// writeCheckpoint writes a toy checkpoint of cfg with its tensors, less
// drop, with override's shapes.
func writeCheckpoint(t *testing.T, cfg map[string]any, drop string, override map[string][]int) string {
	t.Helper()
	dir := t.TempDir()
	raw, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := parseConfig("config.json", raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	shapes := map[string][]int{}
	for _, w := range weightSpecs(c) {
		shapes[w.name] = w.shape
	}
	delete(shapes, drop)
	for k, v := range override {
		shapes[k] = v
	}
	writeSafetensors(t, filepath.Join(dir, "model.safetensors"), shapes)
	return dir
}

// TestBadCheckpoints: each broken checkpoint is refused with an error
// naming the problem. Each case is the fault injected into a valid
// checkpoint (the "valid" case loads).
func TestBadCheckpoints(t *testing.T) {
	ctx := context.Background()
	b, err := tensorbridge.Open(ctx, "cpu")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	with := func(k string, v any) map[string]any {
		c := tinyConfig()
		c[k] = v
		return c
	}
	truncated := func(t *testing.T) string {
		dir := writeCheckpoint(t, tinyConfig(), "", nil)
		p := filepath.Join(dir, "model.safetensors")
		st, _ := os.Stat(p)
		if err := os.Truncate(p, st.Size()-10); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	cases := []struct {
		name string
		dir  func(t *testing.T) string
		want []string // substrings of the error
		as   any
	}{
		{"valid", func(t *testing.T) string { return writeCheckpoint(t, tinyConfig(), "", nil) }, nil, nil},
		{"unknown architecture", func(t *testing.T) string {
			return writeCheckpoint(t, tinyConfig(), "", nil)
		}, nil, nil},
		{"unknown rope type", func(t *testing.T) string {
			c := tinyConfig()
			dir := writeCheckpoint(t, c, "", nil)
			c["rope_scaling"] = map[string]any{"rope_type": "yarn", "factor": 4.0}
			raw, _ := json.Marshal(c)
			_ = os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644)
			return dir
		}, []string{"rope_scaling.rope_type", "yarn"}, new(*UnsupportedError)},
		{"unknown config field", func(t *testing.T) string {
			dir := writeCheckpoint(t, tinyConfig(), "", nil)
			raw, _ := json.Marshal(with("attn_logit_softcapping", 50.0))
			_ = os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644)
			return dir
		}, []string{"attn_logit_softcapping"}, new(*UnsupportedError)},
		{"missing tensor", func(t *testing.T) string {
			return writeCheckpoint(t, tinyConfig(), "model.layers.1.mlp.up_proj.weight", nil)
		}, []string{"model.layers.1.mlp.up_proj.weight", "missing"}, new(*MissingTensorError)},
		{"wrong shape", func(t *testing.T) string {
			return writeCheckpoint(t, tinyConfig(), "", map[string][]int{"model.layers.0.self_attn.k_proj.weight": {16, 16}})
		}, []string{"model.layers.0.self_attn.k_proj.weight", "[16 16]", "[8 16]"}, new(*ShapeError)},
		{"truncated safetensors", truncated, []string{"model.safetensors", "truncated"}, nil},
	}
	cases[1].dir = func(t *testing.T) string {
		dir := writeCheckpoint(t, tinyConfig(), "", nil)
		raw, _ := json.Marshal(with("architectures", []string{"GPTNeoXForCausalLM"}))
		_ = os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644)
		return dir
	}
	cases[1].want = []string{"architectures", "GPTNeoXForCausalLM"}
	cases[1].as = new(*UnsupportedError)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Load(ctx, b, tc.dir(t), LoadOptions{})
			if tc.want == nil {
				if err != nil {
					t.Fatalf("valid checkpoint refused: %v", err)
				}
				_ = m.Close()
				return
			}
			if err == nil {
				_ = m.Close()
				t.Fatal("loaded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			if tc.as != nil {
				switch target := tc.as.(type) {
				case **UnsupportedError:
					if !errors.As(err, target) {
						t.Errorf("%v is not an *UnsupportedError", err)
					}
				case **MissingTensorError:
					if !errors.As(err, target) {
						t.Errorf("%v is not a *MissingTensorError", err)
					}
				case **ShapeError:
					if !errors.As(err, target) {
						t.Errorf("%v is not a *ShapeError", err)
					}
				}
			}
		})
	}
}

// TestRopeConfigs reads rope settings from the older keys and from
// transformers 5's rope_parameters.
func TestRopeConfigs(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  map[string]any
		want Rope
	}{
		{"default", nil, Rope{Theta: 10000, Type: "default", Factor: 1}},
		{"linear", map[string]any{"rope_scaling": map[string]any{"type": "linear", "factor": 2.0}}, Rope{Theta: 10000, Type: "linear", Factor: 2}},
		{"llama3", map[string]any{"rope_theta": 500000.0, "rope_scaling": map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
			Rope{Theta: 500000, Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192}},
		{"rope_parameters", map[string]any{"rope_theta": nil, "rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1e6}}, Rope{Theta: 1e6, Type: "default", Factor: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tinyConfig()
			for k, v := range tc.set {
				if v == nil {
					delete(c, k)
				} else {
					c[k] = v
				}
			}
			raw, _ := json.Marshal(c)
			cfg, err := parseConfig("config.json", raw, nil)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Rope != tc.want {
				t.Errorf("got %+v, want %+v", cfg.Rope, tc.want)
			}
		})
	}
}

// FuzzParseHeader: any bytes give a header or an error, never a panic,
// and every accepted tensor lies inside the file.
func FuzzParseHeader(f *testing.F) {
	good := func(h string, data int) []byte {
		b := make([]byte, 8)
		binary.LittleEndian.PutUint64(b, uint64(len(h)))
		return append(append(b, h...), make([]byte, data)...)
	}
	f.Add(good(`{"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}`, 16))
	f.Add(good(`{"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]}}`, 6))
	f.Add(good(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F16","shape":[1],"data_offsets":[8,10]}}`, 16))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		ts, start, err := parseHeader("fuzz", data, int64(len(data)))
		if err != nil {
			return
		}
		for name, x := range ts {
			if x.Begin < start || x.End > int64(len(data)) || x.Begin > x.End {
				t.Fatalf("tensor %q at [%d, %d) outside the %d-byte file", name, x.Begin, x.End, len(data))
			}
		}
	})
}

// TestWeightsMustFit: with a memory budget smaller than the weights, Load
// refuses before placing anything, with an *errs.OutOfMemoryError. (The
// fault: a budget of a millionth of host memory, which this process's own
// resident size already exceeds.)
func TestWeightsMustFit(t *testing.T) {
	ctx := context.Background()
	b, err := tensorbridge.Open(ctx, "cpu", tensorbridge.WithMemoryFraction(1e-6))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, err = Load(ctx, b, writeCheckpoint(t, tinyConfig(), "", nil), LoadOptions{})
	var oom *errs.OutOfMemoryError
	if !errors.As(err, &oom) || !errors.Is(err, errs.ErrOutOfMemory) {
		t.Fatalf("got %v, want an *errs.OutOfMemoryError", err)
	}
}

// TestRequestErrors: requests the engine cannot run are refused with a
// typed error, and the wait queue is bounded (ErrQueueFull). (Fault
// injected: Generate's stop-strings check removed; the request without a
// detokenizer is accepted and its stop strings would be ignored.)
func TestRequestErrors(t *testing.T) {
	ctx := context.Background()
	b, err := tensorbridge.Open(ctx, "cpu")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m, err := Load(ctx, b, writeCheckpoint(t, tinyConfig(), "", nil), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 1, MaxQueue: 1, MinPrefill: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	long := make([]int, 64)
	for _, tc := range []struct {
		name string
		r    Request
		is   error // a sentinel the error also matches
	}{
		{"empty prompt", Request{}, nil},
		{"prompt fills the context", Request{Prompt: long}, nil},
		{"negative max tokens", Request{Prompt: []int{1}, MaxTokens: -1}, nil},
		{"max tokens beyond the context", Request{Prompt: []int{1, 2}, MaxTokens: 63}, nil},
		{"id outside the vocabulary", Request{Prompt: []int{32}}, nil},
		{"stop id outside the vocabulary", Request{Prompt: []int{3}, StopIDs: []int{-1}}, nil},
		// This engine has no NewDetokenizer: stop strings would never match.
		{"stop strings without a detokenizer", Request{Prompt: []int{3}, StopStrings: []string{"\n"}}, ErrNoDetokenizer},
	} {
		var re *RequestError
		_, err := e.Generate(ctx, tc.r)
		if !errors.As(err, &re) || !errors.Is(err, errs.ErrInvalidInput) {
			t.Errorf("%s: got %v, want a *RequestError (ErrInvalidInput)", tc.name, err)
		}
		if tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%s: got %v, want one matching %v", tc.name, err, tc.is)
		}
	}
	accepted, full := 0, 0
	var chans []<-chan Token
	for range 10 {
		ch, err := e.Generate(ctx, Request{Prompt: []int{3}, IgnoreEOS: true})
		switch {
		case err == nil:
			accepted++
			chans = append(chans, ch)
		case errors.Is(err, ErrQueueFull):
			full++
		default:
			t.Fatal(err)
		}
	}
	if accepted > 3 || full == 0 {
		t.Errorf("1 slot and a queue of 1: %d accepted, %d refused as full", accepted, full)
	}
	for _, ch := range chans {
		if _, _, err := collect(ch); err != nil {
			t.Error(err)
		}
	}
}
