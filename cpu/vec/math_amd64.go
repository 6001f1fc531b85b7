//go:build !purego

package vec

import "golang.org/x/sys/cpu"

//go:noescape
func erfAVX512(d, a *float32, n int, small *[erfSmallN]float64, large *[erfLargeN][8]float64)

//go:noescape
func expAVX512(d, a *float32, n int)

//go:noescape
func logisticAVX512(d, a *float32, n int)

//go:noescape
func erfAVX2(d, a *float32, n int, small *[erfSmallN]float64, large *[erfLargeN][8]float64)

//go:noescape
func expAVX2(d, a *float32, n int)

//go:noescape
func logisticAVX2(d, a *float32, n int)

// erfLargeLanes holds the coefficients of the three unit-interval series
// lane-wise (coefficient j of interval i at [j][i]) for the assembly's
// per-lane VPERMPD (AVX-512) or VPERMD (AVX2, the first four lanes).
var erfLargeLanes = func() (t [erfLargeN][8]float64) {
	for i, s := range erfLarge {
		for j, c := range s.c {
			t[j][i] = c
		}
	}
	return t
}()

// erfSmallCoef is erfSmall's coefficients as the assembly reads them.
var erfSmallCoef = [erfSmallN]float64(erfSmall.c)

// mathKernel reports which float64-lane assembly of gen_math.go kernel k
// runs: AVX-512 with DQ (float64 ↔ int64 conversions) as well, or AVX2
// with FMA; 0 for none.
func mathKernel(k kernel, n int) kernel {
	switch {
	case n == 0:
		return kernGo
	case k == kernAVX512 && cpu.X86.HasAVX512DQ:
		return kernAVX512
	case (k == kernAVX512 || k == kernAVX2) && cpu.X86.HasAVX2 && cpu.X86.HasFMA:
		return kernAVX2
	}
	return kernGo
}

// erfArch runs Erf on the assembly and reports whether it did.
func erfArch(k kernel, d, a []float32) bool {
	switch mathKernel(k, len(d)) {
	case kernAVX512:
		_ = a[len(d)-1]
		erfAVX512(&d[0], &a[0], len(d), &erfSmallCoef, &erfLargeLanes)
	case kernAVX2:
		_ = a[len(d)-1]
		erfAVX2(&d[0], &a[0], len(d), &erfSmallCoef, &erfLargeLanes)
	default:
		return false
	}
	return true
}

// expArch runs Exp on the assembly and reports whether it did.
func expArch(k kernel, d, a []float32) bool {
	switch mathKernel(k, len(d)) {
	case kernAVX512:
		_ = a[len(d)-1]
		expAVX512(&d[0], &a[0], len(d))
	case kernAVX2:
		_ = a[len(d)-1]
		expAVX2(&d[0], &a[0], len(d))
	default:
		return false
	}
	return true
}

// logisticArch runs Logistic on the assembly and reports whether it did.
func logisticArch(k kernel, d, a []float32) bool {
	switch mathKernel(k, len(d)) {
	case kernAVX512:
		_ = a[len(d)-1]
		logisticAVX512(&d[0], &a[0], len(d))
	case kernAVX2:
		_ = a[len(d)-1]
		logisticAVX2(&d[0], &a[0], len(d))
	default:
		return false
	}
	return true
}
