package serve

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
)

// pending is one accepted request waiting for, or in, a run.
type pending struct {
	ctx    context.Context
	inputs []Tensor // in the model's input order
	rows   int      // along the batch dimension; 0 when not merged
	key    string   // requests merge only with equal keys
	alone  bool     // never merged (no batching, or as many rows as a batch)
	enq    time.Time
	done   chan result // buffered: the batcher never blocks on a departed caller
}

// result is what a run gives each request.
type result struct {
	outputs []Tensor // in the model's output order
	err     error
	queued  time.Duration
}

// queue holds a model's accepted requests in arrival order.
type queue struct {
	mu    sync.Mutex
	items []*pending
	max   int
	wake  chan struct{}
	depth func(int) // reports the depth after each change
}

func newQueue(max int, depth func(int)) *queue {
	return &queue{max: max, wake: make(chan struct{}, 1), depth: depth}
}

// push accepts p, or refuses it at once when the queue is full.
func (q *queue) push(p *pending) bool {
	q.mu.Lock()
	if len(q.items) >= q.max {
		q.mu.Unlock()
		return false
	}
	q.items = append(q.items, p)
	q.depth(len(q.items))
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return true
}

// next blocks until a batch can be formed and returns it: the oldest live
// request and, when merging is on, the next requests of the same key in
// arrival order while their rows fit maxBatch. While the batch has fewer
// than maxBatch rows it waits until the oldest request has queued for
// delay. It returns nil when stop closes.
//
// When sizes (the compiled batch sizes, ascending) are given and the rows
// that could merge are not one of them, the batch is cut to the largest
// size below, in arrival order, and the rest waits for the next run: 17
// one-row requests run as 16 and then 1 with later arrivals, rather than
// as 17 padded to 32.
func (q *queue) next(stop <-chan struct{}, merge bool, maxBatch int, delay time.Duration, sizes []int) []*pending {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		q.mu.Lock()
		q.dropDeparted()
		if len(q.items) == 0 {
			q.mu.Unlock()
			select {
			case <-q.wake:
				continue
			case <-stop:
				return nil
			}
		}
		oldest := q.items[0]
		if merge && delay > 0 && !oldest.alone {
			rows := 0
			for _, p := range q.items {
				if !p.alone && p.key == oldest.key && rows+p.rows <= maxBatch {
					rows += p.rows
				}
			}
			if wait := time.Until(oldest.enq.Add(delay)); rows < maxBatch && wait > 0 {
				q.mu.Unlock()
				if timer == nil {
					timer = time.NewTimer(wait)
				} else {
					timer.Reset(wait)
				}
				select {
				case <-q.wake:
				case <-timer.C:
				case <-stop:
					return nil
				}
				continue
			}
		}
		limit := maxBatch
		if merge && !oldest.alone && len(sizes) > 0 {
			n := oldest.rows
			for _, p := range q.items[1:] {
				if !p.alone && p.key == oldest.key && n+p.rows <= maxBatch {
					n += p.rows
				}
			}
			if _, exact := slices.BinarySearch(sizes, n); !exact {
				if i, _ := slices.BinarySearch(sizes, n); i > 0 && sizes[i-1] >= oldest.rows {
					limit = sizes[i-1]
				}
			}
		}
		batch := []*pending{oldest}
		rest := q.items[:0]
		rows := oldest.rows
		for _, p := range q.items[1:] {
			if merge && !oldest.alone && !p.alone && p.key == oldest.key && rows+p.rows <= limit {
				batch = append(batch, p)
				rows += p.rows
				continue
			}
			rest = append(rest, p)
		}
		clear(q.items[len(rest):])
		q.items = rest
		q.depth(len(q.items))
		q.mu.Unlock()
		return batch
	}
}

// dropDeparted removes requests whose caller has gone (canceled or past
// its deadline); the caller has already been answered. q.mu is held.
func (q *queue) dropDeparted() {
	kept := q.items[:0]
	for _, p := range q.items {
		if p.ctx.Err() == nil {
			kept = append(kept, p)
		}
	}
	if len(kept) != len(q.items) {
		clear(q.items[len(kept):])
		q.items = kept
		q.depth(len(q.items))
	}
}

// drain empties the queue, answering every request with err.
func (q *queue) drain(err error) {
	q.mu.Lock()
	items := q.items
	q.items = nil
	q.depth(0)
	q.mu.Unlock()
	for _, p := range items {
		p.done <- result{err: err}
	}
}

// dispatch forms batches while a replica slot is free and runs them, until
// stop closes. It returns when every run it started has finished.
func (m *model) dispatch(stop <-chan struct{}) {
	slots := make(chan struct{}, len(m.replicas)*m.cfg.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case slots <- struct{}{}:
		case <-stop:
			return
		}
		// Only compiled batch sizes are formed: while warm-up continues in
		// the background (coldstart.go), up to the largest compiled one.
		sizes, maxBatch := m.compiledSizes(), m.maxBatch
		if len(sizes) > 0 && sizes[len(sizes)-1] < maxBatch {
			maxBatch = sizes[len(sizes)-1]
		}
		batch := m.q.next(stop, m.batchDim != "", maxBatch, m.cfg.MaxQueueDelay, sizes)
		if batch == nil {
			return
		}
		r := m.pick()
		r.inflight.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { r.inflight.Add(-1); <-slots }()
			m.runBatch(r, batch)
		}()
	}
}

// batchContext is canceled when every request of the batch has gone: a
// merged run continues while any caller still waits for it.
func batchContext(batch []*pending) (context.Context, func()) {
	if len(batch) == 1 {
		return batch[0].ctx, func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var left atomic.Int64
	left.Store(int64(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, p := range batch {
		stops[i] = context.AfterFunc(p.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, s := range stops {
			s()
		}
		cancel()
	}
}

// runBatch runs a batch on r and answers each request. A merged batch that
// the runtime refuses as invalid input is run again one request at a
// time, so one bad request cannot fail the others.
func (m *model) runBatch(r *replica, batch []*pending) {
	start := time.Now()
	for _, p := range batch {
		m.met.queue.Observe(start.Sub(p.enq).Seconds())
	}
	outs, err := m.runMerged(r, batch)
	if err != nil && len(batch) > 1 && errs.KindOf(err) == errs.InvalidArgument {
		for _, p := range batch {
			o, e := m.runMerged(r, []*pending{p})
			p.done <- result{outputs: o[0], err: e, queued: start.Sub(p.enq)}
		}
		return
	}
	for i, p := range batch {
		res := result{err: err, queued: start.Sub(p.enq)}
		if err == nil {
			res.outputs = outs[i]
		}
		p.done <- res
	}
}

// runMerged concatenates the batch's inputs along axis 0, runs them and
// splits the outputs back: outs[i] are request i's outputs.
func (m *model) runMerged(r *replica, batch []*pending) (outs [][]Tensor, err error) {
	outs = make([][]Tensor, len(batch))
	defer func() {
		if p := recover(); p != nil {
			err = &errs.Error{Kind: errs.Internal, Op: "serve " + m.name, Err: fmt.Errorf("panic in run: %v", p)}
		}
	}()
	ctx, release := batchContext(batch)
	defer release()
	rows := 0
	for _, p := range batch {
		rows += p.rows
	}
	// While warm-up continues in the background, a batch whose own bucket
	// is not compiled yet runs padded to the next larger compiled one.
	runRows := rows
	if m.batchDim != "" && rows > 0 && rows <= m.maxBatch {
		if b := m.runBucket(rows); b > rows && b != m.bucketOf(rows) {
			runRows = b
		}
	}
	in := make(map[string]*ir.Tensor, len(m.inputs))
	for i, spec := range m.inputs {
		t := batch[0].inputs[i]
		if len(batch) > 1 {
			var size int
			for _, p := range batch {
				size += len(p.inputs[i].Data)
			}
			data := make([]byte, 0, size)
			for _, p := range batch {
				data = append(data, p.inputs[i].Data...)
			}
			shape := append([]int{rows}, t.Shape[1:]...)
			t = Tensor{Name: spec.Name, DType: t.DType, Shape: shape, Data: data}
		}
		t = padRows(t, rows, runRows)
		x, err := t.toIR()
		if err != nil {
			return outs, err
		}
		in[spec.Name] = x
	}
	start := time.Now()
	res, err := runToEnd(ctx, r.m, in) // admission.go: holds the slot until the device is done
	m.met.compute.Observe(time.Since(start).Seconds())
	if err != nil {
		return outs, err
	}
	if m.batchDim != "" {
		m.met.batchSize.Observe(float64(rows))
		m.met.padded.Add(float64(max(runRows, m.bucketOf(rows)) - rows))
	}
	for i := range outs {
		outs[i] = make([]Tensor, len(m.outputs))
	}
	for k, spec := range m.outputs {
		t, ok := res[spec.Name]
		if !ok {
			return outs, &errs.Error{Kind: errs.Internal, Op: "serve " + m.name, Err: fmt.Errorf("the run returned no output %q", spec.Name)}
		}
		raw, err := ir.TensorBytes(t)
		if err != nil {
			return outs, &errs.Error{Kind: errs.Internal, Op: "serve " + m.name, Err: fmt.Errorf("output %q: %w", spec.Name, err)}
		}
		shape := t.Shape().Dimensions
		if len(batch) == 1 && runRows == rows {
			outs[0][k] = Tensor{Name: spec.Name, DType: t.DType(), Shape: shape, Data: raw}
			continue
		}
		if len(shape) == 0 || shape[0] != runRows {
			return outs, &errs.Error{Kind: errs.Internal, Op: "serve " + m.name,
				Err: fmt.Errorf("output %q has shape %v, want %d rows to split", spec.Name, shape, runRows)}
		}
		rowBytes := len(raw) / runRows
		off := 0
		for i, p := range batch {
			n := p.rows * rowBytes
			outs[i][k] = Tensor{Name: spec.Name, DType: t.DType(),
				Shape: append([]int{p.rows}, shape[1:]...), Data: raw[off : off+n : off+n]}
			off += n
		}
	}
	return outs, nil
}

// mergeKey identifies requests that may run together: equal dtypes and
// equal shapes apart from the leading (batch) dimension.
func mergeKey(inputs []Tensor) string {
	var b strings.Builder
	for _, t := range inputs {
		fmt.Fprintf(&b, "%d%v;", t.DType, t.Shape[1:])
	}
	return b.String()
}
