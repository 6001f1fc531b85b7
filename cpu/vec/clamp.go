package vec

// clampOp is which steps of the epilogue d = min(max(a + s, lo), hi) a
// clamp kernel runs.
type clampOp int

const (
	clampAddMaxMin clampOp = iota
	clampAddMax
	clampAddMin
	clampMaxMin
)

// AddClamp sets d[i] = min(max(a[i] + s, lo), hi) in one pass, each of the
// three steps only where its flag says (add, hasLo, hasHi), each rounded
// and with Go's semantics, so that d has the bits of AddScalar, MaxScalar
// and MinScalar run one after the other: a convolution's bias and ReLU or
// clip (ReLU6) applied while its output is in cache.
func AddClamp(d, a []float32, s, lo, hi float32, add, hasLo, hasHi bool) {
	clamp(active, d, a, s, lo, hi, add, hasLo, hasHi)
}

func clamp(k kernel, d, a []float32, s, lo, hi float32, add, hasLo, hasHi bool) {
	if len(d) == 0 {
		return
	}
	a = a[:len(d)]
	op, multi := clampOf(add, hasLo, hasHi)
	if multi && clampArch(k, op, d, a, s, lo, hi) {
		return
	}
	if !multi { // one step or none: the single-op kernels
		switch {
		case add:
			scalar(k, opAdd, d, a, s)
		case hasLo:
			scalar(k, opMax, d, a, lo)
		case hasHi:
			scalar(k, opMin, d, a, hi)
		default:
			copy(d, a)
		}
		return
	}
	clampGo(d, a, s, lo, hi, add, hasLo, hasHi)
}

// clampOf names the kernel of a combination of at least two steps.
func clampOf(add, hasLo, hasHi bool) (clampOp, bool) {
	switch {
	case add && hasLo && hasHi:
		return clampAddMaxMin, true
	case add && hasLo:
		return clampAddMax, true
	case add && hasHi:
		return clampAddMin, true
	case hasLo && hasHi:
		return clampMaxMin, true
	}
	return 0, false
}

// clampGo is the portable kernel: Go's own +, max and min.
func clampGo(d, a []float32, s, lo, hi float32, add, hasLo, hasHi bool) {
	for i, x := range a {
		if add {
			x += s
		}
		if hasLo {
			x = max(x, lo)
		}
		if hasHi {
			x = min(x, hi)
		}
		d[i] = x
	}
}
