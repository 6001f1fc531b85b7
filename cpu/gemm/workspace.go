package gemm

import "unsafe"

// workspace holds one call's plan and packing buffers: the shared panel
// of B and, per worker, a block of A and a tile for the edges of C, so a
// steady stream of calls allocates none.
type workspace struct {
	plan plan
	b    []float32
	a, t [][]float32
}

// workspaces keeps up to four idle workspaces for the next calls (four
// concurrent callers run without allocating). Unlike a sync.Pool it is
// not emptied by the garbage collector, which would make a large product
// reallocate its megabytes of buffers after every GC; what it keeps is
// bounded, since the block sizes bound each buffer (a B panel is at most
// kc×nc floats: 1.5 MiB for AVX-512, 4 MiB for AVX2).
var workspaces = make(chan *workspace, 4)

// getWorkspace returns a workspace holding the plan pl, with buffers big
// enough for it.
func getWorkspace(pl plan) *workspace {
	var ws *workspace
	select {
	case ws = <-workspaces:
	default:
		ws = new(workspace)
	}
	ws.plan = pl
	p := &ws.plan
	mr, nr := p.kern.mr, p.kern.nr
	workers := p.tm * p.tn
	if p.bInPlace {
		ws.b = grow(ws.b, p.kc*nr)
	} else {
		ws.b = grow(ws.b, p.kc*ceilDiv(p.nc, nr)*nr)
	}
	for len(ws.a) < workers {
		ws.a = append(ws.a, nil)
		ws.t = append(ws.t, nil)
	}
	for w := range workers {
		ws.a[w] = grow(ws.a[w], p.kc*p.mc)
		ws.t[w] = grow(ws.t[w], mr*nr)
	}
	return ws
}

// putWorkspace returns ws for reuse, or drops it when four are idle. The
// plan is cleared so that an idle workspace holds no caller's matrices.
func putWorkspace(ws *workspace) {
	ws.plan = plan{}
	select {
	case workspaces <- ws:
	default:
	}
}

// cacheLine is the alignment of packed buffers, so that a vector load of
// a packed step never straddles two lines.
const cacheLine = 64

// grow returns buf if it holds n floats, else a new cache-line-aligned
// slice of n floats.
func grow(buf []float32, n int) []float32 {
	if cap(buf) >= n {
		return buf[:n]
	}
	const pad = cacheLine / 4
	raw := make([]float32, n+pad)
	off := int(uintptr(unsafe.Pointer(&raw[0]))%cacheLine) / 4
	if off != 0 {
		off = pad - off
	}
	return raw[off : off+n : off+n]
}
