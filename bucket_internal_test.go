package tensorbridge

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
)

// Padding puts the source in the leading corner and zeros elsewhere;
// slicing takes the leading corner back: checked element by element.
func TestPadAndSliceExact(t *testing.T) {
	src := make([]int32, 2*3*2)
	for i := range src {
		src[i] = int32(i + 1)
	}
	x := tensors.FromFlatDataAndDimensions(src, 2, 3, 2)
	p, err := padTensor(x, []int{4, 4, 3})
	if err != nil {
		t.Fatal(err)
	}
	got := tensors.MustCopyFlatData[int32](p)
	for i := 0; i < 4; i++ {
		for j := 0; j < 4; j++ {
			for k := 0; k < 3; k++ {
				want := int32(0)
				if i < 2 && j < 3 && k < 2 {
					want = src[(i*3+j)*2+k]
				}
				if g := got[(i*4+j)*3+k]; g != want {
					t.Fatalf("padded[%d,%d,%d] = %d, want %d", i, j, k, g, want)
				}
			}
		}
	}
	back, err := sliceTensor(p, []int{2, 3, 2})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range tensors.MustCopyFlatData[int32](back) {
		if v != src[i] {
			t.Fatalf("sliced back[%d] = %d, want %d", i, v, src[i])
		}
	}
	// Zero-size and same-shape edge cases.
	if same, err := padTensor(x, []int{2, 3, 2}); err != nil || same != x {
		t.Fatalf("same-shape pad: %v", err)
	}
	empty, err := sliceTensor(p, []int{0, 4, 3})
	if err != nil || empty.Shape().Size() != 0 {
		t.Fatalf("zero-size slice: %v %v", empty, err)
	}
}

func TestPlanBucketsRules(t *testing.T) {
	sym := func(n string) onnx.Dim { return onnx.Dim{Param: n, Value: -1} }
	fix := func(v int) onnx.Dim { return onnx.Dim{Value: v} }
	spec := func(name string, dims ...onnx.Dim) ValueSpec {
		return ValueSpec{Name: name, DType: ir.Float32, Dims: dims, RankKnown: true}
	}
	tests := []struct {
		name        string
		in, out     []ValueSpec
		valueInputs []string
		bucketed    []string
		exact       []string
	}{
		{"batch axis", []ValueSpec{spec("x", sym("batch"), fix(64))}, []ValueSpec{spec("y", sym("batch"), fix(10))}, nil,
			[]string{"batch"}, nil},
		{"sequence without mask", []ValueSpec{spec("ids", sym("batch"), sym("seq"))}, []ValueSpec{spec("h", sym("batch"), sym("seq"))}, nil,
			[]string{"batch"}, []string{"seq"}},
		{"sequence with mask", []ValueSpec{spec("ids", sym("batch"), sym("seq")), spec("attention_mask", sym("batch"), sym("seq"))},
			[]ValueSpec{spec("h", sym("batch"), sym("seq"))}, nil, []string{"batch", "seq"}, nil},
		{"value input", []ValueSpec{spec("shape", sym("n"))}, []ValueSpec{spec("y", sym("batch"))}, []string{"shape"},
			[]string{"batch"}, []string{"n"}},
	}
	for _, tc := range tests {
		p := planBuckets(tc.in, tc.out, tc.valueInputs)
		for _, d := range tc.bucketed {
			if !p.dims[d] {
				t.Errorf("%s: %s not bucketed (%s)", tc.name, d, p)
			}
		}
		for _, d := range tc.exact {
			if p.dims[d] || p.skipped[d] == "" {
				t.Errorf("%s: %s should be exact with a reason (%s)", tc.name, d, p)
			}
		}
	}
}
