package lower

import (
	"strings"
	"testing"
)

// A zero-size constant must come out as a broadcast scalar: go-xla's literal
// for a 2x0x5 tensor has too few nesting levels and XLA refuses it (seen in
// the ONNX tests slice_start_out_of_bounds, tril_zero, triu_zero).
func TestZeroSizeConstant(t *testing.T) {
	for _, dims := range [][]int{{0}, {2, 0, 5}, {3, 0}} {
		b := New("zero", 1)
		c, err := b.Constant(make([]float32, 0), dims...)
		if err != nil {
			t.Fatalf("%v: %v", dims, err)
		}
		s, _ := b.OpShape(c)
		if got, want := s.String(), sh(f32, dims...).String(); got != want {
			t.Fatalf("shape %s, want %s", got, want)
		}
		prog, err := b.Finish([]op{c}, nil)
		if err != nil {
			t.Fatal(err)
		}
		text := string(prog.Text)
		if !strings.Contains(text, "stablehlo.broadcast_in_dim") || strings.Contains(text, "dense<[") {
			t.Errorf("%v: want a broadcast scalar, got:\n%s", dims, text)
		}
	}
}
