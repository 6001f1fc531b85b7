package safetensors

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/errs"
)

// file builds a safetensors file: the length, the header text as given,
// then data zero bytes.
func file(header string, data int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(b, header...), make([]byte, data)...)
}

// TestParseGood: headers the format allows, with the tensors' absolute
// offsets computed by hand (the data section starts at 8 + len(header)).
func TestParseGood(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header string
		data   int
		want   map[string]Tensor // Begin and End relative to the data section
		meta   map[string]string
	}{
		{"two tensors, metadata", `{"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}`, 22,
			map[string]Tensor{"a": {DType: F32, Shape: []int64{2, 2}, Elements: 4, Begin: 0, End: 16}, "b": {DType: BF16, Shape: []int64{3}, Elements: 3, Begin: 16, End: 22}},
			map[string]string{"format": "pt"}},
		{"scalar", `{"s":{"dtype":"I64","shape":[],"data_offsets":[0,8]}}`, 8,
			map[string]Tensor{"s": {DType: I64, Shape: []int64{}, Elements: 1, Begin: 0, End: 8}}, nil},
		{"empty tensors share an offset", `{"e":{"dtype":"F32","shape":[0,5],"data_offsets":[0,0]},"f":{"dtype":"U8","shape":[4294967296,0],"data_offsets":[0,0]},"x":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}}`, 2,
			map[string]Tensor{"e": {DType: F32, Shape: []int64{0, 5}}, "f": {DType: U8, Shape: []int64{4294967296, 0}}, "x": {DType: BOOL, Shape: []int64{2}, Elements: 2, End: 2}}, nil},
		{"no tensors", `{}`, 0, map[string]Tensor{}, nil},
		{"padded header", `{"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}}    `, 1,
			map[string]Tensor{"a": {DType: F8E4M3, Shape: []int64{1}, Elements: 1, End: 1}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := file(tc.header, tc.data)
			h, err := Parse("x.safetensors", b, int64(len(b)))
			if err != nil {
				t.Fatal(err)
			}
			start := int64(8 + len(tc.header))
			if h.DataStart != start {
				t.Errorf("data start %d, want %d", h.DataStart, start)
			}
			if len(h.Tensors) != len(tc.want) {
				t.Errorf("%d tensors, want %d", len(h.Tensors), len(tc.want))
			}
			for name, w := range tc.want {
				g, ok := h.Tensors[name]
				if !ok {
					t.Fatalf("tensor %q missing", name)
				}
				if g.Name != name || g.DType != w.DType || !equal(g.Shape, w.Shape) || g.Elements != w.Elements || g.Begin != start+w.Begin || g.End != start+w.End {
					t.Errorf("tensor %q: got %+v, want %+v at data start %d", name, *g, w, start)
				}
			}
			if len(h.Metadata) != len(tc.meta) || h.Metadata["format"] != tc.meta["format"] {
				t.Errorf("metadata %v, want %v", h.Metadata, tc.meta)
			}
		})
	}
}

func equal(a, b []int64) bool {
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

// TestParseBad: each header breaks one rule and is refused with a
// *HeaderError naming the file, the tensor and the problem. Each case is
// the fault its rule exists to catch.
func TestParseBad(t *testing.T) {
	long := binary.LittleEndian.AppendUint64(nil, MaxHeaderBytes+1)
	long = append(long, make([]byte, 16)...)
	for _, tc := range []struct {
		name   string
		raw    []byte
		tensor string
		want   string
	}{
		{"short file", []byte{1, 2, 3}, "", "shorter than the 8-byte"},
		{"header over the limit", long, "", "over the 100000000-byte limit"},
		{"header past the file", file(`{}`, 0)[:9], "", "only 1 bytes after"},
		{"not json", file(`[`, 0), "", "not a JSON object"},
		{"a list, not an object", file(`[1]`, 0), "", "not a JSON object"},
		{"metadata not strings", file(`{"__metadata__":{"n":1}}`, 0), "", "__metadata__ must map strings to strings"},
		{"unknown dtype", file(`{"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}}`, 1), "a", `dtype "Q4" unknown`},
		{"sub-byte dtype", file(`{"a":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}}`, 1), "a", `dtype "F4" unknown`},
		{"no dtype", file(`{"a":{"shape":[1],"data_offsets":[0,1]}}`, 1), "a", `want "dtype" and "shape"`},
		{"no shape", file(`{"a":{"dtype":"U8","data_offsets":[0,1]}}`, 1), "a", `want "dtype" and "shape"`},
		{"one offset", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0]}}`, 1), "a", "data_offsets has 1 entries"},
		{"offsets past data", file(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, 8), "a", "outside the 8 data bytes"},
		{"offsets reversed", file(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}`, 8), "a", "data_offsets [4, 0]"},
		{"negative offset", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}}`, 8), "a", "data_offsets [-1, 0]"},
		{"size mismatch", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}}`, 8), "a", "is 4 bytes, data_offsets [0, 8] span 8"},
		{"negative dimension", file(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, 4), "a", "dimension -1 is negative"},
		{"overflow", file(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}}`, 8), "a", "more elements than the 8 data bytes"},
		{"overflow by the dtype", file(`{"a":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,8]}}`, 8), "a", "more elements"},
		{"overlap", file(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F16","shape":[4],"data_offsets":[8,16]}}`, 16), "b", `overlap tensor "a", which ends at 16`},
		{"same bytes twice", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}}`, 8), "b", "overlap"},
		{"hole", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`, 12), "b", "leaving a hole after data offset 4"},
		{"hole at the start", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), "a", "leaving a hole after data offset 0"},
		{"trailing bytes", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 6), "", "end at data offset 4, but the data section has 6 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("x.safetensors", tc.raw, int64(len(tc.raw)))
			var he *HeaderError
			if !errors.As(err, &he) || !errors.Is(err, ErrMalformed) || !errors.Is(err, errs.ErrInvalidInput) {
				t.Fatalf("got %v, want a *HeaderError", err)
			}
			if he.File != "x.safetensors" || he.Tensor != tc.tensor || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %q (tensor %q), want tensor %q and %q", err, he.Tensor, tc.tensor, tc.want)
			}
		})
	}
}

// TestRead reads a file's header from disk, without its data, and refuses
// a truncated copy of it.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	raw := file(`{"w":{"dtype":"F16","shape":[3,2],"data_offsets":[0,12]}}`, 12)
	p := filepath.Join(dir, "model.safetensors")
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := Read(p)
	if err != nil {
		t.Fatal(err)
	}
	if w := h.Tensors["w"]; w == nil || w.Bytes() != 12 || w.End != int64(len(raw)) {
		t.Fatalf("tensor w: %+v", w)
	}
	if err := os.WriteFile(p, raw[:len(raw)-1], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(p); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "outside the 11 data bytes") {
		t.Errorf("truncated: %v", err)
	}
	if _, err := Read(filepath.Join(dir, "absent.safetensors")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("absent: %v", err)
	}
}

// TestReadTransformersFiles reads the safetensors files transformers
// wrote for the LLM fixtures (scripts/setup-llm-fixtures.sh), when they
// are installed: every one the reference implementation wrote is
// accepted, and its tensors tile the data exactly.
func TestReadTransformersFiles(t *testing.T) {
	root := os.Getenv("TENSORBRIDGE_LLM_FIXTURES")
	if root == "" {
		home, _ := os.UserHomeDir()
		root = filepath.Join(home, ".cache", "tensorbridge", "llm-fixtures")
	}
	files, _ := filepath.Glob(filepath.Join(root, "*", "*.safetensors"))
	if len(files) == 0 {
		t.Skip("no LLM fixtures under " + root)
	}
	for _, f := range files {
		h, err := Read(f)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		st, _ := os.Stat(f)
		var sum int64
		for _, x := range h.Tensors {
			sum += x.Bytes()
		}
		if h.DataStart+sum != st.Size() || len(h.Tensors) == 0 {
			t.Errorf("%s: %d tensors of %d bytes from %d, file %d bytes", f, len(h.Tensors), sum, h.DataStart, st.Size())
		}
	}
}

// FuzzParse: any bytes give a header or a *HeaderError, never a panic;
// an accepted header's tensors lie in the data section, their sizes
// match dtype × shape, and sorted by offset they tile it exactly.
func FuzzParse(f *testing.F) {
	f.Add(file(`{"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}`, 16))
	f.Add(file(`{"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]}}`, 6))
	f.Add(file(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F16","shape":[1],"data_offsets":[8,10]}}`, 16))
	f.Add(file(`{"a":{"dtype":"F32","shape":[9223372036854775807,2],"data_offsets":[0,8]}}`, 8))
	f.Add(file(`{"e":{"dtype":"I64","shape":[0],"data_offsets":[0,0]},"s":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}`, 1))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, '{', '}'})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := Parse("fuzz", data, int64(len(data)))
		if err != nil {
			var he *HeaderError
			if !errors.As(err, &he) {
				t.Fatalf("error %v is not a *HeaderError", err)
			}
			return
		}
		ts := make([]*Tensor, 0, len(h.Tensors))
		for _, x := range h.Tensors {
			ts = append(ts, x)
		}
		sort.Slice(ts, func(i, j int) bool {
			return ts[i].Begin < ts[j].Begin || ts[i].Begin == ts[j].Begin && ts[i].End < ts[j].End
		})
		at := h.DataStart
		for _, x := range ts {
			n := int64(1)
			for _, d := range x.Shape {
				n *= d
			}
			if x.Begin != at || x.End < x.Begin || x.Elements != n || x.End-x.Begin != n*int64(x.DType.Size()) {
				t.Fatalf("tensor %+v: not at %d or not dtype × shape bytes", *x, at)
			}
			at = x.End
		}
		if at != int64(len(data)) {
			t.Fatalf("tensors end at %d of %d bytes", at, len(data))
		}
	})
}
