//go:build !purego

package vec

import "golang.org/x/sys/cpu"

// archKernels lists the SIMD kernels this CPU and OS support; x/sys/cpu
// reports AVX2 and AVX-512 only when the OS saves their registers. The
// AVX-512 kernels use F only (ZMM, K masks, VPMOVDB); BW is required too so
// that the kernel matches the one cpu/gemv picks.
func archKernels() []kernel {
	var ks []kernel
	if cpu.X86.HasAVX2 {
		ks = append(ks, kernAVX2)
	}
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW {
		ks = append(ks, kernAVX512)
	}
	return ks
}

// maxReduceArch returns the max of a (len(a) ≥ 1) from an assembly kernel
// and whether a holds a NaN; ok is false for the Go kernel.
func maxReduceArch(k kernel, a []float32) (m float32, nan, ok bool) {
	switch k {
	case kernAVX512:
		m, nan = maxRedAVX512(&a[0], len(a))
	case kernAVX2:
		m, nan = maxRedAVX2(&a[0], len(a))
	default:
		return 0, false, false
	}
	return m, nan, true
}

// boolToF32Arch converts the leading whole vectors of b and returns how
// many elements it did; len(b) = len(d).
func boolToF32Arch(k kernel, d []float32, b []bool) int {
	if len(d) < 16 {
		return 0
	}
	switch k {
	case kernAVX512:
		b2fAVX512(&d[0], &b[0], len(d))
		return len(d) &^ 15
	case kernAVX2:
		b2fAVX2(&d[0], &b[0], len(d))
		return len(d) &^ 7
	}
	return 0
}

// f32ToBoolArch is boolToF32Arch the other way.
func f32ToBoolArch(k kernel, d []bool, a []float32) int {
	if len(d) < 16 {
		return 0
	}
	switch k {
	case kernAVX512:
		f2bAVX512(&d[0], &a[0], len(d))
		return len(d) &^ 15
	case kernAVX2:
		f2bAVX2(&d[0], &a[0], len(d))
		return len(d) &^ 7
	}
	return 0
}
