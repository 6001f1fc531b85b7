package engine

import (
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tensorbridge/tensorbridge/cpu/gemv"
	"github.com/tensorbridge/tensorbridge/cpu/parallel"
)

// Products with few rows on the left and a right operand stored as
// [N, K] rows (a Linear layer's weight read transposed), as in LLM decode
// and batch-1 inference, are bound by reading the weight: package gemv
// streams it once, without the packing copy of a GEMM. Weights that are
// int8 under a ConvertDType to float32 (--quantize int8) are read as int8,
// a quarter of the bytes, and converted in registers.

// gemvRows is the most left-operand rows the matrix-vector kernels take.
const gemvRows = 16

// weightsView reports whether the rhs view reads row-major [N, K] weights
// (element (k, n) at n·K+k) with one batch.
func (p *dotPlan) weightsView() bool {
	return p.batch == 1 && p.rhs.perm == nil && (p.k == 1 || p.rhs.rStride == 1) && (p.n == 1 || p.rhs.cStride == p.k) &&
		p.lhs.perm == nil && (p.k == 1 || p.lhs.cStride == 1)
}

// int8Source returns the int8 value under a ConvertDType(int8 → float32)
// feeding v, or nil.
func int8Source(v *value) *value {
	n := v.n
	if n.op != backends.OpTypeConvertDType || len(n.in) != 1 || n.in[0].shape().DType != dtypes.Int8 {
		return nil
	}
	return n.in[0]
}

// gemvF32 computes the product with the matrix-vector kernel.
func (p *dotPlan) gemvF32(r *run, lhs, rhs, c []float32) error {
	return gemv.F32(p.m, p.n, p.k, lhs, max(p.lhs.rStride, p.k), rhs, p.k, c, p.n, r.threads)
}

// inPlaceLayout is how gemvBatched reads each batch element's right
// operand in place.
type inPlaceLayout int

const (
	formNone inPlaceLayout = iota
	// formRows: contracting axis contiguous, the N outputs' rows ldw =
	// cStride apart (gemv.F32): attention's scores q·kᵀ over a KV cache
	// [keys, heads, head dim], whose key rows are heads·head dim apart.
	formRows
	// formKN: output axis contiguous, the K rows ldb = rStride apart
	// (gemv.F32KN): attention's probabilities times the values.
	formKN
)

// inPlaceForm says whether, and how, gemvBatched can run the product:
// a left operand read in place with contiguous rows, and a right operand
// in place in one of the two layouts above with rows that do not overlap.
// (weightsView, the one-batch formRows with ldw = K, takes precedence.)
func (p *dotPlan) inPlaceForm() inPlaceLayout {
	if p.lhs.perm != nil || p.rhs.perm != nil || (p.k > 1 && p.lhs.cStride != 1) || (p.m > 1 && p.lhs.rStride < p.k) {
		return formNone
	}
	if (p.k == 1 || p.rhs.rStride == 1) && (p.n == 1 || p.rhs.cStride >= p.k) {
		return formRows
	}
	if (p.n == 1 || p.rhs.cStride == 1) && (p.k == 1 || p.rhs.rStride >= p.n) && gemv.KNAccelerated() {
		return formKN
	}
	return formNone
}

// gemvBatched computes a product with few left rows (p.m ≤ gemvRows) per
// batch element on the matrix-vector kernels, both operands read in place:
// one call per batch element, the batch spread over the threads (or, with
// one batch element, the threads inside the call). These are the
// attention products of LLM decode, a few query rows (the group of query
// heads sharing a KV head) against a KV cache read through strides, which
// the GEMM path would pack, or transpose, for every batch element.
func (p *dotPlan) gemvBatched(r *run, lhs, rhs, c []float32) error {
	form := p.inPlaceForm()
	ldx := max(p.lhs.rStride, p.k)
	one := func(b, threads int) error {
		x, w, y := lhs[p.lhs.off(b):], rhs[p.rhs.off(b):], c[b*p.m*p.n:(b+1)*p.m*p.n]
		if form == formKN {
			return gemv.F32KN(p.m, p.n, p.k, x, ldx, w, max(p.rhs.rStride, p.n), y, p.n, threads)
		}
		return gemv.F32(p.m, p.n, p.k, x, ldx, w, max(p.rhs.cStride, p.k), y, p.n, threads)
	}
	if p.batch == 1 {
		return one(0, r.threads)
	}
	var (
		mu    sync.Mutex
		first error
	)
	err := parallel.For(p.batch, max(1, 1<<14/max(1, p.m*p.n*p.k)), r.threads, func(lo, hi int) {
		for b := lo; b < hi; b++ {
			if err := one(b, 1); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				return
			}
		}
	})
	if err != nil {
		return err
	}
	return first
}

// runInt8 computes x · dequantized(q)ᵀ reading the int8 weights q: with
// the int8 matrix-vector kernel for few rows, else converting q to float32
// once for the GEMM.
func (p *dotPlan) runInt8(r *run, ins []backends.Buffer) ([]backends.Buffer, error) {
	lhs, err := r.f32(ins[0])
	if err != nil {
		return nil, err
	}
	flatQ, err := r.data(ins[1])
	if err != nil {
		return nil, err
	}
	q := flatQ.([]int8)
	out, flat, err := r.alloc(p.out)
	if err != nil {
		return nil, err
	}
	c := flat.([]float32)
	if p.m <= gemvRows {
		err = gemv.Int8(p.m, p.n, p.k, lhs, max(p.lhs.rStride, p.k), q, p.k, p.ones(), c, p.n, r.threads)
	} else {
		var w *[]float32
		if w, err = widenInt8(q, r.threads); err == nil {
			err = p.gemms(r, lhs, *w, c)
		}
		widePool.Put(w)
	}
	if err != nil {
		_ = r.x.e.inner.BufferFinalize(out)
		return nil, err
	}
	return r.one(out), nil
}

// widePool holds the float32 copies of int8 weights that runInt8 makes for
// the GEMM (prompt prefill), so that each product reuses one instead of
// allocating and zeroing megabytes.
var widePool sync.Pool // *[]float32

// widenInt8 returns q converted to float32 in a buffer from widePool (put
// it back when done), converted on the threads: one pass over the weights
// per many-row product, on which the 512-token prefill of BENCHMARKS.md's
// 100M Llama spent 34 of its 490 ms (CPU profile, --quantize int8) when
// one thread converted into a new slice. A panic in a worker is returned
// as its error.
func widenInt8(q []int8, threads int) (*[]float32, error) {
	w, _ := widePool.Get().(*[]float32)
	if w == nil || cap(*w) < len(q) {
		b := make([]float32, len(q))
		w = &b
	}
	*w = (*w)[:len(q)]
	dst := *w
	err := parallel.For(len(q), 1<<16, threads, func(lo, hi int) {
		d, s := dst[lo:hi], q[lo:hi]
		for i, v := range s {
			d[i] = float32(v)
		}
	})
	return w, err
}

// ones returns p.n scales of 1 (the graph applies the real scales after
// the product), made once.
func (p *dotPlan) ones() []float32 {
	p.onesOnce.Do(func() {
		p.unit = make([]float32, p.n)
		for i := range p.unit {
			p.unit[i] = 1
		}
	})
	return p.unit
}
