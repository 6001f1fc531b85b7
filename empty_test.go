package tensorbridge_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// TestEmptyBatch: an input with a zero batch gets empty outputs of the
// shapes ONNX Runtime gives, on every backend (cpu by default, xla-cpu
// with TENSORBRIDGE_TEST_BACKEND=xla-cpu). The expected shapes were
// recorded by hand with onnxruntime 1.23 (pip, CPUExecutionProvider) on
// zero-filled inputs of the same shapes:
//
//	mlp (0,64) -> (0,10); tiny_resnet and mobilenet_v2_w025 (0,3,32,32)
//	-> (0,10); bert_tiny (0,16),(0,16) -> (0,16,64),(0,64).
//
// (bert_tiny_op13 is left out: ONNX Runtime refuses it, as its Reshape
// cannot infer a -1 dimension of a tensor with no elements; tensorbridge
// answers (0,16,64),(0,64), the shapes every non-empty batch extrapolates
// to.) Before the change the cpu backend failed with "DotGeneral sizes
// must be positive" on every one of these.
func TestEmptyBatch(t *testing.T) {
	b := openTest(t)
	ctx := context.Background()
	cases := []struct {
		model string
		in    map[string][]int
		want  map[string][]int
	}{
		{"mlp", map[string][]int{"x": {0, 64}}, map[string][]int{"log_probs": {0, 10}}},
		{"tiny_resnet", map[string][]int{"image": {0, 3, 32, 32}}, map[string][]int{"logits": {0, 10}}},
		{"mobilenet_v2_w025", map[string][]int{"image": {0, 3, 32, 32}}, map[string][]int{"logits": {0, 10}}},
		{"bert_tiny", map[string][]int{"input_ids": {0, 16}, "attention_mask": {0, 16}},
			map[string][]int{"hidden": {0, 16, 64}, "pooled": {0, 64}}},
	}
	for _, tc := range cases {
		t.Run(tc.model, func(t *testing.T) {
			m, err := b.LoadModel(ctx, filepath.Join("testdata", "models", tc.model+".onnx"))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			inputs := map[string]*ir.Tensor{}
			for _, spec := range m.Inputs() {
				x, err := ir.NewHostTensor(spec.DType, tc.in[spec.Name]...)
				if err != nil {
					t.Fatal(err)
				}
				inputs[spec.Name] = x
			}
			outs, err := m.Run(ctx, inputs)
			if err != nil {
				t.Fatalf("Run on %s: %v", b.Name(), err)
			}
			for name, want := range tc.want {
				got := outs[name]
				if got == nil || !slices.Equal(got.Shape().Dimensions, want) || got.DType() != ir.Float32 {
					t.Errorf("output %s = %v, want Float32%v", name, got, want)
				}
			}
			if len(outs) != len(tc.want) {
				t.Errorf("%d outputs, want %d", len(outs), len(tc.want))
			}
		})
	}
}

// TestEmptyBatchReduced: an empty batch whose output holds values
// computed from no data is computed as ONNX defines it: a ReduceSum over
// every axis of a (0, 3) input is the sum of an empty set, 0 ("Reduction
// over an empty set of values yields 0",
// https://onnx.ai/onnx/operators/onnx__ReduceSum.html; ONNX Runtime gives
// a zero scalar too), on every backend, run at the exact shapes; a
// ReduceMean there, which ONNX leaves undefined, is an error matching
// errs.ErrInvalidInput and onnx.ErrEmptySet, never a NaN. Fault injected:
// the rule before (an InputError whenever an output is not empty) fails
// the ReduceSum with `output "y" would have shape []`.
func TestEmptyBatchReduced(t *testing.T) {
	b := openTest(t)
	ctx := context.Background()
	for _, op := range []string{"ReduceSum", "ReduceMean"} {
		pb := &onnxpb.Model{IRVersion: 8, OpsetImport: []onnxpb.OperatorSetID{{Version: 18}},
			Graph: &onnxpb.Graph{Name: "sum",
				Input:  []onnxpb.ValueInfo{valueInfo("x", "batch", 3)},
				Output: []onnxpb.ValueInfo{valueInfo("y")},
				Node: []onnxpb.Node{{OpType: op, Input: []string{"x"}, Output: []string{"y"},
					Attribute: []onnxpb.Attribute{{Name: "keepdims", Type: onnxpb.AttrInt, I: 0}}}}}}
		om, err := onnx.FromProto(pb)
		if err != nil {
			t.Fatal(err)
		}
		m, err := b.LoadONNX(ctx, om, "sum")
		if err != nil {
			t.Fatal(err)
		}
		x, _ := ir.NewHostTensor(ir.Float32, 0, 3)
		outs, err := m.Run(ctx, map[string]*ir.Tensor{"x": x})
		if op == "ReduceMean" {
			if !errors.Is(err, errs.ErrInvalidInput) || !errors.Is(err, onnx.ErrEmptySet) {
				t.Errorf("%s: Run = %v, %v; want an error matching ErrInvalidInput and onnx.ErrEmptySet", op, outs, err)
			}
		} else if err != nil || outs["y"] == nil || outs["y"].Shape().Rank() != 0 || tensors.MustCopyFlatData[float32](outs["y"])[0] != 0 {
			t.Errorf("%s: Run = %v, %v; want a zero scalar", op, outs, err)
		}
		// The same model with a non-empty batch runs.
		x1, _ := ir.TensorFromFlat([]float32{1, 2, 3}, 1, 3)
		if _, err := m.Run(ctx, map[string]*ir.Tensor{"x": x1}); err != nil {
			t.Fatalf("%s: Run (1,3): %v", op, err)
		}
		_ = m.Close()
	}
}

// valueInfo declares a FLOAT tensor; dims are ints or symbolic names.
func valueInfo(name string, dims ...any) onnxpb.ValueInfo {
	shape := &onnxpb.TensorShape{Dim: []onnxpb.Dimension{}}
	for _, d := range dims {
		switch v := d.(type) {
		case int:
			shape.Dim = append(shape.Dim, onnxpb.Dimension{DimValue: int64(v), HasDimValue: true})
		case string:
			shape.Dim = append(shape.Dim, onnxpb.Dimension{DimParam: v})
		}
	}
	return onnxpb.ValueInfo{Name: name, Type: &onnxpb.TypeProto{TensorType: &onnxpb.TypeTensor{ElemType: onnxpb.Float, Shape: shape}}}
}

// TestOutOfRangeTokenID: bert_tiny's vocabulary has 1000 rows; ONNX
// Runtime raises on a token id of 1000 or -1001 ("indices element out of
// data bounds, idx=1000 must be within the inclusive range [-1000,999]",
// checked by hand with onnxruntime 1.23) and accepts -1000. On every
// backend tensorbridge returns an *InputError naming the input, the node
// and the id. Before the change it returned the row of id 999 (XLA and
// the pure-Go backend clamp gather indices).
func TestOutOfRangeTokenID(t *testing.T) {
	b := openTest(t)
	ctx := context.Background()
	m, err := b.LoadModel(ctx, filepath.Join("testdata", "models", "bert_tiny.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	mask := readNPY(t, filepath.Join("testdata", "models", "bert_tiny.input_1.npy"))
	ids := readNPY(t, filepath.Join("testdata", "models", "bert_tiny.input_0.npy"))
	for _, id := range []int64{1000, -1001, 1e12, -1000, 999} {
		t.Run(fmt.Sprint(id), func(t *testing.T) {
			flat := tensors.MustCopyFlatData[int64](ids)
			flat[3] = id
			x, err := ir.TensorFromFlat(flat, ids.Shape().Dimensions...)
			if err != nil {
				t.Fatal(err)
			}
			_, err = m.Run(ctx, map[string]*ir.Tensor{"input_ids": x, "attention_mask": mask})
			if id >= -1000 && id <= 999 {
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				return
			}
			var ie *tensorbridge.InputError
			if !errors.As(err, &ie) || !errors.Is(err, errs.ErrInvalidInput) || ie.Name != "input_ids" ||
				!strings.Contains(err.Error(), fmt.Sprintf("got %d at flat position 3", id)) || !strings.Contains(err.Error(), `"/tok/Gather"`) {
				t.Fatalf("Run = %v, want an InputError naming input_ids, /tok/Gather and %d", err, id)
			}
		})
	}
}

// TestWarmStartKeepsIndexChecks: a restarted process that loads
// bert_tiny's executable by its warm-start key (no Build of the plan on the
// way to the executable) still refuses a token id of 1000: the warm start
// builds the plan on the host to learn its index checks. Fault injected:
// without that host build, the second open answered the id with the row
// of 999.
func TestWarmStartKeepsIndexChecks(t *testing.T) {
	needXLACPU(t)
	ctx := context.Background()
	cacheDir := t.TempDir()
	ids := readNPY(t, filepath.Join("testdata", "models", "bert_tiny.input_0.npy"))
	mask := readNPY(t, filepath.Join("testdata", "models", "bert_tiny.input_1.npy"))
	bad := tensors.MustCopyFlatData[int64](ids)
	bad[0] = 1000
	badIDs, err := ir.TensorFromFlat(bad, ids.Shape().Dimensions...)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		b, err := tensorbridge.Open(ctx, "xla-cpu", tensorbridge.WithSettings(tensorbridge.Settings{CacheDir: cacheDir}))
		if err != nil {
			t.Fatal(err)
		}
		m, err := b.LoadModel(ctx, filepath.Join("testdata", "models", "bert_tiny.onnx"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = m.Run(ctx, map[string]*ir.Tensor{"input_ids": badIDs, "attention_mask": mask})
		var ie *tensorbridge.InputError
		if !errors.As(err, &ie) || ie.Name != "input_ids" {
			t.Errorf("round %d: Run = %v, want an InputError for input_ids", round, err)
		}
		s := b.CacheStats()
		if round == 1 && (s.Hits != 1 || s.Misses != 0) {
			t.Errorf("restart: %+v, want the executable from the cache", s)
		}
		_ = m.Close()
		_ = b.Close()
		if round == 0 {
			// Keep only the warm-start entry (written last), so that the
			// restart cannot take the path through the plan's Build.
			entries, _ := filepath.Glob(filepath.Join(cacheDir, "*.tbc"))
			if len(entries) != 2 {
				t.Fatalf("%d cache entries %v, want 2 (by program text, by model digest)", len(entries), entries)
			}
			sort.Slice(entries, func(i, j int) bool {
				a, _ := os.Stat(entries[i])
				b, _ := os.Stat(entries[j])
				return a.ModTime().Before(b.ModTime())
			})
			if err := os.Remove(entries[0]); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestEmptyInputHugeOutput: an empty input costs its sender nothing
// whatever its other dimensions, while ONNX gives ReduceSum over the zero
// axis of a (0, 2^40) input 2^40 zeros (4 TiB): Model.Run refuses it with
// an *OutOfMemoryError (needed against available) before allocating
// anything, and keeps serving, concurrently, the same request at a size
// that fits (16 callers, each getting 3 zeros). Fault injected: without
// checkEmptyOutputs the run allocates the output and the process dies
// ("fatal error: runtime: out of memory" or a makeslice panic).
func TestEmptyInputHugeOutput(t *testing.T) {
	b := openTest(t)
	ctx := context.Background()
	pb := &onnxpb.Model{IRVersion: 8, OpsetImport: []onnxpb.OperatorSetID{{Version: 11}}, // axes as an attribute
		Graph: &onnxpb.Graph{Name: "sum0",
			Input:  []onnxpb.ValueInfo{valueInfo("x", "batch", "n")},
			Output: []onnxpb.ValueInfo{valueInfo("y", "n")},
			Node: []onnxpb.Node{{OpType: "ReduceSum", Input: []string{"x"}, Output: []string{"y"},
				Attribute: []onnxpb.Attribute{{Name: "keepdims", Type: onnxpb.AttrInt, I: 0},
					{Name: "axes", Type: onnxpb.AttrInts, Ints: []int64{0}}}}}}}
	om, err := onnx.FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	m, err := b.LoadONNX(ctx, om, "sum0", tensorbridge.WithExactShapes())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	huge, err := ir.NewHostTensor(ir.Float32, 0, 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Run(ctx, map[string]*ir.Tensor{"x": huge})
	var oom *errs.OutOfMemoryError
	if !errors.As(err, &oom) || oom.Needed != 4<<40 || oom.Available >= oom.Needed {
		t.Fatalf("Run (0, 2^40) = %v; want an OutOfMemoryError needing 4 TiB (%v)", err, oom)
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x, _ := ir.NewHostTensor(ir.Float32, 0, 3)
			outs, err := m.Run(ctx, map[string]*ir.Tensor{"x": x})
			if err != nil || !slices.Equal(outs["y"].Shape().Dimensions, []int{3}) || !slices.Equal(tensors.MustCopyFlatData[float32](outs["y"]), []float32{0, 0, 0}) {
				t.Errorf("Run (0, 3) = %v, %v; want 3 zeros", outs, err)
			}
		}()
	}
	wg.Wait()
}
