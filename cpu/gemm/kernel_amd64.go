//go:build !purego

package gemm

import "golang.org/x/sys/cpu"

// archKernels lists the amd64 kernels this CPU and OS support, fastest
// first. x/sys/cpu reports AVX-512 and AVX only when the OS saves the
// registers.
func archKernels() []*microKernel {
	var ks []*microKernel
	if cpu.X86.HasAVX512F {
		ks = append(ks, avx512Kernel)
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		ks = append(ks, avx2Kernel)
	}
	return ks
}

// avx512Kernel: 6×64 tile, 24 ZMM accumulators, 4 for a step of B and 4
// for broadcasts of A. Measured on Zen 5 against 14×32, 12×32 and 8×48
// (all within 2% alone, 6×64 ahead by ~3% in the full product and with
// less waste at the edges of m). kc=192: the 48 KiB B sliver overflows
// L1, but Zen 5's L2 feeds it (21 B/cycle needed, 64 available); mc=144
// puts a 108 KiB block of A in L2.
var avx512Kernel = &microKernel{name: "avx512", mr: 6, nr: 64, kc: 192, mc: 144, nc: 2048,
	tile: checkedTile(6, 64, kernAVX512)}

// avx2Kernel: 6×16 tile, 12 YMM accumulators, 2 for B and 2 for
// broadcasts of A; the B sliver is 16 KiB at kc=256, the block of A
// 288 KiB. kc from 128 to 512 and mc from 72 to 288 measured within noise
// (±5%) of each other.
var avx2Kernel = &microKernel{name: "avx2", mr: 6, nr: 16, kc: 256, mc: 288, nc: 4096,
	tile: checkedTile(6, 16, kernAVX2)}

// The micro-kernels in kernels_amd64.s (written by gen_kernels.go): the
// mr×nr tile at c (rows ldc floats apart) = A·B, or += when add, for a of
// kc·mr packed floats and b of kc rows of nr floats, ldb apart; kc ≥ 1.

//go:noescape
func kernAVX512(kc int, a, b *float32, ldb int, c *float32, ldc int, add bool)

//go:noescape
func kernAVX2(kc int, a, b *float32, ldb int, c *float32, ldc int, add bool)
