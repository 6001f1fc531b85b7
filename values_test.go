package tensorbridge_test

import (
	"context"
	"errors"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"os"
	"path/filepath"
	"testing"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/ir"
)

// debianNodeCase returns the model of a case of Debian's libonnx-testdata
// node suite ($TENSORBRIDGE_ONNX_TESTDATA, else where
// scripts/fetch-onnx-testdata.sh unpacks it), skipping when absent.
func debianNodeCase(t *testing.T, name string) string {
	t.Helper()
	root := os.Getenv("TENSORBRIDGE_ONNX_TESTDATA")
	if root == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			t.Skip(err)
		}
		root = filepath.Join(cache, "tensorbridge", "onnx-testdata", "root", "usr", "share", "libonnx-testdata")
	}
	p := filepath.Join(root, "data", "node", name, "model.onnx")
	if _, err := os.Stat(p); err != nil {
		testreq.Skipf(t, "ONNX test data not found (run scripts/fetch-onnx-testdata.sh): %v", err)
	}
	return p
}

func int64s(t *testing.T, v ...int64) *ir.Tensor {
	t.Helper()
	x, err := ir.TensorFromFlat(v, len(v))
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// TestRunValuesSequence runs ONNX's SequenceInsert case (seq(int64) and a
// tensor in, seq(int64) out) through Model.RunValues with sequences of
// different lengths and element shapes; the result is the input sequence
// with the tensor appended, by the op's definition.
func TestRunValuesSequence(t *testing.T) {
	path := debianNodeCase(t, "test_sequence_insert_at_back")
	ctx := context.Background()
	m, err := openCPU(t).LoadModel(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if in := m.Inputs(); in[0].Kind != tensorbridge.KindSequence {
		t.Fatalf("input 0 is a %s, want a sequence", in[0].Kind)
	}
	tail := int64s(t, 7, 8, 9)
	for _, elems := range [][]*ir.Tensor{{int64s(t, 1, 2, 3), int64s(t, 4, 5)}, {}, {int64s(t, 6)}} {
		seq := make([]tensorbridge.Value, len(elems))
		for k, e := range elems {
			seq[k] = tensorbridge.TensorValue(e)
		}
		outs, err := m.RunValues(ctx, map[string]tensorbridge.Value{
			"sequence": tensorbridge.SequenceValue(seq...), "tensor": tensorbridge.TensorValue(tail)})
		if err != nil {
			t.Fatalf("%d elements: %v", len(elems), err)
		}
		got := outs["output_sequence"].Elems()
		if len(got) != len(elems)+1 {
			t.Fatalf("%d elements: got a sequence of %d", len(elems), len(got))
		}
		for k, want := range append(append([]*ir.Tensor{}, elems...), tail) {
			w, _ := ir.TensorBytes(want)
			g, err := ir.TensorBytes(got[k].Tensor())
			if err != nil || string(g) != string(w) || !got[k].Tensor().Shape().Equal(want.Shape()) {
				t.Errorf("%d elements: element %d = %v, want %v", len(elems), k, got[k], want.Shape())
			}
		}
	}
	var ie *tensorbridge.InputError
	if _, err := m.Run(ctx, map[string]*ir.Tensor{"tensor": tail}); !errors.As(err, &ie) {
		t.Errorf("Run on a sequence model: err = %v, want an *InputError pointing at RunValues", err)
	}
}

// TestRunValuesOptional runs ONNX's OptionalHasElement case with an
// absent optional (given as NoneValue, and left out) and a present one.
func TestRunValuesOptional(t *testing.T) {
	path := debianNodeCase(t, "test_optional_has_element_empty")
	ctx := context.Background()
	m, err := openCPU(t).LoadModel(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	five, err := ir.TensorFromFlat([]int32{5})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		inputs map[string]tensorbridge.Value
		want   byte
	}{
		{"none", map[string]tensorbridge.Value{"optional_input": tensorbridge.NoneValue()}, 0},
		{"left out", map[string]tensorbridge.Value{}, 0},
		{"present", map[string]tensorbridge.Value{"optional_input": tensorbridge.OptionalValue(tensorbridge.TensorValue(five))}, 1},
	} {
		outs, err := m.RunValues(ctx, tc.inputs)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		b, err := ir.TensorBytes(outs["output"].Tensor())
		if err != nil || len(b) != 1 || b[0] != tc.want {
			t.Errorf("%s: output = %v (%v), want %d", tc.name, b, err, tc.want)
		}
	}
}
