package vec

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkVec runs each function on one 512-element tile per kernel. The
// throughput counts the bytes read and written (4 per float32, 1 per
// bool); the go kernel is the plain Go loop, the baseline for speedups.
func BenchmarkVec(b *testing.B) {
	const n = 512
	rng := rand.New(rand.NewPCG(21, 22))
	x, y, c := randVec(rng, n, nil), randVec(rng, n, nil), randVec(rng, n, nil)
	for i := range x { // finite operands: the timing of NaN/subnormal-free data
		x[i], y[i], c[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())+3, float32(rng.IntN(2))
	}
	d := make([]float32, n)
	bs := make([]bool, n)
	src := make([]float32, 3*n)
	type bench struct {
		name  string
		bytes int
		f     func(k kernel)
	}
	benches := []bench{
		{"Add", 12, func(k kernel) { binary(k, opAdd, d, x, y) }},
		{"Sub", 12, func(k kernel) { binary(k, opSub, d, x, y) }},
		{"Mul", 12, func(k kernel) { binary(k, opMul, d, x, y) }},
		{"Div", 12, func(k kernel) { binary(k, opDiv, d, x, y) }},
		{"Max", 12, func(k kernel) { binary(k, opMax, d, x, y) }},
		{"Min", 12, func(k kernel) { binary(k, opMin, d, x, y) }},
		{"CompareLT", 12, func(k kernel) { binary(k, opLT, d, x, y) }},
		{"AddS", 8, func(k kernel) { scalar(k, opAdd, d, x, 1.5) }},
		{"SubSR", 8, func(k kernel) { scalar(k, opSubR, d, x, 1.5) }},
		{"MulS", 8, func(k kernel) { scalar(k, opMul, d, x, 1.5) }},
		{"DivS", 8, func(k kernel) { scalar(k, opDiv, d, x, 1.5) }},
		{"MaxS", 8, func(k kernel) { scalar(k, opMax, d, x, 0) }},
		{"CompareSGE", 8, func(k kernel) { scalar(k, opGE, d, x, 0) }},
		{"Neg", 8, func(k kernel) { unary(k, opNeg, d, x) }},
		{"Abs", 8, func(k kernel) { unary(k, opAbs, d, x) }},
		{"Sqrt", 8, func(k kernel) { unary(k, opSqrt, d, y) }},
		{"NonZero", 8, func(k kernel) { unary(k, opNonZero, d, c) }},
		{"Select", 16, func(k kernel) { selectK(k, d, c, x, y) }},
		{"Fill", 4, func(k kernel) { fill(k, d, 2) }},
		{"BoolToF32", 5, func(k kernel) { boolToF32(k, d, bs) }},
		{"F32ToBool", 5, func(k kernel) { f32ToBool(k, bs, c) }},
		{"MaxReduce", 4, func(k kernel) { _ = maxReduce(k, x, 0) }},
	}
	for _, bn := range benches {
		b.Run(bn.name, func(b *testing.B) {
			for _, k := range availableKernels() {
				b.Run(k.String(), func(b *testing.B) {
					b.SetBytes(int64(bn.bytes * n))
					for b.Loop() {
						bn.f(k)
					}
				})
			}
		})
	}
	// Scalar on every kernel.
	b.Run("Gather/stride=3/go", func(b *testing.B) {
		b.SetBytes(8 * n)
		for b.Loop() {
			Gather(d, src, 3)
		}
	})
	b.Run("Sum/go", func(b *testing.B) {
		b.SetBytes(4 * n)
		for b.Loop() {
			_ = Sum(x)
		}
	})
}
