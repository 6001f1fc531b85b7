package onnxpb

import (
	"crypto/sha1"
	"encoding/hex"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/tensorbridge/tensorbridge/ir"
)

func f16s(bits ...uint16) []ir.Float16Value {
	out := make([]ir.Float16Value, len(bits))
	for i, b := range bits {
		out[i] = ir.Float16Value(b)
	}
	return out
}

func bf16s(bits ...uint16) []ir.BFloat16Value {
	out := make([]ir.BFloat16Value, len(bits))
	for i, b := range bits {
		out[i] = ir.BFloat16Value(b)
	}
	return out
}

// TestTensorValues checks payload decoding against bit patterns taken from
// the format specifications (IEEE 754 binary16/32/64, bfloat16 = upper half
// of binary32, onnx.proto's packing rules for 4- and 2-bit types).
func TestTensorValues(t *testing.T) {
	cases := []struct {
		name string
		t    Tensor
		want any
	}{
		{"float raw", Tensor{Dims: []int64{2}, DataType: Float, RawData: []byte{0, 0, 0x80, 0x3f, 0, 0, 0x20, 0xc0}},
			[]float32{1, -2.5}},
		{"float typed", Tensor{Dims: []int64{2, 1}, DataType: Float, FloatData: []float32{1, -2.5}}, []float32{1, -2.5}},
		{"scalar", Tensor{DataType: Float, FloatData: []float32{3}}, []float32{3}},
		{"empty", Tensor{Dims: []int64{0, 3}, DataType: Float}, []float32{}},
		{"double raw", Tensor{Dims: []int64{1}, DataType: Double, RawData: []byte{0, 0, 0, 0, 0, 0, 0xf0, 0xbf}},
			[]float64{-1}},
		{"double typed", Tensor{Dims: []int64{2}, DataType: Double, DoubleData: []float64{0.1, 2}}, []float64{0.1, 2}},
		// binary16: 0x3C00 = 1, 0xC000 = -2, 0x7C00 = +Inf, 0x0001 = 2^-24.
		{"float16 raw", Tensor{Dims: []int64{4}, DataType: Float16,
			RawData: []byte{0x00, 0x3c, 0x00, 0xc0, 0x00, 0x7c, 0x01, 0x00}}, f16s(0x3c00, 0xc000, 0x7c00, 0x0001)},
		{"float16 int32_data", Tensor{Dims: []int64{2}, DataType: Float16, Int32Data: []int32{0x3c00, 0xc000}},
			f16s(0x3c00, 0xc000)},
		{"float16 int32_data sign-extended", Tensor{Dims: []int64{1}, DataType: Float16, Int32Data: []int32{-16384}},
			f16s(0xc000)},
		// bfloat16: 0x3F80 = 1, 0xC040 = -3, 0x7F80 = +Inf, 0xFFC0 = -NaN.
		{"bfloat16 raw", Tensor{Dims: []int64{4}, DataType: BFloat16,
			RawData: []byte{0x80, 0x3f, 0x40, 0xc0, 0x80, 0x7f, 0xc0, 0xff}}, bf16s(0x3f80, 0xc040, 0x7f80, 0xffc0)},
		{"bfloat16 int32_data", Tensor{Dims: []int64{2}, DataType: BFloat16, Int32Data: []int32{0x3f80, 0xc040}},
			bf16s(0x3f80, 0xc040)},
		{"bool raw", Tensor{Dims: []int64{3}, DataType: Bool, RawData: []byte{1, 0, 1}}, []bool{true, false, true}},
		{"bool int32_data", Tensor{Dims: []int64{2}, DataType: Bool, Int32Data: []int32{0, 1}}, []bool{false, true}},
		{"int8 raw", Tensor{Dims: []int64{2}, DataType: Int8, RawData: []byte{0x80, 0x7f}}, []int8{-128, 127}},
		{"int8 int32_data", Tensor{Dims: []int64{2}, DataType: Int8, Int32Data: []int32{-128, 127}}, []int8{-128, 127}},
		{"uint8 int32_data", Tensor{Dims: []int64{2}, DataType: Uint8, Int32Data: []int32{0, 255}}, []uint8{0, 255}},
		{"int16 raw", Tensor{Dims: []int64{1}, DataType: Int16, RawData: []byte{0xfe, 0xff}}, []int16{-2}},
		{"uint16 int32_data", Tensor{Dims: []int64{1}, DataType: Uint16, Int32Data: []int32{65535}}, []uint16{65535}},
		{"int32 raw", Tensor{Dims: []int64{1}, DataType: Int32, RawData: []byte{0xff, 0xff, 0xff, 0x7f}},
			[]int32{math.MaxInt32}},
		{"uint32 raw", Tensor{Dims: []int64{1}, DataType: Uint32, RawData: []byte{0xff, 0xff, 0xff, 0xff}},
			[]uint32{math.MaxUint32}},
		{"uint32 uint64_data", Tensor{Dims: []int64{1}, DataType: Uint32, Uint64Data: []uint64{7}}, []uint32{7}},
		{"int64 raw", Tensor{Dims: []int64{1}, DataType: Int64, RawData: []byte{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff,
			0xff, 0xff}}, []int64{-2}},
		{"uint64 typed", Tensor{Dims: []int64{1}, DataType: Uint64, Uint64Data: []uint64{math.MaxUint64}},
			[]uint64{math.MaxUint64}},
		{"complex64 typed", Tensor{Dims: []int64{2}, DataType: Complex64, FloatData: []float32{1, 2, 3, 4}},
			[]complex64{1 + 2i, 3 + 4i}},
		{"complex128 raw", Tensor{Dims: []int64{1}, DataType: Complex128, RawData: []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f,
			0, 0, 0, 0, 0, 0, 0, 0xc0}}, []complex128{1 - 2i}},
		{"string", Tensor{Dims: []int64{2}, DataType: String, StringData: [][]byte{[]byte("a"), []byte("")}},
			[][]byte{[]byte("a"), []byte("")}},
		// 4-bit: first element in the low nibble. 0x21 -> 1, 2; 0xF8 -> 8, 15; 0x07 -> 7 (pad).
		{"int4 raw", Tensor{Dims: []int64{5}, DataType: Int4, RawData: []byte{0x21, 0xf8, 0x07}},
			[]int8{1, 2, -8, -1, 7}},
		{"uint4 raw", Tensor{Dims: []int64{5}, DataType: Uint4, RawData: []byte{0x21, 0xf8, 0x07}},
			[]uint8{1, 2, 8, 15, 7}},
		{"int4 int32_data", Tensor{Dims: []int64{1, 4}, DataType: Int4, Int32Data: []int32{0x21, 0xf8}},
			[]int8{1, 2, -8, -1}},
		// 2-bit: 0xE4 = 0b11_10_01_00 -> 0, 1, 2, 3 from the low bits up.
		{"int2 raw", Tensor{Dims: []int64{5}, DataType: Int2, RawData: []byte{0xe4, 0x03}}, []int8{0, 1, -2, -1, -1}},
		{"uint2 raw", Tensor{Dims: []int64{5}, DataType: Uint2, RawData: []byte{0xe4, 0x03}}, []uint8{0, 1, 2, 3, 3}},
		// OCP MX FP4 (E2M1) code points 0..15.
		{"float4e2m1", Tensor{Dims: []int64{16}, DataType: Float4E2M1,
			RawData: []byte{0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe}},
			[]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6, float32(math.Copysign(0, -1)), -0.5, -1, -1.5, -2, -3, -4, -6}},
		// FP8 values from the OCP 8-bit float spec and the FNUZ paper:
		// E4M3FN max 0x7E = 448, min subnormal 0x01 = 2^-9, 0x38 = 1;
		{"float8e4m3fn", Tensor{Dims: []int64{4}, DataType: Float8E4M3FN, RawData: []byte{0x7e, 0x01, 0x38, 0xb8}},
			[]float32{448, 0x1p-9, 1, -1}},
		// E4M3FNUZ max 0x7F = 240, min subnormal 2^-10, 0x40 = 1;
		{"float8e4m3fnuz", Tensor{Dims: []int64{3}, DataType: Float8E4M3FNUZ, Int32Data: []int32{0x7f, 0x01, 0x40}},
			[]float32{240, 0x1p-10, 1}},
		// E5M2 max 0x7B = 57344, 0x7C = +Inf, min subnormal 2^-16, 0x3C = 1;
		{"float8e5m2", Tensor{Dims: []int64{4}, DataType: Float8E5M2, RawData: []byte{0x7b, 0xfc, 0x01, 0x3c}},
			[]float32{57344, float32(math.Inf(-1)), 0x1p-16, 1}},
		// E5M2FNUZ max 0x7F = 57344, min subnormal 2^-17, 0x40 = 1;
		{"float8e5m2fnuz", Tensor{Dims: []int64{3}, DataType: Float8E5M2FNUZ, RawData: []byte{0x7f, 0x01, 0x40}},
			[]float32{57344, 0x1p-17, 1}},
		// E8M0: 127 = 1, 0 = 2^-127, 254 = 2^127.
		{"float8e8m0", Tensor{Dims: []int64{3}, DataType: Float8E8M0, RawData: []byte{127, 0, 254}},
			[]float32{1, 0x1p-127, 0x1p127}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.t.Values()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestFloat8NaN(t *testing.T) {
	nans := []struct {
		dt DataType
		b  uint8
	}{{Float8E4M3FN, 0x7f}, {Float8E4M3FN, 0xff}, {Float8E4M3FNUZ, 0x80}, {Float8E5M2, 0x7d}, {Float8E5M2, 0xff},
		{Float8E5M2FNUZ, 0x80}, {Float8E8M0, 0xff}}
	for _, c := range nans {
		if v := DecodeFloat8(c.dt, c.b); !math.IsNaN(float64(v)) {
			t.Errorf("%s 0x%02x = %v, want NaN", c.dt, c.b, v)
		}
	}
	if v := DecodeFloat8(Float8E4M3FNUZ, 0x00); v != 0 || math.Signbit(float64(v)) {
		t.Errorf("E4M3FNUZ 0 = %v", v)
	}
}

func TestTensorValuesErrors(t *testing.T) {
	cases := []struct {
		name     string
		t        Tensor
		sentinel error
		msg      string
	}{
		{"raw too short", Tensor{Name: "w", Dims: []int64{2}, DataType: Float, RawData: make([]byte, 7)}, ErrInvalidTensor,
			`onnxpb: tensor "w" (FLOAT [2]): payload has 7 bytes, want 8 (2 elements of 32 bits)`},
		{"raw int4 odd", Tensor{Dims: []int64{3}, DataType: Int4, RawData: make([]byte, 1)}, ErrInvalidTensor,
			"payload has 1 bytes, want 2 (3 elements of 4 bits)"},
		{"typed count", Tensor{Dims: []int64{2, 2}, DataType: Float, FloatData: []float32{1, 2, 3}}, ErrInvalidTensor,
			"float_data has 3 entries, want 4 for 4 elements"},
		{"missing payload", Tensor{Dims: []int64{2}, DataType: Int64}, ErrInvalidTensor,
			"int64_data has 0 entries, want 2 for 2 elements"},
		{"wrong field", Tensor{Dims: []int64{2}, DataType: Float, Int64Data: []int64{1, 2}}, ErrInvalidTensor,
			"payload is in int64_data (2 entries), but FLOAT tensors use float_data or raw_data"},
		{"raw and typed", Tensor{Dims: []int64{1}, DataType: Float, RawData: make([]byte, 4), FloatData: []float32{1}},
			ErrInvalidTensor, "both raw/external data and float_data are set"},
		{"negative dim", Tensor{Dims: []int64{2, -1}, DataType: Float}, ErrInvalidTensor, "dims[1] is negative (-1)"},
		{"huge dims", Tensor{Dims: []int64{1 << 40, 1 << 40}, DataType: Float, RawData: []byte{}}, ErrTooLarge,
			"more than 2^58 elements"},
		{"segment", Tensor{Dims: []int64{1}, DataType: Float, Segment: &Segment{0, 1}}, ErrUnsupported, "segmented"},
		{"unknown type", Tensor{Dims: []int64{1}, DataType: 99}, ErrUnsupported, "unknown data_type 99"},
		{"undefined type", Tensor{Dims: []int64{1}}, ErrUnsupported, "unknown data_type 0"},
		{"int8 range", Tensor{Dims: []int64{1}, DataType: Int8, Int32Data: []int32{200}}, ErrInvalidTensor,
			"int32_data[0] = 200 is out of range [-128, 127] for INT8"},
		{"bool range", Tensor{Dims: []int64{1}, DataType: Bool, Int32Data: []int32{2}}, ErrInvalidTensor,
			"int32_data[0] = 2 is out of range [0, 1] for BOOL"},
		{"uint32 range", Tensor{Dims: []int64{1}, DataType: Uint32, Uint64Data: []uint64{1 << 32}}, ErrInvalidTensor,
			"uint64_data[0] = 4294967296 is out of range for UINT32"},
		{"string raw", Tensor{Dims: []int64{1}, DataType: String, RawData: []byte("x")}, ErrInvalidTensor,
			"STRING tensors must use string_data"},
		{"bad location", Tensor{Dims: []int64{1}, DataType: Float, DataLocation: 5, RawData: make([]byte, 4)},
			ErrInvalidTensor, "unknown data_location 5"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.t.Values()
			wantErr(t, err, c.sentinel, c.msg)
		})
	}
}

func flatOf(t *testing.T, x *ir.Tensor) any {
	t.Helper()
	var out any
	if err := x.ConstFlatData(func(flat any) { out = reflect.ValueOf(flat).Interface() }); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestToIR(t *testing.T) {
	cases := []struct {
		name  string
		t     Tensor
		dtype ir.DType
		dims  []int
		flat  any
	}{
		{"float raw (fast path)", Tensor{Dims: []int64{2, 1}, DataType: Float,
			RawData: []byte{0, 0, 0x80, 0x3f, 0, 0, 0x20, 0xc0}}, ir.Float32, []int{2, 1}, []float32{1, -2.5}},
		{"float16 raw (fast path)", Tensor{Dims: []int64{2}, DataType: Float16, RawData: []byte{0, 0x3c, 0, 0xc0}},
			ir.Float16, []int{2}, f16s(0x3c00, 0xc000)},
		{"bfloat16 typed", Tensor{Dims: []int64{1}, DataType: BFloat16, Int32Data: []int32{0x3f80}},
			ir.BFloat16, []int{1}, bf16s(0x3f80)},
		{"bool raw", Tensor{Dims: []int64{2}, DataType: Bool, RawData: []byte{1, 0}}, ir.Bool, []int{2},
			[]bool{true, false}},
		{"int64 scalar", Tensor{DataType: Int64, Int64Data: []int64{-5}}, ir.Int64, []int{}, []int64{-5}},
		{"uint32", Tensor{Dims: []int64{1}, DataType: Uint32, Uint64Data: []uint64{9}}, ir.Uint32, []int{1}, []uint32{9}},
		{"int4 widened", Tensor{Dims: []int64{2}, DataType: Int4, RawData: []byte{0xf1}}, ir.Int8, []int{2},
			[]int8{1, -1}},
		{"uint4 widened", Tensor{Dims: []int64{2}, DataType: Uint4, RawData: []byte{0xf1}}, ir.Uint8, []int{2},
			[]uint8{1, 15}},
		{"float8 widened", Tensor{Dims: []int64{1}, DataType: Float8E4M3FN, RawData: []byte{0x7e}}, ir.Float32,
			[]int{1}, []float32{448}},
		{"complex64", Tensor{Dims: []int64{1}, DataType: Complex64, FloatData: []float32{1, 2}}, ir.Complex64,
			[]int{1}, []complex64{1 + 2i}},
		{"double", Tensor{Dims: []int64{1}, DataType: Double, DoubleData: []float64{0.25}}, ir.Float64, []int{1},
			[]float64{0.25}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x, err := c.t.ToIR()
			if err != nil {
				t.Fatal(err)
			}
			if x.DType() != c.dtype || !reflect.DeepEqual(append([]int{}, x.Shape().Dimensions...), c.dims) {
				t.Errorf("shape %s, want %s %v", x.Shape(), c.dtype, c.dims)
			}
			if got := flatOf(t, x); !reflect.DeepEqual(got, c.flat) {
				t.Errorf("flat %v, want %v", got, c.flat)
			}
		})
	}
	// Zero-size tensors convert without touching the (empty) data.
	x, err := (&Tensor{Dims: []int64{0, 4}, DataType: Float, RawData: []byte{}}).ToIR()
	if err != nil || x.Shape().Size() != 0 || x.Rank() != 2 {
		t.Errorf("zero-size: %v %v", x, err)
	}
	_, err = (&Tensor{Name: "s", Dims: []int64{1}, DataType: String, StringData: [][]byte{[]byte("a")}}).ToIR()
	wantErr(t, err, ErrUnsupported, `tensor "s"`, "STRING tensors cannot be converted")
	_, err = (&Tensor{Dims: []int64{3}, DataType: Float, RawData: make([]byte, 8)}).ToIR()
	wantErr(t, err, ErrInvalidTensor, "payload has 8 bytes, want 12")
}

func TestExternalData(t *testing.T) {
	dir := t.TempDir()
	payload := make([]byte, 4096+8)
	copy(payload[4096:], []byte{0, 0, 0x80, 0x3f, 0, 0, 0x20, 0xc0}) // 1, -2.5
	if err := os.WriteFile(filepath.Join(dir, "w.bin"), payload, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "x.bin"), payload[4096:], 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(payload)
	ext := func(kv ...string) Tensor {
		tn := Tensor{Name: "w", Dims: []int64{2}, DataType: Float, DataLocation: LocationExternal, BaseDir: dir}
		for i := 0; i < len(kv); i += 2 {
			tn.ExternalData = append(tn.ExternalData, StringStringEntry{kv[i], kv[i+1]})
		}
		return tn
	}
	ok := []Tensor{
		ext("location", "w.bin", "offset", "4096", "length", "8"),
		ext("location", "w.bin", "offset", "4096"),
		ext("location", "sub/x.bin"),
		ext("location", "w.bin", "offset", "4096", "length", "8", "checksum", hex.EncodeToString(sum[:])),
		ext("location", "w.bin", "offset", "4096", "other_key", "ignored"),
	}
	for i, tn := range ok {
		v, err := tn.Values()
		if err != nil {
			t.Errorf("case %d: %v", i, err)
			continue
		}
		if !reflect.DeepEqual(v, []float32{1, -2.5}) {
			t.Errorf("case %d: got %v", i, v)
		}
		x, err := tn.ToIR()
		if err != nil || !reflect.DeepEqual(flatOf(t, x), []float32{1, -2.5}) {
			t.Errorf("case %d ToIR: %v", i, err)
		}
	}
	bad := []struct {
		t   Tensor
		msg string
	}{
		{ext("location", "missing.bin"), "cannot open external data file " + filepath.Join(dir, "missing.bin")},
		{ext("location", "w.bin", "offset", "5000"), "external data offset 5000 is past the end of " +
			filepath.Join(dir, "w.bin") + " (4104 bytes)"},
		{ext("location", "w.bin", "offset", "4100", "length", "8"), "offset 4100 + length 8 runs past the end"},
		{ext("location", "w.bin", "length", "8"), "payload has 8 bytes"}, // wrong region: 8 bytes but... fine size
		{ext("location", "w.bin", "offset", "4096", "length", "4"), "payload has 4 bytes, want 8"},
		{ext("location", "../w.bin"), `location "../w.bin" is absolute or leaves the model directory`},
		{ext("location", "/etc/passwd"), "is absolute or leaves the model directory"},
		{ext("offset", "0"), "external_data has no location"},
		{ext("location", "w.bin", "offset", "-1"), `external_data offset "-1" is not a non-negative integer`},
		{ext("location", "w.bin", "checksum", "abc"), "is not a 40-hex-digit SHA-1 digest"},
		{ext("location", "w.bin", "offset", "4096", "checksum", "0000000000000000000000000000000000000000"),
			"has SHA-1 " + hex.EncodeToString(sum[:])},
	}
	for _, c := range bad {
		_, err := c.t.Values()
		if c.msg == "payload has 8 bytes" {
			// length 8 at offset 0 is the right size: it decodes (to zeros).
			if err != nil {
				t.Errorf("%v: %v", c.t.ExternalData, err)
			}
			continue
		}
		sentinel := ErrExternalData
		if c.msg == "payload has 4 bytes, want 8" {
			sentinel = ErrInvalidTensor
		}
		wantErr(t, err, sentinel, c.msg)
	}
	// External and raw data together is contradictory.
	both := ext("location", "w.bin")
	both.RawData = make([]byte, 8)
	_, err := both.Values()
	wantErr(t, err, ErrInvalidTensor, "EXTERNAL but raw_data is also set")

	// ReadModel resolves locations against the model file's directory.
	model := cat(fInt(1, 8), fMsg(8, fInt(2, 13)), fMsg(7, fStr(2, "g"),
		fMsg(5, fStr(8, "w"), packedVarints(1, 2), fInt(2, int64(Float)), fInt(14, 1),
			fMsg(13, fStr(1, "location"), fStr(2, "w.bin")), fMsg(13, fStr(1, "offset"), fStr(2, "4096"))),
		fMsg(1, fStr(4, "If"), fMsg(5, fStr(1, "then_branch"), fInt(20, 5), fMsg(6,
			fMsg(5, fStr(8, "inner"), fInt(2, int64(Float)), fInt(14, 1),
				fMsg(13, fStr(1, "location"), fStr(2, "sub/x.bin"))))))))
	path := filepath.Join(dir, "model.onnx")
	if err := os.WriteFile(path, model, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir()) // make sure nothing resolves against the working directory
	m, err := ReadModel(path)
	if err != nil {
		t.Fatal(err)
	}
	if m.Dir != dir {
		t.Errorf("Dir %q, want %q", m.Dir, dir)
	}
	v, err := m.Graph.Initializer[0].Values()
	if err != nil || !reflect.DeepEqual(v, []float32{1, -2.5}) {
		t.Errorf("initializer via ReadModel: %v %v", v, err)
	}
	inner := m.Graph.Node[0].Attribute[0].G.Initializer[0]
	inner.Dims = []int64{2}
	if v, err := inner.Values(); err != nil || !reflect.DeepEqual(v, []float32{1, -2.5}) {
		t.Errorf("subgraph initializer: %v %v", v, err)
	}
}
