package serve

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Cold start: ready after the smallest batch bucket.
//
// With Options.BackgroundWarmup a model whose requests merge along a
// padded batch dimension is ready once the programs of its smallest batch
// bucket are compiled (with every size of its other symbolic dimensions).
// Its other batch buckets compile afterwards, in the background, while it
// serves: the largest next, so that from then on every request has a
// compiled bucket, then the rest in ascending order. The batcher forms
// batches of compiled sizes only, and a batch whose own bucket is not
// compiled yet runs padded to the next larger compiled one (padding along
// the batch dimension is exact: the runtime pads it only where rows are
// independent), so no request waits for a compile it does not need. Only a
// request with more rows than every compiled bucket waits, for its own.

// warmState is a model's warm-up progress: the batch buckets compiled so
// far (ascending; nil until warm-up starts) and how many there are in all.
type warmState struct {
	compiled atomic.Pointer[[]int]
	total    atomic.Int32
	// beforeCompile, when set (tests), runs before each batch bucket
	// compiles; an error ends warm-up with it.
	beforeCompile func(ctx context.Context, batch int) error
}

// compiledSizes returns the batch buckets compiled so far, ascending: the
// full plan when warm-up did not track buckets (no batching, or every
// bucket compiled before ready).
func (m *model) compiledSizes() []int {
	if p := m.cold.compiled.Load(); p != nil {
		return *p
	}
	return m.sizes
}

// markCompiled records that batch bucket b is compiled.
func (m *model) markCompiled(b int) {
	old := m.compiledSizes()
	if m.cold.compiled.Load() == nil {
		old = nil
	}
	next := append(slices.Clone(old), b)
	slices.Sort(next)
	m.cold.compiled.Store(&next)
}

// runBucket is the batch size a merged batch of rows runs at: its own
// bucket when compiled, else the next larger compiled one; 0 when no
// compiled bucket holds rows (the runtime then compiles its own).
func (m *model) runBucket(rows int) int {
	own := m.bucketOf(rows)
	sizes := m.compiledSizes()
	if _, ok := slices.BinarySearch(sizes, own); ok {
		return own
	}
	if i, _ := slices.BinarySearch(sizes, rows); i < len(sizes) {
		return sizes[i]
	}
	return 0
}

// bucketOrder is the order batch buckets compile in: the smallest (before
// ready), the largest, then the rest ascending.
func bucketOrder(sizes []int) []int {
	if len(sizes) <= 2 {
		return slices.Clone(sizes)
	}
	out := []int{sizes[0], sizes[len(sizes)-1]}
	return append(out, sizes[1:len(sizes)-1]...)
}

// byBatch groups warm-up's assignments by their batch size, in order.
func (m *model) byBatch(dims []map[string]int, order []int) [][]map[string]int {
	groups := make([][]map[string]int, len(order))
	for _, d := range dims {
		if i := slices.Index(order, d[m.batchDim]); i >= 0 {
			groups[i] = append(groups[i], d)
		}
	}
	return groups
}

// compileBucket compiles one batch bucket's assignments on the shared
// specialisations (replicas share them: tensorbridge.Model.Replica) and
// marks it compiled.
func (m *model) compileBucket(ctx context.Context, batch int, dims []map[string]int) (int, error) {
	if h := m.cold.beforeCompile; h != nil {
		if err := h(ctx, batch); err != nil {
			return 0, err
		}
	}
	n, err := m.replicas[0].m.Warmup(ctx, dims, nil)
	if err != nil {
		return n, err
	}
	m.markCompiled(batch)
	return n, nil
}

// warmupInBackground compiles the smallest batch bucket and returns, ready;
// rest compiles the other buckets (call it on its own goroutine). ok is
// false when the model does not qualify (no merged batch dimension, or a
// model over a mesh): warm it up whole with warmup instead.
func (m *model) warmupInBackground(ctx context.Context) (rest func(context.Context), ok bool, err error) {
	dims, why := m.warmupDims()
	if why != "" || m.batchDim == "" || len(m.sizes) < 2 || m.replicas[0].mesh != "" {
		return nil, false, nil
	}
	start := time.Now()
	order := bucketOrder(m.sizes)
	groups := m.byBatch(dims, order)
	m.cold.total.Store(int32(len(order)))
	empty := []int{}
	m.cold.compiled.Store(&empty)
	n, err := m.compileBucket(ctx, order[0], groups[0])
	if err != nil {
		return nil, true, m.warmErr(err)
	}
	if !m.cfg.AllowCompile {
		m.warm, _, _ = m.warmValues()
	}
	m.ready.Store(true)
	m.log.Info("ready on the smallest batch bucket; the others compile in the background", "batch", order[0],
		"compiled", n, "took", time.Since(start).Round(time.Millisecond).String(), "pending", fmtInts(order[1:]))
	return func(ctx context.Context) { m.warmRest(ctx, start, order[1:], groups[1:]) }, true, nil
}

// warmRest compiles the remaining batch buckets in order, logging each,
// until done or ctx ends.
func (m *model) warmRest(ctx context.Context, start time.Time, order []int, groups [][]map[string]int) {
	for i, b := range order {
		t := time.Now()
		n, err := m.compileBucket(ctx, b, groups[i])
		if ctx.Err() != nil {
			m.log.Info("background warm-up stopped", "pending", fmtInts(order[i:]))
			return
		}
		if err != nil {
			m.log.Warn("background warm-up failed; larger compiled buckets serve this size", "batch", b, "error", err.Error())
			continue
		}
		m.log.Info("compiled batch bucket", "batch", b, "compiled", n, "buckets_done", len(m.compiledSizes()),
			"buckets", m.cold.total.Load(), "took", time.Since(t).Round(time.Millisecond).String())
	}
	m.log.Info("warm", "buckets", fmtInts(m.compiledSizes()), "took", time.Since(start).Round(time.Millisecond).String())
}

// warmProgress is a model's warm-up progress for /v2/health/ready.
type warmProgress struct {
	Ready    bool  `json:"ready"`
	Compiled []int `json:"batch_buckets_compiled"`
	Pending  []int `json:"batch_buckets_pending"`
}

// progress reports which batch buckets are compiled and which are pending.
func (m *model) progress() warmProgress {
	p := warmProgress{Ready: m.ready.Load(), Compiled: []int{}, Pending: []int{}}
	if m.cold.compiled.Load() == nil {
		if p.Ready {
			p.Compiled = append(p.Compiled, m.sizes...)
		} else {
			p.Pending = append(p.Pending, m.sizes...)
		}
		return p
	}
	done := m.compiledSizes()
	p.Compiled = append(p.Compiled, done...)
	for _, s := range m.sizes {
		if !slices.Contains(done, s) {
			p.Pending = append(p.Pending, s)
		}
	}
	return p
}

// background runs the models' remaining warm-ups on their own goroutines,
// tracked by wg and stopped by ctx.
type background struct {
	wg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc
}

func newBackground() *background {
	b := &background{}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	return b
}

// start runs f on its own goroutine with the background's context.
func (b *background) start(f func(context.Context)) {
	b.wg.Add(1)
	go func() { defer b.wg.Done(); f(b.ctx) }()
}

// stop cancels every background warm-up and waits for them to return.
func (b *background) stop() {
	b.cancel()
	b.wg.Wait()
}

// padRows returns t with its leading dimension padded from rows to n by
// repeating the last row (rows of a padded batch dimension are
// independent, so what a padding row holds cannot reach the real rows; a
// copy of a real row is valid input wherever the real row is).
func padRows(t Tensor, rows, n int) Tensor {
	if rows == 0 || n <= rows {
		return t
	}
	rowBytes := len(t.Data) / rows
	data := make([]byte, 0, rowBytes*n)
	data = append(data, t.Data...)
	last := t.Data[len(t.Data)-rowBytes:]
	for i := rows; i < n; i++ {
		data = append(data, last...)
	}
	shape := append([]int{n}, t.Shape[1:]...)
	return Tensor{Name: t.Name, DType: t.DType, Shape: shape, Data: data}
}

// fmtInts formats sizes as "[1 2 4]".
func fmtInts(sizes []int) string { return fmt.Sprint(sizes) }
