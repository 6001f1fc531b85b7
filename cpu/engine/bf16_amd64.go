//go:build !purego

package engine

import "golang.org/x/sys/cpu"

// bf16AVX2 says whether the AVX2 conversion loops of bf16_amd64.s run
// (x/sys/cpu reports AVX2 only when the OS saves its registers).
var bf16AVX2 = cpu.X86.HasAVX2

//go:noescape
func roundBF16AVX2(d, a *float32, n int)

//go:noescape
func narrowBF16AVX2(d *uint16, a *float32, n int)

//go:noescape
func widenBF16AVX2(d *float32, h *uint16, n int)

// roundBF16Arch rounds the leading whole vectors of a into d and returns
// how many values it did; len(a) ≥ len(d).
func roundBF16Arch(d, a []float32) int {
	n := len(d) &^ 7
	if !bf16AVX2 || n == 0 {
		return 0
	}
	roundBF16AVX2(&d[0], &a[0], n)
	return n
}

// narrowBF16Arch converts the leading whole vectors of a to bfloat16 bits
// in d and returns how many values it did; len(a) ≥ len(d).
func narrowBF16Arch(d []uint16, a []float32) int {
	n := len(d) &^ 15
	if !bf16AVX2 || n == 0 {
		return 0
	}
	narrowBF16AVX2(&d[0], &a[0], n)
	return n
}

// widenBF16Arch widens the leading whole vectors of h into d and returns
// how many values it did; len(h) ≥ len(d).
func widenBF16Arch(d []float32, h []uint16) int {
	n := len(d) &^ 7
	if !bf16AVX2 || n == 0 {
		return 0
	}
	widenBF16AVX2(&d[0], &h[0], n)
	return n
}
