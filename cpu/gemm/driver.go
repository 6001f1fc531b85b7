package gemm

import (
	"iter"

	"github.com/tensorbridge/tensorbridge/cpu/parallel"
)

// smallWork is the m·n·k below which one goroutine does the whole
// product: starting workers costs more than it saves. Measured with AVX-512
// on the 2-core Zen 5 VM this was tuned on, 2 threads against 1: 64³ runs
// at 0.6×, 96³ at 1.05×, 128³ at 1.3×; 2²⁰ is about 100³.
const smallWork = 1 << 20

// plan is one call: its operands, its blocking and its split over the
// workers.
type plan struct {
	kern       *microKernel
	m, n, k    int
	a, b       Matrix
	c          []float32
	ldc        int
	accumulate bool
	post       *Post     // applied to each block after the last panel in k
	apacked    []float32 // A already packed (APack), or nil
	kc, mc, nc int       // block sizes for this call, ≤ the kernel's
	tm, tn     int       // workers: tm row ranges × tn column ranges of a panel
	bInPlace   bool      // the kernel reads B's full slivers where they lie
}

// panel is one kcur×ncur panel of B, at row pc and column jc; add says
// whether its product adds to C (every panel after the first in k does).
type panel struct {
	jc, ncur, pc, kcur int
	add                bool
}

// inPlaceSlivers is the most slivers of A for which B is read in place,
// when its rows are contiguous: packing B costs as much as reading it,
// and pays only when the packed panel is read many times.
const inPlaceSlivers = 2

// newPlan sizes the blocks for an m×n×k product (k ≥ 1) and picks the
// grid of workers.
func newPlan(kern *microKernel, m, n, k int, a, b Matrix, c []float32, ldc int, accumulate bool, post *Post, threads int) plan {
	p := plan{kern: kern, m: m, n: n, k: k, a: a, b: b, c: c, ldc: ldc, accumulate: accumulate, post: post}
	p.bInPlace = b.ColStride == 1 && b.RowStride >= kern.nr && ceilDiv(m, kern.mr) <= inPlaceSlivers
	kcMax := kern.kc
	if p.bInPlace {
		// No B panel to keep in cache: only the small block of A grows.
		kcMax *= 4
	}
	p.kc = evenBlock(k, kcMax, 1)
	p.mc = evenBlock(m, kern.mc, kern.mr)
	p.nc = evenBlock(n, kern.nc, kern.nr)
	threads = parallel.Threads(threads)
	if float64(m)*float64(n)*float64(k) < smallWork {
		threads = 1
	}
	p.tm, p.tn = grid(threads, m, p.nc, kern.mr, kern.nr)
	return p
}

// evenBlock splits total into the fewest blocks of at most limit and
// returns the block size, rounded up to a multiple of unit, that makes
// them even: k = 300 runs as 150+150 rather than 256+44.
func evenBlock(total, limit, unit int) int {
	nb := ceilDiv(total, limit)
	return ceilDiv(ceilDiv(total, nb), unit) * unit
}

func ceilDiv(x, y int) int { return (x + y - 1) / y }

// moveCost is what moving one element of an operand between cores or
// through packing costs, in multiply-add lanes: ~0.8 ns, fitted to 2-thread
// timings on Zen 5 (the rows-versus-columns split of 128×768×256,
// 2048×128×256 and 256³ and 1024³), at 128 AVX-512 lanes per ns.
const moveCost = 100

// grid picks tm×tn ≤ threads workers for an m-row product whose panels
// are nc wide, minimising one worker's estimated time per step of k: its
// tiles, mr·nr lanes each, plus moveCost for each element it moves. A
// worker packs its rows of A and a share of its columns of the panel of
// B, and reads the rest of its columns from the cores that packed them:
// rows + cols elements per step of k. So rows are split when A is the
// taller operand and columns when B is the wider one (measured: the wrong
// split of 128×768×256 runs at 2/3 the speed); on a tie fewer workers
// win, then more rows.
func grid(threads, m, nc, mr, nr int) (tm, tn int) {
	ms, ns := ceilDiv(m, mr), ceilDiv(nc, nr)
	best := -1.0
	for t := 1; t <= threads; t++ {
		for r := t; r >= 1; r-- {
			c := t / r
			if r*c != t || r > ms || c > ns {
				continue
			}
			rows, cols := float64(ceilDiv(ms, r)*mr), float64(ceilDiv(ns, c)*nr)
			cost := rows*cols + moveCost*(rows+cols)
			if best < 0 || cost < best {
				best, tm, tn = cost, r, c
			}
		}
	}
	return tm, tn
}

// run computes the product block by block: for each kc×nc panel of B,
// packed once by all workers together, each worker packs the mc×kc blocks
// of its rows of A and runs the macro-kernel on its columns of the panel.
// With one worker the whole product runs under one parallel.Run, which
// turns a panic into an error as the workers' parallel.For does. For may
// run several workers' shares on one goroutine, one after the other, so
// the workers never wait for each other inside a For.
func (p *plan) run(ws *workspace, apack *APack) error {
	if apack != nil {
		p.apacked = apack.packed(p)
	}
	workers := p.tm * p.tn
	if workers == 1 {
		return parallel.Run(func() {
			for pn := range p.panels() {
				p.packShare(ws.b, pn, 0)
				p.work(ws, 0, pn)
			}
		})
	}
	for pn := range p.panels() {
		err := parallel.For(workers, 1, workers, func(lo, hi int) {
			for w := lo; w < hi; w++ {
				p.packShare(ws.b, pn, w)
			}
		})
		if err != nil {
			return err
		}
		err = parallel.For(workers, 1, workers, func(lo, hi int) {
			for w := lo; w < hi; w++ {
				p.work(ws, w, pn)
			}
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// panels yields the kc×nc panels of B, k fastest.
func (p *plan) panels() iter.Seq[panel] {
	return func(yield func(panel) bool) {
		for jc := 0; jc < p.n; jc += p.nc {
			for pc := 0; pc < p.k; pc += p.kc {
				pn := panel{jc: jc, ncur: min(p.nc, p.n-jc), pc: pc, kcur: min(p.kc, p.k-pc), add: p.accumulate || pc > 0}
				if !yield(pn) {
					return
				}
			}
		}
	}
}

// work is worker w's share of one packed panel: its range of rows of C,
// mc at a time, against its range of the panel's slivers.
func (p *plan) work(ws *workspace, w int, pn panel) {
	i0, i1, s0, s1 := p.share(w, pn)
	for ic := i0; ic < i1; ic += p.mc {
		mcur := min(p.mc, i1-ic)
		p.macro(p.aBlock(ws.a[w], ic, mcur, pn), ws.b, ws.t[w], pn, ic, mcur, s0, s1)
	}
}

// share returns worker w's rows i0..i1 of C and slivers s0..s1 of the
// panel pn: the rows split in tm ranges, the slivers in tn, in whole
// slivers of A and B.
func (p *plan) share(w int, pn panel) (i0, i1, s0, s1 int) {
	mr := p.kern.mr
	ms, ns := ceilDiv(p.m, mr), ceilDiv(pn.ncur, p.kern.nr)
	ri, ci := w/p.tn, w%p.tn
	i0, i1 = ms*ri/p.tm*mr, min(p.m, ms*(ri+1)/p.tm*mr)
	s0, s1 = ns*ci/p.tn, ns*(ci+1)/p.tn
	return i0, i1, s0, s1
}

// macro runs the micro-kernel over the tiles of the mcur rows of packed A
// ap (rows ic.. of C) against slivers s0..s1 of the panel: each sliver of
// B stays in cache while every sliver of A passes it. Tiles cut by the
// edge of C are computed into tmp and their valid part copied.
func (p *plan) macro(ap, bp, tmp []float32, pn panel, ic, mcur, s0, s1 int) {
	kern, kc, ldc := p.kern, pn.kcur, p.ldc
	mr, nr := kern.mr, kern.nr
	post := p.post
	if pn.pc+pn.kcur < p.k {
		post = nil // C is final only after the last panel in k
	}
	for s := s0; s < s1; s++ {
		bs, ldb := p.sliver(bp, pn, s)
		nv := min(nr, pn.ncur-s*nr)
		for ir := 0; ir < mcur; ir += mr {
			as := ap[ir*kc : (ir+mr)*kc]
			mv := min(mr, mcur-ir)
			c := p.c[(ic+ir)*ldc+pn.jc+s*nr:]
			if mv == mr && nv == nr {
				kern.tile(kc, as, bs, ldb, c, ldc, pn.add)
				continue
			}
			kern.tile(kc, as, bs, ldb, tmp, nr, false)
			copyTile(c, ldc, tmp, nr, mv, nv, pn.add)
		}
		// The epilogue on this column of tiles, while it is in L1.
		post.block(p.c, ldc, ic, pn.jc+s*nr, mcur, nv)
	}
}

// packShare packs worker w's share of the panel pn of B: the slivers of
// its column range, split among the workers sharing that range, so that
// with columns split each worker packs what it reads. With B in place
// only a last, partial sliver is packed, at the start of bp.
func (p *plan) packShare(bp []float32, pn panel, w int) {
	nr := p.kern.nr
	_, _, s0, s1 := p.share(w, pn)
	ri := w / p.tn
	lo, hi := s0+(s1-s0)*ri/p.tm, s0+(s1-s0)*(ri+1)/p.tm
	if !p.bInPlace {
		packB(bp, p.b, pn.pc, pn.kcur, pn.jc, pn.ncur, nr, lo, hi)
		return
	}
	if last := ceilDiv(pn.ncur, nr) - 1; pn.ncur%nr != 0 && lo <= last && last < hi {
		packB(bp[:pn.kcur*nr], p.b, pn.pc, pn.kcur, pn.jc+last*nr, pn.ncur-last*nr, nr, 0, 1)
	}
}

// sliver returns sliver s of the panel pn and its row stride: packed in
// bp, or in place in B.
func (p *plan) sliver(bp []float32, pn panel, s int) ([]float32, int) {
	nr := p.kern.nr
	switch {
	case !p.bInPlace:
		return bp[s*pn.kcur*nr : (s+1)*pn.kcur*nr], nr
	case (s+1)*nr > pn.ncur:
		return bp[:pn.kcur*nr], nr
	}
	return p.b.Data[pn.pc*p.b.RowStride+pn.jc+s*nr:], p.b.RowStride
}

// copyTile writes the mv×nv corner of the tile t (rows ldt apart) into c,
// or adds it when add.
func copyTile(c []float32, ldc int, t []float32, ldt, mv, nv int, add bool) {
	for i := range mv {
		dst, src := c[i*ldc:i*ldc+nv], t[i*ldt:i*ldt+nv]
		if !add {
			copy(dst, src)
			continue
		}
		for j := range dst {
			dst[j] += src[j]
		}
	}
}
