package gemm

// The dot-product path: C = A·Bᵀ-style products on the matrix-vector
// kernels of package gemv, for the shapes where it beats the packed BLIS
// path of driver.go (Sgemm chooses, useTiled).

import (
	"sync"

	"github.com/tensorbridge/tensorbridge/cpu/gemv"
	"github.com/tensorbridge/tensorbridge/cpu/parallel"
)

// useTiled reports whether the dot-product path takes an m×n×k product:
// all but the large ones (m and n at least 512, k at least 256), which the
// packed micro-kernels run faster (1024³: 199 against 147 GFLOP/s on one
// thread, 361 against 270 on two; ResNet and batch-1 encoder products the
// other way round), and the shallow ones (k below 128), whose dot products
// are too short to fill a vector loop: the 1×1 convolutions of MobileNetV2
// (k 16 to 64) measured 2 to 4 times faster packed (m12544 n96 k16: 89
// against 35 GFLOP/s on one thread; m196 n384 k64: 185 against 114).
func useTiled(m, n, k int) bool { return k >= 128 && (m < 512 || n < 512 || k < 256) }

// widePacked reports whether a product the dot-product path would take
// goes to the packed path instead because B is row-major and wide: the
// dot-product path would first transpose all of B, while packing copies
// its rows as they are. Measured on one thread (the 1×1 convolutions of
// MobileNetV2 and ResNet-50, whose B is the input): m24 n3136 k144 163
// against 60 GFLOP/s, m64 n3136 k256 160 against 119, m128 n784 k512 199
// against 152; below n = 512 the packed kernel's 64-wide slivers run part
// empty and the dot-product path wins (m2048 n49 k512: 71 against 151).
func widePacked(n int, b Matrix) bool { return n >= 512 && b.ColStride == 1 && b.RowStride != 1 }

// rowBlock is the number of rows of A one kernel call takes: 8 measured
// faster than 16 on the products of convolutions (m64 n227 k576: 235
// against 211 GFLOP/s on one thread; ResNet-18 batch 1, medians of 3
// alternating runs: 28.6 -> 27.2 ms on one thread, 16.0 -> 15.4 on two).
const rowBlock = 8

// tiledSgemm is Sgemm, its operands already validated (validate), on
// package gemv's kernels: blocks of up to rowBlock rows
// of A against L2-sized blocks of Bᵀ, each output a dot product of
// contiguous rows. It reads a B whose columns are contiguous (the patches
// of an im2col convolution, a transposed weight) in place, and measured
// faster than the packed path on the products of convolutions and of
// sequence-length encoders (BENCHMARKS.md, "The embedded cpu engine").
func tiledSgemm(m, n, k int, a, b Matrix, c []float32, ldc int, accumulate bool, post *Post, threads int) error {
	if m == 0 || n == 0 {
		return nil
	}
	x, ldx, freeX, err := rowsOf(a, m, k, threads)
	defer freeX()
	if err != nil {
		return err
	}
	w, ldw, freeW, err := rowsOf(Matrix{Data: b.Data, RowStride: b.ColStride, ColStride: b.RowStride}, n, k, threads)
	defer freeW()
	if err != nil {
		return err
	}
	if !accumulate {
		return product(m, n, k, x, ldx, w, ldw, c, ldc, post, threads)
	}
	t := getBuf(m * n)
	defer putBuf(t)
	if err := product(m, n, k, x, ldx, w, ldw, *t, n, nil, threads); err != nil {
		return err
	}
	for i := range m {
		row, add := c[i*ldc:i*ldc+n], (*t)[i*n:(i+1)*n]
		for j := range row {
			row[j] += add[j]
		}
	}
	post.block(c, ldc, 0, 0, m, n)
	return nil
}

// l2Bytes is the share of the L2 cache a block of Wᵀ may fill, so that
// the blocks of rows of X that stream past it find it there.
const l2Bytes = 256 << 10

// product computes C = X·Wᵀ in tiles of up to rowBlock rows of X by a block of
// rows of W sized to stay in L2; the tiles are spread over the threads,
// whole columns of tiles to a thread so each streams its block of W from
// its own L2. post (nil: none) runs on each tile as it is finished.
func product(m, n, k int, x []float32, ldx int, w []float32, ldw int, c []float32, ldc int, post *Post, threads int) error {
	nc := max(4, min(n, l2Bytes/(4*max(k, 1)))/4*4)
	rb, nb := (m+rowBlock-1)/rowBlock, (n+nc-1)/nc
	tileFn := func(t int) error {
		j0, i0 := (t/rb)*nc, (t%rb)*rowBlock
		rows, cols := min(rowBlock, m-i0), min(nc, n-j0)
		if err := gemv.F32(rows, cols, k, x[i0*ldx:], ldx, w[j0*ldw:], ldw, c[i0*ldc+j0:], ldc, 1); err != nil {
			return err
		}
		post.block(c, ldc, i0, j0, rows, cols)
		return nil
	}
	if rb*nb == 1 {
		if err := gemv.F32(m, n, k, x, ldx, w, ldw, c, ldc, threads); err != nil {
			return err
		}
		post.block(c, ldc, 0, 0, m, n)
		return nil
	}
	var (
		mu    sync.Mutex
		first error
	)
	err := parallel.For(rb*nb, 1, threads, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			if err := tileFn(t); err != nil {
				mu.Lock()
				first = err
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

// rowsOf returns the rows×cols view v as rows with contiguous columns, in
// place when they are, else packed (free returns the packing buffer).
func rowsOf(v Matrix, rows, cols, threads int) (data []float32, ld int, free func(), err error) {
	if (cols == 1 || v.ColStride == 1) && (rows == 1 || v.RowStride >= cols) {
		ld = v.RowStride
		if rows == 1 {
			ld = cols
		}
		return v.Data, ld, func() {}, nil
	}
	p := getBuf(rows * cols)
	err = pack(*p, v, rows, cols, threads)
	return *p, cols, func() { putBuf(p) }, err
}

// packTile is the side of the square tiles pack copies, so that both the
// rows read and the rows written stay in L1.
const packTile = 32

// pack copies the view v into d as rows×cols row-major, tile by tile
// (reading a transposed operand column by column would miss the cache on
// every element), the row tiles spread over the threads.
func pack(d []float32, v Matrix, rows, cols, threads int) error {
	grain := max(1, 4096/(packTile*max(cols, 1)))
	return parallel.For((rows+packTile-1)/packTile, grain, threads, func(lo, hi int) {
		for ti := lo; ti < hi; ti++ {
			i0, i1 := ti*packTile, min(rows, (ti+1)*packTile)
			for j0 := 0; j0 < cols; j0 += packTile {
				j1 := min(cols, j0+packTile)
				for i := i0; i < i1; i++ {
					row, src := d[i*cols+j0:i*cols+j1], v.Data[i*v.RowStride+j0*v.ColStride:]
					for j := range row {
						row[j] = src[j*v.ColStride]
					}
				}
			}
		}
	})
}

var bufs sync.Pool // *[]float32

func getBuf(n int) *[]float32 {
	if p, ok := bufs.Get().(*[]float32); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	s := make([]float32, n)
	return &s
}

func putBuf(p *[]float32) { bufs.Put(p) }
