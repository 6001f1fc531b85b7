//go:build !purego

package gemm

import "golang.org/x/sys/cpu"

// archKernels lists the NEON kernel, which every arm64 CPU Go runs on
// has; the check is for form's sake.
func archKernels() []*microKernel {
	if cpu.ARM64.HasASIMD {
		return []*microKernel{neonKernel}
	}
	return nil
}

// neonKernel: 8×8 tile, 16 accumulators, 2 registers for B and 8 for
// broadcasts of A (loaded four at a time by LD4R).
var neonKernel = &microKernel{name: "neon", mr: 8, nr: 8, kc: 256, mc: 128, nc: 2048,
	tile: checkedTile(8, 8, kernNEON)}

// kernNEON, in kernels_arm64.s (written by gen_kernels.go): the 8×8 tile at
// c (rows ldc floats apart) = A·B, or += when add, B's rows ldb apart;
// kc ≥ 1.
//
//go:noescape
func kernNEON(kc int, a, b *float32, ldb int, c *float32, ldc int, add bool)
