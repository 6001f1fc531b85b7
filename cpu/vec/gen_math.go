//go:build ignore

// gen_math writes math_amd64.s: Erf, Exp and Logistic on AVX-512 (F and
// DQ), eight float32 elements at a time widened to float64 lanes, so that
// each result is the float64 function rounded once to float32, as the Go
// paths (and GoMLX's reference engine) compute it.
//
// Erf evaluates the Chebyshev series of erf.go by Clenshaw's recurrence,
// both branches for every lane and a masked blend (no per-element branch).
// Exp reduces x = k·ln2 + r (|r| ≤ ln2/2, ln2 split in two so k·ln2_hi is
// exact) and sums exp(r)'s Taylor series to r¹²/12! (truncation below
// 2e-16 relative), then scales by 2^k built in the exponent bits.
//
//	go run gen_math.go
package main

import (
	"fmt"
	"math"
	"os"
	"strings"
)

var b strings.Builder

func p(format string, args ...any) { fmt.Fprintf(&b, "\t"+format+"\n", args...) }

// clenshaw emits the recurrence for n coefficients; coef(j, dst) loads
// coefficient j into dst; t and t2 hold t and 2t; regs are three scratch
// registers; the sum is left in the returned register.
func clenshaw(n int, coef func(j int, dst string), t, t2 string, regs [3]string) string {
	b1, b2, nw := regs[0], regs[1], regs[2]
	coef(n-1, b1)
	coef(n-2, b2)
	p("VFMADD231PD %s, %s, %s", b1, t2, b2) // b(n-2) = 2t·c(n-1) + c(n-2); b(n-1) = c(n-1)
	b1, b2 = b2, b1
	for j := n - 3; j >= 1; j-- {
		coef(j, nw)
		p("VSUBPD %s, %s, %s", b2, nw, nw)
		p("VFMADD231PD %s, %s, %s", b1, t2, nw)
		b1, b2, nw = nw, b1, b2
	}
	coef(0, nw)
	p("VSUBPD %s, %s, %s", b2, nw, nw)
	p("VFMADD231PD %s, %s, %s", b1, t, nw)
	return nw
}

// body computes erf of the float64 lanes of Z0 into Y16 (float32).
func body() {
	p("VANDPD Z23, Z0, Z1") // |x|
	// |x| < 1: x·g(u), u = x², t = 2u - 1.
	p("VMULPD Z0, Z0, Z2")
	p("VADDPD Z2, Z2, Z2")
	p("VSUBPD Z20, Z2, Z2")
	p("VADDPD Z2, Z2, Z3")
	small := clenshaw(smallN, func(j int, dst string) { p("VBROADCASTSD %d(R8), %s", 8*j, dst) },
		"Z2", "Z3", [3]string{"Z10", "Z11", "Z12"})
	p("VMULPD Z0, %s, Z17", small)
	// 1 ≤ |x| < 4: interval i = clamp(floor|x|, 1, 3), t = 2(|x| - i) - 1.
	p("VRNDSCALEPD $1, Z1, Z4")
	p("VMAXPD Z20, Z4, Z4")
	p("VMINPD Z21, Z4, Z4")
	p("VSUBPD Z4, Z1, Z5")
	p("VADDPD Z5, Z5, Z5")
	p("VSUBPD Z20, Z5, Z5")
	p("VADDPD Z5, Z5, Z7")
	p("VSUBPD Z20, Z4, Z4")
	p("VCVTTPD2QQ Z4, Z6")
	large := clenshaw(largeN, func(j int, dst string) { p("VPERMPD %d(R9), Z6, %s", 64*j, dst) },
		"Z5", "Z7", [3]string{"Z13", "Z14", "Z15"})
	p("VANDPD Z24, Z0, Z8") // sign of x
	p("VORPD Z8, %s, Z16", large)
	p("VCMPPD $1, Z20, Z1, K1") // |x| < 1
	p("VMOVAPD Z17, K1, Z16")
	p("VORPD Z8, Z20, Z9")       // ±1
	p("VCMPPD $13, Z22, Z1, K2") // |x| ≥ 4
	p("VMOVAPD Z9, K2, Z16")
	p("VCMPPD $3, Z0, Z0, K3") // NaN: math.Erf's own NaN, whatever the input's payload
	p("VBROADCASTSD mathnan<>(SB), Z19")
	p("VMOVAPD Z19, K3, Z16")
	p("VCVTPD2PS Z16, Y16")
}

const (
	smallN = 12 // the series lengths of erf.go
	largeN = 16
	expN   = 12 // the degree of exp's Taylor polynomial
)

// expBody sets Z16 to exp of the float64 lanes of Z3, clamped to
// [-110, 89] first (beyond, the float32 result is 0 or +Inf either way);
// NaN lanes are the caller's to blend. Uses Z2, Z4, Z5.
func expBody() {
	p("VMAXPD Z26, Z3, Z3")
	p("VMINPD Z27, Z3, Z3")
	p("VMULPD Z28, Z3, Z2")
	p("VRNDSCALEPD $0, Z2, Z2") // k, to nearest
	p("VFNMADD231PD Z29, Z2, Z3")
	p("VFNMADD231PD Z30, Z2, Z3") // r = x - k·ln2
	p("VBROADCASTSD exptaylor<>+%d(SB), Z16", 8*expN)
	for j := expN - 1; j >= 0; j-- {
		p("VBROADCASTSD exptaylor<>+%d(SB), Z5", 8*j)
		p("VFMADD213PD Z5, Z3, Z16") // Z16 = Z16·r + c_j
	}
	p("VCVTPD2QQ Z2, Z4")
	p("VPADDQ Z31, Z4, Z4")
	p("VPSLLQ $52, Z4, Z4") // 2^k
	p("VMULPD Z4, Z16, Z16")
}

// kernel writes one function: load eight (or a masked tail of) float32
// into Z0 as float64, body computes Y16, store.
func kernel(name, params string, frame int, prologue []string, body func()) {
	fmt.Fprintf(&b, "// func %s(%s)\nTEXT ·%s(SB), NOSPLIT, $0-%d\n", name, params, name, frame)
	p("MOVQ d+0(FP), DI")
	p("MOVQ a+8(FP), SI")
	p("MOVQ n+16(FP), CX")
	for _, l := range prologue {
		p("%s", l)
	}
	for i, c := range []string{"one", "three", "four", "abs", "sign", "xmin", "xmax", "log2e", "ln2hi", "ln2lo", "bias"} {
		p("VBROADCASTSD math%s<>(SB), Z%d", c, 20+i+boolInt(i > 4))
	}
	p("VXORPD Z25, Z25, Z25")
	fmt.Fprintf(&b, "%s_loop:\n", name)
	p("CMPQ CX, $8")
	p("JLT %s_tail", name)
	p("VCVTPS2PD (SI), Z0")
	body()
	p("VMOVUPS Y16, (DI)")
	p("ADDQ $32, SI")
	p("ADDQ $32, DI")
	p("SUBQ $8, CX")
	p("JMP %s_loop", name)
	fmt.Fprintf(&b, "%s_tail:\n", name)
	p("TESTQ CX, CX")
	p("JEQ %s_done", name)
	p("MOVL $1, AX")
	p("SHLL CX, AX")
	p("DECL AX")
	p("KMOVW AX, K4")
	p("VMOVUPS.Z (SI), K4, Y0")
	p("VCVTPS2PD Y0, Z0")
	body()
	p("VMOVUPS Y16, K4, (DI)")
	fmt.Fprintf(&b, "%s_done:\n", name)
	p("VZEROUPPER")
	p("RET\n")
}

// boolInt skips Z25 (zero) between the erf constants (Z20-Z24) and
// exp's (Z26-Z31).
func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}

// nanBlend keeps NaN inputs (Z0) as the result, as the Go paths do.
func nanBlend() {
	p("VCMPPD $3, Z0, Z0, K3")
	p("VMOVAPD Z0, K3, Z16")
}

// The AVX2 kernels: four float64 lanes per YMM register, constants read
// from 32-byte memory vectors (sixteen registers leave none to hold them),
// blends by VBLENDVPD, the interval's coefficients picked by VPERMD on
// dword pairs, and 2^k built with the 2^52+2^51 rounding trick (AVX2 has
// no float64 → int64 conversion).

// c4 names a 32-byte constant.
func c4(name string) string { return "math" + name + "4<>(SB)" }

// erfBody2 computes erf of the float64 lanes of Y0 into Y10.
func erfBody2() {
	p("VANDPD %s, Y0, Y1", c4("abs"))
	p("VMULPD Y0, Y0, Y2")
	p("VADDPD Y2, Y2, Y2")
	p("VSUBPD %s, Y2, Y2", c4("one"))
	p("VADDPD Y2, Y2, Y3")
	small := clenshaw(smallN, func(j int, dst string) { p("VBROADCASTSD %d(R8), %s", 8*j, dst) },
		"Y2", "Y3", [3]string{"Y10", "Y11", "Y12"})
	p("VMULPD Y0, %s, Y8", small)
	p("VROUNDPD $1, Y1, Y4")
	p("VMAXPD %s, Y4, Y4", c4("one"))
	p("VMINPD %s, Y4, Y4", c4("three"))
	p("VSUBPD Y4, Y1, Y5")
	p("VADDPD Y5, Y5, Y5")
	p("VSUBPD %s, Y5, Y5", c4("one"))
	p("VADDPD Y5, Y5, Y7")
	p("VSUBPD %s, Y4, Y4", c4("one"))
	p("VCVTTPD2DQY Y4, X6")
	p("VPMOVZXDQ X6, Y6")
	p("VPSLLQ $1, Y6, Y6")
	p("VPSLLQ $32, Y6, Y9")
	p("VPOR Y9, Y6, Y6")
	p("VPADDQ %s, Y6, Y6", c4("pairinc")) // dwords (2i, 2i+1): lane i's float64
	large := clenshaw(largeN, func(j int, dst string) { p("VPERMD %d(R9), Y6, %s", 64*j, dst) },
		"Y5", "Y7", [3]string{"Y13", "Y14", "Y15"})
	p("VANDPD %s, Y0, Y9", c4("sign"))
	p("VORPD Y9, %s, Y11", large)
	p("VCMPPD $1, %s, Y1, Y2", c4("one"))
	p("VBLENDVPD Y2, Y8, Y11, Y10")
	p("VORPD %s, Y9, Y9", c4("one"))
	p("VCMPPD $13, %s, Y1, Y2", c4("four"))
	p("VBLENDVPD Y2, Y9, Y10, Y10")
	p("VCMPPD $3, Y0, Y0, Y2")
	p("VBLENDVPD Y2, %s, Y10, Y10", c4("nan"))
}

// expBody2 sets Y8 to exp of the lanes of Y3 (clamped first); uses Y2,
// Y4, Y5.
func expBody2() {
	p("VMAXPD %s, Y3, Y3", c4("xmin"))
	p("VMINPD %s, Y3, Y3", c4("xmax"))
	p("VMULPD %s, Y3, Y2", c4("log2e"))
	p("VROUNDPD $0, Y2, Y2")
	p("VFNMADD231PD %s, Y2, Y3", c4("ln2hi"))
	p("VFNMADD231PD %s, Y2, Y3", c4("ln2lo"))
	p("VBROADCASTSD exptaylor<>+%d(SB), Y8", 8*expN)
	for j := expN - 1; j >= 0; j-- {
		p("VBROADCASTSD exptaylor<>+%d(SB), Y5", 8*j)
		p("VFMADD213PD Y5, Y3, Y8")
	}
	p("VADDPD %s, Y2, Y4", c4("magic"))
	p("VPSUBQ %s, Y4, Y4", c4("magic"))
	p("VPADDQ %s, Y4, Y4", c4("bias"))
	p("VPSLLQ $52, Y4, Y4")
	p("VMULPD Y4, Y8, Y8")
}

// kernel2 writes one AVX2 function: four float32 at a time (a masked
// tail), body leaving its float64 result in register res.
func kernel2(name, params string, frame int, prologue []string, res string, body func()) {
	fmt.Fprintf(&b, "// func %s(%s)\nTEXT ·%s(SB), NOSPLIT, $0-%d\n", name, params, name, frame)
	p("MOVQ d+0(FP), DI")
	p("MOVQ a+8(FP), SI")
	p("MOVQ n+16(FP), CX")
	for _, l := range prologue {
		p("%s", l)
	}
	x := "X" + res[1:]
	fmt.Fprintf(&b, "%s_loop:\n", name)
	p("CMPQ CX, $4")
	p("JLT %s_tail", name)
	p("VCVTPS2PD (SI), Y0")
	body()
	p("VCVTPD2PSY %s, %s", res, x)
	p("VMOVUPS %s, (DI)", x)
	p("ADDQ $16, SI")
	p("ADDQ $16, DI")
	p("SUBQ $4, CX")
	p("JMP %s_loop", name)
	fmt.Fprintf(&b, "%s_tail:\n", name)
	p("TESTQ CX, CX")
	p("JEQ %s_done", name)
	p("LEAQ mathtailmask<>(SB), AX")
	p("MOVQ $4, DX")
	p("SUBQ CX, DX")
	p("SHLQ $2, DX")
	p("VMOVDQU (AX)(DX*1), X15")
	p("VMASKMOVPS (SI), X15, X0")
	p("VCVTPS2PD X0, Y0")
	body()
	p("VCVTPD2PSY %s, %s", res, x)
	p("VMOVDQU (AX)(DX*1), X15")
	p("VMASKMOVPS %s, X15, (DI)", x)
	fmt.Fprintf(&b, "%s_done:\n", name)
	p("VZEROUPPER")
	p("RET\n")
}

func main() {
	b.WriteString("// Code generated by gen_math.go; DO NOT EDIT.\n\n//go:build !purego\n\n#include \"textflag.h\"\n\n")
	consts := []struct {
		name string
		bits uint64
	}{{"one", 0x3ff0000000000000}, {"three", 0x4008000000000000}, {"four", 0x4010000000000000},
		{"abs", 0x7fffffffffffffff}, {"sign", 0x8000000000000000},
		{"xmin", math.Float64bits(-110)}, {"xmax", math.Float64bits(89)}, {"log2e", math.Float64bits(math.Log2E)},
		{"ln2hi", 0x3fe62e42fee00000}, {"ln2lo", 0x3dea39ef35793c76}, {"bias", 1023}, {"nan", math.Float64bits(math.NaN())}}
	for _, c := range consts {
		fmt.Fprintf(&b, "DATA math%s<>+0(SB)/8, $0x%016x\nGLOBL math%s<>(SB), RODATA|NOPTR, $8\n\n", c.name, c.bits, c.name)
	}
	fact := 1.0
	for j := 0; j <= expN; j++ {
		if j > 0 {
			fact *= float64(j)
		}
		fmt.Fprintf(&b, "DATA exptaylor<>+%d(SB)/8, $0x%016x\n", 8*j, math.Float64bits(1/fact))
	}
	fmt.Fprintf(&b, "GLOBL exptaylor<>(SB), RODATA|NOPTR, $%d\n\n", 8*(expN+1))
	kernel("erfAVX512", "d, a *float32, n int, small *[12]float64, large *[16][8]float64", 40,
		[]string{"MOVQ small+24(FP), R8", "MOVQ large+32(FP), R9"}, body)
	kernel("expAVX512", "d, a *float32, n int", 24, nil, func() {
		p("VMOVAPD Z0, Z3")
		expBody()
		nanBlend()
		p("VCVTPD2PS Z16, Y16")
	})
	// logistic(x) = 1/(1+e) for x ≥ 0 and e/(1+e) below, e = exp(-|x|),
	// the Go path's formula.
	kernel("logisticAVX512", "d, a *float32, n int", 24, nil, func() {
		p("VANDPD Z23, Z0, Z3")
		p("VXORPD Z24, Z3, Z3") // -|x|
		expBody()
		p("VADDPD Z20, Z16, Z17")   // 1 + e
		p("VDIVPD Z17, Z16, Z18")   // e/(1+e)
		p("VDIVPD Z17, Z20, Z16")   // 1/(1+e)
		p("VCMPPD $1, Z25, Z0, K1") // x < 0
		p("VMOVAPD Z18, K1, Z16")
		nanBlend()
		p("VCVTPD2PS Z16, Y16")
	})
	consts4 := []struct {
		name string
		bits uint64
	}{{"one", 0x3ff0000000000000}, {"three", 0x4008000000000000}, {"four", 0x4010000000000000},
		{"abs", 0x7fffffffffffffff}, {"sign", 0x8000000000000000}, {"nan", math.Float64bits(math.NaN())},
		{"xmin", math.Float64bits(-110)}, {"xmax", math.Float64bits(89)}, {"log2e", math.Float64bits(math.Log2E)},
		{"ln2hi", 0x3fe62e42fee00000}, {"ln2lo", 0x3dea39ef35793c76}, {"bias", 1023},
		{"magic", math.Float64bits(0x1.8p52)}, {"pairinc", 1 << 32}}
	for _, c := range consts4 {
		for l := range 4 {
			fmt.Fprintf(&b, "DATA math%s4<>+%d(SB)/8, $0x%016x\n", c.name, 8*l, c.bits)
		}
		fmt.Fprintf(&b, "GLOBL math%s4<>(SB), RODATA|NOPTR, $32\n\n", c.name)
	}
	for l := range 8 {
		v := uint32(0)
		if l < 4 {
			v = 0xffffffff
		}
		fmt.Fprintf(&b, "DATA mathtailmask<>+%d(SB)/4, $0x%08x\n", 4*l, v)
	}
	b.WriteString("GLOBL mathtailmask<>(SB), RODATA|NOPTR, $32\n\n")
	kernel2("erfAVX2", "d, a *float32, n int, small *[12]float64, large *[16][8]float64", 40,
		[]string{"MOVQ small+24(FP), R8", "MOVQ large+32(FP), R9"}, "Y10", erfBody2)
	kernel2("expAVX2", "d, a *float32, n int", 24, nil, "Y8", func() {
		p("VMOVAPD Y0, Y3")
		expBody2()
		p("VCMPPD $3, Y0, Y0, Y2")
		p("VBLENDVPD Y2, Y0, Y8, Y8")
	})
	kernel2("logisticAVX2", "d, a *float32, n int", 24, nil, "Y8", func() {
		p("VANDPD %s, Y0, Y3", c4("abs"))
		p("VXORPD %s, Y3, Y3", c4("sign"))
		expBody2()
		p("VADDPD %s, Y8, Y9", c4("one"))
		p("VDIVPD Y9, Y8, Y10")
		p("VMOVUPD %s, Y11", c4("one"))
		p("VDIVPD Y9, Y11, Y11")
		p("VXORPD Y12, Y12, Y12")
		p("VCMPPD $1, Y12, Y0, Y2")
		p("VBLENDVPD Y2, Y10, Y11, Y8")
		p("VCMPPD $3, Y0, Y0, Y2")
		p("VBLENDVPD Y2, Y0, Y8, Y8")
	})
	if err := os.WriteFile("math_amd64.s", []byte(b.String()), 0o644); err != nil {
		panic(err)
	}
}
