package conv

import (
	"slices"

	"github.com/tensorbridge/tensorbridge/cpu/gemm"
)

// Tiling parameters; variables so tests can force many small tiles.
var (
	// scratchFloats bounds an im2col panel or output tile (4 MiB). gemm
	// repacks its operands block by block for its own cache blocking, so the
	// panel is streamed once from L2/L3; fewer, larger gemm calls measured
	// 8–15% faster on the ResNet layers than L2-sized (1 MiB) panels.
	scratchFloats = 1 << 20
	// minTile is the fewest output positions per tile, so gemm calls on
	// very deep kernels still have a useful width.
	minTile = 64
	// minSplit is the fewest output positions per thread for threads to
	// split an image's positions: a narrower product runs as slowly as a
	// full vector panel (64 columns), so on MobileNetV2's 7×7 maps (49
	// positions) two threads splitting them took as long as one; they now
	// split the output channels inside the product instead.
	minSplit = 64
)

const (
	// tileAlign rounds tiles to a multiple that suits gemm micro-kernels.
	tileAlign = 16
)

// outMode says how gemm's row-major C maps onto the output.
type outMode int

const (
	outRows outMode = iota // C is out: rows are channels, columns consecutive positions (spatial stride 1)
	outCols                // C is out: rows are positions, columns channels (channel stride 1)
	outTemp                // C is a temporary tile scattered through the output strides
)

// gemmPlan is the im2col + gemm algorithm for one call: per image, group
// and tile of output positions, C[Og × tile] = W[Og × K] · X[K × tile] with
// K = Cg·KK. X is a view of the input for 1×1 windows, else an im2col
// panel (see im2col for its layout). gemm packs both operands itself.
type gemmPlan struct {
	q           *ConvParams
	g           *geometry
	w           gemm.Matrix // the kernel, [O × K]
	minor       bool        // patch columns are kk·Cg + c (channelMinor)
	direct      bool        // X is a view of the input (1×1 kernels), no im2col
	inFlat      int         // input stride between consecutive positions when direct
	mode        outMode
	outFlat     int // output stride between consecutive positions (outCols)
	tile, tiles int
	gemmThreads int
	posts       []*gemm.Post // each group's epilogue (outRows only)
	cache       *KernelCache // the kernel's packed slivers, or nil
}

// gemmWorkspace is one worker's scratch.
type gemmWorkspace struct {
	x, c   *[]float32 // im2col panel, output tile
	off    []int      // output offsets of a tile's positions (outTemp)
	oc     []int      // output coordinates
	tapOff []int      // input offset of each outer tap for the current output row
	tapOK  []bool     // whether that tap reads input (not padding)
}

// gemmConv runs the im2col + gemm algorithm, in parallel over images × tiles.
func gemmConv(q *ConvParams, g *geometry, kl kernelLayout, in, out []float32, threads int) error {
	w, packed := kl.matrix(q, g)
	defer putFloats(packed)
	pl := &gemmPlan{q: q, g: g, w: w, minor: channelMinor(q), cache: q.Cache}
	if packed != nil {
		pl.cache = nil // a copy made for this call: nothing to keep
	}
	pl.direct, pl.inFlat = directInput(q)
	pl.mode, pl.outFlat = outputMode(q, g)
	if q.Post != nil && pl.mode != outRows {
		return afterwards(q, out, threads, func(q *ConvParams) error { return gemmConv(q, g, kl, in, out, threads) })
	}
	pl.chooseTile(threads)
	if q.Post != nil {
		pl.posts = make([]*gemm.Post, q.Groups)
		for grp := range pl.posts {
			pl.posts[grp] = groupPost(q, grp, g.og)
		}
	}
	tasks := q.Batch * pl.tiles
	pl.gemmThreads = max(1, threads/min(threads, tasks))
	return forTasks(tasks, threads, pl.newWorkspace, pl.release, func(ws *gemmWorkspace, i int) error {
		return pl.task(ws, in, out, i/pl.tiles, i%pl.tiles*pl.tile)
	})
}

// directInput reports whether the im2col matrix of every image and group is
// a strided view of the input: a 1×1 window that reads every input position
// once, in order, with the spatial axes walkable at one stride.
func directInput(q *ConvParams) (bool, int) {
	for d := range q.InSpatial {
		if q.KernelSpatial[d] != 1 || q.Strides[d] != 1 || q.PadLow[d] != 0 || q.InputDilations[d] != 1 {
			return false, 0
		}
	}
	if !slices.Equal(q.InSpatial, q.OutSpatial) {
		return false, 0
	}
	s, ok := flatStride(q.InSpatial, q.InSpatialStrides)
	return ok, s
}

// outputMode picks how gemm writes the output (see outMode).
func outputMode(q *ConvParams, g *geometry) (outMode, int) {
	s, ok := flatStride(q.OutSpatial, q.OutSpatialStrides)
	switch {
	case ok && s == 1:
		return outRows, 1
	case ok && (q.OutChanStride == 1 || g.og == 1):
		return outCols, s
	}
	return outTemp, 0
}

// chooseTile sizes tiles so one worker's scratch (panel, output tile)
// stays within scratchFloats and every thread gets at least one tile.
func (pl *gemmPlan) chooseTile(threads int) {
	g := pl.g
	t := g.np
	if !pl.direct {
		t = min(t, max(scratchFloats/g.k, minTile))
	}
	if pl.mode == outTemp {
		t = min(t, max(scratchFloats/g.og, minTile))
	}
	// Threads share an image by its positions only when each gets a
	// useful width (minSplit); otherwise the product splits its rows.
	if per := ceilDiv(threads, pl.q.Batch); per > 1 && g.np >= per*minSplit {
		t = min(t, ceilDiv(g.np, per))
	}
	if t > tileAlign {
		t = min(g.np, ceilDiv(t, tileAlign)*tileAlign)
	}
	pl.tile = max(t, 1)
	pl.tiles = ceilDiv(g.np, pl.tile)
}

func (pl *gemmPlan) newWorkspace() *gemmWorkspace {
	g := pl.g
	ws := &gemmWorkspace{oc: make([]int, g.n), tapOff: make([]int, len(g.taps)), tapOK: make([]bool, len(g.taps))}
	if !pl.direct {
		ws.x = getFloats(g.k * pl.tile)
	}
	if pl.mode == outTemp {
		ws.c = getFloats(g.og * pl.tile)
		ws.off = make([]int, pl.tile)
	}
	return ws
}

func (pl *gemmPlan) release(ws *gemmWorkspace) {
	putFloats(ws.x)
	putFloats(ws.c)
}

// task computes output positions [t0, t0+tile) of image b for every group.
func (pl *gemmPlan) task(ws *gemmWorkspace, in, out []float32, b, t0 int) error {
	q, g := pl.q, pl.g
	tn := min(pl.tile, g.np-t0)
	for grp := range q.Groups {
		x := pl.patches(ws, in, b, grp, t0, tn)
		w := pl.w
		w.Data = w.Data[grp*g.og*w.RowStride:]
		var post *gemm.Post
		if pl.posts != nil {
			post = pl.posts[grp]
		}
		o := gemm.Options{Post: post, A: pl.cache.group(grp, q.Groups)}
		if err := pl.multiply(ws, w, x, out, o, b*q.OutBatchStride+grp*g.og*q.OutChanStride, t0, tn); err != nil {
			return err
		}
	}
	return nil
}

// patches returns X[K × tn], the inputs each output position reads, as a
// view of the input when direct, else of the im2col panel.
func (pl *gemmPlan) patches(ws *gemmWorkspace, in []float32, b, grp, t0, tn int) gemm.Matrix {
	q, g := pl.q, pl.g
	base := b*q.InBatchStride + grp*g.cg*q.InChanStride
	if pl.direct {
		return gemm.Matrix{Data: in[base+t0*pl.inFlat:], RowStride: q.InChanStride, ColStride: pl.inFlat}
	}
	x := (*ws.x)[:g.k*tn]
	pl.im2col(x, tn, ws, in, base, t0)
	if pl.minor {
		return gemm.Matrix{Data: x, RowStride: 1, ColStride: g.k}
	}
	return gemm.Matrix{Data: x, RowStride: tn, ColStride: 1}
}

// multiply computes C = W·X for one tile into the output at base (the
// image's and group's first output channel).
func (pl *gemmPlan) multiply(ws *gemmWorkspace, w, x gemm.Matrix, out []float32, o gemm.Options, base, t0, tn int) error {
	q, g := pl.q, pl.g
	switch pl.mode {
	case outRows:
		return gemm.SgemmWith(g.og, tn, g.k, w, x, out[base+t0:], ldc(g.og, tn, q.OutChanStride), o, pl.gemmThreads)
	case outCols:
		return gemm.Sgemm(tn, g.og, g.k, transpose(x), transpose(w), out[base+t0*pl.outFlat:],
			ldc(tn, g.og, pl.outFlat), false, pl.gemmThreads)
	}
	tmp := (*ws.c)[:g.og*tn]
	if err := gemm.SgemmWith(g.og, tn, g.k, w, x, tmp, tn, gemm.Options{A: o.A}, pl.gemmThreads); err != nil {
		return err
	}
	offs := ws.off[:tn]
	offsets(offs, t0, q.OutSpatial, q.OutSpatialStrides, ws.oc)
	for o := range g.og {
		ob := base + o*q.OutChanStride
		for t, v := range tmp[o*tn : (o+1)*tn] {
			out[ob+offs[t]] = v
		}
	}
	return nil
}

// ldc is the row stride to give gemm for an m×n C whose rows are stride
// apart: with one row the stride is unused, and gemm wants it ≥ n.
func ldc(m, n, stride int) int {
	if m == 1 {
		return max(stride, n)
	}
	return stride
}

func transpose(m gemm.Matrix) gemm.Matrix {
	return gemm.Matrix{Data: m.Data, RowStride: m.ColStride, ColStride: m.RowStride}
}

// im2col fills x with the patches of output positions [t0, t0+tn), as
// row-major [tn × K] when minor (each patch's Cg channels are contiguous
// in the input and in the panel), else as row-major [K × tn] (each input
// row is read along x and written contiguously); this also suits gemm,
// which packs B fastest from contiguous rows. The tile is walked as segments of consecutive x within one
// output row, whose outer taps share input offsets.
func (pl *gemmPlan) im2col(x []float32, tn int, ws *gemmWorkspace, in []float32, base, t0 int) {
	g := pl.g
	oc := ws.oc
	unflatten(t0, pl.q.OutSpatial, oc)
	for row := 0; row < tn; {
		x0 := oc[g.n-1]
		seg := min(g.outX-x0, tn-row)
		for j, k := range g.taps {
			ws.tapOff[j], ws.tapOK[j] = g.inOffset(oc, k)
		}
		if pl.minor {
			pl.segmentMinor(x[row*g.k:(row+seg)*g.k], seg, x0, ws, in, base)
		} else {
			pl.segmentMajor(x[row:], tn, seg, x0, ws, in, base)
		}
		row += seg
		oc[g.n-1] = 0
		advance(oc[:g.n-1], g.outerOut)
	}
}

// segmentMajor fills columns [0, seg) of the row-major [K × ld] panel
// dst, K in order c·KK + kk: each row is a (strided) gather from one input
// row, a plain copy for unit strides.
func (pl *gemmPlan) segmentMajor(dst []float32, ld, seg, x0 int, ws *gemmWorkspace, in []float32, base int) {
	q, g := pl.q, pl.g
	isx := q.InSpatialStrides[g.n-1]
	for c := range g.cg {
		cb := base + c*q.InChanStride
		for j := range g.taps {
			for kx, r := range g.xRuns {
				row := dst[(c*g.kk+j*g.kx+kx)*ld:][:seg]
				if !ws.tapOK[j] {
					clear(row)
					continue
				}
				r.gatherStrided(row, 1, seg, x0, in, cb+ws.tapOff[j], isx)
			}
		}
	}
}

// segmentMinor fills seg rows of the row-major [tile × K] panel dst, K in
// order kk·Cg + c: for each tap, every position copies Cg contiguous input
// channels (or zeros where it reads padding).
func (pl *gemmPlan) segmentMinor(dst []float32, seg, x0 int, ws *gemmWorkspace, in []float32, base int) {
	g := pl.g
	isx := pl.q.InSpatialStrides[g.n-1]
	for j := range g.taps {
		for kx, r := range g.xRuns {
			col := dst[(j*g.kx+kx)*g.cg:]
			i0, i1 := r.clip(x0, x0+seg)
			if !ws.tapOK[j] || i0 >= i1 {
				zeroCols(col, g.k, g.cg, 0, seg)
				continue
			}
			t0, t1 := r.lo+i0*r.step-x0, r.lo+(i1-1)*r.step-x0+1
			zeroCols(col, g.k, g.cg, 0, t0)
			zeroCols(col, g.k, g.cg, t1, seg)
			if r.step != 1 {
				zeroCols(col, g.k, g.cg, t0, t1)
			}
			p, d := base+ws.tapOff[j]+(r.first+i0*r.inStep)*isx, r.inStep*isx
			for t := t0; t < t1; t += r.step {
				copy(col[t*g.k:t*g.k+g.cg], in[p:p+g.cg])
				p += d
			}
		}
	}
}

// zeroCols zeroes dst[t·ld : t·ld+w] for t in [t0, t1).
func zeroCols(dst []float32, ld, w, t0, t1 int) {
	for t := t0; t < t1; t++ {
		clear(dst[t*ld : t*ld+w])
	}
}

// fillStrided zeroes dst[0], dst[stride], … (n elements).
func fillStrided(dst []float32, stride, n int) {
	for t := range n {
		dst[t*stride] = 0
	}
}
