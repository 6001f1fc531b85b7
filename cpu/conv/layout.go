package conv

import (
	"math"
	"slices"
	"sync"
)

// prod returns the product of xs (1 for none).
func prod(xs []int) int {
	n := 1
	for _, x := range xs {
		n *= x
	}
	return n
}

// extent is the number of elements a strided view spans, 1 + Σ(d-1)·s, or
// 0 when a size is 0; math.MaxInt when that overflows, so that no slice
// passes a length check against it. Sizes and strides are non-negative.
func extent(dims, strides []int) int {
	if slices.Contains(dims, 0) {
		return 0
	}
	e := 1
	for i, d := range dims {
		if s := strides[i]; s > 0 && d-1 > (math.MaxInt-e)/s {
			return math.MaxInt
		}
		e += (d - 1) * strides[i]
	}
	return e
}

// overlapping reports whether two indices of a strided view may share an
// element. It sorts the axes by stride and requires each stride to exceed the
// span of the smaller ones, which every permuted or padded dense layout does.
func overlapping(dims, strides []int) bool {
	type axis struct{ d, s int }
	var axes []axis
	for i, d := range dims {
		if d == 0 {
			return false
		}
		if d > 1 {
			axes = append(axes, axis{d, strides[i]})
		}
	}
	slices.SortFunc(axes, func(a, b axis) int { return a.s - b.s })
	span := 0
	for _, a := range axes {
		if a.s <= span {
			return true
		}
		span += (a.d - 1) * a.s
	}
	return false
}

// flatStride reports whether the row-major walk over dims visits elements a
// uniform stride apart, and returns that stride; size-1 axes are ignored.
func flatStride(dims, strides []int) (int, bool) {
	stride, want, seen := 1, 0, false
	for i := len(dims) - 1; i >= 0; i-- {
		switch {
		case dims[i] == 1:
		case !seen:
			stride, want, seen = strides[i], strides[i]*dims[i], true
		case strides[i] != want:
			return 0, false
		default:
			want *= dims[i]
		}
	}
	return stride, true
}

// unflatten writes the row-major coordinates of flat index t into c.
func unflatten(t int, dims, c []int) {
	for i := len(dims) - 1; i >= 0; i-- {
		c[i] = t % dims[i]
		t /= dims[i]
	}
}

// advance steps the row-major coordinates c over dims by one.
func advance(c, dims []int) {
	for i := len(dims) - 1; i >= 0; i-- {
		if c[i]++; c[i] < dims[i] {
			return
		}
		c[i] = 0
	}
}

// offsets fills dst with the element offsets, under strides, of the
// row-major flat positions t0, t0+1, … of dims; c is scratch of len(dims).
func offsets(dst []int, t0 int, dims, strides, c []int) {
	if len(dst) == 0 {
		return
	}
	unflatten(t0, dims, c)
	for i := range dst {
		off := 0
		for d, x := range c {
			off += x * strides[d]
		}
		dst[i] = off
		advance(c, dims)
	}
}

// ceilDiv and floorDiv divide rounding toward +∞ and −∞ (b > 0); mod is
// the non-negative remainder. Padding makes the numerators negative.
func ceilDiv(a, b int) int { return -floorDiv(-a, b) }

func floorDiv(a, b int) int {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}
func mod(a, b int) int { return ((a % b) + b) % b }

// gcd is the greatest common divisor of a, b > 0.
func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// dilatedIndex maps q, a coordinate in an axis of size elements dilated by
// dil, to the element index, or reports that q falls on padding or a hole.
func dilatedIndex(q, size, dil int) (int, bool) {
	if q < 0 || q%dil != 0 || q/dil >= size {
		return 0, false
	}
	return q / dil, true
}

// axisRun lists, for one kernel tap along one axis, the outputs x that read a
// real input element: x = lo, lo+step, … < hi read input indices first,
// first+inStep, … . Other outputs read padding or input-dilation holes.
type axisRun struct{ lo, hi, step, first, inStep int }

// newAxisRun builds the run of outputs 0 ≤ x < n whose dilated input
// coordinate q = x·stride + off hits an element of an axis of size elements
// dilated by dil. Valid q are multiples of dil, which x reaches with period
// dil/gcd(stride, dil).
func newAxisRun(n, stride, off, size, dil int) axisRun {
	if n <= 0 || size <= 0 {
		return axisRun{step: 1}
	}
	step := dil / gcd(stride, dil)
	x0 := -1
	for x := range step {
		if mod(x*stride+off, dil) == 0 {
			x0 = x
			break
		}
	}
	if x0 < 0 {
		return axisRun{step: 1}
	}
	if lo := ceilDiv(-off, stride); lo > x0 {
		x0 += ceilDiv(lo-x0, step) * step
	}
	hi := min(n, floorDiv((size-1)*dil-off, stride)+1)
	if x0 >= hi {
		return axisRun{step: 1}
	}
	return axisRun{lo: x0, hi: hi, step: step, first: (x0*stride + off) / dil, inStep: step * stride / dil}
}

// clip returns the run's outputs within [x0, x1) as the index range
// [i0, i1) of its progression (x = lo + i·step).
func (r axisRun) clip(x0, x1 int) (i0, i1 int) {
	lo, hi := max(r.lo, x0), min(r.hi, x1)
	if lo >= hi {
		return 0, 0
	}
	return ceilDiv(lo-r.lo, r.step), ceilDiv(hi-r.lo, r.step)
}

// gatherStrided writes into dst[t·ds], t < n, the input value read by
// output x0+t, or zero where it reads padding; element i of the input is
// src[base+i·inc].
func (r axisRun) gatherStrided(dst []float32, ds, n, x0 int, src []float32, base, inc int) {
	i0, i1 := r.clip(x0, x0+n)
	if i0 >= i1 {
		fillStrided(dst, ds, n)
		return
	}
	d0, d1 := r.lo+i0*r.step-x0, r.lo+(i1-1)*r.step-x0+1
	if r.step != 1 {
		fillStrided(dst, ds, n)
	} else {
		fillStrided(dst, ds, d0)
		for t := d1; t < n; t++ {
			dst[t*ds] = 0
		}
	}
	p, d := base+(r.first+i0*r.inStep)*inc, r.inStep*inc
	if ds == 1 && d == 1 && r.step == 1 {
		copy(dst[d0:d1], src[p:p+d1-d0])
		return
	}
	for t := d0; t < d1; t += r.step {
		dst[t*ds] = src[p]
		p += d
	}
}

// index returns the input index output x reads through this run, or false.
func (r axisRun) index(x int) (int, bool) {
	if x < r.lo || x >= r.hi || (x-r.lo)%r.step != 0 {
		return 0, false
	}
	return r.first + (x-r.lo)/r.step*r.inStep, true
}

// floatPool recycles scratch buffers (im2col panels, output tiles, packed
// kernels) across calls so steady-state inference does not allocate them.
var floatPool sync.Pool

// getFloats returns a pooled buffer of length n; release it with putFloats.
func getFloats(n int) *[]float32 {
	if v, ok := floatPool.Get().(*[]float32); ok && cap(*v) >= n {
		*v = (*v)[:n]
		return v
	}
	s := make([]float32, n) // a smaller pooled buffer, if any, is dropped
	return &s
}

func putFloats(v *[]float32) {
	if v != nil {
		floatPool.Put(v)
	}
}
