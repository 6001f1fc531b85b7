package onnx

import (
	"math"
	"testing"

	"github.com/tensorbridge/tensorbridge/ir"
)

// Bit patterns from the IEEE 754 binary16 encoding.
func TestF16Bits(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		bits uint16
	}{
		{1, 0x3c00},
		{-2, 0xc000},
		{65504, 0x7bff},                // largest finite
		{65519.99, 0x7bff},             // below the halfway point to 65536
		{65520, 0x7c00},                // halfway rounds to even: infinity
		{math.Inf(-1), 0xfc00},         // -inf
		{0x1p-24, 0x0001},              // smallest subnormal
		{0x1p-25, 0x0000},              // halfway to zero rounds to even (0)
		{3 * 0x1p-25, 0x0002},          // 1.5 units rounds to even (2)
		{0x1p-14, 0x0400},              // smallest normal
		{1 + 0x1p-11, 0x3c00},          // tie, rounds to even mantissa
		{1 + 3*0x1p-11, 0x3c02},        // tie, rounds up to even
		{0.1, 0x2e66},                  // 0.0999755859375
		{math.Copysign(0, -1), 0x8000}, // -0
		{2049, 0x6800},                 // 2048 + 1: tie between 2048 and 2050, even is 2048
	} {
		if got := f16Bits(tc.v); got != tc.bits {
			t.Errorf("f16Bits(%v) = %#04x, want %#04x", tc.v, got, tc.bits)
		}
	}
	if b := f16Bits(math.NaN()); b&0x7c00 != 0x7c00 || b&0x3ff == 0 {
		t.Errorf("NaN encodes as %#04x", b)
	}
	// Every finite pattern decodes and re-encodes to itself.
	for b := 0; b < 1<<16; b++ {
		if b&0x7c00 == 0x7c00 {
			continue
		}
		if got := f16Bits(f16Value(uint16(b))); got != uint16(b) {
			t.Fatalf("round trip of %#04x gives %#04x", b, got)
		}
	}
}

// Values from the round-to-nearest-even column of the reference doc's
// bfloat16 table.
func TestBF16Bits(t *testing.T) {
	for _, tc := range []struct{ v, want float64 }{
		{1.0058594, 1.0078125},
		{-2.71828, -2.71875},
		{0.1, 0.100097656},
		{65504.7, 65536},
	} {
		if got := bf16Value(bf16Bits(tc.v)); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("bf16(%v) = %v, want %v", tc.v, got, tc.want)
		}
	}
}

func TestHostTensorCast(t *testing.T) {
	h := newHostFloats(ir.Float32, []int{4}, []float64{300.7, -1.5, 0, 2.5})
	for _, tc := range []struct {
		dt   ir.DType
		want []int64
	}{
		{ir.Int8, []int64{44, -1, 0, 2}}, // 300 wraps modulo 256
		{ir.Uint8, []int64{44, 255, 0, 2}},
		{ir.Int64, []int64{300, -1, 0, 2}},
		{ir.Bool, []int64{1, 1, 0, 1}},
	} {
		c, err := h.castTo(tc.dt)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range tc.want {
			if c.i[k] != v {
				t.Errorf("cast to %s: %v, want %v", tc.dt, c.i, tc.want)
				break
			}
		}
	}
	// Round trip through an ir.Tensor.
	x, err := newHostInts(ir.Int16, []int{2}, []int64{-5, 7}).toIR()
	if err != nil {
		t.Fatal(err)
	}
	back, err := hostFromIR(x, ir.Int16).ints()
	if err != nil || back[0] != -5 || back[1] != 7 {
		t.Errorf("round trip: %v, %v", back, err)
	}
}

func TestHostDataMovement(t *testing.T) {
	x := newHostInts(ir.Int64, []int{2, 3}, []int64{1, 2, 3, 4, 5, 6})
	tr, err := x.transposed([]int{1, 0})
	if err != nil || !equalInt64(tr.i, []int64{1, 4, 2, 5, 3, 6}) || !equalInts(tr.dims, []int{3, 2}) {
		t.Errorf("transpose: %v %v %v", tr.i, tr.dims, err)
	}
	b, err := newHostInts(ir.Int64, []int{3}, []int64{7, 8, 9}).broadcastTo([]int{2, 3})
	if err != nil || !equalInt64(b.i, []int64{7, 8, 9, 7, 8, 9}) {
		t.Errorf("broadcast: %v %v", b.i, err)
	}
	cat, err := hostConcat([]*hostTensor{x, newHostInts(ir.Int64, []int{2, 1}, []int64{0, -1})}, 1)
	if err != nil || !equalInt64(cat.i, []int64{1, 2, 3, 0, 4, 5, 6, -1}) {
		t.Errorf("concat: %v %v", cat.i, err)
	}
	sel, err := hostSelect(x, [][]int{{1}, {2, 0}})
	if err != nil || !equalInt64(sel.i, []int64{6, 4}) {
		t.Errorf("select: %v %v", sel.i, err)
	}
	if _, err := broadcastDims([]int{2, 3}, []int{4}); err == nil {
		t.Error("broadcastDims accepted [2,3] with [4]")
	}
}

func equalInt64(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if a[k] != b[k] {
			return false
		}
	}
	return true
}
