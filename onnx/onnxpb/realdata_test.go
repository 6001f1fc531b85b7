package onnxpb

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tensorbridge/tensorbridge/ir"
)

// TestRealTestData decodes every model and every test value of the Debian
// libonnx-testdata package and checks each value against the type and
// static shape the model declares for it: two different messages decoded
// independently must agree.
func TestRealTestData(t *testing.T) {
	root := testdataRoot(t)
	for _, dir := range []string{"node", "pytorch-converted", "pytorch-operator", "simple"} {
		t.Run(dir, func(t *testing.T) {
			models, err := filepath.Glob(filepath.Join(root, "data", dir, "*", "model.onnx"))
			if err != nil || len(models) == 0 {
				t.Fatalf("no models under %s (%v)", filepath.Join(root, "data", dir), err)
			}
			values := 0
			for _, path := range models {
				values += checkCase(t, path)
			}
			t.Logf("%s: %d models, %d test values", dir, len(models), values)
		})
	}
}

// knownBadTestData lists cases of ONNX 1.12's test data whose values
// disagree with their model's declared types (fixed in later ONNX releases):
// BFLOAT16 values stored as UINT16 tensors, and CastLike "like" inputs of
// rank 1 declared as rank 2.
var knownBadTestData = map[string]bool{
	"test_cast_BFLOAT16_to_FLOAT":              true,
	"test_cast_FLOAT_to_BFLOAT16":              true,
	"test_castlike_BFLOAT16_to_FLOAT":          true,
	"test_castlike_BFLOAT16_to_FLOAT_expanded": true,
	"test_castlike_FLOAT_to_BFLOAT16":          true,
	"test_castlike_FLOAT_to_BFLOAT16_expanded": true,
}

func checkCase(t *testing.T, path string) int {
	m, err := ReadModel(path)
	if err != nil {
		t.Errorf("%v", err)
		return 0
	}
	if m.Graph == nil || len(m.Graph.Node) == 0 || len(m.OpsetImport) == 0 {
		t.Errorf("%s: graph %v, opsets %v", path, m.Graph != nil, m.OpsetImport)
		return 0
	}
	for i := range m.Graph.Initializer {
		if _, err := m.Graph.Initializer[i].Values(); err != nil {
			t.Errorf("%s: initializer %d: %v", path, i, err)
		}
	}
	inits := map[string]bool{}
	for _, in := range m.Graph.Initializer {
		inits[in.Name] = true
	}
	var inputs []ValueInfo
	for _, in := range m.Graph.Input {
		if !inits[in.Name] {
			inputs = append(inputs, in)
		}
	}
	n := 0
	sets, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "test_data_set_*"))
	for _, set := range sets {
		for _, kind := range []struct {
			prefix string
			infos  []ValueInfo
		}{{"input", inputs}, {"output", m.Graph.Output}} {
			files, _ := filepath.Glob(filepath.Join(set, kind.prefix+"_*.pb"))
			for _, f := range files {
				var idx int
				if _, err := fmt.Sscanf(filepath.Base(f), kind.prefix+"_%d.pb", &idx); err != nil || idx >= len(kind.infos) {
					t.Errorf("%s: no graph %s for it (%d declared)", f, kind.prefix, len(kind.infos))
					continue
				}
				v, err := ReadValue(f, kind.infos[idx].Type)
				if err != nil {
					t.Errorf("%v", err)
					continue
				}
				if knownBadTestData[filepath.Base(filepath.Dir(path))] {
					// Decode and read the payload, but skip the type check.
					err = checkValue(v, nil)
				} else {
					err = checkValue(v, kind.infos[idx].Type)
				}
				if err != nil {
					t.Errorf("%s (%s): %v", f, kind.infos[idx].Name, err)
				}
				n++
			}
		}
	}
	return n
}

// checkValue verifies a decoded test value against its declared type.
func checkValue(v any, typ *TypeProto) error {
	switch v := v.(type) {
	case *Tensor:
		vals, err := v.Values()
		if err != nil {
			return err
		}
		if got := int64(reflect.ValueOf(vals).Len()); true {
			want, _ := v.NumElements()
			if got != want {
				return fmt.Errorf("%d values for dims %v", got, v.Dims)
			}
		}
		if typ == nil || typ.TensorType == nil {
			return nil
		}
		tt := typ.TensorType
		if tt.ElemType != v.DataType {
			return fmt.Errorf("data_type %s, declared %s", v.DataType, tt.ElemType)
		}
		if tt.Shape != nil {
			if len(tt.Shape.Dim) != len(v.Dims) {
				return fmt.Errorf("rank %d (dims %v), declared rank %d", len(v.Dims), v.Dims, len(tt.Shape.Dim))
			}
			for i, d := range tt.Shape.Dim {
				if d.HasDimValue && d.DimValue != v.Dims[i] {
					return fmt.Errorf("dims %v, declared dim %d = %d", v.Dims, i, d.DimValue)
				}
			}
		}
		if _, err := v.ToIR(); err != nil && !(v.DataType == String && errors.Is(err, ErrUnsupported)) {
			return err
		}
	case *Sequence:
		if typ == nil || typ.SequenceType == nil {
			return fmt.Errorf("sequence value for type %+v", typ)
		}
		for i := range v.TensorValues {
			if err := checkValue(&v.TensorValues[i], typ.SequenceType.ElemType); err != nil {
				return fmt.Errorf("tensor_values[%d]: %w", i, err)
			}
		}
	case *Optional:
		if typ == nil || typ.OptionalType == nil {
			return fmt.Errorf("optional value for type %+v", typ)
		}
		switch {
		case v.TensorValue != nil:
			return checkValue(v.TensorValue, typ.OptionalType.ElemType)
		case v.SequenceValue != nil:
			return checkValue(v.SequenceValue, typ.OptionalType.ElemType)
		}
	}
	return nil
}

func readCase(t *testing.T, name string) (*Model, []*Tensor, []*Tensor) {
	t.Helper()
	dir := filepath.Join(testdataRoot(t), "data", "node", name)
	m, err := ReadModel(filepath.Join(dir, "model.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	read := func(prefix string) []*Tensor {
		var out []*Tensor
		for i := 0; ; i++ {
			p := filepath.Join(dir, "test_data_set_0", fmt.Sprintf("%s_%d.pb", prefix, i))
			if _, err := os.Stat(p); err != nil {
				return out
			}
			tn, err := ReadTensor(p)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, tn)
		}
	}
	return m, read("input"), read("output")
}

func mustF32(t *testing.T, tn *Tensor) []float32 {
	t.Helper()
	v, err := tn.Values()
	if err != nil {
		t.Fatal(err)
	}
	f, ok := v.([]float32)
	if !ok {
		t.Fatalf("got %T, want []float32", v)
	}
	return f
}

// TestRealElementwise checks decoded inputs and outputs of ONNX's backend
// tests against the operator's definition, computed exactly here: an
// independent check of payload decoding for FLOAT, FLOAT16 and BOOL data.
func TestRealElementwise(t *testing.T) {
	unary := map[string]func(float32) float32{
		"test_abs":  func(x float32) float32 { return float32(math.Abs(float64(x))) },
		"test_neg":  func(x float32) float32 { return -x },
		"test_relu": func(x float32) float32 { return max(x, 0) },
	}
	for name, fn := range unary {
		t.Run(name, func(t *testing.T) {
			m, in, out := readCase(t, name)
			if len(in) != 1 || len(out) != 1 {
				t.Fatalf("%d inputs, %d outputs", len(in), len(out))
			}
			// onnx/backend/test/case/node: x = np.random.randn(3, 4, 5).astype(np.float32)
			if !reflect.DeepEqual(in[0].Dims, []int64{3, 4, 5}) || in[0].DataType != Float {
				t.Errorf("input %s %v, want FLOAT [3 4 5]", in[0].DataType, in[0].Dims)
			}
			if len(m.Graph.Node) != 1 || !strings.EqualFold(m.Graph.Node[0].OpType, strings.TrimPrefix(name, "test_")) {
				t.Errorf("nodes %+v", m.Graph.Node)
			}
			x, y := mustF32(t, in[0]), mustF32(t, out[0])
			for i := range x {
				if math.Float32bits(fn(x[i])) != math.Float32bits(y[i]) && !(x[i] == 0 && y[i] == 0) {
					t.Fatalf("element %d: f(%v) = %v, file says %v", i, x[i], fn(x[i]), y[i])
				}
			}
		})
	}
	for name, fn := range map[string]func(a, b float32) float32{
		"test_add": func(a, b float32) float32 { return a + b },
		"test_mul": func(a, b float32) float32 { return a * b },
	} {
		t.Run(name, func(t *testing.T) {
			_, in, out := readCase(t, name)
			a, b, c := mustF32(t, in[0]), mustF32(t, in[1]), mustF32(t, out[0])
			if len(a) != 60 || len(b) != 60 || len(c) != 60 {
				t.Fatalf("lengths %d %d %d, want 60", len(a), len(b), len(c))
			}
			for i := range a {
				if fn(a[i], b[i]) != c[i] {
					t.Fatalf("element %d: %v op %v = %v, file says %v", i, a[i], b[i], fn(a[i], b[i]), c[i])
				}
			}
		})
	}
	t.Run("test_cast_FLOAT16_to_FLOAT", func(t *testing.T) {
		m, in, out := readCase(t, "test_cast_FLOAT16_to_FLOAT")
		if a := m.Graph.Node[0].Attribute; len(a) != 1 || a[0].Name != "to" || a[0].Type != AttrInt || a[0].I != int64(Float) {
			t.Errorf("attributes %+v, want to=FLOAT", a)
		}
		v, err := in[0].Values()
		if err != nil {
			t.Fatal(err)
		}
		h := v.([]ir.Float16Value)
		y := mustF32(t, out[0])
		for i := range h {
			want := h[i].Float32() // binary16 -> binary32 is exact
			if math.Float32bits(want) != math.Float32bits(y[i]) && !(math.IsNaN(float64(want)) && math.IsNaN(float64(y[i]))) {
				t.Fatalf("element %d: float16 bits 0x%04x -> %v, file says %v", i, uint16(h[i]), want, y[i])
			}
		}
	})
	t.Run("test_not_2d", func(t *testing.T) {
		_, in, out := readCase(t, "test_not_2d")
		x, err1 := in[0].Values()
		y, err2 := out[0].Values()
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		xb, yb := x.([]bool), y.([]bool)
		trues := 0
		for i := range xb {
			if xb[i] == yb[i] {
				t.Fatalf("element %d: not %v = %v", i, xb[i], yb[i])
			}
			if xb[i] {
				trues++
			}
		}
		if trues == 0 || trues == len(xb) {
			t.Errorf("degenerate input: %d of %d true", trues, len(xb))
		}
	})
}

// TestRealConv checks attribute decoding and payloads of
// test_conv_with_strides_padding against a direct convolution.
func TestRealConv(t *testing.T) {
	m, in, out := readCase(t, "test_conv_with_strides_padding")
	nd := m.Graph.Node[0]
	attrs := map[string][]int64{}
	for _, a := range nd.Attribute {
		if a.Type != AttrInts {
			t.Errorf("attribute %s type %s", a.Name, a.Type)
		}
		attrs[a.Name] = a.Ints
	}
	// From onnx/backend/test/case/node/conv.py.
	want := map[string][]int64{"kernel_shape": {3, 3}, "pads": {1, 1, 1, 1}, "strides": {2, 2}}
	if nd.OpType != "Conv" || !reflect.DeepEqual(attrs, want) {
		t.Fatalf("node %s attrs %v, want Conv %v", nd.OpType, attrs, want)
	}
	x, w, y := mustF32(t, in[0]), mustF32(t, in[1]), mustF32(t, out[0])
	if !reflect.DeepEqual(in[0].Dims, []int64{1, 1, 7, 5}) || !reflect.DeepEqual(in[1].Dims, []int64{1, 1, 3, 3}) ||
		!reflect.DeepEqual(out[0].Dims, []int64{1, 1, 4, 3}) {
		t.Fatalf("dims %v %v %v", in[0].Dims, in[1].Dims, out[0].Dims)
	}
	for oy := 0; oy < 4; oy++ {
		for ox := 0; ox < 3; ox++ {
			var s float32
			for ky := 0; ky < 3; ky++ {
				for kx := 0; kx < 3; kx++ {
					iy, ix := 2*oy-1+ky, 2*ox-1+kx
					if iy >= 0 && iy < 7 && ix >= 0 && ix < 5 {
						s += x[iy*5+ix] * w[ky*3+kx]
					}
				}
			}
			if s != y[oy*3+ox] {
				t.Errorf("y[%d][%d] = %v, computed %v", oy, ox, y[oy*3+ox], s)
			}
		}
	}
}

// TestTruncatedModels decodes every proper prefix of a model: none may
// panic, and every prefix that does not end on a top-level field boundary
// must fail (a protobuf cut between fields is indistinguishable from a
// shorter message).
func TestTruncatedModels(t *testing.T) {
	inputs := map[string][]byte{"hand-built": minimalModel()}
	if dir, err := testdataDir(); err == nil {
		for _, name := range []string{"test_conv_with_strides_padding", "test_if", "test_lstm_defaults"} {
			if b, err := os.ReadFile(filepath.Join(dir, "data", "node", name, "model.onnx")); err == nil {
				inputs[name] = b
			}
		}
	} else {
		t.Log("ONNX test data not found: truncating only the hand-built model")
	}
	for name, full := range inputs {
		boundaries := map[int]bool{0: true}
		for off := 0; off < len(full); {
			_, _, n := protowire.ConsumeField(full[off:])
			if n < 0 {
				t.Fatalf("%s: reference parse failed at %d", name, off)
			}
			off += n
			boundaries[off] = true
		}
		failures := 0
		for n := 0; n < len(full); n++ {
			_, err := Decode(full[:n])
			if err != nil {
				failures++
				var de *DecodeError
				if !errors.As(err, &de) && !errors.Is(err, ErrNotONNX) {
					t.Errorf("%s[:%d]: error %v is neither a DecodeError nor ErrNotONNX", name, n, err)
				}
			} else if !boundaries[n] {
				t.Errorf("%s[:%d]: decoded without error", name, n)
			}
		}
		t.Logf("%s: %d prefixes, %d rejected", name, len(full), failures)
	}
}
