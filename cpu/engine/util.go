package engine

import (
	"fmt"
	"sync"

	"github.com/gomlx/gomlx/backends"
)

// f32 returns a float32 buffer's values.
func (r *run) f32(b backends.Buffer) ([]float32, error) {
	flat, err := r.data(b)
	if err != nil {
		return nil, err
	}
	f, ok := flat.([]float32)
	if !ok {
		return nil, fmt.Errorf("buffer holds %T, want []float32", flat)
	}
	return f, nil
}

// transpose writes src (of dimensions dims) permuted into dst: axis i of
// dst is axis perm[i] of src.
func transpose[T any](dst, src []T, dims, perm []int) {
	r := len(dims)
	if r == 0 {
		copy(dst, src)
		return
	}
	st := rowMajorStrides(dims)
	od := make([]int, r)  // dst dims
	ost := make([]int, r) // src stride of each dst axis
	for i, p := range perm {
		od[i], ost[i] = dims[p], st[p]
	}
	idx := make([]int, r)
	inner, innerStride := od[r-1], ost[r-1]
	src0 := 0
	for o := 0; o < len(dst); o += inner {
		s := src0
		for j := range inner {
			dst[o+j] = src[s]
			s += innerStride
		}
		// advance the odometer over the outer axes
		for a := r - 2; a >= 0; a-- {
			idx[a]++
			src0 += ost[a]
			if idx[a] < od[a] {
				break
			}
			src0 -= ost[a] * od[a]
			idx[a] = 0
		}
	}
}

// at returns s[i], or def when s is shorter or s[i] is 0.
func at(s []int, i, def int) int {
	if i < len(s) && s[i] != 0 {
		return s[i]
	}
	return def
}

var f32Pool sync.Pool // *[]float32 scratch

// getF32 returns scratch of n float32 values (not zeroed).
func getF32(n int) *[]float32 {
	if p, ok := f32Pool.Get().(*[]float32); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	s := make([]float32, n)
	return &s
}

func putF32(p *[]float32) { f32Pool.Put(p) }
