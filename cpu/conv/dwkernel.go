package conv

//go:generate go run gen_dw.go

// dwKernel identifies one implementation of the depthwise plane kernel
// (dwShape.planes).
type dwKernel int

const (
	dwGo     dwKernel = iota // portable Go, every GOARCH
	dwAVX2                   // amd64 AVX2 + FMA
	dwAVX512                 // amd64 AVX-512 F
)

// dwActive is the fastest plane kernel this machine supports, chosen once at
// start; tests set it to run every kernel through the public entry points.
var dwActive = dwBest()

// String names the kernel in test output.
func (k dwKernel) String() string {
	switch k {
	case dwAVX2:
		return "avx2"
	case dwAVX512:
		return "avx512"
	}
	return "go"
}

// dwBest picks the last, fastest, of the kernels available.
func dwBest() dwKernel {
	ks := dwKernels()
	return ks[len(ks)-1]
}

// dwKernels lists the plane kernels this machine can run, slowest first; the
// Go kernel is always there.
func dwKernels() []dwKernel {
	return append([]dwKernel{dwGo}, dwArchKernels()...)
}

// dwPlaneFunc is the signature of the assembly kernels (see gen_dw.go):
// the outRows rows of each of nch channels (inputs inCS, outputs outCS
// apart, K·K weights each), out[y·ldout + i] = Σ_{ky,kx<K} w[ky·K+kx] ·
// B[y·sy + ky·dy][S·i + kx] for i < n, where B is a zero-padded copy of
// the channel in buf (rows ldbuf apart, 64-byte aligned in the kernel):
// the kernel copies input row r − padY (rows ldin apart, inRows of them),
// elements [cpSrc, cpSrc+cpN), to columns from cpDst of row r. At stride 2
// a buf row holds the even columns in its first half and the odd ones in
// its second.
type dwPlaneFunc func(out *float32, ldout, outRows int, in *float32, ldin, inRows int,
	buf *float32, ldbuf, padY, sy, dy, cpSrc, cpDst, cpN int, w *float32, n, nch, inCS, outCS int)

// dwShape is the geometry of one channel of a 2-D depthwise convolution
// with contiguous input rows and no dilation along x: a ky×k kernel; along
// y stride sy, kernel dilation dy, low padding padY over height input rows
// ldin elements apart, outH output rows; along x stride s and low padding
// pad over rows of width elements, n outputs per row.
type dwShape struct {
	ky, k, sy, dy, padY, height, ldin, outH int
	s, width, pad, n                        int
	// Outputs [lo, hi) of a row read only real input (no padding): the Go
	// kernel's fused range.
	lo, hi int
	// The assembly's padded copy (see dwPlaneFunc): bufRows rows of ldbuf
	// columns (at stride 2, two halves of ldbuf/2), wide enough for the
	// 32 columns (per half) an AVX-512 vector reads, even when n is
	// shorter, and a multiple of 16 so that the rows stay aligned; one row
	// more than the outputs read, filled ahead.
	ldbuf, bufRows, cpSrc, cpDst, cpN int
	asm                               dwPlaneFunc // nil: the Go kernel
}

// dwMaxVL is the widest vector of any kernel, in floats.
const dwMaxVL = 16

// init derives the ranges and picks kern's assembly, if it has one: for
// square 3×3 or 5×5 kernels at x stride 1 or 2.
func (d *dwShape) init(kern dwKernel) {
	d.lo = min(d.n, max(0, ceilDiv(d.pad, d.s)))
	d.hi = max(d.lo, min(d.n, floorDiv(d.width+d.pad-d.k, d.s)+1))
	d.asm = nil
	if d.ky == d.k {
		d.asm = dwAsm(kern, d.k, d.s)
	}
	d.ldbuf = d.s * ((max(d.n, dwMaxVL) + dwMaxVL + d.k + 15) &^ 15)
	d.bufRows = d.outH*d.sy + (d.k-1)*d.dy + 1
	i0, i1 := max(0, -d.pad), min(d.width, d.ldbuf-d.pad)
	d.cpSrc, d.cpDst, d.cpN = i0, i0+d.pad, max(0, i1-i0)
}

// bufLen is the length of the zeroed buffer plane needs: none for the Go
// kernel.
func (d *dwShape) bufLen() int {
	if d.asm == nil {
		return 0
	}
	return d.bufRows*d.ldbuf + dwMaxVL
}

// planes computes the outH output rows of nch channels, row y of channel
// c at out[c·outCS + y·ldout], from the channels' input in[c·inCS…] and
// weights w[c·ky·k…] (row-major ky×k); buf (bufLen long) is zero outside
// the columns and rows the kernel copies input into, as it leaves it. The
// slice expressions check every element the kernels may touch.
func (d *dwShape) planes(out []float32, ldout, outCS int, in []float32, inCS int, w, buf []float32, nch int) {
	if nch == 0 || d.outH == 0 || d.n == 0 {
		return
	}
	kk := d.ky * d.k
	out, w = out[:(nch-1)*outCS+(d.outH-1)*ldout+d.n], w[:nch*kk]
	in = in[:(nch-1)*inCS+(d.height-1)*d.ldin+d.width]
	if d.asm != nil {
		buf = buf[:d.bufLen()]
		d.asm(&out[0], ldout, d.outH, &in[0], d.ldin, d.height, &buf[0], d.ldbuf, d.padY, d.sy, d.dy,
			d.cpSrc, d.cpDst, d.cpN, &w[0], d.n, nch, inCS, outCS)
		return
	}
	for c := range nch {
		for y := range d.outH {
			d.rowGo(out[c*outCS+y*ldout:][:d.n], in[c*inCS:], w[c*kk:(c+1)*kk], y)
		}
	}
}

// rowGo is the portable kernel for output row y: per kernel row that reads
// input, one fused pass over the outputs that read only real input
// (fusedTaps) and a bounds-checked loop for the border outputs.
func (d *dwShape) rowGo(out, in, w []float32, y int) {
	clear(out)
	for ky := range d.ky {
		iy := y*d.sy - d.padY + ky*d.dy
		if iy < 0 || iy >= d.height {
			continue
		}
		src, wr := in[iy*d.ldin:iy*d.ldin+d.width], w[ky*d.k:(ky+1)*d.k]
		d.border(out, src, wr, 0, d.lo)
		d.border(out, src, wr, d.hi, d.n)
		if d.lo < d.hi {
			fusedTaps(out[d.lo:d.hi], wr, src, d.lo*d.s-d.pad, d.s, 1)
		}
	}
}

// border adds to out[x], x in [x0, x1), the taps w of input row src that
// fall inside the row.
func (d *dwShape) border(out, src, w []float32, x0, x1 int) {
	for x := x0; x < x1; x++ {
		for k, wk := range w {
			if i := x*d.s - d.pad + k; i >= 0 && i < len(src) {
				out[x] += wk * src[i]
			}
		}
	}
}
