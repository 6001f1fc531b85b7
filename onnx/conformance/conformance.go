// Package conformance runs the ONNX backend test suite through the importer
// and tallies what passes, per suite, with the failure reasons most
// frequent first.
//
// The cases are those Debian ships as libonnx-testdata: data/node,
// data/pytorch-converted, data/pytorch-operator and data/simple.
//
// Every case goes through the path users call: Backend.LoadModel, then
// Model.Run with its input checks, shape buckets and precision, so a
// regression a user would see is one the suite sees.
//
// Each case directory holds model.onnx and test_data_set_N/ directories of
// input_K.pb and output_K.pb (serialized TensorProto). A case passes when
// every data set's outputs match: floats within |got-want| <= atol +
// rtol·|want| (NaN matching NaN, infinities matching exactly; bfloat16
// outputs with rtol two bfloat16 ulps, as ONNX's runner), everything else
// exactly.
package conformance

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// DefaultSuites are the suites Run covers when Options.Suites is empty,
// those of them present under the data directory: the 1,072 cases of the
// ONNX 1.12 backend test data have all four; data generated from a newer
// onnx wheel has node and simple.
var DefaultSuites = []string{"node", "pytorch-converted", "pytorch-operator", "simple"}

// Dataset is one set of ONNX backend test data the runner knows.
type Dataset struct {
	Name  string // "onnx-1.12", "onnx-1.23.2"
	Env   string // environment variable that overrides its directory
	Cache string // its directory under the tensorbridge cache
	Fetch string // the script that installs it
}

// Datasets are the test data sets, oldest first: Debian's libonnx-testdata
// (ONNX 1.12, opsets up to 17) and the node tests generated from the onnx
// 1.23.2 wheel (opsets up to 28).
var Datasets = []Dataset{
	{Name: "onnx-1.12", Env: "TENSORBRIDGE_ONNX_TESTDATA", Cache: "onnx-testdata", Fetch: "scripts/fetch-onnx-testdata.sh"},
	{Name: "onnx-1.23.2", Env: "TENSORBRIDGE_ONNX_NODE_TESTDATA", Cache: "onnx-node-1.23.2", Fetch: "scripts/fetch-onnx-node-tests.sh"},
}

// LookupDataset finds a data set by name; "1.12" and "1.23.2" work too.
func LookupDataset(name string) (Dataset, bool) {
	for _, d := range Datasets {
		if d.Name == name || d.Name == "onnx-"+name {
			return d, true
		}
	}
	return Dataset{}, false
}

// Dir returns where the data set is expected: $Env, else
// ${TENSORBRIDGE_CACHE:-$HOME/.cache/tensorbridge}/Cache. Run finds the
// suites anywhere below it.
func (d Dataset) Dir() string {
	if v := os.Getenv(d.Env); v != "" {
		return v
	}
	cache := os.Getenv("TENSORBRIDGE_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		cache = filepath.Join(home, ".cache", "tensorbridge")
	}
	return filepath.Join(cache, d.Cache)
}

// Options tune Run. The zero value is usable.
type Options struct {
	Suites  []string       // suite directory names; DefaultSuites when empty
	Match   *regexp.Regexp // run only cases whose name matches; all when nil
	Timeout time.Duration  // per case; 60s when zero
	RTol    float64        // relative tolerance for floats; 1e-3 when zero
	ATol    float64        // absolute tolerance for floats; 1e-5 when zero
	// BF16RTol is the relative tolerance for bfloat16 outputs, at least
	// RTol: 2^-6 (two bfloat16 ulps) when zero, the rule of ONNX's own
	// backend test runner (assert_similar_outputs in
	// https://github.com/onnx/onnx/blob/v1.23.2/onnx/backend/test/runner/__init__.py).
	// The reference computes bfloat16 with numpy on ml_dtypes arrays, which
	// rounds after every numpy operation and accumulates sums in bfloat16,
	// an order no backend is bound to follow.
	BF16RTol float64
	// Progress, when set, is called after each case.
	Progress func(CaseResult)
	// ModelOptions are passed to Backend.LoadModel for every case.
	ModelOptions []tensorbridge.ModelOption
}

// rtolFor is the relative tolerance for outputs of dtype dt (defaults
// resolved): BF16RTol for bfloat16, RTol otherwise.
func (o *Options) rtolFor(dt ir.DType) float64 {
	if dt == ir.BFloat16 {
		return o.BF16RTol
	}
	return o.RTol
}

// Status is a case's outcome.
type Status int

const (
	Pass  Status = iota
	Fail         // ran, but an output differs from the reference
	Error        // could not load, build or run the model
)

func (s Status) String() string {
	switch s {
	case Pass:
		return "pass"
	case Fail:
		return "fail"
	}
	return "error"
}

// CaseResult is one case's outcome.
type CaseResult struct {
	Suite    string
	Name     string
	Status   Status
	Reason   string // short classification for tallies ("" on Pass)
	Detail   string // the full message
	Duration time.Duration
}

// SuiteResult tallies one suite.
type SuiteResult struct {
	Name                     string
	Total, Pass, Fail, Error int
}

// Reason is a failure classification with how many cases it covers.
type Reason struct {
	Reason string
	Count  int
}

// Result is the outcome of a Run.
type Result struct {
	Dir     string
	Cases   []CaseResult
	Suites  []SuiteResult
	Reasons []Reason // most frequent first
	Total   SuiteResult
}

// PassRate is the fraction of cases that passed.
func (r *Result) PassRate() float64 {
	if r.Total.Total == 0 {
		return 0
	}
	return float64(r.Total.Pass) / float64(r.Total.Total)
}

// Summary formats per-suite counts and the most frequent failure reasons.
func (r *Result) Summary(maxReasons int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-20s %6s %6s %6s %6s %7s\n", "suite", "total", "pass", "fail", "error", "rate")
	row := func(s SuiteResult) {
		rate := 0.0
		if s.Total > 0 {
			rate = 100 * float64(s.Pass) / float64(s.Total)
		}
		fmt.Fprintf(&b, "%-20s %6d %6d %6d %6d %6.1f%%\n", s.Name, s.Total, s.Pass, s.Fail, s.Error, rate)
	}
	for _, s := range r.Suites {
		row(s)
	}
	row(r.Total)
	if len(r.Reasons) > 0 {
		b.WriteString("failure reasons:\n")
		for k, reason := range r.Reasons {
			if maxReasons > 0 && k >= maxReasons {
				fmt.Fprintf(&b, "  ... %d more\n", len(r.Reasons)-k)
				break
			}
			fmt.Fprintf(&b, "  %4d  %s\n", reason.Count, reason.Reason)
		}
	}
	return b.String()
}

// DefaultDir returns where the ONNX 1.12 test data is expected (see
// Dataset.Dir).
func DefaultDir() string { return Datasets[0].Dir() }

// ErrNoTestData says the directory holds no ONNX backend test suites.
var ErrNoTestData = errors.New("no ONNX backend test data found")

// FindSuites returns the directory whose children are the suite
// directories (node, simple...): dir itself, dir/data, or the first
// .../data directory holding node/ found below dir.
func FindSuites(dir string) (string, error) {
	for _, cand := range []string{dir, filepath.Join(dir, "data")} {
		if st, err := os.Stat(filepath.Join(cand, "node")); err == nil && st.IsDir() {
			return cand, nil
		}
	}
	var found string
	stop := errors.New("found")
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.Count(strings.TrimPrefix(p, dir), string(filepath.Separator)) > 6 {
			return filepath.SkipDir
		}
		if d.Name() == "node" && filepath.Base(filepath.Dir(p)) == "data" {
			found = filepath.Dir(p)
			return stop
		}
		return nil
	})
	if found == "" {
		return "", fmt.Errorf("%w under %s (run scripts/fetch-onnx-testdata.sh or scripts/fetch-onnx-node-tests.sh)", ErrNoTestData, dir)
	}
	return found, nil
}

// Run runs every case of the selected suites under dir on backend b, one at
// a time, through b.LoadModel and Model.Run, each under its own timeout and with panics recovered. It returns an
// error only when the suites cannot be found or ctx ends; case failures are
// in the Result. A case that times out keeps running in the background
// (the backends cannot be interrupted) and is reported as an error.
func Run(ctx context.Context, dir string, b *tensorbridge.Backend, opts *Options) (*Result, error) {
	if opts == nil {
		opts = &Options{}
	}
	o := *opts
	explicit := len(o.Suites) > 0
	if !explicit {
		o.Suites = DefaultSuites
	}
	if o.Timeout <= 0 {
		o.Timeout = 60 * time.Second
	}
	if o.RTol == 0 {
		o.RTol = 1e-3
	}
	if o.ATol == 0 {
		o.ATol = 1e-5
	}
	if o.BF16RTol == 0 {
		o.BF16RTol = 0x1p-6
	}
	o.BF16RTol = math.Max(o.BF16RTol, o.RTol)
	root, err := FindSuites(dir)
	if err != nil {
		return nil, err
	}
	res := &Result{Dir: root, Total: SuiteResult{Name: "total"}}
	reasons := map[string]int{}
	for _, suite := range o.Suites {
		entries, err := os.ReadDir(filepath.Join(root, suite))
		if errors.Is(err, os.ErrNotExist) && !explicit {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("suite %s: %w", suite, err)
		}
		sr := SuiteResult{Name: suite}
		for _, e := range entries {
			if !e.IsDir() || (o.Match != nil && !o.Match.MatchString(e.Name())) {
				continue
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			cr := runCase(ctx, filepath.Join(root, suite, e.Name()), b, &o)
			cr.Suite, cr.Name = suite, e.Name()
			res.Cases = append(res.Cases, cr)
			sr.Total++
			switch cr.Status {
			case Pass:
				sr.Pass++
			case Fail:
				sr.Fail++
			default:
				sr.Error++
			}
			if cr.Status != Pass {
				reasons[cr.Reason]++
			}
			if o.Progress != nil {
				o.Progress(cr)
			}
		}
		res.Suites = append(res.Suites, sr)
		res.Total.Total += sr.Total
		res.Total.Pass += sr.Pass
		res.Total.Fail += sr.Fail
		res.Total.Error += sr.Error
	}
	for r, n := range reasons {
		res.Reasons = append(res.Reasons, Reason{r, n})
	}
	sort.Slice(res.Reasons, func(a, b int) bool {
		if res.Reasons[a].Count != res.Reasons[b].Count {
			return res.Reasons[a].Count > res.Reasons[b].Count
		}
		return res.Reasons[a].Reason < res.Reasons[b].Reason
	})
	return res, nil
}

// runCase runs one case directory under the per-case timeout.
func runCase(ctx context.Context, dir string, b *tensorbridge.Backend, o *Options) CaseResult {
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	done := make(chan CaseResult, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- CaseResult{Status: Error, Reason: "panic", Detail: fmt.Sprintf("panic: %v\n%s", r, debug.Stack())}
			}
		}()
		done <- runCaseNow(cctx, dir, b, o)
	}()
	var cr CaseResult
	select {
	case cr = <-done:
	case <-cctx.Done():
		cr = CaseResult{Status: Error, Reason: "timeout", Detail: fmt.Sprintf("no result within %s", o.Timeout)}
	}
	cr.Duration = time.Since(start)
	return cr
}

func runCaseNow(ctx context.Context, dir string, b *tensorbridge.Backend, o *Options) CaseResult {
	m, err := b.LoadModel(ctx, filepath.Join(dir, "model.onnx"), o.ModelOptions...)
	if err != nil {
		return errorResult("load", err)
	}
	defer m.Close()
	sets, _ := filepath.Glob(filepath.Join(dir, "test_data_set_*"))
	if len(sets) == 0 {
		return CaseResult{Status: Error, Reason: "no test data sets", Detail: dir}
	}
	sort.Strings(sets)
	specs := m.Inputs()
	outSpecs := m.Outputs()
	for _, set := range sets {
		if m.ONNX().HasStructuredBoundary() { // sequences and optionals (values.go)
			if cr, ok := runSetValues(ctx, m, set, o); !ok {
				return cr
			}
			continue
		}
		inputs := map[string]*ir.Tensor{}
		strs := map[string]*onnx.StringTensor{}
		for k, spec := range specs {
			if spec.DType == onnx.String {
				st, err := readStrings(filepath.Join(set, fmt.Sprintf("input_%d.pb", k)))
				if err != nil {
					return errorResult("reading input", err)
				}
				strs[spec.Name] = st
				continue
			}
			t, err := readTensor(filepath.Join(set, fmt.Sprintf("input_%d.pb", k)))
			if err != nil {
				return errorResult("reading input", err)
			}
			if t, err = bf16Quirk(t, spec.DType); err != nil {
				return errorResult("reading input", err)
			}
			inputs[spec.Name] = t
		}
		outs, souts, err := run(ctx, m, inputs, strs)
		if err != nil {
			return errorResult("run", err)
		}
		for k, spec := range outSpecs {
			if spec.DType == onnx.String {
				want, err := readStrings(filepath.Join(set, fmt.Sprintf("output_%d.pb", k)))
				if err != nil {
					return errorResult("reading output", err)
				}
				if msg := compareStrings(souts[spec.Name], want); msg != "" {
					return CaseResult{Status: Fail, Reason: "output mismatch", Detail: fmt.Sprintf("%s: output %q: %s", filepath.Base(set), spec.Name, msg)}
				}
				continue
			}
			want, err := readTensor(filepath.Join(set, fmt.Sprintf("output_%d.pb", k)))
			if err != nil {
				return errorResult("reading output", err)
			}
			if want, err = bf16Quirk(want, spec.DType); err != nil {
				return errorResult("reading output", err)
			}
			got := outs[spec.Name]
			if msg := compare(got, want, o.rtolFor(want.DType()), o.ATol); msg != "" {
				return CaseResult{Status: Fail, Reason: "output mismatch", Detail: fmt.Sprintf("%s: output %q: %s", filepath.Base(set), spec.Name, msg)}
			}
		}
	}
	return CaseResult{Status: Pass}
}

// run runs one data set as `tensorbridge run` does: Model.Run for a model
// without STRING values, RunStrings only for one with them. (RunStrings
// given an empty map of STRING inputs takes another path through Model.run
// than Run: it skipped the empty-input rule that Run applies, so the
// suite passed cases that Run refused.)
func run(ctx context.Context, m *tensorbridge.Model, inputs map[string]*ir.Tensor, strs map[string]*onnx.StringTensor) (map[string]*ir.Tensor, map[string]*onnx.StringTensor, error) {
	for _, s := range append(m.Inputs(), m.Outputs()...) {
		if s.DType == onnx.String {
			return m.RunStrings(ctx, inputs, strs)
		}
	}
	outs, err := m.Run(ctx, inputs)
	return outs, nil, err
}

func readTensor(path string) (*ir.Tensor, error) {
	t, err := onnxpb.ReadTensor(path)
	if err != nil {
		return nil, err
	}
	return t.ToIR()
}

// bf16Quirk reinterprets a UINT16 tensor as BFLOAT16 where the model
// declares BFLOAT16: test data written before numpy had a bfloat16 type
// stores the bit patterns as UINT16.
func bf16Quirk(t *ir.Tensor, declared ir.DType) (*ir.Tensor, error) {
	if declared != ir.BFloat16 || t.DType() != ir.Uint16 {
		return t, nil
	}
	raw, err := ir.TensorBytes(t)
	if err != nil {
		return nil, err
	}
	return ir.TensorFromBytes(ir.BFloat16, t.Shape().Dimensions, raw)
}

// errorResult classifies an error into a short reason.
func errorResult(stage string, err error) CaseResult {
	cr := CaseResult{Status: Error, Detail: err.Error()}
	var uo *onnx.UnsupportedOpsError
	var nc *onnx.NotConstantError
	var ne *onnx.NodeError
	var ud *onnx.UnsupportedDTypeError
	var oe *onnx.OpsetError
	var ie *errs.InputError
	var ue *errs.UnsupportedError
	switch {
	case errors.As(err, &uo):
		ops := make([]string, 0, len(uo.Ops))
		for op := range uo.Ops {
			ops = append(ops, op)
		}
		sort.Strings(ops)
		cr.Reason = "unsupported op " + strings.Join(ops, ", ")
	case errors.As(err, &ud):
		cr.Reason = "unsupported dtype " + ud.Name
	case errors.As(err, &oe):
		cr.Reason = fmt.Sprintf("unsupported opset %d", oe.Version)
	case errors.As(err, &nc):
		cr.Reason = "value needed at build time in " + nc.Op
	case errors.As(err, &ne):
		cr.Reason = "failed in " + ne.Op
	case errors.As(err, &ue):
		cr.Reason = "unsupported " + ue.What + " " + ue.Name
	case errors.As(err, &ie):
		cr.Reason = "input check: " + ie.Problem
	default:
		cr.Reason = stage + " error"
	}
	return cr
}

// compare checks got against want, returning "" when they match.
func compare(got, want *ir.Tensor, rtol, atol float64) string {
	if got == nil {
		return "missing"
	}
	if got.DType() != want.DType() {
		return fmt.Sprintf("dtype %s, want %s", got.DType(), want.DType())
	}
	gd, wd := got.Shape().Dimensions, want.Shape().Dimensions
	if len(gd) != len(wd) {
		return fmt.Sprintf("shape %v, want %v", gd, wd)
	}
	for k := range gd {
		if gd[k] != wd[k] {
			return fmt.Sprintf("shape %v, want %v", gd, wd)
		}
	}
	g, err := values(got)
	if err != nil {
		return err.Error()
	}
	w, err := values(want)
	if err != nil {
		return err.Error()
	}
	isFloat := want.DType().IsFloat()
	bad, first := 0, -1
	for k := range w {
		a, b := g[k], w[k]
		ok := a == b
		if !ok && isFloat {
			switch {
			case math.IsNaN(a) || math.IsNaN(b):
				ok = math.IsNaN(a) && math.IsNaN(b)
			case math.IsInf(a, 0) || math.IsInf(b, 0):
				ok = false
			default:
				ok = math.Abs(a-b) <= atol+rtol*math.Abs(b)
			}
		}
		if !ok {
			if first < 0 {
				first = k
			}
			bad++
		}
	}
	if bad > 0 {
		return fmt.Sprintf("%d of %d values differ; first at flat index %d: got %v, want %v", bad, len(w), first, g[first], w[first])
	}
	return ""
}

// values returns a tensor's elements as float64 (integers up to 2^53 are
// exact; larger ones are compared through their float64 rounding).
func values(t *ir.Tensor) (out []float64, err error) {
	if t.Shape().Size() == 0 {
		return nil, nil
	}
	var convErr error
	err = t.ConstFlatData(func(flat any) {
		switch v := flat.(type) {
		case []float32:
			out = conv(v, func(x float32) float64 { return float64(x) })
		case []float64:
			out = v
		case []int8:
			out = conv(v, func(x int8) float64 { return float64(x) })
		case []int16:
			out = conv(v, func(x int16) float64 { return float64(x) })
		case []int32:
			out = conv(v, func(x int32) float64 { return float64(x) })
		case []int64:
			out = conv(v, func(x int64) float64 { return float64(x) })
		case []uint8:
			out = conv(v, func(x uint8) float64 { return float64(x) })
		case []uint16:
			out = conv(v, func(x uint16) float64 { return float64(x) })
		case []uint32:
			out = conv(v, func(x uint32) float64 { return float64(x) })
		case []uint64:
			out = conv(v, func(x uint64) float64 { return float64(x) })
		case []bool:
			out = conv(v, func(x bool) float64 {
				if x {
					return 1
				}
				return 0
			})
		case []ir.Float16Value:
			out = conv(v, func(x ir.Float16Value) float64 { return float64(x.Float32()) })
		case []ir.BFloat16Value:
			out = conv(v, func(x ir.BFloat16Value) float64 { return float64(x.Float32()) })
		default:
			convErr = fmt.Errorf("cannot compare elements of type %T", flat)
		}
	})
	if err == nil {
		err = convErr
	}
	return out, err
}

func conv[T any](v []T, f func(T) float64) []float64 {
	out := make([]float64, len(v))
	for k, x := range v {
		out[k] = f(x)
	}
	return out
}
