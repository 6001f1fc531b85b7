package lower

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

func filled[T any](n int, v T) []T {
	s := make([]T, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// TestHoistedConstants checks which constants are hoisted, where their
// hidden parameters go, and the hexadecimal form CompileText writes. The
// expected hex strings are the IEEE 754 / two's complement encodings of
// the values, little-endian (1.0f32 = 0x3F800000, 1.0bf16 = 0x3F80).
func TestHoistedConstants(t *testing.T) {
	const n = HoistThreshold
	cases := []struct {
		name       string
		param      string // user parameter, declared after the constant; "" for none
		flat       any
		dims       []int
		hoisted    bool
		textHeader string // the signature in Text
		compHeader string // the signature CompileText writes
		elemHex    string // one element of the constant, as CompileText writes it
	}{
		{"f32 before param", "x", filled(n, float32(1)), []int{n}, true,
			"@main(%x: tensor<4096xf32>, %hoisted_const_0: tensor<4096xf32>)", "@main(%x: tensor<4096xf32>)", "0000803f"},
		{"f32 no params", "", filled(n, float32(1)), []int{64, 64}, true,
			"@main(%hoisted_const_0: tensor<64x64xf32>)", "@main()", "0000803f"},
		{"go int is int64", "x", filled(n, 1), []int{n}, true,
			"@main(%x: tensor<4096xf32>, %hoisted_const_0: tensor<4096xi64>)", "@main(%x: tensor<4096xf32>)", "0100000000000000"},
		{"bf16", "x", filled(n, bfloat16.FromFloat32(1)), []int{n}, true,
			"@main(%x: tensor<4096xf32>, %hoisted_const_0: tensor<4096xbf16>)", "@main(%x: tensor<4096xf32>)", "803f"},
		{"int8 -1", "x", filled(n, int8(-1)), []int{n}, true,
			"@main(%x: tensor<4096xf32>, %hoisted_const_0: tensor<4096xi8>)", "@main(%x: tensor<4096xf32>)", "ff"},
		{"below threshold", "x", filled(n-1, float32(1)), []int{n - 1}, false, "@main(%x: tensor<4096xf32>)", "", ""},
		{"bool stays literal", "x", filled(n, true), []int{n}, false, "@main(%x: tensor<4096xf32>)", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := New("m", 1)
			c, err := b.Constant(tc.flat, tc.dims...)
			if err != nil {
				t.Fatal(err)
			}
			outs := []backends.Op{c}
			if tc.param != "" {
				x, err := b.Parameter(tc.param, shapes.Make(dtypes.Float32, n), nil)
				if err != nil {
					t.Fatal(err)
				}
				outs = append(outs, x)
			}
			p, err := b.Finish(outs, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(p.Text), tc.textHeader+" ->") {
				t.Errorf("Text lacks signature %q:\n%.400s", tc.textHeader, p.Text)
			}
			wantParams := 0
			if tc.param != "" {
				wantParams = 1
			}
			if len(p.ParamShapes) != wantParams {
				t.Errorf("ParamShapes = %v, want only the user's parameter", p.ParamShapes)
			}
			ct, err := p.CompileText()
			if err != nil {
				t.Fatal(err)
			}
			if !tc.hoisted {
				if len(p.Constants) != 0 || p.WeightsDigest != "" || !bytes.Equal(ct, p.Text) {
					t.Fatalf("constant was hoisted: %d constants, digest %q", len(p.Constants), p.WeightsDigest)
				}
				return
			}
			if len(p.Constants) != 1 || !strings.HasPrefix(p.WeightsDigest, "sha256:") {
				t.Fatalf("got %d hoisted constants, digest %q; want 1", len(p.Constants), p.WeightsDigest)
			}
			if strings.Contains(string(ct), "hoisted_const_0:") || !strings.Contains(string(ct), tc.compHeader+" ->") {
				t.Errorf("CompileText signature is not %q:\n%.400s", tc.compHeader, ct)
			}
			want := `%hoisted_const_0 = stablehlo.constant dense<"0x` + strings.Repeat(tc.elemHex, n) + `"> : `
			if !strings.Contains(string(ct), want) {
				t.Errorf("CompileText lacks the constant %.80s...:\n%.400s", want, ct)
			}
		})
	}
}

// TestWeightsDigest checks that the digest follows the hoisted values,
// dtype and dimensions, and that the text does not.
func TestWeightsDigest(t *testing.T) {
	build := func(flat any, dims ...int) *Program {
		t.Helper()
		b := New("m", 1)
		c, err := b.Constant(flat, dims...)
		if err != nil {
			t.Fatal(err)
		}
		p, err := b.Finish([]backends.Op{c}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	base := build(filled(4096, float32(1)), 4096)
	other := filled(4096, float32(1))
	other[4095] = 2
	cases := []struct {
		name     string
		p        *Program
		sameText bool
		sameSum  bool
	}{
		{"same values", build(filled(4096, float32(1)), 4096), true, true},
		{"one value differs", build(other, 4096), true, false},
		{"other dims", build(filled(4096, float32(1)), 64, 64), false, false},
		{"other dtype, same bytes", build(filled(4096, int32(0x3f800000)), 4096), false, false},
	}
	for _, tc := range cases {
		if got := bytes.Equal(tc.p.Text, base.Text); got != tc.sameText {
			t.Errorf("%s: same text = %v, want %v", tc.name, got, tc.sameText)
		}
		if got := tc.p.WeightsDigest == base.WeightsDigest; got != tc.sameSum {
			t.Errorf("%s: same digest = %v, want %v", tc.name, got, tc.sameSum)
		}
	}
}

// TestReservedHoistedName checks that a user parameter cannot take a
// hoisted constant's name.
func TestReservedHoistedName(t *testing.T) {
	b := New("m", 1)
	x, err := b.Parameter("hoisted_const_0", shapes.Make(dtypes.Float32, 2), nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := b.Constant(filled(4096, float32(0)), 4096)
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.Finish([]backends.Op{x, c}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "@main(%param_hoisted_const_0: tensor<2xf32>, %hoisted_const_0: tensor<4096xf32>)"; !strings.Contains(string(p.Text), want) {
		t.Errorf("Text lacks %q:\n%.300s", want, p.Text)
	}
}
