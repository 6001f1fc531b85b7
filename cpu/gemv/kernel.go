package gemv

// kernel identifies one implementation of the block functions.
type kernel int

const (
	kernGo     kernel = iota // portable Go, every GOARCH
	kernAVX2                 // amd64 AVX2 + FMA
	kernAVX512               // amd64 AVX-512 F/BW/VL
	kernNEON                 // arm64 Advanced SIMD
)

// active is the fastest kernel this machine supports, chosen once at start.
var active = bestKernel()

// String is the name KernelName reports.
func (k kernel) String() string {
	switch k {
	case kernAVX2:
		return "avx2"
	case kernAVX512:
		return "avx512"
	case kernNEON:
		return "neon"
	}
	return "go"
}

// maxMB is how many x rows one block call takes: as many as the
// accumulators (four per x row) fit in the vector registers.
func (k kernel) maxMB() int {
	switch k {
	case kernAVX2, kernNEON:
		return 2
	}
	return 4
}

// bestKernel picks the last, fastest, of the kernels available.
func bestKernel() kernel {
	ks := availableKernels()
	return ks[len(ks)-1]
}

// availableKernels lists the kernels this machine can run, slowest first;
// the Go kernel is always there.
func availableKernels() []kernel {
	return append([]kernel{kernGo}, archKernels()...)
}

// f32Block computes one block with the given kernel: for m < mb and i < 4,
// y[m*ldy+i] = Σ_{k<K} x[m*ldx+k]·w[i*ldw+k]. ldw may be 0 (one row, four
// times). pf is how far past w, in bytes, the assembly kernels prefetch
// (the weights of a later block; it changes no result).
func f32Block(kern kernel, x []float32, ldx, mb int, w []float32, ldw, k int, y []float32, ldy, pf int) {
	if !f32BlockArch(kern, x, ldx, mb, w, ldw, k, y, ldy, pf) {
		f32BlockGo(x, ldx, mb, w, ldw, k, y, ldy)
	}
}

// int8Block is f32Block for int8 weights, times scale[i].
func int8Block(kern kernel, x []float32, ldx, mb int, w []int8, ldw, k int, scale, y []float32, ldy, pf int) {
	if !int8BlockArch(kern, x, ldx, mb, w, ldw, k, scale, y, ldy, pf) {
		int8BlockGo(x, ldx, mb, w, ldw, k, scale, y, ldy)
	}
}

// f32BlockGo is the portable block: four running sums per x row, one per
// W row, so that each x element is loaded once per row of the block.
func f32BlockGo(x []float32, ldx, mb int, w []float32, ldw, k int, y []float32, ldy int) {
	w0, w1, w2, w3 := w[:k], w[ldw:ldw+k], w[2*ldw:2*ldw+k], w[3*ldw:3*ldw+k]
	for m := range mb {
		xr := x[m*ldx : m*ldx+k]
		var s0, s1, s2, s3 float32
		for j, xv := range xr {
			s0 += xv * w0[j]
			s1 += xv * w1[j]
			s2 += xv * w2[j]
			s3 += xv * w3[j]
		}
		yr := y[m*ldy : m*ldy+4]
		yr[0], yr[1], yr[2], yr[3] = s0, s1, s2, s3
	}
}

// int8BlockGo is f32BlockGo for int8 weights, scaled after the sum.
func int8BlockGo(x []float32, ldx, mb int, w []int8, ldw, k int, scale, y []float32, ldy int) {
	w0, w1, w2, w3 := w[:k], w[ldw:ldw+k], w[2*ldw:2*ldw+k], w[3*ldw:3*ldw+k]
	sc := scale[:4]
	for m := range mb {
		xr := x[m*ldx : m*ldx+k]
		var s0, s1, s2, s3 float32
		for j, xv := range xr {
			s0 += xv * float32(w0[j])
			s1 += xv * float32(w1[j])
			s2 += xv * float32(w2[j])
			s3 += xv * float32(w3[j])
		}
		yr := y[m*ldy : m*ldy+4]
		yr[0], yr[1], yr[2], yr[3] = s0*sc[0], s1*sc[1], s2*sc[2], s3*sc[3]
	}
}
