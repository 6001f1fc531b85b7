//go:build !purego

package conv

import "golang.org/x/sys/cpu"

// dwArchKernels lists the SIMD row kernels this CPU and OS support; x/sys/cpu
// reports AVX2 and AVX-512 only when the OS saves their registers. The
// AVX-512 kernels use F only (ZMM, K masks, VPERMQ); AVX2 needs FMA too.
func dwArchKernels() []dwKernel {
	var ks []dwKernel
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		ks = append(ks, dwAVX2)
	}
	if cpu.X86.HasAVX512F {
		ks = append(ks, dwAVX512)
	}
	return ks
}

// dwAsm returns kern's assembly for a K×K kernel at x stride s, or nil.
func dwAsm(kern dwKernel, k, s int) dwPlaneFunc {
	type key struct {
		kern dwKernel
		k, s int
	}
	switch (key{kern, k, s}) {
	case key{dwAVX512, 3, 1}:
		return dwK3S1AVX512
	case key{dwAVX512, 3, 2}:
		return dwK3S2AVX512
	case key{dwAVX512, 5, 1}:
		return dwK5S1AVX512
	case key{dwAVX512, 5, 2}:
		return dwK5S2AVX512
	case key{dwAVX2, 3, 1}:
		return dwK3S1AVX2
	case key{dwAVX2, 3, 2}:
		return dwK3S2AVX2
	case key{dwAVX2, 5, 1}:
		return dwK5S1AVX2
	case key{dwAVX2, 5, 2}:
		return dwK5S2AVX2
	}
	return nil
}

// The assembly row kernels (depthwise_amd64.s, written by gen_dw.go); see
// dwPlaneFunc for what they compute.

//go:noescape
func dwK3S1AVX512(out *float32, ldout, outRows int, in *float32, ldin, inRows int, buf *float32, ldbuf, padY, sy, dy, cpSrc, cpDst, cpN int, w *float32, n, nch, inCS, outCS int)

//go:noescape
func dwK3S2AVX512(out *float32, ldout, outRows int, in *float32, ldin, inRows int, buf *float32, ldbuf, padY, sy, dy, cpSrc, cpDst, cpN int, w *float32, n, nch, inCS, outCS int)

//go:noescape
func dwK5S1AVX512(out *float32, ldout, outRows int, in *float32, ldin, inRows int, buf *float32, ldbuf, padY, sy, dy, cpSrc, cpDst, cpN int, w *float32, n, nch, inCS, outCS int)

//go:noescape
func dwK5S2AVX512(out *float32, ldout, outRows int, in *float32, ldin, inRows int, buf *float32, ldbuf, padY, sy, dy, cpSrc, cpDst, cpN int, w *float32, n, nch, inCS, outCS int)

//go:noescape
func dwK3S1AVX2(out *float32, ldout, outRows int, in *float32, ldin, inRows int, buf *float32, ldbuf, padY, sy, dy, cpSrc, cpDst, cpN int, w *float32, n, nch, inCS, outCS int)

//go:noescape
func dwK3S2AVX2(out *float32, ldout, outRows int, in *float32, ldin, inRows int, buf *float32, ldbuf, padY, sy, dy, cpSrc, cpDst, cpN int, w *float32, n, nch, inCS, outCS int)

//go:noescape
func dwK5S1AVX2(out *float32, ldout, outRows int, in *float32, ldin, inRows int, buf *float32, ldbuf, padY, sy, dy, cpSrc, cpDst, cpN int, w *float32, n, nch, inCS, outCS int)

//go:noescape
func dwK5S2AVX2(out *float32, ldout, outRows int, in *float32, ldin, inRows int, buf *float32, ldbuf, padY, sy, dy, cpSrc, cpDst, cpN int, w *float32, n, nch, inCS, outCS int)
