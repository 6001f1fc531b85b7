// Package tensorbridge runs machine-learning models and computations on
// TPUs, GPUs and CPUs through one interface: open a backend, see its
// devices, load and run ONNX models (Model), compile and run GoMLX
// computations (Executable), train (Trainer), watch its memory.
//
//	b, err := tensorbridge.Open(ctx, "auto")
//	if err != nil { ... }              // says what is available and why
//	defer b.Close()
//	fmt.Println(b.Selection())         // which backend auto chose, and why
//	exe, err := b.Compile(ctx, "axpy", func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
//		return []*ir.Node{graph.Add(graph.MulScalar(in[0], 2), in[1])}, nil
//	}, ir.MakeShape(ir.Float32, 3), ir.MakeShape(ir.Float32, 3))
//	out, err := exe.Run(ctx, x, y)
//
// Backends register themselves by import, as database/sql drivers do. The
// pure-Go "cpu" backend is always built in and needs no setup. Computations
// are GoMLX graphs, named through package ir.
//
// # Selection
//
// A backend is named explicitly (an argument to Open, the --backend flag of
// the CLI, or the TENSORBRIDGE_BACKEND environment variable) or chosen with
// "auto", which takes the first available of Priority and records, for every
// candidate it passed over, why. An unknown or unavailable name is an error
// that lists what is available: there is never a silent fallback.
//
// # Errors
//
// Errors carry a Kind and match the sentinels of package errs, re-exported
// here: ErrUnavailable, ErrUnsupported, ErrOutOfMemory, ErrCompileFailed,
// ErrCompileTimeout, ErrInvalidInput, ErrClosed. Typed errors
// (*UnavailableError, *InputError, ...) give the details through errors.As.
// No panic raised inside a backend reaches the caller: it is returned as an
// error of kind Internal naming the graph and the operation.
package tensorbridge

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/tensorbridge/tensorbridge/config"
	"github.com/tensorbridge/tensorbridge/cpu"
	"github.com/tensorbridge/tensorbridge/device"
	"github.com/tensorbridge/tensorbridge/discover"
	"github.com/tensorbridge/tensorbridge/driver"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
)

func init() {
	// The cpu backend describes its device with discovery's CPU probe
	// (model, cores, SIMD features, memory with the cgroup limit).
	cpu.DescribeHost = func(ctx context.Context) (device.Info, error) {
		d, _, err := discover.CPU(ctx, discover.Options{})
		return d, err
	}
}

// EnvBackend is the environment variable read when no backend is named.
const EnvBackend = "TENSORBRIDGE_BACKEND"

// Auto is the backend name that asks for automatic selection.
const Auto = "auto"

// Priority is the order in which "auto" considers backends: TPUs first,
// then GPUs, then XLA's CPU compiler, then the embedded pure-Go backend.
var Priority = []string{"tpu", "cuda", "rocm", "xla-cpu", cpu.Name}

// knownBackends maps each name tensorbridge defines to the package that
// provides it, for errors about a name whose driver is not built in.
var knownBackends = map[string]string{
	"tpu":     "github.com/tensorbridge/tensorbridge/pjrt",
	"cuda":    "github.com/tensorbridge/tensorbridge/pjrt",
	"rocm":    "github.com/tensorbridge/tensorbridge/pjrt",
	"xla-cpu": "github.com/tensorbridge/tensorbridge/pjrt",
	cpu.Name:  "github.com/tensorbridge/tensorbridge/cpu",
}

// Option configures Open.
type Option func(*openOptions)

type openOptions struct {
	driver      driver.Options
	getenv      func(string) string
	settings    Settings
	settingsSet bool
}

// WithConfig passes a backend-specific configuration string, as the part
// after the colon in "cpu:ops_sequential" would.
func WithConfig(config string) Option {
	return func(o *openOptions) { o.driver.Config = config }
}

// WithMemoryFraction limits the backend to a share of each device's memory,
// in (0, 1]. The default is 0.9. It is the MemoryFraction of Settings.
func WithMemoryFraction(f float64) Option {
	return func(o *openOptions) { o.settings.MemoryFraction = f; o.settingsSet = true }
}

// withGetenv replaces os.Getenv for reading TENSORBRIDGE_BACKEND, so that
// tests choose what Open sees without changing the process environment
// (tensorbridge_export_test.go exports it to package tensorbridge_test).
func withGetenv(getenv func(string) string) Option {
	return func(o *openOptions) { o.getenv = getenv }
}

// Backend is an opened backend. It is safe for concurrent use.
type Backend struct {
	drv       driver.Backend
	selection Selection
	devices   []device.Info
	settings  EffectiveSettings
	cacheState

	mu       sync.Mutex
	closed   bool
	inflight int // runs and compiles under way; the last one after Close closes the driver
	// driverClosed: the driver was closed (by Close, or after it by the
	// last work in flight).
	driverClosed bool
}

// Backends returns the names of the backends built into this binary.
func Backends() []string { return driver.Names() }

// Open opens the backend named by spec: "NAME" or "NAME:CONFIG", or "auto",
// or "" for the TENSORBRIDGE_BACKEND environment variable, itself defaulting
// to "auto".
func Open(ctx context.Context, spec string, opts ...Option) (*Backend, error) {
	o := openOptions{getenv: os.Getenv}
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.settings.Validate(); err != nil {
		return nil, err
	}
	o.driver.MemoryFraction = o.settings.MemoryFraction
	if o.driver.MemoryFraction == 0 {
		o.driver.MemoryFraction = config.DefaultMemoryFraction
	}
	sel := Selection{Requested: spec}
	if spec == "" {
		spec = o.getenv(EnvBackend)
		sel.Requested = spec
		if spec != "" {
			sel.From = "environment variable " + EnvBackend
		}
	}
	if spec == "" {
		spec = Auto
		sel.Requested = Auto
		sel.From = "default"
	}
	name, config, _ := strings.Cut(spec, ":")
	if config != "" {
		if o.driver.Config != "" {
			return nil, &errs.Error{Kind: errs.InvalidArgument, Op: "open",
				Err: fmt.Errorf("backend config given twice: %q in the spec and %q as an option", config, o.driver.Config)}
		}
		o.driver.Config = config
	}
	if name == Auto {
		if o.driver.Config != "" {
			return nil, &errs.Error{Kind: errs.InvalidArgument, Op: "open",
				Err: fmt.Errorf("a config (%q) cannot be given with auto: name the backend", o.driver.Config)}
		}
		return openAuto(ctx, sel, &o)
	}
	d, ok := driver.Lookup(name)
	if !ok {
		return nil, notBuiltIn(ctx, name)
	}
	av := d.Probe(ctx)
	if !av.Available {
		return nil, &errs.UnavailableError{Name: name, Reason: av.Reason, Available: available(ctx)}
	}
	sel.Chosen = name
	sel.Reason = "requested by name: " + av.Reason
	return open(ctx, d, name, sel, &o)
}

func openAuto(ctx context.Context, sel Selection, o *openOptions) (*Backend, error) {
	for _, name := range Priority {
		c := Candidate{Name: name}
		d, ok := driver.Lookup(name)
		if !ok {
			c.Reason = fmt.Sprintf("not built into this binary (import %s)", knownBackends[name])
			sel.Candidates = append(sel.Candidates, c)
			continue
		}
		c.Registered = true
		av := d.Probe(ctx)
		c.Available, c.Reason = av.Available, av.Reason
		if !av.Available {
			sel.Candidates = append(sel.Candidates, c)
			continue
		}
		b, err := open(ctx, d, name, sel, o)
		if err != nil {
			// A probe that said yes but an open that failed is reported, not
			// skipped: the user should learn the device is broken.
			return nil, err
		}
		c.Chosen = true
		b.selection.Chosen = name
		b.selection.Reason = av.Reason
		b.selection.Candidates = append(sel.Candidates, c)
		return b, nil
	}
	var why []string
	for _, c := range sel.Candidates {
		why = append(why, c.Name+": "+c.Reason)
	}
	return nil, &errs.UnavailableError{Name: Auto, Reason: "no backend is available: " + strings.Join(why, "; "), Available: []string{}}
}

func open(ctx context.Context, d driver.Driver, name string, sel Selection, o *openOptions) (b *Backend, err error) {
	defer recoverInto(&err, name, "open")
	db, err := d.Open(ctx, &o.driver)
	if err != nil {
		return nil, err
	}
	devs, err := db.Devices(ctx)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	sel.Chosen = name
	b = &Backend{drv: db, selection: sel, devices: devs}
	if err := b.resolveSettings(ctx, o.settings); err != nil {
		_ = db.Close()
		return nil, err
	}
	return b, nil
}

// notBuiltIn explains an unregistered name: a known backend whose package
// is not imported, or an unknown name.
func notBuiltIn(ctx context.Context, name string) error {
	avail := available(ctx)
	if pkg, known := knownBackends[name]; known {
		return &errs.UnavailableError{Name: name, Available: avail,
			Reason: "its driver is not built into this binary (it is provided by " + pkg + ")"}
	}
	return &errs.UnavailableError{Name: name, Available: avail,
		Reason: fmt.Sprintf("unknown backend name; known names are %s and %q", strings.Join(sortedKeys(knownBackends), ", "), Auto)}
}

// available lists the registered backends whose probe succeeds.
func available(ctx context.Context) []string {
	out := []string{}
	for _, n := range driver.Names() {
		if d, ok := driver.Lookup(n); ok && d.Probe(ctx).Available {
			out = append(out, n)
		}
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Name returns the backend's registered name.
func (b *Backend) Name() string { return b.drv.Name() }

// Selection says how this backend was chosen.
func (b *Backend) Selection() Selection { return b.selection }

// Devices returns the backend's devices as its runtime describes them.
func (b *Backend) Devices() []device.Info {
	out := make([]device.Info, len(b.devices))
	copy(out, b.devices)
	return out
}

// MemoryStats returns the memory figures of device i from the runtime.
func (b *Backend) MemoryStats(ctx context.Context, i int) (MemoryStats, error) {
	if err := b.check(); err != nil {
		return MemoryStats{}, err
	}
	ms, ok := b.drv.(driver.MemoryStatser)
	if !ok {
		return MemoryStats{}, &errs.UnsupportedError{Backend: b.Name(), What: "feature", Name: "memory statistics"}
	}
	if i < 0 || i >= len(b.devices) {
		return MemoryStats{}, &errs.Error{Kind: errs.InvalidArgument, Backend: b.Name(), Op: "memory stats",
			Err: fmt.Errorf("device index %d out of range [0, %d)", i, len(b.devices))}
	}
	return ms.MemoryStats(ctx, i)
}

// Close releases the backend. It refuses new work at once and never waits
// for work in flight: with none, it frees the runtime's client before
// returning; otherwise (runs under way, a compile abandoned by its
// caller's deadline: a PJRT compile cannot be interrupted) the last of
// that work frees it when it ends, and Close returns nil at once. Later
// calls, and calls on anything compiled from it, return an error matching
// ErrClosed.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return &errs.Error{Kind: errs.FailedPrecondition, Backend: b.Name(), Op: "close", Err: ErrClosed}
	}
	b.closed = true
	// Work still in flight (a compile cut off by its deadline, a run
	// its caller stopped waiting for) keeps the driver open: Close returns
	// at once and the last of it closes the driver (closeDriver).
	later := b.inflight > 0
	b.mu.Unlock()
	if b.disk != nil {
		_ = b.disk.FlushStats(context.Background())
	}
	if later {
		return nil
	}
	err := b.drv.Close()
	b.markDriverClosed()
	return err
}

// markDriverClosed records that the driver was closed.
func (b *Backend) markDriverClosed() {
	b.mu.Lock()
	b.driverClosed = true
	b.mu.Unlock()
}

// closeDriver closes the driver after Close, once the last work in flight
// ended; the error has no caller left to go to and is dropped (the
// driver's own resources are freed either way).
func (b *Backend) closeDriver() {
	_ = b.drv.Close()
	b.markDriverClosed()
}

// enter counts a run or compile as work in flight, which Close waits for;
// the returned function ends it. It fails once Close has begun.
func (b *Backend) enter(op string) (leave func(), err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, &errs.Error{Kind: errs.FailedPrecondition, Backend: b.drv.Name(), Op: op, Err: ErrClosed}
	}
	b.inflight++
	var once sync.Once
	return func() {
		once.Do(b.end)
	}, nil
}

// begin and end are enter and its leave for the run path, without the
// closure: every begin that returns nil must be followed by one end.
func (b *Backend) begin(op string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return &errs.Error{Kind: errs.FailedPrecondition, Backend: b.drv.Name(), Op: op, Err: ErrClosed}
	}
	b.inflight++
	return nil
}

func (b *Backend) end() {
	b.mu.Lock()
	b.inflight--
	last := b.inflight == 0 && b.closed // Close left the driver to us
	b.mu.Unlock()
	if last {
		b.closeDriver()
	}
}

func (b *Backend) check() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return &errs.Error{Kind: errs.FailedPrecondition, Backend: b.drv.Name(), Err: ErrClosed}
	}
	return nil
}

// Selection records how Open chose a backend.
type Selection struct {
	Requested  string      `json:"requested"`            // what was asked: a name or "auto"
	From       string      `json:"from,omitempty"`       // where the request came from when not an argument
	Chosen     string      `json:"chosen"`               // the backend opened
	Reason     string      `json:"reason"`               // why it was chosen
	Candidates []Candidate `json:"candidates,omitempty"` // for auto: each backend considered, in priority order
}

// Candidate is one backend that auto selection considered.
type Candidate struct {
	Name       string `json:"name"`
	Registered bool   `json:"registered"`
	Available  bool   `json:"available"`
	Chosen     bool   `json:"chosen"`
	Reason     string `json:"reason"`
}

// String renders the selection as a few readable lines.
func (s Selection) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "backend %s (requested %q", s.Chosen, s.Requested)
	if s.From != "" {
		fmt.Fprintf(&b, " by %s", s.From)
	}
	fmt.Fprintf(&b, "): %s", s.Reason)
	for _, c := range s.Candidates {
		if c.Chosen {
			continue
		}
		fmt.Fprintf(&b, "\n  passed over %s: %s", c.Name, c.Reason)
	}
	return b.String()
}

// Engine returns the GoMLX engine the backend builds and runs graphs on, for
// code that drives GoMLX directly (the ONNX conformance runner does).
func (b *Backend) Engine() ir.Engine { return b.drv.Engine() }
