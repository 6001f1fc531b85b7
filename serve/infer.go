package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/errs"
)

// The inference path HTTP and gRPC share: request and response types, the
// queue-full and timeout errors, Infer, input checking and the mapping of
// errors to protocol statuses.

// InferRequest is a decoded inference request.
type InferRequest struct {
	ID      string
	Inputs  []Tensor
	Outputs []string      // the outputs to return; empty: all
	Timeout time.Duration // shortens the model's default; 0: the default
}

// InferResponse holds the requested outputs.
type InferResponse struct {
	ModelName string
	ID        string
	Outputs   []Tensor
}

// QueueFullError says a model's queue was full when a request arrived.
type QueueFullError struct {
	Model string
	Size  int
}

func (e *QueueFullError) Error() string {
	return fmt.Sprintf("queue full: model %s already has %d requests waiting; retry later", e.Model, e.Size)
}

// Is makes a full queue match errs.ErrUnavailable.
func (e *QueueFullError) Is(target error) bool { return target == errs.ErrUnavailable }

// TimeoutError says a request's deadline passed before its answer.
type TimeoutError struct {
	Model  string
	After  time.Duration
	Queued bool // still waiting in the queue when it expired
}

func (e *TimeoutError) Error() string {
	where := "while running"
	if e.Queued {
		where = "while queued"
	}
	return fmt.Sprintf("request timeout expired after %s %s (model %s)", e.After.Round(time.Millisecond), where, e.Model)
}

// Is makes a timeout match errs.ErrUnavailable, as the protocol answers it with 503.
func (e *TimeoutError) Is(target error) bool { return target == errs.ErrUnavailable }

// Infer validates req against the model, queues it and waits for its
// outputs or for ctx to end.
func (s *Server) Infer(ctx context.Context, modelName, version string, req *InferRequest) (*InferResponse, error) {
	start := time.Now()
	m, err := s.lookup(modelName, version)
	if err != nil {
		s.met.unknownModel.Inc()
		return nil, err
	}
	return s.inferModel(ctx, m, req, start)
}

// inferModel is Infer once the model is known; start is the request's
// arrival.
func (s *Server) inferModel(ctx context.Context, m *model, req *InferRequest, start time.Time) (*InferResponse, error) {
	resp, err := s.infer(ctx, m, req, start)
	m.met.requests.WithLabelValues(outcome(err)).Inc()
	m.met.duration.Observe(time.Since(start).Seconds())
	if err != nil && errs.KindOf(err) == errs.Internal {
		s.log.Error("inference failed", "model", m.name, "error", err.Error())
	}
	return resp, err
}

func (s *Server) infer(ctx context.Context, m *model, req *InferRequest, start time.Time) (*InferResponse, error) {
	// While draining, requests on connections already open are still
	// served (Triton does the same); the closed listeners admit no others.
	if !m.ready.Load() {
		return nil, &errs.UnavailableError{Name: m.name, Reason: "the model is not ready (warming up, or the server has shut down)"}
	}
	outIdx, err := m.selectOutputs(req.Outputs)
	if err != nil {
		return nil, err
	}
	timeout := m.cfg.Timeout
	if req.Timeout > 0 && req.Timeout < timeout {
		timeout = req.Timeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	est := s.est[m]
	if err := s.admit(m, ctx, est); err != nil {
		return nil, err
	}
	p, err := m.prepare(req.Inputs)
	if err != nil {
		return nil, err
	}
	p.ctx, p.enq, p.done = ctx, start, make(chan result, 1)
	if !m.q.push(p) {
		return nil, &QueueFullError{Model: m.name, Size: m.cfg.MaxQueueSize}
	}
	var res result
	select {
	case res = <-p.done:
		if res.err == nil {
			est.observe(time.Since(p.enq) - res.queued)
		}
	case <-ctx.Done():
		// The batcher drops the request if it is still queued; a run
		// already under way finishes for the others and its answer here
		// is discarded.
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, &TimeoutError{Model: m.name, After: time.Since(start)}
		}
		return nil, ctx.Err()
	}
	if res.err != nil {
		if errors.Is(res.err, context.DeadlineExceeded) && ctx.Err() != nil {
			return nil, &TimeoutError{Model: m.name, After: time.Since(start)}
		}
		return nil, res.err
	}
	out := &InferResponse{ModelName: m.name, ID: req.ID}
	for _, k := range outIdx {
		out.Outputs = append(out.Outputs, res.outputs[k])
	}
	return out, nil
}

// selectOutputs maps requested output names to indices (all when none).
func (m *model) selectOutputs(names []string) ([]int, error) {
	if len(names) == 0 {
		idx := make([]int, len(m.outputs))
		for i := range idx {
			idx[i] = i
		}
		return idx, nil
	}
	var idx []int
	seen := map[string]bool{}
	for _, n := range names {
		k := slices.IndexFunc(m.outputs, func(s tensorbridge.ValueSpec) bool { return s.Name == n })
		if k < 0 {
			return nil, &errs.InputError{Name: n, Problem: "name", Expected: "an output of model " + m.name + ": " + specNames(m.outputs),
				Got: fmt.Sprintf("unknown output %q", n)}
		}
		if seen[n] {
			return nil, &errs.InputError{Name: n, Problem: "name", Expected: "each output requested once", Got: "output " + n + " twice"}
		}
		seen[n] = true
		idx = append(idx, k)
	}
	return idx, nil
}

// prepare checks the request's inputs against the model's declaration
// (names, dtypes, ranks, static and shared symbolic dimensions, data
// length) before it is queued, so that a bad request never joins a merged
// batch, and orders them as the model declares them.
func (m *model) prepare(inputs []Tensor) (*pending, error) {
	byName := map[string]int{}
	for i, t := range inputs {
		if _, dup := byName[t.Name]; dup {
			return nil, &errs.InputError{Name: t.Name, Problem: "name", Expected: "each input once", Got: "input " + t.Name + " twice"}
		}
		byName[t.Name] = i
	}
	for _, t := range inputs {
		if !slices.ContainsFunc(m.inputs, func(s tensorbridge.ValueSpec) bool { return s.Name == t.Name }) {
			return nil, &errs.InputError{Name: t.Name, Problem: "name", Expected: "an input of model " + m.name + ": " + specNames(m.inputs),
				Got: fmt.Sprintf("unknown input %q", t.Name)}
		}
	}
	p := &pending{inputs: make([]Tensor, len(m.inputs))}
	sym := map[string]int{}
	symFrom := map[string]string{}
	for k, spec := range m.inputs {
		i, ok := byName[spec.Name]
		if !ok {
			return nil, &errs.InputError{Name: spec.Name, Problem: "value", Expected: "a tensor " + describeSpec(spec), Got: "none"}
		}
		t := inputs[i]
		if t.DType != spec.DType {
			return nil, &errs.InputError{Name: spec.Name, Problem: "dtype", Expected: Datatype(spec.DType), Got: Datatype(t.DType)}
		}
		if spec.RankKnown && len(t.Shape) != len(spec.Dims) {
			return nil, &errs.InputError{Name: spec.Name, Problem: "shape", Expected: describeSpec(spec), Got: fmt.Sprint(t.Shape)}
		}
		if spec.RankKnown {
			for d, dim := range spec.Dims {
				switch {
				case dim.Param != "":
					if n, seen := sym[dim.Param]; seen && n != t.Shape[d] {
						return nil, &errs.InputError{Name: spec.Name, Problem: "shape",
							Expected: fmt.Sprintf("dimension %q = %d, as input %q has it", dim.Param, n, symFrom[dim.Param]),
							Got:      fmt.Sprint(t.Shape)}
					}
					sym[dim.Param], symFrom[dim.Param] = t.Shape[d], spec.Name
				case dim.Value >= 0 && t.Shape[d] != dim.Value:
					return nil, &errs.InputError{Name: spec.Name, Problem: "shape",
						Expected: fmt.Sprintf("%s (dimension %d is %d)", describeSpec(spec), d, dim.Value), Got: fmt.Sprint(t.Shape)}
				}
			}
		}
		n := 1
		for _, d := range t.Shape {
			n *= d
		}
		if want := n * t.DType.Size(); len(t.Data) != want {
			return nil, &errs.InputError{Name: spec.Name, Problem: "value",
				Expected: fmt.Sprintf("%d bytes (%d %s elements for shape %v)", want, n, Datatype(t.DType), t.Shape),
				Got:      fmt.Sprintf("%d bytes", len(t.Data))}
		}
		p.inputs[k] = t
	}
	if err := m.admit(sym); err != nil { // nothing compiles after ready (model.go)
		return nil, err
	}
	if m.batchDim != "" {
		p.rows = sym[m.batchDim]
		p.key = mergeKey(p.inputs)
		p.alone = p.rows == 0 || p.rows >= m.maxBatch
	} else {
		p.alone = true
	}
	return p, nil
}

func describeSpec(s tensorbridge.ValueSpec) string {
	str := s.String()
	if i := strings.Index(str, ": "); i >= 0 {
		return str[i+2:]
	}
	return str
}

func specNames(specs []tensorbridge.ValueSpec) string {
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	return strings.Join(names, ", ")
}

// status maps an error to its HTTP status, gRPC code and metrics outcome:
// typed errors only, never message text.
func status(err error) (int, codes.Code) {
	var qf *QueueFullError
	var te *TimeoutError
	var ie *errs.InputError
	var tl *TooLargeError
	var um *UnsupportedMediaError
	var ob *OverBudgetError
	var ol *OverloadError
	var ua *UnauthenticatedError
	var re *routeError
	switch {
	case err == nil:
		return http.StatusOK, codes.OK
	case errors.As(err, &ua):
		return http.StatusUnauthorized, codes.Unauthenticated
	case errors.As(err, &re) && re.Allow != "":
		return http.StatusMethodNotAllowed, codes.Unimplemented
	case errors.As(err, &re):
		return http.StatusNotFound, codes.NotFound
	case errors.As(err, &tl):
		return http.StatusRequestEntityTooLarge, codes.ResourceExhausted
	case errors.As(err, &um):
		return http.StatusUnsupportedMediaType, codes.InvalidArgument
	case errors.As(err, &ob):
		return http.StatusServiceUnavailable, codes.ResourceExhausted
	case errors.As(err, &qf), errors.As(err, &te), errors.As(err, &ol):
		return http.StatusServiceUnavailable, codes.Unavailable
	case errors.As(err, &ie):
		return http.StatusBadRequest, codes.InvalidArgument
	case errors.Is(err, context.Canceled):
		return 499, codes.Canceled // the client closed the request
	}
	switch errs.KindOf(err) {
	case errs.InvalidArgument:
		return http.StatusBadRequest, codes.InvalidArgument
	case errs.NotFound:
		return http.StatusNotFound, codes.NotFound
	case errs.Unavailable, errs.ResourceExhausted, errs.FailedPrecondition, errs.DeadlineExceeded:
		return http.StatusServiceUnavailable, codes.Unavailable
	case errs.Unimplemented:
		return http.StatusNotImplemented, codes.Unimplemented
	}
	return http.StatusInternalServerError, codes.Internal
}

// outcome is the requests_total label for err.
func outcome(err error) string {
	var qf *QueueFullError
	var te *TimeoutError
	switch {
	case err == nil:
		return "success"
	case errors.As(err, &qf):
		return "queue_full"
	case errors.As(err, &te):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	var ob *OverBudgetError
	var ol *OverloadError
	if errors.As(err, &ob) || errors.As(err, &ol) {
		return "overloaded" // refused at admission: the byte budget, or a deadline the queue ahead would miss
	}
	switch code, _ := status(err); code {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
		return "bad_request"
	case http.StatusServiceUnavailable:
		return "unavailable"
	}
	return "error"
}
