// Package cpu is tensorbridge's embedded default backend: pure Go (with
// Go-assembly kernels), needing no library, plugin or setup. It runs on
// tensorbridge's own engine (package cpu/engine), which runs the ops it has
// no kernel for through GoMLX's simplego; "cpu:engine=simplego" runs
// simplego alone.
//
// Import it for its side effect of registering the "cpu" backend (package
// tensorbridge already does):
//
//	import _ "github.com/tensorbridge/tensorbridge/cpu"
//
// # Safety
//
// simplego raises some failures as panics, and in its default parallel mode
// it raises them inside worker goroutines, where no caller can recover them
// and the process dies (an unsupported dtype reached at run time did so). This
// backend therefore runs simplego with "ops_sequential", so ops run on the
// calling goroutine where package tensorbridge recovers them, and it
// implements driver.GraphChecker to refuse dtypes the engine cannot
// execute (complex, 8-bit floats; Float16 too under engine=simplego; the
// engine stores Float16 and BFloat16 and computes them in float32) before
// anything runs. Large matrix
// products and element-wise ops still use simplego's worker pool inside an op.
//
// # Backward ops
//
// simplego v0.26.0 lacks Pad, Reverse and SelectAndScatter, which GoMLX's
// reverse-mode autodiff emits for Slice, sum and max pooling and
// convolution. The engine runs them natively (cpu/engine/padrev.go: Pad
// and Reverse of any dtype, SelectAndScatter of float32); for the rest,
// and under engine=simplego, the inner engine adds them as compositions of
// ops simplego has (ops.go), so models with those ops train either way.
//
// # Config
//
// "engine=simplego" selects simplego alone ("engine=tensorbridge", the
// default, the engine). The rest of the spec after "cpu:" is passed to
// simplego: "parallelism=N",
// "ops_parallel" (faster on wide graphs, but a panic inside an op then ends
// the process), "dotgeneral_small", "dotgeneral_large".
package cpu

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"

	tbengine "github.com/tensorbridge/tensorbridge/cpu/engine"
	"github.com/tensorbridge/tensorbridge/device"
	"github.com/tensorbridge/tensorbridge/driver"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
)

// Name is the registered backend name.
const Name = "cpu"

func init() { driver.Register(Name, Driver{}) }

// Driver opens the cpu backend. It is always available.
type Driver struct{}

// Probe always reports the backend available: it is pure Go.
func (Driver) Probe(ctx context.Context) driver.Availability {
	return driver.Availability{Available: true, Devices: 1,
		Reason: "pure Go (tensorbridge's cpu engine), embedded, always available"}
}

// Open starts a simplego engine.
func (Driver) Open(ctx context.Context, opts *driver.Options) (driver.Backend, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	config := "ops_sequential"
	useSimplego := false
	if opts != nil && opts.Config != "" {
		var rest []string
		for _, part := range strings.Split(opts.Config, ",") {
			switch part {
			case "engine=simplego":
				useSimplego = true
				continue
			case "engine=tensorbridge", "engine=" + tbengine.Name:
				continue
			}
			if strings.HasPrefix(part, "engine=") {
				return nil, &errs.Error{Kind: errs.InvalidArgument, Backend: Name, Op: "open",
					Err: fmt.Errorf("option %q: unknown engine (want engine=tensorbridge, the default, or engine=simplego)", part)}
			}
			rest = append(rest, part)
			if strings.HasPrefix(part, "parallelism") {
				// simplego prints this option to stdout; refuse rather than
				// corrupt a machine-readable output stream.
				return nil, &errs.Error{Kind: errs.InvalidArgument, Backend: Name, Op: "open",
					Err: fmt.Errorf("option %q is not supported: set GOMAXPROCS to limit the worker pool instead", part)}
			}
			if part == "ops_parallel" || part == "ops_dynamic" {
				// The race detector shows simplego v0.26.0's parallel
				// executor letting one op overwrite, in place, a buffer
				// another op is still reading (go test -race -run
				// TestPrecisionGraphRoundingMatchesHost ./onnx/ with a
				// parallel engine): a wrong answer waiting to happen.
				return nil, &errs.Error{Kind: errs.InvalidArgument, Backend: Name, Op: "open",
					Err: fmt.Errorf("option %q is refused: GoMLX v0.26.0's parallel op executor has a data race that can corrupt results; the cpu backend runs ops sequentially", part)}
			}
		}
		config = strings.Trim(config+","+strings.Join(rest, ","), ",")
	}
	eng, err := simplego.New(config)
	if err != nil {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Backend: Name, Op: "open", Err: err}
	}
	if useSimplego {
		return &Backend{eng: wrapEngine(eng)}, nil
	}
	return &Backend{eng: tbengine.New(wrapEngine(eng))}, nil
}

// Backend is an open cpu backend.
type Backend struct {
	eng  backends.Backend
	once sync.Once
	info device.Info
	ierr error
}

var (
	_ driver.Backend       = (*Backend)(nil)
	_ driver.MemoryStatser = (*Backend)(nil)
	_ driver.GraphChecker  = (*Backend)(nil)
)

// Name returns "cpu".
func (b *Backend) Name() string { return Name }

// Engine returns the simplego engine.
func (b *Backend) Engine() ir.Engine { return b.eng }

// Devices returns the one CPU device, described by the host's CPU probe.
func (b *Backend) Devices(ctx context.Context) ([]device.Info, error) {
	b.once.Do(func() { b.info, b.ierr = DescribeHost(ctx) })
	if b.ierr != nil {
		return nil, b.ierr
	}
	return []device.Info{b.info}, nil
}

// DescribeHost describes this host's CPU as a device. Package tensorbridge
// sets it to the discover package's CPU probe; it is a variable so the cpu
// backend needs no discovery code of its own.
var DescribeHost = func(ctx context.Context) (device.Info, error) {
	return device.Info{ID: "cpu:0", Platform: device.CPU, Kind: "cpu", CoreOnChip: -1}, nil
}

// Close releases the engine.
func (b *Backend) Close() error {
	b.eng.Finalize()
	return nil
}

// MemoryStats reports this process's memory against the host or cgroup limit.
func (b *Backend) MemoryStats(ctx context.Context, deviceIndex int) (driver.MemoryStats, error) {
	if deviceIndex != 0 {
		return driver.MemoryStats{}, &errs.Error{Kind: errs.InvalidArgument, Backend: Name, Op: "memory stats",
			Err: fmt.Errorf("device index %d out of range: the cpu backend has 1 device", deviceIndex)}
	}
	devs, err := b.Devices(ctx)
	if err != nil {
		return driver.MemoryStats{}, err
	}
	return processMemory(devs[0].Memory.Total, devs[0].Memory.Source)
}

// CheckGraph refuses graphs holding a dtype simplego cannot execute. It must
// run before the first execution: simplego fails on these only at run time,
// sometimes by a panic in a worker goroutine.
func (b *Backend) CheckGraph(g *ir.Graph, outputs []*ir.Node) error {
	supported := b.eng.Capabilities().DTypes
	for _, n := range g.Nodes() {
		dt := n.DType()
		if n.NumOutputs() > 1 || dt == ir.InvalidDType {
			continue // a multi-output node's parts are checked on their own
		}
		if !supported[dt] {
			return &errs.UnsupportedError{Backend: Name, What: "dtype", Name: dt.String(),
				Detail: fmt.Sprintf("graph %q node #%d (%s) produces %s; simplego executes only %s",
					g.Name(), n.Id(), n.Type(), n.Shape(), dtypeList(supported))}
		}
	}
	return nil
}

func dtypeList(m map[ir.DType]bool) string {
	var names []string
	for dt, ok := range m {
		if ok {
			names = append(names, dt.String())
		}
	}
	sortStrings(names)
	return strings.Join(names, ", ")
}
