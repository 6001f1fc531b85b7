package safetensors

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/errs"
)

// goldenTensors are the tensors of testdata/go-written.safetensors: one
// of each way a value reaches the file (raw bytes, float32 as F32,
// converted to BF16 and F16), a scalar, an empty tensor and a name that
// JSON must escape.
func goldenTensors() []NamedTensor {
	i16 := binary.LittleEndian.AppendUint16(nil, uint16(0xfffe)) // -2
	i16 = binary.LittleEndian.AppendUint16(i16, 7)
	i16 = binary.LittleEndian.AppendUint16(i16, 300)
	return []NamedTensor{
		Float32Tensor("z.weight", []int64{2, 3}, []float32{1.5, -2.25, 0, 3e-8, 65504, -1}),
		{Name: "a.bf16", DType: BF16, Shape: []int64{3}, Float32: []float32{1.0 / 3, -7.1, 1e30}},
		{Name: "m.f16", DType: F16, Shape: []int64{2, 1}, Float32: []float32{0.1, -65519}},
		{Name: "b.i16", DType: I16, Shape: []int64{3}, Data: i16},
		Float32Tensor("scalar", []int64{}, []float32{42}),
		Float32Tensor("empty", []int64{0, 4}, []float32{}),
		Float32Tensor(`we"ird\name<&>`, []int64{1}, []float32{-0.5}),
	}
}

var goldenMetadata = map[string]string{"format": "pt", "note": "written by tensorbridge"}

// pythonLoad is testdata/go-written.json: what
// safetensors.torch.load_file (safetensors 0.8.0, torch 2.5.1) returned
// for testdata/go-written.safetensors, recorded once by hand with
//
//	t = load_file(p); meta = safe_open(p, "pt").metadata()
//	{"metadata": meta, "order": [the header's keys in file order],
//	 "tensors": {k: {"dtype": str(v.dtype), "shape": list(v.shape),
//	                 "values": v.float().flatten().tolist()}}}
type pythonLoad struct {
	Metadata map[string]string `json:"metadata"`
	Order    []string          `json:"order"`
	Tensors  map[string]struct {
		DType  string    `json:"dtype"`
		Shape  []int64   `json:"shape"`
		Values []float64 `json:"values"`
	} `json:"tensors"`
}

// TestWriteLoadsInPython: the file Write makes today is byte for byte the
// one Python's safetensors loaded, and what Python read from it is what
// the tensors hold (F32 exact, BF16 and F16 rounded to nearest even).
func TestWriteLoadsInPython(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.safetensors")
	if err := Write(path, goldenTensors(), goldenMetadata); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if os.Getenv("TENSORBRIDGE_WRITE_GOLDEN") == "1" {
		os.WriteFile("testdata/go-written.safetensors", got, 0o644)
	}
	want, err := os.ReadFile("testdata/go-written.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Write's bytes differ from testdata/go-written.safetensors (the file Python loaded)")
	}
	raw, err := os.ReadFile("testdata/go-written.json")
	if err != nil {
		t.Fatal(err)
	}
	var py pythonLoad
	if err := json.Unmarshal(raw, &py); err != nil {
		t.Fatal(err)
	}
	if py.Metadata["format"] != "pt" || py.Metadata["note"] != goldenMetadata["note"] || len(py.Metadata) != 2 {
		t.Errorf("python read metadata %v", py.Metadata)
	}
	torch := map[DType]string{F32: "torch.float32", BF16: "torch.bfloat16", F16: "torch.float16", I16: "torch.int16"}
	// The 16-bit values as torch 2.5.1 rounds the float32 ones
	// (tensor.to(torch.bfloat16 / torch.float16)): bf16 0x3eab, 0xc0e3,
	// 0x714a; f16 0x2e66 and -65519 to -65504.
	want16 := map[string][]float64{
		"a.bf16": {0.333984375, -7.09375, float64(math.Float32frombits(0x714a0000))},
		"m.f16":  {0.0999755859375, -65504},
		"b.i16":  {-2, 7, 300},
	}
	for i, nt := range goldenTensors() {
		if i >= len(py.Order) || py.Order[i] != nt.Name {
			t.Errorf("python saw the tensors in order %q; tensor %d should be %q", py.Order, i, nt.Name)
		}
		p, ok := py.Tensors[nt.Name]
		if !ok {
			t.Fatalf("python did not load %q", nt.Name)
		}
		if p.DType != torch[nt.DType] || !equal(p.Shape, nt.Shape) {
			t.Errorf("%q: python read %s%v, wrote %s%v", nt.Name, p.DType, p.Shape, nt.DType, nt.Shape)
		}
		vals := want16[nt.Name]
		if vals == nil {
			for _, v := range nt.Float32 {
				vals = append(vals, float64(v))
			}
		}
		if len(p.Values) != len(vals) {
			t.Fatalf("%q: python read %d values, want %d", nt.Name, len(p.Values), len(vals))
		}
		for j := range vals {
			if p.Values[j] != vals[j] {
				t.Errorf("%q[%d]: python read %v, want %v", nt.Name, j, p.Values[j], vals[j])
			}
		}
	}
}

// TestWriteRoundTrip: this package's Read finds every tensor at the
// offsets the order given implies, with the data written, an 8-aligned
// data section, and no metadata when none is given.
func TestWriteRoundTrip(t *testing.T) {
	for _, meta := range []map[string]string{nil, {}, goldenMetadata} {
		path := filepath.Join(t.TempDir(), "r.safetensors")
		ts := goldenTensors()
		if err := Write(path, ts, meta); err != nil {
			t.Fatal(err)
		}
		h, err := Read(path)
		if err != nil {
			t.Fatal(err)
		}
		if h.DataStart%8 != 0 {
			t.Errorf("data section starts at %d, not 8-aligned", h.DataStart)
		}
		if (meta == nil) != (h.Metadata == nil) || len(h.Metadata) != len(meta) {
			t.Errorf("metadata %v, wrote %v", h.Metadata, meta)
		}
		file, _ := os.ReadFile(path)
		at := h.DataStart
		for _, nt := range ts {
			g := h.Tensors[nt.Name]
			if g == nil || g.DType != nt.DType || !equal(g.Shape, nt.Shape) || g.Begin != at {
				t.Fatalf("%q: read %+v, want %s%v at %d", nt.Name, g, nt.DType, nt.Shape, at)
			}
			at = g.End
			if nt.DType == F32 {
				for j, v := range nt.Float32 {
					if b := binary.LittleEndian.Uint32(file[g.Begin+4*int64(j):]); b != math.Float32bits(v) {
						t.Errorf("%q[%d]: bits %#x, want %#x", nt.Name, j, b, math.Float32bits(v))
					}
				}
			} else if nt.Data != nil && !bytes.Equal(file[g.Begin:g.End], nt.Data) {
				t.Errorf("%q: data differs", nt.Name)
			}
		}
		if at != int64(len(file)) {
			t.Errorf("tensors end at %d of %d bytes", at, len(file))
		}
	}
}

// TestWriteRefuses: each bad tensor is an *errs.InputError naming it, and
// neither the target nor a temporary file is left behind.
func TestWriteRefuses(t *testing.T) {
	f := []float32{1, 2}
	for _, tc := range []struct {
		name string
		ts   []NamedTensor
		want string // in the error
	}{
		{"duplicate name", []NamedTensor{Float32Tensor("w", []int64{2}, f), Float32Tensor("w", []int64{2}, f)}, `second tensor named "w"`},
		{"metadata name", []NamedTensor{Float32Tensor("__metadata__", []int64{2}, f)}, "__metadata__"},
		{"unknown dtype", []NamedTensor{{Name: "w", DType: "F12", Shape: []int64{1}, Data: []byte{0}}}, `"F12"`},
		{"too few values", []NamedTensor{Float32Tensor("w", []int64{3}, f)}, "3 float32 values"},
		{"too many bytes", []NamedTensor{{Name: "w", DType: I16, Shape: []int64{1}, Data: []byte{1, 2, 3}}}, "2 bytes for I16[1]"},
		{"negative dimension", []NamedTensor{Float32Tensor("w", []int64{-1}, f)}, "negative"},
		{"overflowing shape", []NamedTensor{{Name: "w", DType: U8, Shape: []int64{1 << 40, 1 << 40}, Data: nil}}, "fits in int64"},
		{"both values", []NamedTensor{{Name: "w", DType: F32, Shape: []int64{1}, Data: []byte{0, 0, 0, 0}, Float32: []float32{1}}}, "exactly one"},
		{"float32 as int", []NamedTensor{{Name: "w", DType: I32, Shape: []int64{2}, Float32: f}}, "F32, BF16 or F16"},
		{"invalid utf-8", []NamedTensor{Float32Tensor("w\xff", []int64{2}, f)}, "UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			err := Write(filepath.Join(dir, "x.safetensors"), tc.ts, nil)
			var ie *errs.InputError
			if !errors.As(err, &ie) || !errors.Is(err, errs.ErrInvalidInput) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an InputError saying %q", err, tc.want)
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("left %v behind", left)
			}
		})
	}
}

// TestWriteCancelledKeepsOld: a cancelled write leaves the file that was
// there untouched and no temporary file.
func TestWriteCancelledKeepsOld(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.safetensors")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := WriteContext(ctx, path, goldenTensors(), nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Errorf("the old file became %q", b)
	}
	if left, _ := os.ReadDir(dir); len(left) != 1 {
		t.Errorf("left %v", left)
	}
}
