//go:build !purego

package gemv

import "golang.org/x/sys/cpu"

// archKernels lists the SIMD kernels this CPU and OS support. AVX-512 needs
// BW and VL besides F for the byte-masked int8 tail and the 256-bit EVEX
// reduction; x/sys/cpu reports them only when the OS saves the registers.
func archKernels() []kernel {
	var ks []kernel
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		ks = append(ks, kernAVX2)
	}
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL {
		ks = append(ks, kernAVX512)
	}
	return ks
}

// f32BlockArch runs a block on an assembly kernel and reports whether it
// did. The callers have checked every length, so the element addresses are
// in range; pf is the prefetch distance in bytes (prefetches never fault,
// so it may point past w), 0 for the kernel that does not prefetch.
func f32BlockArch(kern kernel, x []float32, ldx, mb int, w []float32, ldw, k int, y []float32, ldy, pf int) bool {
	switch {
	case kern == kernAVX512 && pf != 0:
		f32AVX512PF(&x[0], ldx, mb, &w[0], ldw, k, &y[0], ldy, pf)
	case kern == kernAVX512:
		f32AVX512(&x[0], ldx, mb, &w[0], ldw, k, &y[0], ldy, 0)
	case kern == kernAVX2 && pf != 0:
		f32AVX2PF(&x[0], ldx, mb, &w[0], ldw, k, &y[0], ldy, pf)
	case kern == kernAVX2:
		f32AVX2(&x[0], ldx, mb, &w[0], ldw, k, &y[0], ldy, 0)
	default:
		return false
	}
	return true
}

// int8BlockArch is f32BlockArch for int8 weights.
func int8BlockArch(kern kernel, x []float32, ldx, mb int, w []int8, ldw, k int, scale, y []float32, ldy, pf int) bool {
	switch {
	case kern == kernAVX512 && pf != 0:
		i8AVX512PF(&x[0], ldx, mb, &w[0], ldw, k, &scale[0], &y[0], ldy, pf)
	case kern == kernAVX512:
		i8AVX512(&x[0], ldx, mb, &w[0], ldw, k, &scale[0], &y[0], ldy, 0)
	case kern == kernAVX2 && pf != 0:
		i8AVX2PF(&x[0], ldx, mb, &w[0], ldw, k, &scale[0], &y[0], ldy, pf)
	case kern == kernAVX2:
		i8AVX2(&x[0], ldx, mb, &w[0], ldw, k, &scale[0], &y[0], ldy, 0)
	default:
		return false
	}
	return true
}

// knBlockArch runs a block of F32KN on an assembly kernel and reports
// whether it did; the callers have checked every length.
func knBlockArch(kern kernel, x []float32, ldx, mb int, b []float32, ldb, k int, y []float32, ldy, n int) bool {
	switch kern {
	case kernAVX512:
		f32knAVX512(&x[0], ldx, mb, &b[0], ldb, k, &y[0], ldy, n)
	case kernAVX2:
		f32knAVX2(&x[0], ldx, mb, &b[0], ldb, k, &y[0], ldy, n)
	default:
		return false
	}
	return true
}

// knArch reports whether kern has an assembly F32KN kernel.
func knArch(kern kernel) bool { return kern == kernAVX512 || kern == kernAVX2 }

// The assembly kernels (gemv_amd64.s, written by gen_asm.go) compute, for
// m < mb and i < 4, y[m*ldy+i] = Σ_{j<k} x[m*ldx+j]·w[i*ldw+j] (times
// scale[i] for int8 weights). mb ≤ 4 for AVX-512 and ≤ 2 for AVX2; the
// AVX2 int8 kernel needs k ≥ 8. The PF variants also prefetch the 4·k
// weights that start pf bytes past w (gen_asm.go's prefetch); the others
// ignore pf.

//go:noescape
func f32AVX512(x *float32, ldx, mb int, w *float32, ldw, k int, y *float32, ldy, pf int)

//go:noescape
func f32AVX2(x *float32, ldx, mb int, w *float32, ldw, k int, y *float32, ldy, pf int)

//go:noescape
func f32AVX512PF(x *float32, ldx, mb int, w *float32, ldw, k int, y *float32, ldy, pf int)

//go:noescape
func f32AVX2PF(x *float32, ldx, mb int, w *float32, ldw, k int, y *float32, ldy, pf int)

//go:noescape
func i8AVX512(x *float32, ldx, mb int, w *int8, ldw, k int, scale *float32, y *float32, ldy, pf int)

//go:noescape
func i8AVX2(x *float32, ldx, mb int, w *int8, ldw, k int, scale *float32, y *float32, ldy, pf int)

//go:noescape
func i8AVX512PF(x *float32, ldx, mb int, w *int8, ldw, k int, scale *float32, y *float32, ldy, pf int)

//go:noescape
func i8AVX2PF(x *float32, ldx, mb int, w *int8, ldw, k int, scale *float32, y *float32, ldy, pf int)

// f32knAVX512 and f32knAVX2 compute, for m < mb and j < n, y[m*ldy+j] =
// Σ_{i<k} x[m*ldx+i]·b[i*ldb+j], with 1 ≤ n ≤ knCols, 1 ≤ mb ≤ maxMB and
// k ≥ 1 (gen_asm.go's knKernel).

//go:noescape
func f32knAVX512(x *float32, ldx, mb int, b *float32, ldb, k int, y *float32, ldy, n int)

//go:noescape
func f32knAVX2(x *float32, ldx, mb int, b *float32, ldb, k int, y *float32, ldy, n int)
