package serve

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/internal/oip"
	"github.com/tensorbridge/tensorbridge/ir"
)

// inputSpecs checks the inputs a request declares (name, datatype, shape)
// against the model before any element is decoded, so that nothing is
// allocated from a shape the model could not take. The decoders then
// check the declared element count against the bytes actually sent.
type inputSpecs struct {
	model    string
	specs    []tensorbridge.ValueSpec
	nOutputs int // the model's outputs, which a request may name
	// bucket is the runtime's bucket rule (Model.BucketSize): an error for
	// a size beyond the largest bucket of a padded dimension. nil: none.
	bucket func(dim string, n int) (int, error)
}

// specsOf is the checker of model m, from its first replica's bucket rule.
func specsOf(m *model) *inputSpecs {
	c := &inputSpecs{model: m.name, specs: m.inputs, nOutputs: len(m.outputs)}
	if len(m.replicas) > 0 && m.replicas[0].m != nil {
		c.bucket = m.replicas[0].m.BucketSize
	}
	return c
}

// check validates one declared input and returns its dtype, shape and
// element count. It refuses an unknown name, a datatype other than the
// model's, a wrong rank, a fixed dimension of another size, a negative or
// oversized dimension, an overflowing element count, and a symbolic
// dimension beyond the runtime's largest bucket. A zero dimension is an
// empty tensor; it exempts no other dimension from these checks.
func (c *inputSpecs) check(name, datatype string, shape []int64) (ir.DType, []int, int, error) {
	k := slices.IndexFunc(c.specs, func(s tensorbridge.ValueSpec) bool { return s.Name == name })
	if k < 0 {
		return ir.InvalidDType, nil, 0, &errs.InputError{Name: name, Problem: "name",
			Expected: "an input of model " + c.model + ": " + specNames(c.specs), Got: fmt.Sprintf("unknown input %q", oip.Clip(name))}
	}
	spec := c.specs[k]
	dt, err := parseDatatype(name, datatype)
	if err != nil {
		return ir.InvalidDType, nil, 0, err
	}
	if dt != spec.DType {
		return ir.InvalidDType, nil, 0, &errs.InputError{Name: name, Problem: "dtype", Expected: Datatype(spec.DType), Got: datatype}
	}
	n, err := oip.Elements(shape)
	if err != nil {
		return ir.InvalidDType, nil, 0, &errs.InputError{Name: name, Problem: "shape",
			Expected: "non-negative dimensions with at most 2^40 elements in all", Got: err.Error()}
	}
	if spec.RankKnown && len(shape) != len(spec.Dims) {
		return ir.InvalidDType, nil, 0, &errs.InputError{Name: name, Problem: "shape", Expected: describeSpec(spec), Got: fmt.Sprint(shape)}
	}
	dims := make([]int, len(shape))
	for d, v := range shape {
		dims[d] = int(v)
		if !spec.RankKnown {
			continue
		}
		want := spec.Dims[d]
		switch {
		case want.Param == "" && want.Value >= 0 && v != int64(want.Value):
			return ir.InvalidDType, nil, 0, &errs.InputError{Name: name, Problem: "shape",
				Expected: fmt.Sprintf("%s (dimension %d is %d)", describeSpec(spec), d, want.Value), Got: fmt.Sprint(shape)}
		case want.Param != "" && c.bucket != nil:
			if _, err := c.bucket(want.Param, int(v)); err != nil {
				return ir.InvalidDType, nil, 0, &errs.InputError{Name: name, Problem: "shape",
					Expected: fmt.Sprintf("dimension %d (%q) within the model's buckets", d, want.Param), Got: err.Error()}
			}
		}
	}
	return dt, dims, n, nil
}

// jsonLimits bound a request's JSON structure for this model: the root
// and its parameters, each input and output with its parameters (twice
// over, so that a request naming things twice gets its precise error from
// the checks that follow), and up to 16 keys per object.
func (c *inputSpecs) jsonLimits() oip.JSONLimits {
	objects := 2 + 4*(len(c.specs)+c.nOutputs)
	return oip.JSONLimits{Depth: oip.MaxDepth, Objects: objects, Keys: 16 * objects}
}

// byteBudget admits requests by the bytes they hold in memory (body and
// decoded tensors), so that many large requests at once cannot exhaust
// the process's memory. It never blocks: a request that does not fit is
// refused with 503 and Retry-After.
type byteBudget struct {
	mu   sync.Mutex
	max  int64
	used int64
}

// acquire reserves n more bytes for a request already holding held bytes.
// A request holding everything in use is always admitted (the budget is
// at least the largest request), so a lone large request cannot starve.
func (b *byteBudget) acquire(n, held int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max && b.used != held {
		return false
	}
	b.used += n
	return true
}

func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

// inUse returns the bytes reserved now.
func (b *byteBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// OverBudgetError says the server's in-flight byte budget
// (Options.MaxInflightBytes) had no room for a request: retry later.
type OverBudgetError struct {
	Need, InUse, Max int64
}

func (e *OverBudgetError) Error() string {
	return fmt.Sprintf("server busy: %d bytes of requests in flight, %d more do not fit the budget of %d; retry later",
		e.InUse, e.Need, e.Max)
}

// Is makes it match errs.ErrUnavailable (503).
func (e *OverBudgetError) Is(target error) bool { return target == errs.ErrUnavailable }

// TooLargeError says a request body is over Options.MaxMessageBytes (413).
type TooLargeError struct {
	Limit int64
	Got   int64 // the declared length, or -1 when the body ran past the limit
}

func (e *TooLargeError) Error() string {
	if e.Got >= 0 {
		return fmt.Sprintf("request body of %d bytes is over the limit of %d bytes", e.Got, e.Limit)
	}
	return fmt.Sprintf("request body over the limit of %d bytes", e.Limit)
}

// reservation is the bytes one request holds in the budget.
type reservation struct {
	b    *byteBudget
	held int64
}

func (r *reservation) grow(n int64) error {
	if n <= 0 {
		return nil
	}
	if !r.b.acquire(n, r.held) {
		return &OverBudgetError{Need: n, InUse: r.b.inUse(), Max: r.b.max}
	}
	r.held += n
	return nil
}

// release gives back n of the bytes held (at most all of them), for
// buffers the request no longer uses.
func (r *reservation) release(n int64) {
	n = min(n, r.held)
	if n <= 0 {
		return
	}
	r.b.release(n)
	r.held -= n
}

func (r *reservation) done() {
	r.b.release(r.held)
	r.held = 0
}

// readChunk is how much of a body is read (and reserved) at a time.
const readChunk = 64 << 10

// readBody reads a body of at most limit bytes, reserving each chunk in
// res before it is read, so that memory grows only with bytes actually
// received, whatever length the client declared.
func readBody(body io.Reader, limit int64, res *reservation) ([]byte, error) {
	var buf []byte
	for {
		if len(buf) == cap(buf) {
			grow := min(max(int64(cap(buf)), readChunk), limit+1-int64(len(buf)))
			if grow <= 0 {
				return nil, &TooLargeError{Limit: limit, Got: -1}
			}
			if err := res.grow(grow); err != nil {
				return nil, err
			}
			buf = slices.Grow(buf, int(grow))
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, &TooLargeError{Limit: limit, Got: -1}
		}
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, &errs.Error{Kind: errs.InvalidArgument, Op: "read request body", Err: err}
		}
	}
}

// retryAfter is the Retry-After value (whole seconds, at least 1) for an
// expected wait.
func retryAfter(seconds float64) string {
	s := int(seconds + 0.999)
	if s < 1 {
		s = 1
	}
	return strconv.Itoa(s)
}
