// Package gemv multiplies a few rows of activations by a row-major weight
// matrix on the CPU: y[m, n] = Σ_k x[m, k]·W[n, k], the shape of LLM decode
// steps and batch-1 MLP inference.
//
// With M ≤ 16 rows of x such a product is bound by memory bandwidth: every
// weight is used M times at most, so the kernels stream W exactly once, in
// place (no packing copy), four rows at a time, keeping one SIMD accumulator
// per (x row, W row) pair in registers and summing its lanes at the end.
// The int8 variant reads a quarter of the bytes and dequantizes per output
// row after the sum. The kernels prefetch the weights a few blocks ahead,
// so that each thread streams them at the memory's bandwidth rather than
// its latency. F32KN (kn.go) is the product by a row-major K×N matrix,
// the values of attention over a KV cache, also read in place.
//
//go:generate go run gen_asm.go
//go:generate go run gen_neon.go
package gemv

import (
	"fmt"
	"math"

	"github.com/tensorbridge/tensorbridge/cpu/parallel"
)

// blockRows is the number of W rows one kernel call covers.
const blockRows = 4

// chunkBytes is the least weight bytes a worker is given. Package
// parallel's workers spin between pieces, so within a run of kernels (an
// LLM decode step: 85 products and the element-wise ops between them,
// back to back) handing a piece to the second thread costs about a
// microsecond, and each thread streams its share of the weights at its
// own bandwidth: splitting pays from tens of KiB of weights. With 1 MiB
// here (set when a parked worker's wake-up, tens of µs, was the cost),
// the 256×768 and 768×768 projections of the 100M Llama ran on one
// thread, and BenchmarkLlamaStep took 3.76 ms (int8, M=1) and 15.2 ms
// (int8, M=16) against 3.38 and 11.6 at 64 KiB (prefetch off, median of
// 5, 2-vCPU EPYC). 64 KiB is the fused element-wise kernels' grain too.
const chunkBytes = 64 << 10

// F32 computes y[m*ldy + n] = Σ_k x[m*ldx + k] * w[n*ldw + k] for m < M,
// n < N, overwriting y and leaving the rest of y untouched. The leading
// dimensions must be at least the row lengths (ldx, ldw ≥ K; ldy ≥ N).
// threads ≤ 0 means GOMAXPROCS. Bad sizes are returned as errors, and a
// panic inside a worker as *parallel.PanicError.
func F32(M, N, K int, x []float32, ldx int, w []float32, ldw int, y []float32, ldy int, threads int) error {
	return f32With(active, M, N, K, x, ldx, w, ldw, y, ldy, threads)
}

// Int8 computes y[m*ldy + n] = scale[n] * Σ_k x[m*ldx + k] * float32(w[n*ldw + k]):
// int8 weights with one float32 scale per output row, applied after the sum
// (per-output-channel dequantization), so the result equals Σ x·(w·scale)
// up to rounding. Sizes, threads and errors are as for F32.
func Int8(M, N, K int, x []float32, ldx int, w []int8, ldw int, scale []float32, y []float32, ldy int, threads int) error {
	return int8With(active, M, N, K, x, ldx, w, ldw, scale, y, ldy, threads)
}

// f32With is F32 on a given kernel; tests use it to force each one.
func f32With(kern kernel, M, N, K int, x []float32, ldx int, w []float32, ldw int, y []float32, ldy int, threads int) error {
	if err := checkShape(M, N, K, len(x), ldx, len(w), ldw, len(y), ldy); err != nil {
		return err
	}
	if M == 0 || N == 0 {
		return nil
	}
	if K == 0 {
		clearRows(M, N, y, ldy)
		return nil
	}
	t, grain, blocks := plan(N, 4*K, threads)
	pf := prefetchFor(N, 4*K, 4*ldw, prefetchMinF32)
	if t <= 1 {
		return parallel.Run(func() { f32Rows(kern, M, K, x, ldx, w, ldw, y, ldy, 0, N, pf) })
	}
	return parallel.For(blocks, grain, t, func(lo, hi int) {
		f32Rows(kern, M, K, x, ldx, w, ldw, y, ldy, lo*blockRows, min(hi*blockRows, N), pf)
	})
}

// int8With is Int8 on a given kernel; tests use it to force each one.
func int8With(kern kernel, M, N, K int, x []float32, ldx int, w []int8, ldw int, scale []float32, y []float32, ldy int, threads int) error {
	if err := checkShape(M, N, K, len(x), ldx, len(w), ldw, len(y), ldy); err != nil {
		return err
	}
	if len(scale) < N {
		return fmt.Errorf("gemv: operand scale too short: need N=%d elements, have %d", N, len(scale))
	}
	if M == 0 || N == 0 {
		return nil
	}
	if K == 0 {
		clearRows(M, N, y, ldy)
		return nil
	}
	kk := kern
	if kern == kernAVX2 && K < 8 {
		kk = kernGo // the AVX2 int8 tail re-reads a full 8-byte vector
	}
	t, grain, blocks := plan(N, K, threads)
	pf := prefetchFor(N, K, ldw, prefetchMinInt8)
	if t <= 1 {
		return parallel.Run(func() { int8Rows(kk, M, K, x, ldx, w, ldw, scale, y, ldy, 0, N, pf) })
	}
	return parallel.For(blocks, grain, t, func(lo, hi int) {
		int8Rows(kk, M, K, x, ldx, w, ldw, scale, y, ldy, lo*blockRows, min(hi*blockRows, N), pf)
	})
}

// checkShape validates sizes, leading dimensions and slice lengths, naming
// the operand at fault, so that no kernel can index out of range.
func checkShape(M, N, K, nx, ldx, nw, ldw, ny, ldy int) error {
	if M < 0 || N < 0 || K < 0 {
		return fmt.Errorf("gemv: negative size M=%d N=%d K=%d", M, N, K)
	}
	if err := checkOperand("x", "M", "K", "ldx", M, K, ldx, nx); err != nil {
		return err
	}
	if err := checkOperand("w", "N", "K", "ldw", N, K, ldw, nw); err != nil {
		return err
	}
	return checkOperand("y", "M", "N", "ldy", M, N, ldy, ny)
}

// checkOperand checks that a rows×cols matrix with leading dimension ld
// fits in a slice of length have: it needs (rows-1)*ld + cols elements.
func checkOperand(name, rowsName, colsName, ldName string, rows, cols, ld, have int) error {
	if ld < cols {
		return fmt.Errorf("gemv: operand %s: %s=%d is less than the row length %s=%d", name, ldName, ld, colsName, cols)
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	if rows > 1 && ld > (math.MaxInt-cols)/(rows-1) {
		return fmt.Errorf("gemv: operand %s: %s=%d rows of %s=%d overflow int", name, rowsName, rows, ldName, ld)
	}
	if need := (rows-1)*ld + cols; have < need {
		return fmt.Errorf("gemv: operand %s too short: need %d elements (%s=%d rows of %s=%d, %s=%d), have %d",
			name, need, rowsName, rows, colsName, cols, ldName, ld, have)
	}
	return nil
}

// clearRows zeroes the M×N part of y: the product with K = 0.
func clearRows(M, N int, y []float32, ldy int) {
	for m := range M {
		clear(y[m*ldy : m*ldy+N])
	}
}

// plan splits W rows [0, N) for the workers: it returns how many to use
// (at most threads), and the grain, in blocks of four rows out of blocks,
// that gives each at least chunkBytes of weights. With one worker the
// caller runs the rows itself through parallel.Run, whose closure does not
// escape, so the single-threaded path allocates nothing; parallel.For gets
// whole blocks so that every worker runs the same kernel calls as one would.
func plan(N, rowBytes, threads int) (workers, grain, blocks int) {
	blocks = (N + blockRows - 1) / blockRows
	grain = max(1, (chunkBytes+blockRows*rowBytes-1)/(blockRows*rowBytes))
	return min(parallel.Threads(threads), (blocks+grain-1)/grain), grain, blocks
}

// prefetchAhead is the least distance, in bytes, at which the assembly
// kernels prefetch the weights: rounded up to whole blocks, so that the
// prefetches of one block's call land on the rows of a later block
// (gen_asm.go's prefetch). BenchmarkLlamaStep (weights streamed from
// memory, 2 threads) measured, median of 5 at 1, 2, 4 and 8 KiB: int8
// M=1 2.56, 2.50, 2.52, 2.42 ms; int8 M=16 7.26, 7.32, 8.58, 7.44; f32
// M=1 8.1, 8.3, 7.9, 7.7; f32 M=16 11.2, 11.0, 11.1, 10.9; without
// prefetching 3.38, 11.6, 7.8 and 15.1 (a shared VM: differences under
// about 5 % are noise).
const prefetchAhead = 8 << 10

// prefetchMinF32 and prefetchMinInt8 are the least weight bytes an F32 or
// Int8 product must read for the kernels to prefetch (see prefetchFor):
// more than 256 KiB for F32, whose small products most often find their
// weights in cache (package gemm's dot-product path calls it on tiles of
// at most 256 KiB of weights that many tiles of rows read from L2, where
// prefetching into L1 only evicts what the kernel reads: BenchmarkTiled
// 1024³ 287 against 326 GFLOP/s on two threads), and any size for Int8,
// whose only caller is LLM decode, streaming every weight from memory
// once per step (the 256×768 int8 K and V projections are 192 KiB).
// Tests set them to force either kernel variant.
var (
	prefetchMinF32  = 256<<10 + 1
	prefetchMinInt8 = 0
)

// prefetchFor returns the prefetch distance for a product reading N rows
// of rowBytes bytes, ldBytes apart: 0 (the kernels that do not prefetch)
// below minBytes, else the least whole number of four-row blocks of at
// least prefetchAhead bytes.
func prefetchFor(N, rowBytes, ldBytes, minBytes int) int {
	blk := blockRows * ldBytes
	if N*rowBytes < minBytes || blk <= 0 {
		return 0
	}
	return (prefetchAhead + blk - 1) / blk * blk
}

// f32Rows computes output columns [lo, hi) for all M rows of x: full blocks
// of four W rows in place, then the last N%4 rows one at a time. pf is the
// kernels' prefetch distance, 0 for none.
func f32Rows(kern kernel, M, K int, x []float32, ldx int, w []float32, ldw int, y []float32, ldy int, lo, hi, pf int) {
	mbMax := kern.maxMB()
	n := lo
	for ; n+blockRows <= hi; n += blockRows {
		for m := 0; m < M; m += mbMax {
			mb := min(mbMax, M-m)
			f32Block(kern, x[m*ldx:], ldx, mb, w[n*ldw:], ldw, K, y[m*ldy+n:], ldy, pf)
		}
	}
	// A lone row runs as a block of four copies of itself (ldw = 0) into
	// scratch, keeping the SIMD kernel without reading past the last row.
	var tmp [4 * blockRows]float32
	for ; n < hi; n++ {
		for m := 0; m < M; m += mbMax {
			mb := min(mbMax, M-m)
			f32Block(kern, x[m*ldx:], ldx, mb, w[n*ldw:], 0, K, tmp[:], blockRows, 0)
			for j := range mb {
				y[(m+j)*ldy+n] = tmp[j*blockRows]
			}
		}
	}
}

// int8Rows is f32Rows for int8 weights.
func int8Rows(kern kernel, M, K int, x []float32, ldx int, w []int8, ldw int, scale []float32, y []float32, ldy int, lo, hi, pf int) {
	mbMax := kern.maxMB()
	n := lo
	for ; n+blockRows <= hi; n += blockRows {
		for m := 0; m < M; m += mbMax {
			mb := min(mbMax, M-m)
			int8Block(kern, x[m*ldx:], ldx, mb, w[n*ldw:], ldw, K, scale[n:], y[m*ldy+n:], ldy, pf)
		}
	}
	var tmp [4 * blockRows]float32
	for ; n < hi; n++ {
		s := scale[n]
		sc := [blockRows]float32{s, s, s, s}
		for m := 0; m < M; m += mbMax {
			mb := min(mbMax, M-m)
			int8Block(kern, x[m*ldx:], ldx, mb, w[n*ldw:], 0, K, sc[:], tmp[:], blockRows, 0)
			for j := range mb {
				y[(m+j)*ldy+n] = tmp[j*blockRows]
			}
		}
	}
}
