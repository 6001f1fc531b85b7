package tensorbridge_test

import (
	"archive/zip"
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/npy"
	"github.com/tensorbridge/tensorbridge/onnx"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// Dynamically quantized conv nets (issue 19): testdata/models/quant_unet*.onnx
// are a small two-level U-Net quantized by ONNX Runtime 1.31.1's
// quantize_dynamic (DynamicQuantizeLinear -> ConvInteger -> Cast -> Mul ->
// Add per Conv, one MatMulInteger), with ONNX Runtime's outputs and every
// intermediate value recorded by scripts/gen-quant-fixtures.py.

// quantValue is one line of NAME.values.tsv: a node output in the graph's
// (topological) order, with the key of its array in NAME.values.npz.
type quantValue struct {
	key, node, op, name, dtype string
}

func readQuantValues(t *testing.T, path string) []quantValue {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []quantValue
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		c := strings.Split(sc.Text(), "\t")
		if len(c) != 6 {
			t.Fatalf("%s: line %q has %d columns, want 6", path, sc.Text(), len(c))
		}
		out = append(out, quantValue{key: c[0], node: c[1], op: c[2], name: c[3], dtype: c[4]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// readNPZ reads every array of a NumPy .npz archive (a zip of .npy files).
func readNPZ(t *testing.T, path string) map[string]*ir.Tensor {
	t.Helper()
	zr, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	out := map[string]*ir.Tensor{}
	for _, f := range zr.File {
		r, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		a, err := npy.Read(r)
		r.Close()
		if err != nil {
			t.Fatalf("%s: %s: %v", path, f.Name, err)
		}
		x, err := a.ToIR()
		if err != nil {
			t.Fatalf("%s: %s: %v", path, f.Name, err)
		}
		out[strings.TrimSuffix(f.Name, ".npy")] = x
	}
	return out
}

// onnxDType maps the dtypes the fixtures record to ONNX's.
var onnxDType = map[string]onnxpb.DataType{"float32": onnxpb.Float, "uint8": onnxpb.Uint8, "int32": 6, "int8": 3}

// withOutputs returns a copy of the model whose graph outputs are the named
// values (any node output), typed from the recorded dtypes.
func withOutputs(t *testing.T, pb *onnxpb.Model, vals []quantValue) *onnx.Model {
	t.Helper()
	g := *pb.Graph
	g.Output = nil
	for _, v := range vals {
		dt, ok := onnxDType[v.dtype]
		if !ok {
			t.Fatalf("value %s: no ONNX type for %s", v.name, v.dtype)
		}
		g.Output = append(g.Output, onnxpb.ValueInfo{Name: v.name, Type: &onnxpb.TypeProto{TensorType: &onnxpb.TypeTensor{ElemType: dt}}})
	}
	cp := *pb
	cp.Graph = &g
	m, err := onnx.FromProto(&cp)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// quantDiff compares a value with ONNX Runtime's: the number of elements
// that differ, the largest absolute difference and the relative L2 distance.
func quantDiff(t *testing.T, got, want *ir.Tensor) (n int, maxAbs, rel float64) {
	t.Helper()
	if !got.Shape().Equal(want.Shape()) {
		t.Fatalf("shape %s, ONNX Runtime %s", got.Shape(), want.Shape())
	}
	g, err := quantAsFloat64(got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := quantAsFloat64(want)
	if err != nil {
		t.Fatal(err)
	}
	var num, den float64
	for i := range w {
		d := g[i] - w[i]
		if d != 0 {
			n++
			maxAbs = math.Max(maxAbs, math.Abs(d))
		}
		num += d * d
		den += w[i] * w[i]
	}
	if den > 0 {
		rel = math.Sqrt(num / den)
	}
	return n, maxAbs, rel
}

// quantAsFloat64 is asFloat64 with the 8-bit types too.
func quantAsFloat64(x *ir.Tensor) ([]float64, error) {
	switch x.DType() {
	case ir.Uint8:
		v := tensors.MustCopyFlatData[uint8](x)
		out := make([]float64, len(v))
		for i, e := range v {
			out[i] = float64(e)
		}
		return out, nil
	case ir.Int8:
		v := tensors.MustCopyFlatData[int8](x)
		out := make([]float64, len(v))
		for i, e := range v {
			out[i] = float64(e)
		}
		return out, nil
	}
	return asFloat64(x)
}

func quantModelsDir() string { return filepath.Join("testdata", "models") }

func loadQuantProto(t *testing.T, name string) *onnxpb.Model {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(quantModelsDir(), name+".onnx"))
	if err != nil {
		t.Fatal(err)
	}
	pb, err := onnxpb.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return pb
}

// TestQuantizedUNetValues runs the quantized U-Net with every node output as
// a graph output on the recorded 32x32 input and walks the values in
// topological order against ONNX Runtime's.
func TestQuantizedUNetValues(t *testing.T) {
	dir := quantModelsDir()
	vals := readQuantValues(t, filepath.Join(dir, "quant_unet.values.tsv"))
	want := readNPZ(t, filepath.Join(dir, "quant_unet.values.npz"))
	m := withOutputs(t, loadQuantProto(t, "quant_unet"), vals)
	b := openTest(t)
	ctx := context.Background()
	lm, err := b.LoadONNX(ctx, m, "quant_unet_values")
	if err != nil {
		t.Fatal(err)
	}
	defer lm.Close()
	out, err := lm.Run(ctx, map[string]*ir.Tensor{"image": readNPY(t, filepath.Join(dir, "quant_unet.values_input.npy"))})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vals {
		n, mx, rel := quantDiff(t, out[v.name], want[v.key])
		t.Logf("%s %-22s %-40s differ %d max %g rel %g", v.key, v.op, v.name, n, mx, rel)
	}
	_ = fmt.Sprint
}
