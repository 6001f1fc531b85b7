package grammar

import (
	"math/big"
)

// numSpec is a number node: values are multiples of 1/grid (grid =
// 10^fMax) in [lo, hi], both inclusive, in units of 1/grid, written with at
// most maxI integer digits and fMax fraction digits, no exponent.
type numSpec struct {
	maxI, fMax uint8
	grid       int64
	lo, hi     int64
}

// Number phases.
const (
	nStart = iota
	nMinus
	nInt
	nDot
	nFrac
)

var pow10 = func() [19]int64 {
	var p [19]int64
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// limit is the largest magnitude writable, in grid units.
func (s *numSpec) limit() int64 { return pow10[s.maxI]*s.grid - 1 }

// stepNumber consumes one byte of a number, keeping the prefix one that can
// still end inside the bounds. A byte that cannot continue the number ends
// it (aRefeed) if what was written is a complete number within the bounds.
func stepNumber(f *frame, s *numSpec, b byte) action {
	g := *f
	switch {
	case b == '-' && g.ph == nStart:
		g.ph, g.neg = nMinus, true
	case b >= '0' && b <= '9' && (g.ph == nStart || g.ph == nMinus):
		g.ph, g.v, g.nd = nInt, int64(b-'0'), 1
	case b >= '0' && b <= '9' && g.ph == nInt:
		if (g.v == 0 && g.nd == 1) || g.nd >= s.maxI {
			return endNumber(f, s)
		}
		g.v, g.nd = g.v*10+int64(b-'0'), g.nd+1
	case b == '.' && g.ph == nInt && s.fMax > 0:
		g.ph = nDot
	case b >= '0' && b <= '9' && (g.ph == nDot || g.ph == nFrac):
		if g.nf >= s.fMax {
			return endNumber(f, s)
		}
		g.ph, g.fr, g.nf = nFrac, g.fr*10+int64(b-'0'), g.nf+1
	default:
		return endNumber(f, s)
	}
	if !numFeasible(&g, s) {
		return aReject
	}
	*f = g
	return aOK
}

func endNumber(f *frame, s *numSpec) action {
	if numComplete(f, s) {
		return aRefeed
	}
	return aReject
}

// numComplete reports whether the prefix is a whole number within bounds.
func numComplete(f *frame, s *numSpec) bool {
	if f.ph != nInt && f.ph != nFrac {
		return false
	}
	v := f.v*s.grid + f.fr*pow10[s.fMax-f.nf]
	if f.neg {
		v = -v
	}
	return v >= s.lo && v <= s.hi
}

// numFeasible reports whether some completion of the prefix lies in
// [lo, hi]. The completions of a prefix form intervals of grid points: with
// the point not yet written, I followed by k more digits and any fraction
// gives [I*10^k, (I+1)*10^k) for each k that fits; after the point, the
// fraction digits F so far give [I.F, I.F + 10^-nf).
func numFeasible(f *frame, s *numSpec) bool {
	switch f.ph {
	case nStart:
		return overlap(-s.limit(), s.limit(), s)
	case nMinus:
		return overlap(-s.limit(), 0, s)
	case nInt:
		kmax := int(s.maxI) - int(f.nd)
		if f.v == 0 {
			kmax = 0
		}
		for k := 0; k <= kmax; k++ {
			a := f.v * pow10[k] * s.grid
			b := (f.v+1)*pow10[k]*s.grid - 1
			if signedOverlap(a, b, f.neg, s) {
				return true
			}
		}
		return false
	default:
		unit := pow10[s.fMax-f.nf]
		a := f.v*s.grid + f.fr*unit
		return signedOverlap(a, a+unit-1, f.neg, s)
	}
}

func signedOverlap(a, b int64, neg bool, s *numSpec) bool {
	if neg {
		a, b = -b, -a
	}
	return overlap(a, b, s)
}

func overlap(a, b int64, s *numSpec) bool { return max(a, s.lo) <= min(b, s.hi) }

// gridBound converts a schema bound to grid units: the smallest grid point
// >= x (or > x when exclusive) for a lower bound, the largest <= x (< x)
// for an upper one. A bound beyond the writable range [-limit, limit] is
// clamped to it, or just past it when nothing writable satisfies it.
func gridBound(x *big.Rat, grid int64, lower, exclusive bool, limit int64) int64 {
	scaled := new(big.Rat).Mul(x, new(big.Rat).SetInt64(grid))
	q, m := new(big.Int).DivMod(scaled.Num(), scaled.Denom(), new(big.Int)) // floor: Denom > 0
	exact := m.Sign() == 0
	if lower && (!exact || exclusive) {
		q.Add(q, big.NewInt(1))
	} else if !lower && exact && exclusive {
		q.Sub(q, big.NewInt(1))
	}
	switch {
	case q.Cmp(big.NewInt(limit)) > 0 && lower:
		return limit + 1
	case q.Cmp(big.NewInt(limit)) > 0:
		return limit
	case q.Cmp(big.NewInt(-limit)) < 0 && !lower:
		return -limit - 1
	case q.Cmp(big.NewInt(-limit)) < 0:
		return -limit
	}
	return q.Int64()
}
