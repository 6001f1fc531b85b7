package engine

import (
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tensorbridge/tensorbridge/cpu/gemv"
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
		w := make([]float32, len(q))
		for i, v := range q {
			w[i] = float32(v)
		}
		err = p.gemms(r, lhs, w, c)
	}
	if err != nil {
		_ = r.x.e.inner.BufferFinalize(out)
		return nil, err
	}
	return r.one(out), nil
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
