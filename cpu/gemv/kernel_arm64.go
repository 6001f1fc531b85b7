//go:build !purego

package gemv

import "golang.org/x/sys/cpu"

// archKernels lists the NEON kernel, which every arm64 CPU Go supports has;
// the check is for form's sake.
func archKernels() []kernel {
	if cpu.ARM64.HasASIMD {
		return []kernel{kernNEON}
	}
	return nil
}

// f32BlockArch runs a block on the NEON kernel and reports whether it did.
// The callers have checked every length. The NEON kernels do not
// prefetch, so pf (the amd64 kernels' prefetch distance) is unused.
func f32BlockArch(kern kernel, x []float32, ldx, mb int, w []float32, ldw, k int, y []float32, ldy, pf int) bool {
	if kern != kernNEON {
		return false
	}
	f32NEON(&x[0], ldx, mb, &w[0], ldw, k, &y[0], ldy)
	return true
}

// int8BlockArch is f32BlockArch for int8 weights.
func int8BlockArch(kern kernel, x []float32, ldx, mb int, w []int8, ldw, k int, scale, y []float32, ldy, pf int) bool {
	if kern != kernNEON {
		return false
	}
	i8NEON(&x[0], ldx, mb, &w[0], ldw, k, &scale[0], &y[0], ldy)
	return true
}

// The assembly kernels (gemv_arm64.s, written by gen_neon.go) compute, for
// m < mb ≤ 2 and i < 4, y[m*ldy+i] = Σ_{j<k} x[m*ldx+j]·w[i*ldw+j] (times
// scale[i] for int8 weights).

//go:noescape
func f32NEON(x *float32, ldx, mb int, w *float32, ldw, k int, y *float32, ldy int)

//go:noescape
func i8NEON(x *float32, ldx, mb int, w *int8, ldw, k int, scale *float32, y *float32, ldy int)

// knBlockArch reports that no assembly F32KN kernel ran: arm64 has none
// yet, and runs the Go kernel.
func knBlockArch(kern kernel, x []float32, ldx, mb int, b []float32, ldb, k int, y []float32, ldy, n int) bool {
	return false
}

// knArch reports that no kernel here has an assembly F32KN.
func knArch(kern kernel) bool { return false }
