//go:build !purego

package vec

import "golang.org/x/sys/cpu"

//go:noescape
func erfAVX512(d, a *float32, n int, small *[erfSmallN]float64, large *[erfLargeN][8]float64)

// erfLargeLanes holds the coefficients of the three unit-interval series
// lane-wise (coefficient j of interval i at [j][i]) for the assembly's
// per-lane VPERMPD.
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

// erfArch runs Erf on the AVX-512 kernel (which needs DQ as well, for the
// float64 → int64 conversion) and reports whether it did.
func erfArch(k kernel, d, a []float32) bool {
	if k != kernAVX512 || !cpu.X86.HasAVX512DQ || len(d) == 0 {
		return false
	}
	_ = a[len(d)-1]
	erfAVX512(&d[0], &a[0], len(d), &erfSmallCoef, &erfLargeLanes)
	return true
}
