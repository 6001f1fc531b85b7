package tensorbridge_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/ir"
)

// Model.Run reuses what the latest call resolved (specialisation key,
// padded shapes, dimension sizes) when the next call's input dims are the
// same. Dims that change every call, alternating between two buckets and
// between sizes that share a bucket, must still give exactly y = x + x
// with the caller's row count, with buckets and with exact shapes; and a
// call with the remembered dims but a wrong dtype or an unknown input is
// still refused with an *InputError.
func TestRunAlternatingShapes(t *testing.T) {
	b := openTest(t)
	ctx := context.Background()
	path := tgraph{
		nodes:   [][]byte{tnode("Add", "add", []string{"x", "x"}, []string{"y"})},
		inputs:  [][]byte{tvi("x", onnxFloat, "batch", 3)},
		outputs: [][]byte{tvi("y", onnxFloat, "batch", 3)},
	}.write(t, "double")
	for _, opts := range [][]tensorbridge.ModelOption{nil, {tensorbridge.WithExactShapes()}} {
		m, err := b.LoadModel(ctx, path, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if opts == nil {
			if n, _ := m.BucketSize("batch", 3); n == 3 {
				t.Fatalf("batch 3 is not padded (%s): the test would not exercise padding", m.Buckets())
			}
		}
		for k, rows := range []int{1, 3, 1, 3, 3, 5, 2, 9, 3, 9, 1, 1, 17, 3} {
			flat := make([]float32, rows*3)
			for i := range flat {
				flat[i] = float32(k*100 + i)
			}
			out, err := m.Run(ctx, map[string]*ir.Tensor{"x": tensors.FromFlatDataAndDimensions(flat, rows, 3)})
			if err != nil {
				t.Fatalf("call %d (batch %d): %v", k, rows, err)
			}
			y := out["y"]
			if y == nil || !y.Shape().Equal(ir.MakeShape(ir.Float32, rows, 3)) {
				t.Fatalf("call %d (batch %d): y = %v, want float32[%d,3]", k, rows, y, rows)
			}
			got := tensors.MustCopyFlatData[float32](y)
			for i, v := range flat {
				if got[i] != 2*v {
					t.Fatalf("call %d (batch %d): y[%d] = %v, want %v", k, rows, i, got[i], 2*v)
				}
			}
		}
		// The latest dims are remembered: the same dims with a wrong dtype,
		// with an extra unknown input, and with the input missing.
		var ie *tensorbridge.InputError
		_, err = m.Run(ctx, map[string]*ir.Tensor{"x": tensors.FromFlatDataAndDimensions(make([]int64, 9), 3, 3)})
		if !errors.As(err, &ie) || ie.Problem != "dtype" || ie.Name != "x" {
			t.Fatalf("int64 x: %v, want a dtype *InputError for x", err)
		}
		x := tensors.FromFlatDataAndDimensions(make([]float32, 9), 3, 3)
		_, err = m.Run(ctx, map[string]*ir.Tensor{"x": x, "z": x})
		if !errors.As(err, &ie) || ie.Problem != "name" || ie.Name != "z" {
			t.Fatalf("unknown input z: %v, want a name *InputError for z", err)
		}
		_, err = m.Run(ctx, map[string]*ir.Tensor{"w": x})
		if !errors.As(err, &ie) {
			t.Fatalf("x missing: %v, want an *InputError", err)
		}
		m.Close()
	}
}

// TestRunAlternatingShapesConcurrently has eight goroutines call one Model
// at once, each with its own sequence of batch sizes, so that the shapes
// the model remembers from the latest call change under every caller:
// each must still get exactly y = x + x with its own row count.
func TestRunAlternatingShapesConcurrently(t *testing.T) {
	b := openTest(t)
	ctx := context.Background()
	path := tgraph{
		nodes:   [][]byte{tnode("Add", "add", []string{"x", "x"}, []string{"y"})},
		inputs:  [][]byte{tvi("x", onnxFloat, "batch", 3)},
		outputs: [][]byte{tvi("y", onnxFloat, "batch", 3)},
	}.write(t, "double")
	m, err := b.LoadModel(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	sizes := []int{1, 3, 2, 9, 5, 17, 4, 8}
	errc := make(chan error, len(sizes))
	for g := range sizes {
		go func() {
			for k := range 40 {
				rows := sizes[(g+k)%len(sizes)]
				flat := make([]float32, rows*3)
				for i := range flat {
					flat[i] = float32(g*10000 + k*100 + i)
				}
				out, err := m.Run(ctx, map[string]*ir.Tensor{"x": tensors.FromFlatDataAndDimensions(flat, rows, 3)})
				if err != nil {
					errc <- fmt.Errorf("goroutine %d call %d (batch %d): %w", g, k, rows, err)
					return
				}
				y := out["y"]
				if y == nil || !y.Shape().Equal(ir.MakeShape(ir.Float32, rows, 3)) {
					errc <- fmt.Errorf("goroutine %d call %d (batch %d): y = %v", g, k, rows, y)
					return
				}
				got := tensors.MustCopyFlatData[float32](y)
				for i, v := range flat {
					if got[i] != 2*v {
						errc <- fmt.Errorf("goroutine %d call %d (batch %d): y[%d] = %v, want %v", g, k, rows, i, got[i], 2*v)
						return
					}
				}
			}
			errc <- nil
		}()
	}
	for range sizes {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
}
