package gemm

//go:generate go run gen_kernels.go

// microKernel is one implementation of the innermost step: an mr×nr tile
// of C from a packed sliver of A (kc steps of mr floats) and a packed
// sliver of B (kc steps of nr floats), with its blocking sizes.
type microKernel struct {
	name   string
	mr, nr int
	// kc, mc, nc are the cache blocking: a kc×nr sliver of B stays in L1
	// while the mc×kc block of A streams from L2 past it, and the kc×nc
	// panel of B sits in L3. mc is a multiple of mr, nc of nr.
	kc, mc, nc int
	// tile computes C = A·B, or C += A·B when add, for the mr×nr tile at
	// c whose rows are ldc apart. a holds kc·mr packed floats; b holds kc
	// rows of nr floats, ldb apart (nr when packed).
	tile func(kc int, a, b []float32, ldb int, c []float32, ldc int, add bool)
}

// active is the fastest kernel this machine runs, chosen once at start.
var active = availableKernels()[0]

// KernelName names the micro-kernel Sgemm runs on this machine.
func KernelName() string { return active.name }

// availableKernels lists the kernels this machine can run, fastest first;
// the portable Go kernel, always there, is last.
func availableKernels() []*microKernel {
	return append(archKernels(), goKernel)
}

// checkedTile wraps an assembly tile function with slice bounds checks, so
// that a wrong length in the driver panics (and Sgemm returns it as an
// error) instead of the assembly reading or writing out of bounds.
func checkedTile(mr, nr int, fn func(kc int, a, b *float32, ldb int, c *float32, ldc int, add bool)) func(kc int, a, b []float32, ldb int, c []float32, ldc int, add bool) {
	return func(kc int, a, b []float32, ldb int, c []float32, ldc int, add bool) {
		if kc < 1 || ldb < nr || ldc < nr {
			panic("gemm: micro-kernel called with kc < 1 or a stride < nr")
		}
		a, b, c = a[:kc*mr], b[:(kc-1)*ldb+nr], c[:(mr-1)*ldc+nr]
		fn(kc, &a[0], &b[0], ldb, &c[0], ldc, add)
	}
}

// goKernel is the portable kernel: a 4×4 tile whose sixteen sums the
// compiler keeps in registers on every GOARCH with 16 float registers.
var goKernel = &microKernel{name: "go", mr: 4, nr: 4, kc: 256, mc: 128, nc: 2048, tile: tileGo}

// tileGo is goKernel's tile function.
func tileGo(kc int, a, b []float32, ldb int, c []float32, ldc int, add bool) {
	a = a[:kc*4]
	var c00, c01, c02, c03, c10, c11, c12, c13 float32
	var c20, c21, c22, c23, c30, c31, c32, c33 float32
	for p := 0; p < kc; p++ {
		ap, bp := a[4*p:4*p+4], b[p*ldb:p*ldb+4]
		a0, a1, a2, a3 := ap[0], ap[1], ap[2], ap[3]
		b0, b1, b2, b3 := bp[0], bp[1], bp[2], bp[3]
		c00, c01, c02, c03 = c00+a0*b0, c01+a0*b1, c02+a0*b2, c03+a0*b3
		c10, c11, c12, c13 = c10+a1*b0, c11+a1*b1, c12+a1*b2, c13+a1*b3
		c20, c21, c22, c23 = c20+a2*b0, c21+a2*b1, c22+a2*b2, c23+a2*b3
		c30, c31, c32, c33 = c30+a3*b0, c31+a3*b1, c32+a3*b2, c33+a3*b3
	}
	rows := [4][4]float32{{c00, c01, c02, c03}, {c10, c11, c12, c13}, {c20, c21, c22, c23}, {c30, c31, c32, c33}}
	for i := range rows {
		row := c[i*ldc : i*ldc+4]
		if add {
			for j := range row {
				row[j] += rows[i][j]
			}
		} else {
			copy(row, rows[i][:])
		}
	}
}
