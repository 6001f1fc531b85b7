package serve

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
)

// runEstimate is a moving average of how long one run of a model takes
// (its batch's execution, from the start of the run to its answer), and
// of its deviation, which admission control uses to predict when a new
// request would be answered (as TCP estimates a round trip: RFC 6298).
type runEstimate struct {
	mu   sync.Mutex
	mean float64 // seconds; 0 until the first run
	dev  float64 // mean absolute deviation, seconds
}

// observe adds one run's duration (weights 1/8 and 1/4, as RFC 6298).
func (e *runEstimate) observe(d time.Duration) {
	if d <= 0 {
		return
	}
	x := d.Seconds()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mean == 0 {
		e.mean, e.dev = x, x/2
		return
	}
	e.dev += (math.Abs(x-e.mean) - e.dev) / 4
	e.mean += (x - e.mean) / 8
}

// get returns the mean run time and its deviation, in seconds.
func (e *runEstimate) get() (float64, float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.mean, e.dev
}

// OverloadError says a request was refused at admission because the work
// ahead of it would not finish before its deadline: answering it late
// would only take device time from requests that can still be answered in
// time.
type OverloadError struct {
	Model    string
	Wait     time.Duration // the expected wait for a run slot
	Deadline time.Duration // what was left of the request's deadline
}

func (e *OverloadError) Error() string {
	return fmt.Sprintf("overloaded: model %s would answer in about %s, after the request's deadline (%s left); retry later",
		e.Model, e.Wait.Round(time.Millisecond), e.Deadline.Round(time.Millisecond))
}

// Is makes an overload match errs.ErrUnavailable (503).
func (e *OverloadError) Is(target error) bool { return target == errs.ErrUnavailable }

// admit refuses a request with deadline ctx when the server is busy (a run in every slot, or a
// queue) and the runs ahead of it, at the measured run time, would not
// finish before its deadline. With a free slot and no queue it always
// admits, so the estimate keeps being measured. It runs before the
// request is checked against the model, so that refusing costs little
// when refusals are most of the traffic.
func (s *Server) admit(m *model, ctx context.Context, est *runEstimate) error {
	t, dev := est.get()
	deadline, ok := ctx.Deadline()
	if t == 0 || !ok {
		return nil
	}
	slots := len(m.replicas) * m.cfg.Concurrency
	var inflight int64
	for _, r := range m.replicas {
		inflight += r.inflight.Load()
	}
	ahead := m.q.runsAhead(max(m.maxBatch, 1))
	if ahead == 0 && inflight < int64(slots) {
		return nil
	}
	// Runs in progress are on average half done; the request's own run
	// follows the ones ahead, and may take longer than the mean by twice
	// the deviation; a quarter more covers what the mean misses between
	// runs (dispatch, merging). With it, 10% of admitted requests missed
	// their deadline in BenchmarkGoodput, against 18% without.
	waitRuns := (float64(ahead) + float64(inflight)/2) / float64(slots)
	wait := time.Duration(waitRuns * t * float64(time.Second))
	left := time.Until(deadline)
	if (wait+time.Duration((t+2*dev)*float64(time.Second)))*5/4 <= left {
		return nil
	}
	return &OverloadError{Model: m.name, Wait: wait, Deadline: left}
}

// runsAhead estimates the runs the queued requests make: one each
// for requests that run alone, and the merged rows of the others in
// batches of maxBatch.
func (q *queue) runsAhead(maxBatch int) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	runs, rows := 0, 0
	for _, p := range q.items { // departed ones too: the batcher drops them, and reading contexts here costs more than it saves
		if p.alone {
			runs++
		} else {
			rows += p.rows
		}
	}
	return runs + (rows+maxBatch-1)/maxBatch
}

// retryAfterSeconds is how long a client refused with err should wait.
func retryAfterSeconds(err error) float64 {
	var ol *OverloadError
	if errors.As(err, &ol) {
		return math.Max(ol.Wait.Seconds(), 1)
	}
	return 1
}

// runToEnd runs in on tm and returns only when the execution has really
// ended, even when ctx ends first: the caller (the batcher) holds the
// replica's slot until then, so that abandoned executions, which the
// device finishes anyway, never leave it running more at once than its
// concurrency. A batch whose callers have all gone before it starts is not
// run.
func runToEnd(ctx context.Context, tm *tensorbridge.Model, in map[string]*ir.Tensor) (map[string]*ir.Tensor, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return tm.Run(context.WithoutCancel(ctx), in)
}
