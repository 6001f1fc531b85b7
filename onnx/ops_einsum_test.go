package onnx

import (
	"testing"

	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

func TestEinsumOp(t *testing.T) {
	f := onnxpb.Float
	ein := func(eq string, ins ...string) onnxpb.Node {
		return node("Einsum", ins, []string{"y"}, aString("equation", eq))
	}
	// a = [[1 2 3] [4 5 6]], b = [[1 0] [0 1] [1 1]].
	a := f32(t, []int{2, 3}, 1, 2, 3, 4, 5, 6)
	b := f32(t, []int{3, 2}, 1, 0, 0, 1, 1, 1)
	sq := f32(t, []int{3, 3}, 1, 2, 3, 4, 5, 6, 7, 8, 9)
	runGatherOpCases(t, []gatherOpCase{
		{
			name: "matmul", node: ein("ij,jk->ik", "a", "b"),
			inputs: []onnxpb.ValueInfo{vi("a", f, 2, 3), vi("b", f, 3, 2)}, outputs: []onnxpb.ValueInfo{vi("y", f, 2, 2)},
			feed: map[string]*ir.Tensor{"a": a, "b": b},
			want: []gatherWant{{ir.Float32, []int{2, 2}, floats(4, 5, 10, 11)}},
		},
		{
			// Implicit output: labels appearing once, sorted: "ik".
			name: "implicit matmul with spaces", node: ein(" ij , jk ", "a", "b"),
			inputs: []onnxpb.ValueInfo{vi("a", f, 2, 3), vi("b", f, 3, 2)}, outputs: []onnxpb.ValueInfo{vi("y", f, 2, 2)},
			feed: map[string]*ir.Tensor{"a": a, "b": b},
			want: []gatherWant{{ir.Float32, []int{2, 2}, floats(4, 5, 10, 11)}},
		},
		{
			// Implicit "ba" means output "ab": a transpose.
			name: "implicit transpose", node: ein("ba", "a"),
			inputs: []onnxpb.ValueInfo{vi("a", f, 2, 3)}, outputs: []onnxpb.ValueInfo{vi("y", f, 3, 2)},
			feed: map[string]*ir.Tensor{"a": a},
			want: []gatherWant{{ir.Float32, []int{3, 2}, floats(1, 4, 2, 5, 3, 6)}},
		},
		{
			name: "diagonal", node: ein("ii->i", "s"),
			inputs: []onnxpb.ValueInfo{vi("s", f, 3, 3)}, outputs: []onnxpb.ValueInfo{vi("y", f, 3)},
			feed: map[string]*ir.Tensor{"s": sq},
			want: []gatherWant{{ir.Float32, []int{3}, floats(1, 5, 9)}},
		},
		{
			name: "trace implicit", node: ein("ii", "s"),
			inputs: []onnxpb.ValueInfo{vi("s", f, 3, 3)}, outputs: []onnxpb.ValueInfo{vi("y", f)},
			feed: map[string]*ir.Tensor{"s": sq},
			want: []gatherWant{{ir.Float32, []int{}, floats(15)}},
		},
		{
			// Batch diagonal with the repeated label before the ellipsis.
			name: "ellipsis batch diagonal", node: ein("i...i->...i", "x"),
			inputs: []onnxpb.ValueInfo{vi("x", f, 2, 2, 2)}, outputs: []onnxpb.ValueInfo{vi("y", f, 2, 2)},
			// x[i][b][j] = 100i + 10b + j; diagonal i=j: y[b][i] = 101i + 10b.
			feed: map[string]*ir.Tensor{"x": f32(t, []int{2, 2, 2}, 0, 1, 10, 11, 100, 101, 110, 111)},
			want: []gatherWant{{ir.Float32, []int{2, 2}, floats(0, 101, 10, 111)}},
		},
		{
			name: "three operands", node: ein("ij,jk,kl->il", "a", "b", "c"),
			inputs:  []onnxpb.ValueInfo{vi("a", f, 2, 3), vi("b", f, 3, 2), vi("c", f, 2, 1)},
			outputs: []onnxpb.ValueInfo{vi("y", f, 2, 1)},
			feed:    map[string]*ir.Tensor{"a": a, "b": b, "c": f32(t, []int{2, 1}, 1, -1)},
			want:    []gatherWant{{ir.Float32, []int{2, 1}, floats(-1, -1)}},
		},
		{
			// Batch axis of size 1 in a broadcasts against 2 in b.
			name: "ellipsis broadcasting", node: ein("...ij,...jk->...ik", "a", "b"),
			inputs:  []onnxpb.ValueInfo{vi("a", f, 1, 1, 2), vi("b", f, 2, 2, 1)},
			outputs: []onnxpb.ValueInfo{vi("y", f, 2, 1, 1)},
			feed:    map[string]*ir.Tensor{"a": f32(t, []int{1, 1, 2}, 1, 2), "b": f32(t, []int{2, 2, 1}, 3, 4, 5, 6)},
			want:    []gatherWant{{ir.Float32, []int{2, 1, 1}, floats(11, 17)}},
		},
		{
			name: "ellipsis summed when left out", node: ein("...i->i", "a"),
			inputs: []onnxpb.ValueInfo{vi("a", f, 2, 3)}, outputs: []onnxpb.ValueInfo{vi("y", f, 3)},
			feed: map[string]*ir.Tensor{"a": a},
			want: []gatherWant{{ir.Float32, []int{3}, floats(5, 7, 9)}},
		},
		{
			name: "outer product int32", node: ein("i,j->ij", "p", "q"),
			inputs:  []onnxpb.ValueInfo{vi("p", onnxpb.Int32, 2), vi("q", onnxpb.Int32, 3)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Int32, 2, 3)},
			feed:    map[string]*ir.Tensor{"p": i32(t, []int{2}, 2, -3), "q": i32(t, []int{3}, 1, 2, 3)},
			want:    []gatherWant{{ir.Int32, []int{2, 3}, floats(2, 4, 6, -3, -6, -9)}},
		},
		{
			// Label j contracted inside one operand and against another:
			// sum_j a[i][j] * sum_k ... here "ij,j->" = sum_ij a_ij v_j.
			name: "full contraction to scalar", node: ein("ij,j->", "a", "v"),
			inputs:  []onnxpb.ValueInfo{vi("a", f, 2, 3), vi("v", f, 3)},
			outputs: []onnxpb.ValueInfo{vi("y", f)},
			feed:    map[string]*ir.Tensor{"a": a, "v": f32(t, []int{3}, 1, 0, -1)},
			want:    []gatherWant{{ir.Float32, []int{}, floats(-4)}},
		},
		{
			name: "size mismatch", node: ein("ij,jk->ik", "a", "a2"),
			inputs:  []onnxpb.ValueInfo{vi("a", f, 2, 3), vi("a2", f, 2, 3)},
			outputs: []onnxpb.ValueInfo{vi("y", f, 2, 3)},
			feed:    map[string]*ir.Tensor{"a": a, "a2": a},
			wantErr: `label 'j' has size 2 in input 1 but 3 elsewhere`,
		},
		{
			name: "output label not in inputs", node: ein("ij->ik", "a"),
			inputs: []onnxpb.ValueInfo{vi("a", f, 2, 3)}, outputs: []onnxpb.ValueInfo{vi("y", f, 2, 3)},
			feed:    map[string]*ir.Tensor{"a": a},
			wantErr: `output label 'k' does not appear in any input term`,
		},
	})
}

func TestParseEinsum(t *testing.T) {
	cases := []struct {
		eq      string
		ranks   []int
		inputs  [][]int
		output  []int
		wantErr bool
	}{
		{eq: "ij,jk", ranks: []int{2, 2}, inputs: [][]int{{'i', 'j'}, {'j', 'k'}}, output: []int{'i', 'k'}},
		// Upper case sorts before lower case in the implicit output.
		{eq: "bA", ranks: []int{2}, inputs: [][]int{{'b', 'A'}}, output: []int{'A', 'b'}},
		// Ellipses align right: the rank-3 operand covers E0 E1, the rank-2 one E1.
		{eq: "...i,...->...", ranks: []int{3, 1}, inputs: [][]int{{1000, 1001, 'i'}, {1001}}, output: []int{1000, 1001}},
		{eq: "...ij->j...", ranks: []int{3}, inputs: [][]int{{1000, 'i', 'j'}}, output: []int{'j', 1000}},
		{eq: "ij", ranks: []int{3}, wantErr: true},
		{eq: "i.j", ranks: []int{2}, wantErr: true},
		{eq: "i1", ranks: []int{2}, wantErr: true},
		{eq: "ij->ii", ranks: []int{2}, wantErr: true},
		{eq: "ij->i->j", ranks: []int{2}, wantErr: true},
		{eq: "i,j", ranks: []int{1}, wantErr: true},
		{eq: "......", ranks: []int{2}, wantErr: true},
	}
	for _, tc := range cases {
		spec, err := parseEinsum(tc.eq, tc.ranks)
		if tc.wantErr {
			if err == nil {
				t.Errorf("%q: expected an error, got %v", tc.eq, spec)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.eq, err)
			continue
		}
		for k := range tc.inputs {
			if !equalInts(spec.inputs[k], tc.inputs[k]) {
				t.Errorf("%q: input %d labels %v, want %v", tc.eq, k, spec.inputs[k], tc.inputs[k])
			}
		}
		if !equalInts(spec.output, tc.output) {
			t.Errorf("%q: output labels %v, want %v", tc.eq, spec.output, tc.output)
		}
	}
}

// FuzzParseEinsum checks that parsing never panics and that a parsed
// equation has one label per operand axis and an output free of repeats.
func FuzzParseEinsum(f *testing.F) {
	for _, s := range []string{"ij,jk->ik", "...ii->...i", "i,i", "ba", "...,...->...", "a...b,b...c", "ij->", "..", "->"} {
		f.Add(s, uint8(2), uint8(2))
	}
	f.Fuzz(func(t *testing.T, eq string, r0, r1 uint8) {
		ranks := []int{int(r0 % 8), int(r1 % 8)}
		if len(eq) > 64 {
			return
		}
		spec, err := parseEinsum(eq, ranks)
		if err != nil {
			return
		}
		for k, labels := range spec.inputs {
			if len(labels) != ranks[k] {
				t.Fatalf("%q: input %d has %d labels for rank %d", eq, k, len(labels), ranks[k])
			}
		}
		seen := map[int]bool{}
		for _, l := range spec.output {
			if seen[l] {
				t.Fatalf("%q: output repeats label %d", eq, l)
			}
			seen[l] = true
		}
	})
}
