package conv

import (
	"fmt"
	"sync"

	"github.com/tensorbridge/tensorbridge/cpu/gemm"
)

// The epilogue (ConvParams.Post) runs inside the algorithms where the
// output is written channel by channel with its positions contiguous: the
// gemm path's channel-major output (gemm.SgemmPost, on each block of the
// product as it is finished) and the depthwise planes (on each channel's
// plane as it is written). Elsewhere, afterwards applies it in a pass over
// the output: the same values, only without the saving.

// validatePost checks that Post has one bias per output channel.
func (p *ConvParams) validatePost() error {
	if p.Post != nil && p.Post.Bias != nil && len(p.Post.Bias) != p.OutChannels {
		return fmt.Errorf("conv: len(Post.Bias) = %d, want %d (OutChannels)", len(p.Post.Bias), p.OutChannels)
	}
	return nil
}

// groupPost is q.Post for the og output channels of group grp.
func groupPost(q *ConvParams, grp, og int) *gemm.Post {
	if q.Post == nil || q.Post.Bias == nil {
		return q.Post
	}
	p := *q.Post
	p.Bias = p.Bias[grp*og : (grp+1)*og]
	return &p
}

// afterwards runs the algorithm fn without the epilogue and then applies
// it to every output.
func afterwards(q *ConvParams, out []float32, threads int, fn func(q *ConvParams) error) error {
	if q.Post == nil {
		return fn(q)
	}
	plain := *q
	plain.Post = nil
	if err := fn(&plain); err != nil {
		return err
	}
	applyPost(q, out)
	return nil
}

// applyPost applies q.Post to every output of q, channel by channel, one
// row of the last spatial axis at a time (gathered when it is strided).
func applyPost(q *ConvParams, out []float32) {
	n := len(q.OutSpatial)
	outer, row := 1, q.OutSpatial[n-1]
	for _, d := range q.OutSpatial[:n-1] {
		outer *= d
	}
	sx := q.OutSpatialStrides[n-1]
	buf := make([]float32, row)
	oc := make([]int, n-1)
	for b := range q.Batch {
		for o := range q.OutChannels {
			clear(oc)
			for range outer {
				base := b*q.OutBatchStride + o*q.OutChanStride + rowOffset(oc, q.OutSpatialStrides)
				if sx == 1 {
					q.Post.Row(out[base:base+row], o)
				} else {
					for x := range row {
						buf[x] = out[base+x*sx]
					}
					q.Post.Row(buf, o)
					for x, v := range buf {
						out[base+x*sx] = v
					}
				}
				advance(oc, q.OutSpatial[:n-1])
			}
		}
	}
}

// KernelCache keeps, for a kernel that is the same at every call with one
// ConvParams (a constant packed by PackKernel), what the products derive
// from it: each group's kernel rows packed for the matrix multiply
// (gemm.APack), packed by the first call instead of by every call. Safe
// for concurrent calls.
type KernelCache struct {
	mu     sync.Mutex
	groups []*gemm.APack
}

// group returns group g's APack (of n groups); nil for a nil cache.
func (kc *KernelCache) group(g, n int) *gemm.APack {
	if kc == nil {
		return nil
	}
	kc.mu.Lock()
	defer kc.mu.Unlock()
	if len(kc.groups) != n {
		kc.groups = make([]*gemm.APack, n)
		for i := range kc.groups {
			kc.groups[i] = new(gemm.APack)
		}
	}
	return kc.groups[g]
}
