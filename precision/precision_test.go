package precision

import (
	"encoding/json"
	"math"
	"os"
	"testing"
)

type vectorFile struct {
	Source  string      `json:"source"`
	Vectors [][3]uint32 `json:"vectors"` // float32 bits, bfloat16 bits, float16 bits
}

func loadVectors(t testing.TB) vectorFile {
	b, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vectorFile
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Vectors) < 5000 {
		t.Fatalf("only %d vectors", len(v.Vectors))
	}
	return v
}

func isNaN16(h uint16, expMask uint16) bool {
	return h&expMask == expMask && h&^(expMask|0x8000) != 0
}

// Against conversions recorded from PyTorch (bfloat16) and NumPy (float16).
func TestAgainstRecordedReferences(t *testing.T) {
	v := loadVectors(t)
	t.Logf("reference: %s", v.Source)
	for _, vec := range v.Vectors {
		f := math.Float32frombits(vec[0])
		wantBF, wantF16 := uint16(vec[1]), uint16(vec[2])
		gotBF, gotF16 := BFloat16(f), Float16(f)
		if f != f {
			// NaN: payload bits are implementation-defined. PyTorch returns
			// 0xffff for every NaN; we keep the input's sign and top payload
			// bits, as XLA does, so only NaN-ness is compared for bfloat16.
			if !isNaN16(gotBF, 0x7f80) || gotBF&0x8000 != uint16(vec[0]>>16)&0x8000 {
				t.Errorf("BFloat16(NaN %#08x) = %#04x, want a NaN with the input's sign", vec[0], gotBF)
			}
			if !isNaN16(gotF16, 0x7c00) || gotF16&0x8000 != wantF16&0x8000 {
				t.Errorf("Float16(NaN %#08x) = %#04x, want a NaN with sign of %#04x", vec[0], gotF16, wantF16)
			}
			continue
		}
		if gotBF != wantBF {
			t.Errorf("BFloat16(%#08x = %g) = %#04x, want %#04x", vec[0], f, gotBF, wantBF)
		}
		if gotF16 != wantF16 {
			t.Errorf("Float16(%#08x = %g) = %#04x, want %#04x", vec[0], f, gotF16, wantF16)
		}
	}
}

// Hand-checked cases, by exact arithmetic on the bit patterns.
func TestNamedCases(t *testing.T) {
	tests := []struct {
		name string
		in   uint32
		bf   uint16
		f16  uint16
	}{
		{"one", 0x3f800000, 0x3f80, 0x3c00},
		{"bf16 tie rounds down to even", 0x3f808000, 0x3f80, 0x3c04},
		{"bf16 tie rounds up to even", 0x3f818000, 0x3f82, 0x3c0c},
		{"1.0058594 -> 1.0078125 (GoMLX truncates to 1)", 0x3f80c000, 0x3f81, 0x3c06},
		{"65504 is the largest float16", 0x477fe000, 0x4780, 0x7bff},
		{"65520 ties to infinity in float16", 0x477ff000, 0x4780, 0x7c00},
		{"2^-24 smallest float16 subnormal", 0x33800000, 0x3380, 0x0001},
		{"2^-25 ties to zero", 0x33000000, 0x3300, 0x0000},
		{"1.5*2^-24 ties to even subnormal 2", 0x33c00000, 0x33c0, 0x0002},
		{"largest float32 overflows bf16", 0x7f7fffff, 0x7f80, 0x7c00},
		{"negative zero", 0x80000000, 0x8000, 0x8000},
		{"-inf", 0xff800000, 0xff80, 0xfc00},
		{"float32 subnormal tie to even", 0x00018000, 0x0002, 0x0000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := math.Float32frombits(tc.in)
			if got := BFloat16(f); got != tc.bf {
				t.Errorf("BFloat16 = %#04x, want %#04x", got, tc.bf)
			}
			if got := Float16(f); got != tc.f16 {
				t.Errorf("Float16 = %#04x, want %#04x", got, tc.f16)
			}
		})
	}
	// A signalling NaN whose payload lies only in the low 16 bits must not
	// become infinity, as truncation would make it.
	if got := BFloat16(math.Float32frombits(0x7f800001)); !isNaN16(got, 0x7f80) {
		t.Errorf("BFloat16(sNaN) = %#04x, want NaN", got)
	}
}

// Every 16-bit pattern converts to float32 and back unchanged (NaNs stay NaN).
func TestRoundTripAll16BitPatterns(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		u := uint16(h)
		if f := FromBFloat16(u); f == f && BFloat16(f) != u {
			t.Fatalf("bfloat16 %#04x -> %g -> %#04x", u, f, BFloat16(f))
		}
		f := FromFloat16(u)
		if f != f {
			if !isNaN16(Float16(f), 0x7c00) {
				t.Fatalf("float16 NaN %#04x did not stay NaN", u)
			}
			continue
		}
		if Float16(f) != u {
			t.Fatalf("float16 %#04x -> %g -> %#04x", u, f, Float16(f))
		}
	}
}

func TestRelativeL2(t *testing.T) {
	if got := RelativeL2([]float32{3, 4}, []float32{3, 4}); got != 0 {
		t.Fatalf("identical: %g", got)
	}
	// ||(0,1)|| / ||(3,4)|| = 1/5 exactly.
	if got := RelativeL2([]float32{3, 5}, []float32{3, 4}); math.Abs(got-0.2) > 1e-15 {
		t.Fatalf("got %g, want 0.2", got)
	}
	if got := RelativeL2([]float32{1}, []float32{0}); !math.IsInf(got, 1) {
		t.Fatalf("got %g, want +Inf", got)
	}
}

func BenchmarkBFloat16s(b *testing.B) {
	src := make([]float32, 1<<16)
	for i := range src {
		src[i] = float32(i) * 0.37
	}
	dst := make([]uint16, len(src))
	b.SetBytes(int64(4 * len(src)))
	for b.Loop() {
		BFloat16s(dst, src)
	}
}
