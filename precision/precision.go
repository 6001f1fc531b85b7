// Package precision converts between float32 and the 16-bit float formats
// accelerators compute in, rounding to nearest with ties to even, as XLA and
// TPUs do.
//
// GoMLX's own float32 to bfloat16 conversion truncates (it keeps the top 16
// bits), which differs from XLA in the last bit on about half of all values
// and turns some NaNs into infinities (bfloat16.FromFloat32 in GoMLX
// v0.26.0's pkg/core/dtypes/bfloat16). Model preparation converts weights and inputs
// with these functions instead, so a model cast on the host matches what the
// device would have computed.
package precision

import "math"

// BFloat16 returns the bfloat16 bits nearest to f, ties to even. NaN stays
// NaN (quiet, sign kept); values beyond the largest bfloat16 become infinity.
func BFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: truncation could make it infinity
		return uint16(b>>16) | 0x0040
	}
	// Add half an ULP of the result, minus one unless the kept part is odd,
	// then truncate: the carry propagates into the exponent where it must.
	lsb := (b >> 16) & 1
	b += 0x7fff + lsb
	return uint16(b >> 16)
}

// FromBFloat16 returns the float32 with the same value as bfloat16 bits h.
func FromBFloat16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Float16 returns the IEEE binary16 bits nearest to f, ties to even, with
// gradual underflow to subnormals, overflow to infinity, and NaN kept NaN.
func Float16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	switch {
	case exp == 0xff:
		if man != 0 {
			return sign | 0x7e00 | uint16(man>>13) // quiet NaN, payload top bits
		}
		return sign | 0x7c00
	case exp == 0 && man == 0:
		return sign
	}
	// Unbiased exponent; float32 subnormals are far below float16's range
	// and round to zero below.
	e := exp - 127
	if exp == 0 {
		e = -126
	} else {
		man |= 0x800000 // implicit leading bit
	}
	// Number of low bits of the 24-bit significand to drop.
	shift := int32(13)
	if e < -14 { // float16 subnormal: fixed exponent -14, fewer significant bits
		shift += -14 - e
		if shift > 25 { // below half the smallest subnormal
			return sign
		}
	}
	kept := man >> uint(shift)
	rem := man & (1<<uint(shift) - 1)
	half := uint32(1) << uint(shift-1)
	if rem > half || (rem == half && kept&1 == 1) {
		kept++
	}
	if e < -14 {
		// kept is the subnormal significand; a carry to 0x400 is the smallest
		// normal, which the same bit pattern encodes.
		return sign | uint16(kept)
	}
	// Normal: kept has 11 bits (or 12 after a carry).
	if kept == 0x800 {
		kept >>= 1
		e++
	}
	if e > 15 {
		return sign | 0x7c00
	}
	return sign | uint16(e+15)<<10 | uint16(kept&0x3ff)
}

// FromFloat16 returns the float32 with the same value as binary16 bits h.
func FromFloat16(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0:
		if man == 0 {
			return math.Float32frombits(sign)
		}
		// Subnormal: value = man * 2^-24, exact in float32.
		v := float32(man) * (1.0 / (1 << 24))
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}

// BFloat16s converts a slice, element by element, into dst (allocated when
// nil or too short) and returns it.
func BFloat16s(dst []uint16, src []float32) []uint16 {
	if cap(dst) < len(src) {
		dst = make([]uint16, len(src))
	}
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = BFloat16(f)
	}
	return dst
}

// Float16s converts a slice, element by element, into dst (allocated when nil
// or too short) and returns it.
func Float16s(dst []uint16, src []float32) []uint16 {
	if cap(dst) < len(src) {
		dst = make([]uint16, len(src))
	}
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = Float16(f)
	}
	return dst
}

// RelativeL2 returns ||got - want|| / ||want||, the accuracy-cost measure
// reported for reduced precision; 0 when both are zero, +Inf when only want is.
func RelativeL2(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	if den == 0 {
		if num == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return math.Sqrt(num / den)
}
