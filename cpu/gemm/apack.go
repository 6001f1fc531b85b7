package gemm

import "sync"

// APack keeps a constant A (a layer's weights, a convolution's kernel)
// packed in the micro-kernel's slivers from one product to the next, so
// that only the first product that takes it packs it: the products of a
// small batch otherwise spend a tenth of their time packing the same
// weights again (MobileNetV2 at batch 1). A's values must not change
// while products use the APack; its shape, blocking and kernel may (the
// packing is redone for a new one). An APack is safe for concurrent use.
type APack struct {
	mu   sync.Mutex
	key  apackKey
	data []float32
}

type apackKey struct {
	kern     *microKernel
	m, k, kc int
	data     *float32
	rs, cs   int
	msl      int
}

// packed returns A packed for plan p: for each block of k at pc, in
// order, the slivers of all m rows (rows past m zero), at offset pc·msl
// where msl is m rounded up to mr.
func (ap *APack) packed(p *plan) []float32 {
	mr := p.kern.mr
	msl := ceilDiv(p.m, mr) * mr
	key := apackKey{kern: p.kern, m: p.m, k: p.k, kc: p.kc, data: &p.a.Data[0], rs: p.a.RowStride, cs: p.a.ColStride, msl: msl}
	ap.mu.Lock()
	defer ap.mu.Unlock()
	if ap.key == key {
		return ap.data
	}
	data := make([]float32, msl*p.k)
	for pc := 0; pc < p.k; pc += p.kc {
		packA(data[pc*msl:], p.a, 0, p.m, pc, min(p.kc, p.k-pc), mr)
	}
	ap.key, ap.data = key, data // a new slice: products still reading the old one keep it
	return data
}

// aBlock returns the packed mcur×kcur block of A at (ic, pn.pc): from the
// APack's slivers when there is one, else packed into buf.
func (p *plan) aBlock(buf []float32, ic, mcur int, pn panel) []float32 {
	if p.apacked != nil {
		msl := ceilDiv(p.m, p.kern.mr) * p.kern.mr
		off := pn.pc*msl + ic*pn.kcur
		return p.apacked[off : off+ceilDiv(mcur, p.kern.mr)*p.kern.mr*pn.kcur]
	}
	packA(buf, p.a, ic, mcur, pn.pc, pn.kcur, p.kern.mr)
	return buf
}
