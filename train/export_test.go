package train_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
	"github.com/tensorbridge/tensorbridge/train"
	"google.golang.org/protobuf/encoding/protowire"
)

// A minimal ONNX encoder for these tests, written from onnx.proto's field
// numbers (https://github.com/onnx/onnx/blob/main/onnx/onnx.proto) with
// protowire, independent of the code under test.

func pbVarint(b []byte, num protowire.Number, v int64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), uint64(v))
}

func pbBytes(b []byte, num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}

func pbString(b []byte, num protowire.Number, s string) []byte { return pbBytes(b, num, []byte(s)) }

// tensorProto encodes a TensorProto; exactly one of floatData, raw and ext
// (key/value pairs of external_data) is used.
func tensorProto(name string, dt onnxpb.DataType, dims []int64, floatData []float32, raw []byte, ext ...string) []byte {
	var b []byte
	for _, d := range dims {
		b = pbVarint(b, 1, d)
	}
	b = pbVarint(b, 2, int64(dt))
	if floatData != nil {
		var p []byte
		for _, f := range floatData {
			p = protowire.AppendFixed32(p, math.Float32bits(f))
		}
		b = pbBytes(b, 4, p)
	}
	b = pbString(b, 8, name)
	if raw != nil {
		b = pbBytes(b, 9, raw)
	}
	for i := 0; i+1 < len(ext); i += 2 {
		b = pbBytes(b, 13, pbString(pbString(nil, 1, ext[i]), 2, ext[i+1]))
	}
	if ext != nil {
		b = pbVarint(b, 14, 1) // EXTERNAL
	}
	b = pbString(b, 12, "doc of "+name) // a field after the payload, which must survive
	return b
}

func valueInfo(name string, dt onnxpb.DataType, dims ...int64) []byte {
	var shape []byte
	for _, d := range dims {
		shape = pbBytes(shape, 1, pbVarint(nil, 1, d))
	}
	tt := pbBytes(pbVarint(nil, 1, int64(dt)), 2, shape)
	return pbBytes(pbString(nil, 1, name), 2, pbBytes(nil, 1, tt))
}

func node(op string, in, out []string, attrs ...[]byte) []byte {
	var b []byte
	for _, s := range in {
		b = pbString(b, 1, s)
	}
	for _, s := range out {
		b = pbString(b, 2, s)
	}
	b = pbString(pbString(b, 3, op+"_0"), 4, op)
	for _, a := range attrs {
		b = pbBytes(b, 5, a)
	}
	return b
}

// model encodes an opset-17 ModelProto: y = x·W + B (x float [2,3]),
// h = Cast(H, float) for a float16 initializer H, plus a bfloat16
// initializer G that no node reads. inits are the encoded initializers.
func model(inits ...[]byte) []byte {
	var g []byte
	g = pbBytes(g, 1, node("MatMul", []string{"x", "W"}, []string{"xw"}))
	g = pbBytes(g, 1, node("Add", []string{"xw", "B"}, []string{"y"}))
	to := pbVarint(pbVarint(pbString(nil, 1, "to"), 3, int64(onnxpb.Float)), 20, 2) // AttributeProto INT
	g = pbBytes(g, 1, node("Cast", []string{"H"}, []string{"h"}, to))
	g = pbString(g, 2, "export-test")
	for _, in := range inits {
		g = pbBytes(g, 5, in)
	}
	g = pbBytes(g, 11, valueInfo("x", onnxpb.Float, 2, 3))
	g = pbBytes(g, 12, valueInfo("y", onnxpb.Float, 2, 2))
	g = pbBytes(g, 12, valueInfo("h", onnxpb.Float, 2))
	b := pbVarint(nil, 1, 8)
	b = pbString(b, 2, "tensorbridge-export-test")
	b = pbBytes(b, 7, g)
	b = pbBytes(b, 8, pbVarint(nil, 2, 17))
	return b
}

func f32raw(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

func u16raw(v ...uint16) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return b
}

func f32tensor(t *testing.T, dims []int, v ...float32) *ir.Tensor {
	t.Helper()
	x, err := ir.TensorFromBytes(ir.Float32, dims, f32raw(v...))
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// inlineModel: W in float_data, B in raw_data, H float16 and G bfloat16
// in raw_data.
func inlineModel(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "m.onnx")
	b := model(
		tensorProto("W", onnxpb.Float, []int64{3, 2}, []float32{0, 0, 0, 0, 0, 0}, nil),
		tensorProto("B", onnxpb.Float, []int64{2}, nil, f32raw(0, 0)),
		tensorProto("H", onnxpb.Float16, []int64{2}, nil, u16raw(0x3C00, 0x4000)),
		tensorProto("G", onnxpb.BFloat16, []int64{2}, nil, u16raw(0x3F80, 0x4000)),
	)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// initializerBytes re-reads an ONNX file with package onnxpb and returns
// its initializers as ir tensors' raw bytes, by name.
func initializerBytes(t *testing.T, path string) map[string][]byte {
	t.Helper()
	m, err := onnxpb.ReadModel(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for i := range m.Graph.Initializer {
		x, err := m.Graph.Initializer[i].ToIR()
		if err != nil {
			t.Fatal(err)
		}
		out[m.Graph.Initializer[i].Name], _ = ir.TensorBytes(x)
	}
	return out
}

// runModel runs the model on the cpu backend with x = [[1,0,1],[0,1,-1]].
func runModel(t *testing.T, path string) map[string][]float32 {
	t.Helper()
	ctx := context.Background()
	b, err := tensorbridge.Open(ctx, "cpu")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m, err := b.LoadModel(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	out, err := m.Run(ctx, map[string]*ir.Tensor{"x": f32tensor(t, []int{2, 3}, 1, 0, 1, 0, 1, -1)})
	if err != nil {
		t.Fatal(err)
	}
	res := map[string][]float32{}
	for name, v := range out {
		raw, _ := ir.TensorBytes(v)
		f := make([]float32, len(raw)/4)
		for i := range f {
			f[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		res[name] = f
	}
	return res
}

// The exported model holds the new values (converted to the initializers'
// dtypes, rounding to nearest even), re-reads bitwise, and runs on the cpu
// backend with them.
func TestExportInline(t *testing.T) {
	src := inlineModel(t)
	dst := filepath.Join(t.TempDir(), "out.onnx")
	weights := map[string]*ir.Tensor{
		"W": f32tensor(t, []int{3, 2}, 1, 2, 3, 4, 5, 6),
		"B": f32tensor(t, []int{2}, 0.5, -1),
		// float32 master weights into float16 and bfloat16 initializers.
		"H": f32tensor(t, []int{2}, 0.1, float32(1.0/3)),
		"G": f32tensor(t, []int{2}, 0.1, 1+1.0/256),
	}
	if err := train.ExportONNX(src, dst, weights); err != nil {
		t.Fatal(err)
	}
	got := initializerBytes(t, dst)
	want := map[string][]byte{
		"W": f32raw(1, 2, 3, 4, 5, 6),
		"B": f32raw(0.5, -1),
		// binary16 nearest to 0.1 is 0x2E66, to 1/3 is 0x3555.
		"H": u16raw(0x2E66, 0x3555),
		// bfloat16: 0.1f = 0x3DCCCCCD rounds up to 0x3DCD; 1+2^-8 =
		// 0x3F808000 is a tie and rounds to the even 0x3F80.
		"G": u16raw(0x3DCD, 0x3F80),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("exported initializers %x, want %x", got, want)
	}
	// Everything else is the source's: the doc strings after the payloads,
	// the nodes, the graph's inputs and outputs.
	sm, _ := onnxpb.ReadModel(src)
	dm, _ := onnxpb.ReadModel(dst)
	for i := range sm.Graph.Initializer {
		s, d := sm.Graph.Initializer[i], dm.Graph.Initializer[i]
		if s.Name != d.Name || s.DataType != d.DataType || !reflect.DeepEqual(s.Dims, d.Dims) || s.DocString != d.DocString {
			t.Errorf("initializer %d: %s %s %v %q became %s %s %v %q", i, s.Name, s.DataType, s.Dims, s.DocString, d.Name, d.DataType, d.Dims, d.DocString)
		}
	}
	if !reflect.DeepEqual(sm.Graph.Node, dm.Graph.Node) || !reflect.DeepEqual(sm.Graph.Input, dm.Graph.Input) ||
		!reflect.DeepEqual(sm.Graph.Output, dm.Graph.Output) || sm.ProducerName != dm.ProducerName {
		t.Error("the graph changed")
	}
	// y = x·W + B with x = [[1,0,1],[0,1,-1]]: [[1+5, 2+6], [3-5, 4-6]] + [0.5, -1].
	out := runModel(t, dst)
	if w := []float32{6.5, 7, -1.5, -3}; !reflect.DeepEqual(out["y"], w) {
		t.Errorf("y = %v, want %v", out["y"], w)
	}
	// h is the float16 values widened: 0x2E66 = 0.0999755859375, 0x3555 = 0.333251953125.
	if w := []float32{0.0999755859375, 0.333251953125}; !reflect.DeepEqual(out["h"], w) {
		t.Errorf("h = %v, want %v", out["h"], w)
	}
}

// Exporting raw_data initializers with their own values reproduces the
// source file byte for byte: nothing but the payloads is touched.
func TestExportKeepsBytes(t *testing.T) {
	src := inlineModel(t)
	dst := filepath.Join(t.TempDir(), "same.onnx")
	h, _ := ir.TensorFromBytes(ir.Float16, []int{2}, u16raw(0x3C00, 0x4000))
	err := train.ExportONNX(src, dst, map[string]*ir.Tensor{"B": f32tensor(t, []int{2}, 0, 0), "H": h})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(src)
	b, _ := os.ReadFile(dst)
	if !bytes.Equal(a, b) {
		t.Errorf("re-exporting the same values changed the file (%d -> %d bytes)", len(a), len(b))
	}
}

// A model with external data keeps it: the file is written beside the
// output under the same relative location, the updated tensor's bytes at
// its offset and every other byte (padding, B) unchanged; the .onnx
// itself does not change at all.
func TestExportExternal(t *testing.T) {
	srcDir := t.TempDir()
	os.Mkdir(filepath.Join(srcDir, "data"), 0o755)
	blob := make([]byte, 96)
	for i := range blob {
		blob[i] = byte(0xA0 + i)
	}
	copy(blob[16:], f32raw(0, 0, 0, 0, 0, 0))
	copy(blob[64:], f32raw(0.5, -1))
	if err := os.WriteFile(filepath.Join(srcDir, "data", "weights.bin"), blob, 0o644); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(srcDir, "m.onnx")
	mb := model(
		tensorProto("W", onnxpb.Float, []int64{3, 2}, nil, nil, "location", "data/weights.bin", "offset", "16", "length", "24"),
		tensorProto("B", onnxpb.Float, []int64{2}, nil, nil, "location", "data/weights.bin", "offset", "64", "length", "8"),
		tensorProto("H", onnxpb.Float16, []int64{2}, nil, u16raw(0x3C00, 0x4000)),
		tensorProto("G", onnxpb.BFloat16, []int64{2}, nil, u16raw(0x3F80, 0x4000)),
	)
	if err := os.WriteFile(src, mb, 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "out", "trained.onnx")
	os.Mkdir(filepath.Dir(dst), 0o755)
	if err := train.ExportONNX(src, dst, map[string]*ir.Tensor{"W": f32tensor(t, []int{3, 2}, 1, 2, 3, 4, 5, 6)}); err != nil {
		t.Fatal(err)
	}
	gotModel, _ := os.ReadFile(dst)
	if !bytes.Equal(gotModel, mb) {
		t.Error("the .onnx of an external-data model changed")
	}
	gotBlob, err := os.ReadFile(filepath.Join(filepath.Dir(dst), "data", "weights.bin"))
	if err != nil {
		t.Fatal(err)
	}
	wantBlob := append([]byte{}, blob...)
	copy(wantBlob[16:], f32raw(1, 2, 3, 4, 5, 6))
	if !bytes.Equal(gotBlob, wantBlob) {
		t.Errorf("external file %x, want %x", gotBlob, wantBlob)
	}
	if got := initializerBytes(t, dst); !bytes.Equal(got["W"], f32raw(1, 2, 3, 4, 5, 6)) || !bytes.Equal(got["B"], f32raw(0.5, -1)) {
		t.Errorf("re-read W %x B %x", got["W"], got["B"])
	}
	if out := runModel(t, dst); !reflect.DeepEqual(out["y"], []float32{6.5, 7, -1.5, -3}) {
		t.Errorf("y = %v", out["y"])
	}
	// The source is untouched, and exporting next to it is refused rather
	// than overwriting its external data.
	if b, _ := os.ReadFile(filepath.Join(srcDir, "data", "weights.bin")); !bytes.Equal(b, blob) {
		t.Error("the source's external data changed")
	}
	err = train.ExportONNX(src, filepath.Join(srcDir, "trained.onnx"), map[string]*ir.Tensor{"W": f32tensor(t, []int{3, 2}, 1, 2, 3, 4, 5, 6)})
	if err == nil || !strings.Contains(err.Error(), "another directory") {
		t.Errorf("export beside the source: %v", err)
	}
}

func TestExportErrors(t *testing.T) {
	src := inlineModel(t)
	out := filepath.Join(t.TempDir(), "out.onnx")
	i64, _ := ir.TensorFromBytes(ir.Int64, []int{2}, make([]byte, 16))
	for _, c := range []struct {
		name    string
		dst     string
		weights map[string]*ir.Tensor
		want    []string
		invalid bool
	}{
		{"unknown name", out, map[string]*ir.Tensor{"W2": f32tensor(t, []int{1}, 0)}, []string{`"W2"`, "not an initializer"}, true},
		{"dims", out, map[string]*ir.Tensor{"W": f32tensor(t, []int{2, 3}, 1, 2, 3, 4, 5, 6)}, []string{`"W"`, "[2 3]", "[3 2]"}, true},
		{"dtype", out, map[string]*ir.Tensor{"B": i64}, []string{`"B"`, "Int64", "cannot be converted"}, true},
		{"unwritable", filepath.Join(t.TempDir(), "missing", "out.onnx"), map[string]*ir.Tensor{"B": f32tensor(t, []int{2}, 1, 2)}, []string{"cannot write", "missing/out.onnx"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := train.ExportONNX(src, c.dst, c.weights)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if c.invalid && !errors.Is(err, errs.ErrInvalidInput) {
				t.Errorf("%v does not wrap ErrInvalidInput", err)
			}
			if _, err := os.Stat(c.dst); err == nil {
				t.Error("a failed export left the output file")
			}
		})
	}
	if err := train.ExportONNX(filepath.Join(t.TempDir(), "none.onnx"), out, nil); err == nil {
		t.Error("a missing source exports")
	}
}
