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
	// margin multiplies the predicted finish before it is compared with
	// the deadline (see missed); 0 means marginStart.
	margin float64
}

// The admission margin is set by feedback from what happens to the
// requests admitted while the server was busy: each one answered after
// its deadline (or timed out) raises it by marginUp, each one answered in
// time lowers it by marginDown, so that it settles where about
// missTarget of them miss, whatever the run times' noise (as AIMD does
// with a congestion window: it needs no model of the noise). marginDown
// is marginUp^(-missTarget/(1-missTarget)): at that miss rate the rises
// and falls cancel. A fixed margin (a quarter) let 10-19% of them miss on
// a shared machine whose run times vary more than the deviation says.
const (
	marginStart = 1.25
	marginMin   = 1.0 // never admit what the estimate itself says is late
	marginMax   = 8.0
	marginUp    = 1.1
	missTarget  = 0.02
)

var marginDown = math.Pow(marginUp, -missTarget/(1-missTarget))

// missed records the outcome of a request admitted by the estimate (the
// server busy): late or timed out, or answered in time.
func (e *runEstimate) missed(late bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := e.margin
	if m == 0 {
		m = marginStart
	}
	if late {
		m *= marginUp
	} else {
		m *= marginDown
	}
	e.margin = min(max(m, marginMin), marginMax)
}

// getMargin returns the current admission margin.
func (e *runEstimate) getMargin() float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.margin == 0 {
		return marginStart
	}
	return e.margin
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
// when refusals are most of the traffic. judged says the request was
// admitted by the estimate (the server busy): its outcome is then fed
// back to the margin (runEstimate.missed).
func (s *Server) admit(m *model, ctx context.Context, est *runEstimate) (judged bool, err error) {
	t, dev := est.get()
	deadline, ok := ctx.Deadline()
	if t == 0 || !ok {
		return false, nil
	}
	slots := len(m.replicas) * m.cfg.Concurrency
	var inflight int64
	for _, r := range m.replicas {
		inflight += r.inflight.Load()
	}
	ahead := m.q.runsAhead(max(m.maxBatch, 1))
	if ahead == 0 && inflight < int64(slots) {
		return false, nil
	}
	// Runs in progress are on average half done; the request's own run
	// follows the ones ahead, and may take longer than the mean by twice
	// the deviation; the margin (at least 1, fed back from the outcomes)
	// covers what the mean misses between runs (dispatch, merging, waking
	// the caller) and the machine's noise.
	waitRuns := (float64(ahead) + float64(inflight)/2) / float64(slots)
	wait := time.Duration(waitRuns * t * float64(time.Second))
	left := time.Until(deadline)
	finish := (waitRuns*t + t + 2*dev) * est.getMargin()
	if time.Duration(finish*float64(time.Second)) <= left {
		return true, nil
	}
	return false, &OverloadError{Model: m.name, Wait: wait, Deadline: left}
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
