package vec

import "math"

// Exp sets d[i] = float32(math.Exp(float64(a[i]))), the reference
// engine's formula, for softmax and the like. The AVX-512 kernel
// (gen_math.go) evaluates exp in float64 lanes to about 2e-16 relative,
// so its float32 rounding is math.Exp's except for inputs whose float64
// value lies that close to a rounding boundary (TestExpLogisticMatchMath:
// none among its 3·10⁶ inputs).
func Exp(d, a []float32) { expWith(active, d, a) }

// expWith is Exp on kernel k.
func expWith(k kernel, d, a []float32) {
	if expArch(k, d, a) {
		return
	}
	for i, x := range a[:len(d)] {
		d[i] = float32(math.Exp(float64(x)))
	}
}

// Logistic sets d[i] to the logistic sigmoid 1/(1+e^-x) of a[i], computed
// in float64 as the reference engine does (1/(1+exp(-x)) for x ≥ 0,
// e/(1+e) with e = exp(x) below, so neither overflows) and rounded; the
// AVX-512 kernel evaluates the same formula on its float64 exp, as Exp.
func Logistic(d, a []float32) { logisticWith(active, d, a) }

// logisticWith is Logistic on kernel k.
func logisticWith(k kernel, d, a []float32) {
	if logisticArch(k, d, a) {
		return
	}
	for i, x := range a[:len(d)] {
		d[i] = logistic64(float64(x))
	}
}

// logistic64 is one element of the Go path.
func logistic64(x float64) float32 {
	if x >= 0 {
		return float32(1.0 / (1.0 + math.Exp(-x)))
	}
	e := math.Exp(x)
	return float32(e / (1.0 + e))
}
