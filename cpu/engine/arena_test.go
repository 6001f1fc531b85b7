package engine

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// TestArenaAllocator drives the allocator with random allocations and
// frees of sizes around chunkSize's fractions and beyond it, writing each
// buffer's own pattern over it and checking the pattern at each free (two live buffers sharing a byte break one of
// them); once all are freed, each chunk must be one free block again
// (merging), and close must unmap them all. Faults injected once: merge
// skipping the previous neighbour ("a chunk of 2 blocks"), take not
// splitting off the rest of a block (the chunk count explodes past the
// bound below), a split off by one page (patterns broken).
func TestArenaAllocator(t *testing.T) {
	e, _ := newPair(t)
	a := e.ar
	if a == nil {
		t.Fatal("newArena refused simplego's buffers: the mirror of simplego.Buffer no longer matches (GoMLX changed?)")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	type live struct {
		b    backends.Buffer
		flat []int32
		tag  int32
	}
	var bufs []live
	// Blocks are whole pages (1024 int32s): two overlapping buffers
	// share one's first or last page with the other, and the pages between
	// are sampled.
	const edge, stride = 2048, 509
	next := func(i, n int) int {
		if i < edge-1 || i >= n-edge {
			return i + 1
		}
		return min(i+stride, max(n-edge, i+1))
	}
	check := func(l live) {
		for i := 0; i < len(l.flat); i = next(i, len(l.flat)) {
			if v := l.flat[i]; v != l.tag+int32(i) {
				t.Fatalf("buffer %d: element %d is %d, want %d: another buffer wrote over it", l.tag, i, v, l.tag+int32(i))
			}
		}
	}
	// Elements (int32) of each allocation: mostly below 16 Mi, a few
	// straddling a quarter chunk or over a whole one (its own chunk).
	sizes := []int{arenaMin / 4, 100_000, 1 << 20, 3 << 20, 1 << 20, 100_000, 3 << 20, 1 << 20, 100_000, 3 << 20,
		arenaMin / 4, 100_000, 1 << 20, 3 << 20, 1 << 20, 100_000, 3 << 20, 1 << 20, chunkSize/16 + 1, chunkSize/4 + 1}
	for step := range 600 {
		if len(bufs) > 0 && (rng.IntN(2) == 0 || len(bufs) > 40) {
			i := rng.IntN(len(bufs))
			check(bufs[i])
			if !a.release(bufs[i].b) {
				t.Fatalf("release of a live arena buffer returned false")
			}
			bufs = append(bufs[:i], bufs[i+1:]...)
			continue
		}
		n := sizes[rng.IntN(len(sizes))] + rng.IntN(5000)
		b, flat, err := a.alloc(shapes.Make(dtypes.Int32, n))
		if err != nil {
			t.Fatal(err)
		}
		f := flat.([]int32)
		tag := int32(step) << 20
		for i := 0; i < len(f); i = next(i, len(f)) {
			f[i] = tag + int32(i)
		}
		bufs = append(bufs, live{b, f, tag})
	}
	mapped, _ := a.stats()
	if limit := int64(8 * chunkSize); mapped > limit {
		t.Errorf("mapped %d bytes for at most 41 live buffers of at most %d, want at most %d", mapped, 4*(chunkSize/4+5001), limit)
	}
	for _, l := range bufs {
		check(l)
		a.release(l.b)
	}
	if _, inUse := a.stats(); inUse != 0 {
		t.Errorf("%d bytes in use after every buffer was released", inUse)
	}
	a.mu.Lock()
	perChunk := map[*chunk]int{}
	for _, f := range a.free {
		perChunk[f.c]++
	}
	for c, n := range perChunk {
		if n != 1 {
			t.Errorf("a chunk of %d bytes is %d free blocks after every buffer was released, want 1 (neighbours merged)", len(c.mem), n)
		}
	}
	a.mu.Unlock()
	a.close()
	if mapped, _ := a.stats(); mapped != 0 {
		t.Errorf("close left %d bytes mapped", mapped)
	}
}

// TestArenaTrim: a chunk left wholly free is kept for chunkIdle and then
// unmapped by the next release that empties a chunk.
func TestArenaTrim(t *testing.T) {
	e, _ := newPair(t)
	a := e.ar
	s := shapes.Make(dtypes.Float32, 1<<20)
	b1, _, err := a.alloc(s)
	if err != nil {
		t.Fatal(err)
	}
	a.release(b1)
	if m, _ := a.stats(); m == 0 {
		t.Fatal("a chunk freed a moment ago was unmapped, want it kept for the next run")
	}
	a.mu.Lock()
	for _, c := range a.chunks {
		c.lastUsed = time.Now().Add(-2 * chunkIdle)
	}
	a.mu.Unlock()
	b2, _, err := a.alloc(s) // reuses the idle chunk and makes it recent
	if err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	a.chunks[0].lastUsed = time.Now().Add(-2 * chunkIdle)
	a.mu.Unlock()
	a.release(b2)
	if m, _ := a.stats(); m != 0 {
		t.Errorf("a chunk idle for %s is still mapped (%d bytes)", 2*chunkIdle, m)
	}
}

// TestArenaStaysInside runs graphs whose large intermediate values live in
// the arena and whose outputs come from them in place (a fused region
// overwriting the reduction it reads last) or through a segment of the
// inner engine, and checks that no output is an arena buffer, that every
// arena byte is free after each run, and that the first run's outputs keep
// their values while later runs reuse the arena. The values are compared
// with simplego's. Fault injected once: handing out owned arena buffers
// as they are (exec.go outputs) fails "left the arena" and the kept
// values.
func TestArenaStaysInside(t *testing.T) {
	e, oracle := newPair(t)
	rng := rand.New(rand.NewPCG(9, 10))
	s3 := shapes.Make(dtypes.Float32, 256, 256, 3)
	x := randF32(rng, s3.Size())
	must := func(o backends.Op, err error) backends.Op {
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	cases := map[string]graphFn{
		"in place": func(bl backends.Builder, p []backends.Op) ([]backends.Op, error) {
			d := must(bl.ReduceSum(p[0], 2)) // 256 KiB: in the arena
			sq := must(bl.Mul(d, d))
			return []backends.Op{must(bl.Add(must(bl.Max(sq, d)), d))}, nil
		},
		"through a segment": func(bl backends.Builder, p []backends.Op) ([]backends.Op, error) {
			d := must(bl.ReduceSum(p[0], 2))
			i := must(bl.ConvertDType(d, dtypes.Int32)) // int32 ops run in the inner engine
			return []backends.Op{must(bl.Add(i, i)), d}, nil
		},
	}
	for name, fn := range cases {
		t.Run(name, func(t *testing.T) {
			ins := []shapes.Shape{s3}
			want := runGraph(t, oracle, ins, []any{x}, fn)
			exe, bufs := compileOn(t, e, ins, fn)
			defer exe.Finalize()
			var first []backends.Buffer
			for r := range 3 {
				in, err := e.BufferFromFlatData(0, x, s3)
				if err != nil {
					t.Fatal(err)
				}
				out, err := exe.Execute([]backends.Buffer{in}, []bool{true}, 0)
				if err != nil {
					t.Fatal(err)
				}
				for i, o := range out {
					if e.ar.owns(o) {
						t.Fatalf("run %d: output %d is an arena buffer: it left the arena", r, i)
					}
				}
				if _, inUse := e.ar.stats(); inUse != 0 {
					t.Errorf("run %d: %d arena bytes in use after the run", r, inUse)
				}
				if r == 0 {
					first = out
					continue
				}
				got, err := toFlat(e, out)
				if err != nil {
					t.Fatal(err)
				}
				sameValues(t, got, want)
			}
			got, err := toFlat(e, first)
			if err != nil {
				t.Fatal(err)
			}
			sameValues(t, got, want) // after two more runs over the same arena
			_ = bufs
		})
	}
}

// sameValues fails unless got and want hold equal values.
func sameValues(t *testing.T, got, want []any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("values differ from simplego's")
	}
}

// compileOn compiles fn over parameters of shapes ins on e.
func compileOn(t *testing.T, e *Engine, ins []shapes.Shape, fn graphFn) (backends.Executable, []backends.Op) {
	t.Helper()
	b := e.Builder("arena")
	params := make([]backends.Op, len(ins))
	for i, s := range ins {
		p, err := b.Parameter(fmt.Sprintf("p%d", i), s, nil)
		if err != nil {
			t.Fatal(err)
		}
		params[i] = p
	}
	outs, err := fn(b, params)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := b.Compile(outs, nil)
	if err != nil {
		t.Fatal(err)
	}
	return exe, params
}

// TestArenaConcurrentRuns runs one executable from several goroutines at
// once: the arena is shared, so overlapping blocks would mix the runs'
// values, which differ by input.
func TestArenaConcurrentRuns(t *testing.T) {
	e, oracle := newPair(t)
	s3 := shapes.Make(dtypes.Float32, 128, 128, 8)
	fn := sumOfSquares
	ins := []shapes.Shape{s3}
	exe, _ := compileOn(t, e, ins, fn)
	defer exe.Finalize()
	const workers, iters = 4, 15
	inputs := make([][]float32, workers)
	wants := make([][]any, workers)
	for w := range workers {
		inputs[w] = randF32(rand.New(rand.NewPCG(uint64(w), 3)), s3.Size())
		wants[w] = runGraph(t, oracle, ins, []any{inputs[w]}, fn)
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range iters {
				in, err := e.BufferFromFlatData(0, inputs[w], s3)
				if err != nil {
					errs <- err
					return
				}
				out, err := exe.Execute([]backends.Buffer{in}, nil, 0)
				_ = e.BufferFinalize(in)
				if err != nil {
					errs <- err
					return
				}
				got, err := toFlat(e, out)
				if err != nil {
					errs <- err
					return
				}
				g, w := got[0].([]float32), wants[w][0].([]float32)
				for i := range g {
					if g[i] != w[i] {
						errs <- fmt.Errorf("element %d: %v, want %v (another run's values?)", i, g[i], w[i])
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if _, inUse := e.ar.stats(); inUse != 0 {
		t.Errorf("%d arena bytes in use after every run", inUse)
	}
}

// TestArenaFailedStepsGiveBack: a kernel that fails after allocating its
// output in the arena (a panic, recovered into the run's error) leaves
// nothing allocated, run after run, and the next good run is right. The
// collector never sees arena memory, so such a leak would be for good: a
// server fed inputs that fail would grow without bound. Fault injected
// once: not dropping the step's fresh buffers fails "in use".
func TestArenaFailedStepsGiveBack(t *testing.T) {
	e, oracle := newPair(t)
	s3 := shapes.Make(dtypes.Float32, 128, 128, 4)
	fn := sumOfSquares // its [128, 128] sums, 64 KiB, are in the arena
	ins := []shapes.Shape{s3}
	x := randF32(rand.New(rand.NewPCG(4, 5)), s3.Size())
	want := runGraph(t, oracle, ins, []any{x}, fn)
	exe, _ := compileOn(t, e, ins, fn)
	defer exe.Finalize()
	x86 := exe.(*Executable)
	orig := x86.p.steps[0].native
	x86.p.steps[0].native = func(r *run, in []backends.Buffer) ([]backends.Buffer, error) {
		if _, _, err := r.alloc(shapes.Make(dtypes.Float32, 128, 128)); err != nil {
			return nil, err
		}
		panic("injected after allocating")
	}
	in, err := e.BufferFromFlatData(0, x, s3)
	if err != nil {
		t.Fatal(err)
	}
	defer e.BufferFinalize(in)
	for range 5 {
		if _, err := exe.Execute([]backends.Buffer{in}, nil, 0); err == nil {
			t.Fatal("the injected panic did not fail the run")
		}
	}
	if _, inUse := e.ar.stats(); inUse != 0 {
		t.Errorf("%d arena bytes in use after 5 failed runs, want 0", inUse)
	}
	x86.p.steps[0].native = orig
	out, err := exe.Execute([]backends.Buffer{in}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := toFlat(e, out)
	if err != nil {
		t.Fatal(err)
	}
	sameValues(t, got, want)
}

// sumOfSquares sums its input [a, b, c] over c, squares the sums and sums
// them over b: two reductions around an element-wise step, whose [a, b]
// intermediates are the arena's from 64 KiB.
func sumOfSquares(bl backends.Builder, p []backends.Op) ([]backends.Op, error) {
	d, err := bl.ReduceSum(p[0], 2)
	if err != nil {
		return nil, err
	}
	sq, err := bl.Mul(d, d)
	if err != nil {
		return nil, err
	}
	r, err := bl.ReduceSum(sq, 1)
	if err != nil {
		return nil, err
	}
	return []backends.Op{r}, nil
}
