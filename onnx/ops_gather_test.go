package onnx

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// gatherOpCase is a single-node test checking every output, or an error.
// Expected values are worked out by hand from the ONNX operator spec.
type gatherOpCase struct {
	name    string
	opset   int64
	node    onnxpb.Node
	inputs  []onnxpb.ValueInfo
	outputs []onnxpb.ValueInfo
	inits   []onnxpb.Tensor
	feed    map[string]*ir.Tensor
	want    []gatherWant // one per output, in order
	wantErr string       // when set, Run must fail with an error containing it
}

type gatherWant struct {
	dt   ir.DType
	dims []int
	vals []float64
}

func runGatherOpCases(t *testing.T, cases []gatherOpCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opset := tc.opset
			if opset == 0 {
				opset = 18
			}
			m := mustModel(t, model(opset, tc.inputs, tc.outputs, tc.inits, tc.node))
			if tc.wantErr != "" {
				_, err := m.Run(context.Background(), engine(t), tc.feed)
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Run error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			outs := run(t, m, tc.feed)
			for k, w := range tc.want {
				name := tc.outputs[k].Name
				expect(t, fmt.Sprintf("output %s", name), outs[name], w.dt, w.dims, w.vals, 0)
			}
		})
	}
}

func i32(t testing.TB, dims []int, v ...int32) *ir.Tensor {
	t.Helper()
	x, err := ir.TensorFromFlat(v, dims...)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func bools(t testing.TB, dims []int, v ...bool) *ir.Tensor {
	t.Helper()
	x, err := ir.TensorFromFlat(v, dims...)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func TestGatherOps(t *testing.T) {
	f := onnxpb.Float
	runGatherOpCases(t, []gatherOpCase{
		{
			// out[i][j] = data[i][idx[i][j]]
			name:    "GatherElements axis 1 run-time negative index",
			node:    node("GatherElements", []string{"x", "i"}, []string{"y"}, aInt("axis", 1)),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 2, 2), vi("i", onnxpb.Int64, 2, 2)},
			outputs: []onnxpb.ValueInfo{vi("y", f, 2, 2)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{2, 2}, 1, 2, 3, 4), "i": i64(t, []int{2, 2}, 0, 0, 1, -2)},
			want:    []gatherWant{{ir.Float32, []int{2, 2}, floats(1, 1, 4, 3)}},
		},
		{
			// out[0][j] = data[idx[0][j]][j]: data[1][0], data[2][1], data[0][2].
			name:    "GatherElements axis 0 constant indices smaller than data",
			node:    node("GatherElements", []string{"x", "i"}, []string{"y"}),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 3, 3)},
			outputs: []onnxpb.ValueInfo{vi("y", f, 1, 3)},
			inits:   []onnxpb.Tensor{tI64("i", []int64{1, 3}, 1, 2, 0)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{3, 3}, 1, 2, 3, 4, 5, 6, 7, 8, 9)},
			want:    []gatherWant{{ir.Float32, []int{1, 3}, floats(4, 8, 3)}},
		},
		{
			name:    "GatherElements constant index out of range",
			node:    node("GatherElements", []string{"x", "i"}, []string{"y"}),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 2)},
			outputs: []onnxpb.ValueInfo{vi("y", f, 1)},
			inits:   []onnxpb.Tensor{tI64("i", []int64{1}, 2)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{2}, 1, 2)},
			wantErr: "index 2 out of range for an axis of size 2",
		},
		{
			// ONNX GatherND example 5 (batch_dims = 1).
			name:    "GatherND batch_dims 1",
			node:    node("GatherND", []string{"x", "i"}, []string{"y"}, aInt("batch_dims", 1)),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 2, 2, 2), vi("i", onnxpb.Int64, 2, 1)},
			outputs: []onnxpb.ValueInfo{vi("y", f, 2, 2)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{2, 2, 2}, 0, 1, 2, 3, 4, 5, 6, 7), "i": i64(t, []int{2, 1}, 1, 0)},
			want:    []gatherWant{{ir.Float32, []int{2, 2}, floats(2, 3, 4, 5)}},
		},
		{
			// ONNX GatherND example 3: tuples [0,1] and [1,0] select rows.
			name:    "GatherND slices int32 indices",
			node:    node("GatherND", []string{"x", "i"}, []string{"y"}),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 2, 2, 2), vi("i", onnxpb.Int32, 2, 2)},
			outputs: []onnxpb.ValueInfo{vi("y", f, 2, 2)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{2, 2, 2}, 0, 1, 2, 3, 4, 5, 6, 7), "i": i32(t, []int{2, 2}, 0, 1, 1, 0)},
			want:    []gatherWant{{ir.Float32, []int{2, 2}, floats(2, 3, 4, 5)}},
		},
		{
			// Indices of rank 3 into data of rank 1 (more index axes than data axes).
			name:    "GatherND deep indices into a vector",
			node:    node("GatherND", []string{"x", "i"}, []string{"y"}),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 5), vi("i", onnxpb.Int64, 2, 2, 1)},
			outputs: []onnxpb.ValueInfo{vi("y", f, 2, 2)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{5}, 10, 11, 12, 13, 14), "i": i64(t, []int{2, 2, 1}, 4, 0, -1, 2)},
			want:    []gatherWant{{ir.Float32, []int{2, 2}, floats(14, 10, 14, 12)}},
		},
		{
			name:    "GatherND bad batch dimension",
			node:    node("GatherND", []string{"x", "i"}, []string{"y"}, aInt("batch_dims", 1)),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 2, 2), vi("i", onnxpb.Int64, 3, 1)},
			outputs: []onnxpb.ValueInfo{vi("y", f, 3)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{2, 2}, 0, 1, 2, 3), "i": i64(t, []int{3, 1}, 0, 0, 0)},
			wantErr: "batch dimension 0 is 3 in indices but 2 in data",
		},
	})
}

func TestScatterOps(t *testing.T) {
	f := onnxpb.Float
	i64v := onnxpb.Int64
	runGatherOpCases(t, []gatherOpCase{
		{
			// ONNX ScatterElements example 1.
			name:    "ScatterElements axis 0",
			node:    node("ScatterElements", []string{"x", "i", "u"}, []string{"y"}),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 3, 3), vi("i", i64v, 2, 3), vi("u", f, 2, 3)},
			outputs: []onnxpb.ValueInfo{vi("y", f, 3, 3)},
			feed: map[string]*ir.Tensor{"x": f32(t, []int{3, 3}, 0, 0, 0, 0, 0, 0, 0, 0, 0),
				"i": i64(t, []int{2, 3}, 1, 0, 2, 0, 2, 1), "u": f32(t, []int{2, 3}, 1, 1.5, 1.25, 2, 2.5, 2.25)},
			want: []gatherWant{{ir.Float32, []int{3, 3}, floats(2, 1.5, 0, 1, 0, 2.25, 0, 2.5, 1.25)}},
		},
		{
			// Duplicates under "none": the later update wins, as a
			// sequential loop over the updates gives.
			name:    "ScatterElements none duplicates last wins",
			node:    node("ScatterElements", []string{"x", "i", "u"}, []string{"y"}),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 4), vi("i", i64v, 3), vi("u", f, 3)},
			outputs: []onnxpb.ValueInfo{vi("y", f, 4)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{4}, 0, 0, 0, 0), "i": i64(t, []int{3}, 1, 1, -1), "u": f32(t, []int{3}, 5, 6, 7)},
			want:    []gatherWant{{ir.Float32, []int{4}, floats(0, 6, 0, 7)}},
		},
		{
			// ONNX example with duplicate indices, reduction add: 2 + 1 + 2 = 5.
			name:    "ScatterElements add duplicates axis 1",
			node:    node("ScatterElements", []string{"x", "i", "u"}, []string{"y"}, aInt("axis", 1), aString("reduction", "add")),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 1, 5), vi("u", f, 1, 2)},
			outputs: []onnxpb.ValueInfo{vi("y", f, 1, 5)},
			inits:   []onnxpb.Tensor{tI64("i", []int64{1, 2}, 1, 1)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{1, 5}, 1, 2, 3, 4, 5), "u": f32(t, []int{1, 2}, 1, 2)},
			want:    []gatherWant{{ir.Float32, []int{1, 5}, floats(1, 5, 3, 4, 5)}},
		},
		{
			name:    "Scatter opset 9 axis 1",
			opset:   9,
			node:    node("Scatter", []string{"x", "i", "u"}, []string{"y"}, aInt("axis", 1)),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 1, 5), vi("i", i64v, 1, 2), vi("u", f, 1, 2)},
			outputs: []onnxpb.ValueInfo{vi("y", f, 1, 5)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{1, 5}, 1, 2, 3, 4, 5), "i": i64(t, []int{1, 2}, 1, 3), "u": f32(t, []int{1, 2}, 1.5, 2.5)},
			want:    []gatherWant{{ir.Float32, []int{1, 5}, floats(1, 1.5, 3, 2.5, 5)}},
		},
		{
			// 2·5 = 10 at position 1, 4·3 = 12 at position 3.
			name:    "ScatterND mul duplicates run-time indices",
			node:    node("ScatterND", []string{"x", "i", "u"}, []string{"y"}, aString("reduction", "mul")),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 4), vi("i", i64v, 3, 1), vi("u", f, 3)},
			outputs: []onnxpb.ValueInfo{vi("y", f, 4)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{4}, 1, 2, 3, 4), "i": i64(t, []int{3, 1}, 1, 1, 3), "u": f32(t, []int{3}, 1, 5, 3)},
			want:    []gatherWant{{ir.Float32, []int{4}, floats(1, 10, 3, 12)}},
		},
		{
			// Same with constant indices (rounds of distinct positions).
			name:    "ScatterND mul duplicates constant indices",
			node:    node("ScatterND", []string{"x", "i", "u"}, []string{"y"}, aString("reduction", "mul")),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 4), vi("u", f, 4)},
			outputs: []onnxpb.ValueInfo{vi("y", f, 4)},
			inits:   []onnxpb.Tensor{tI64("i", []int64{4, 1}, 1, -3, 3, 1)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{4}, 1, 2, 3, 4), "u": f32(t, []int{4}, 2, 5, 3, -1)},
			want:    []gatherWant{{ir.Float32, []int{4}, floats(1, -20, 3, 12)}},
		},
		{
			name:    "ScatterND max",
			node:    node("ScatterND", []string{"x", "i", "u"}, []string{"y"}, aString("reduction", "max")),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 3), vi("i", i64v, 3, 1), vi("u", f, 3)},
			outputs: []onnxpb.ValueInfo{vi("y", f, 3)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{3}, 1, 5, 3), "i": i64(t, []int{3, 1}, 0, 1, 0), "u": f32(t, []int{3}, 4, 2, 0)},
			want:    []gatherWant{{ir.Float32, []int{3}, floats(4, 5, 3)}},
		},
		{
			name:    "ScatterND min int64",
			node:    node("ScatterND", []string{"x", "i", "u"}, []string{"y"}, aString("reduction", "min")),
			inputs:  []onnxpb.ValueInfo{vi("x", i64v, 3), vi("i", i64v, 3, 1), vi("u", i64v, 3)},
			outputs: []onnxpb.ValueInfo{vi("y", i64v, 3)},
			feed:    map[string]*ir.Tensor{"x": i64(t, []int{3}, 1, 5, 3), "i": i64(t, []int{3, 1}, 0, 1, 0), "u": i64(t, []int{3}, 4, 2, 0)},
			want:    []gatherWant{{ir.Int64, []int{3}, floats(0, 2, 3)}},
		},
		{
			// ONNX ScatterND example 2 shape, reduced: a row slice replaced.
			name:    "ScatterND slice update",
			node:    node("ScatterND", []string{"x", "i", "u"}, []string{"y"}),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 2, 2), vi("i", i64v, 1, 1), vi("u", f, 1, 2)},
			outputs: []onnxpb.ValueInfo{vi("y", f, 2, 2)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{2, 2}, 1, 2, 3, 4), "i": i64(t, []int{1, 1}, 1), "u": f32(t, []int{1, 2}, 9, 8)},
			want:    []gatherWant{{ir.Float32, []int{2, 2}, floats(1, 2, 9, 8)}},
		},
		{
			name:    "ScatterND add slices",
			node:    node("ScatterND", []string{"x", "i", "u"}, []string{"y"}, aString("reduction", "add")),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 2, 2), vi("i", i64v, 2, 1), vi("u", f, 2, 2)},
			outputs: []onnxpb.ValueInfo{vi("y", f, 2, 2)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{2, 2}, 1, 2, 3, 4), "i": i64(t, []int{2, 1}, 0, 0), "u": f32(t, []int{2, 2}, 10, 20, 100, 200)},
			want:    []gatherWant{{ir.Float32, []int{2, 2}, floats(111, 222, 3, 4)}},
		},
		{
			// Run-time index 5 is out of range for size 3: an error, as ONNX
			// requires (the host check of input i; indexcheck.go).
			name:    "ScatterND run-time out-of-range index refused",
			node:    node("ScatterND", []string{"x", "i", "u"}, []string{"y"}),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 3), vi("i", i64v, 2, 1), vi("u", f, 2)},
			outputs: []onnxpb.ValueInfo{vi("y", f, 3)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{3}, 1, 2, 3), "i": i64(t, []int{2, 1}, 5, 0), "u": f32(t, []int{2}, 7, 8)},
			wantErr: "got 5 at flat position 0",
		},
		{
			name:    "ScatterND constant out-of-range index refused",
			node:    node("ScatterND", []string{"x", "i", "u"}, []string{"y"}),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 3), vi("u", f, 1)},
			outputs: []onnxpb.ValueInfo{vi("y", f, 3)},
			inits:   []onnxpb.Tensor{tI64("i", []int64{1, 1}, -4)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{3}, 1, 2, 3), "u": f32(t, []int{1}, 7)},
			wantErr: "index -4 in component 0 out of range for an axis of size 3",
		},
		{
			name:    "ScatterND bool none",
			node:    node("ScatterND", []string{"x", "i", "u"}, []string{"y"}),
			inputs:  []onnxpb.ValueInfo{vi("x", onnxpb.Bool, 3), vi("i", i64v, 2, 1), vi("u", onnxpb.Bool, 2)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Bool, 3)},
			feed:    map[string]*ir.Tensor{"x": bools(t, []int{3}, false, false, true), "i": i64(t, []int{2, 1}, 0, 2), "u": bools(t, []int{2}, true, false)},
			want:    []gatherWant{{ir.Bool, []int{3}, floats(1, 0, 0)}},
		},
		{
			name:    "ScatterND updates shape mismatch",
			node:    node("ScatterND", []string{"x", "i", "u"}, []string{"y"}),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 2, 2), vi("i", i64v, 1, 1), vi("u", f, 1, 3)},
			outputs: []onnxpb.ValueInfo{vi("y", f, 2, 2)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{2, 2}, 1, 2, 3, 4), "i": i64(t, []int{1, 1}, 1), "u": f32(t, []int{1, 3}, 9, 8, 7)},
			wantErr: "updates have shape [1 3], expected [1 2]",
		},
		{
			name:    "ScatterElements unknown reduction",
			node:    node("ScatterElements", []string{"x", "i", "u"}, []string{"y"}, aString("reduction", "avg")),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 2), vi("i", i64v, 1), vi("u", f, 1)},
			outputs: []onnxpb.ValueInfo{vi("y", f, 2)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{2}, 1, 2), "i": i64(t, []int{1}, 0), "u": f32(t, []int{1}, 3)},
			wantErr: `reduction "avg" is not one of`,
		},
	})
}
