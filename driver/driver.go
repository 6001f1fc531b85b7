// Package driver defines the interfaces that tensorbridge backends implement.
//
// Most code should use package tensorbridge, which validates input, fills in
// defaults, wraps errors and serialises calls before they reach a driver.
// This package is for people writing a backend, the way database/sql/driver
// is for people writing a database driver.
//
// A backend registers itself by name from an init function:
//
//	func init() { driver.Register("cpu", cpuDriver{}) }
//
// and users select it by importing the package and naming it. Register only
// records the driver: no library is loaded and nothing is probed until Probe
// or Open is called.
//
// # Required and optional interfaces
//
// Driver and Backend are what every backend has: a cheap availability probe,
// devices, a graph engine, close. Everything else is an optional interface,
// asserted by package tensorbridge, which reports an Unimplemented error that
// names the backend and the capability when one is missing:
//
//	MemoryStatser   per-device memory statistics from the runtime
//	BufferCounter   how many device buffers are alive
//	GraphChecker    rejects ops and dtypes before execution
//	DiskCacher      stores serialized executables across processes
//	ProcessReporter the backend's place in a multi-process job
//	DirectRunner    runs a compiled graph from host memory to host memory
//	                without GoMLX's tensor and buffer wrappers
package driver

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/tensorbridge/tensorbridge/cache"
	"github.com/tensorbridge/tensorbridge/cluster"
	"github.com/tensorbridge/tensorbridge/device"
	"github.com/tensorbridge/tensorbridge/ir"
)

// Driver opens backends of one kind.
type Driver interface {
	// Probe says whether Open is expected to succeed on this host, and if not
	// why, naming what is missing. It must be cheap, must not initialise a
	// runtime that takes exclusive hold of a device, and must honour ctx.
	Probe(ctx context.Context) Availability
	// Open initialises the backend. It returns an error of kind Unavailable
	// (an *errs.UnavailableError) when the hardware or runtime is missing.
	// opts is never nil.
	Open(ctx context.Context, opts *Options) (Backend, error)
}

// Availability is the answer of a Probe.
type Availability struct {
	Available bool
	// Reason says why the backend is or is not usable, in one sentence
	// naming the evidence ("no PCI device of vendor 0x1ae0 and no /dev/accel*").
	Reason string
	// Devices is how many devices Open is expected to find, 0 if unknown.
	Devices int
}

// Options are the portable settings a backend honours. Package tensorbridge
// fills in defaults, so fields are always meaningful.
type Options struct {
	// Config is the backend-specific part of a spec ("cpu:parallelism=2" gives
	// "parallelism=2"); empty for defaults.
	Config string
	// MemoryFraction is the share of device memory the backend may use, in (0, 1].
	MemoryFraction float64
	// Cluster, when non-nil, makes the backend join the multi-process job
	// it describes (backends with a multi-process mode: pjrt). Nil leaves
	// it to the backend, which joins only when its environment names a job
	// of more than one process.
	Cluster *Cluster
	// ClusterSecurity authenticates this process to the job's coordination
	// service (its shared token, optionally mutual TLS), whether the job
	// comes from Cluster or from the environment. The caller reads it (the
	// CLI: --cluster-token-file or $TENSORBRIDGE_CLUSTER_TOKEN_FILE); nil
	// joins without a token.
	ClusterSecurity *cluster.Security
}

// Backend is an opened backend. Backends must be safe for concurrent use by
// several goroutines, except Close, which is called once, after all other
// calls have returned.
type Backend interface {
	// Name is the registered name ("cpu", "tpu", "xla-cpu" ...).
	Name() string
	// Devices lists the devices with what the runtime reports about them.
	Devices(ctx context.Context) ([]device.Info, error)
	// Engine is the GoMLX backend that builds and runs graphs.
	Engine() ir.Engine
	// Close releases the runtime. It is called exactly once.
	Close() error
}

// MemoryStats are a device's memory figures as the runtime reports them.
// Zero means not reported.
type MemoryStats struct {
	BytesInUse     uint64 `json:"bytes_in_use"`
	PeakBytesInUse uint64 `json:"peak_bytes_in_use"`
	BytesLimit     uint64 `json:"bytes_limit"`
	// Source names where the figures came from ("pjrt", "cgroup", "/proc/self/status").
	Source string `json:"source"`
}

// MemoryStatser is implemented by backends that can report device memory.
type MemoryStatser interface {
	MemoryStats(ctx context.Context, deviceIndex int) (MemoryStats, error)
}

// BufferCounter is implemented by backends that know how many device
// buffers they hold: a long-running process checks with it that its device
// memory does not grow. LostBuffers counts buffers that their owner dropped
// without freeing them and that a garbage-collection safety net freed.
type BufferCounter interface {
	LiveBuffers() int
	LostBuffers() int64
}

// GraphChecker is implemented by backends that can tell, once a graph is
// built and before it runs, that it uses an op or dtype they cannot execute.
// It returns an *errs.UnsupportedError naming the first such op or dtype.
type GraphChecker interface {
	CheckGraph(g *ir.Graph, outputs []*ir.Node) error
}

// DiskCacher is implemented by backends whose executables can be serialized:
// with a disk cache set, a program compiled before (by any process sharing
// the directory) is loaded instead of compiled. Without it, compiled
// programs live only in memory.
type DiskCacher interface {
	SetDiskCache(d *cache.Disk, report func(error))
}

// DirectRunner is implemented by backends that can run a compiled graph
// straight from host bytes to host bytes: package tensorbridge's Run path
// uses it so that what a call costs beyond the runtime's own work is a
// few checks, not GoMLX's per-call tensor and buffer wrappers.
type DirectRunner interface {
	// Direct returns the program g (compiled on this backend's engine) was
	// compiled to, or nil when there is no direct form of it; g then runs
	// through GoMLX.
	Direct(g *ir.Graph) DirectExecutable
}

// DirectExecutable is a compiled program run by DirectRunner's backend.
// It is safe for concurrent use.
type DirectExecutable interface {
	// OutputShapes returns the shape of each output the program computes,
	// in order.
	OutputShapes() []ir.Shape
	// RunDirect executes the program on device dev (an index into the
	// backend's devices; a program compiled for a fixed device runs there).
	// in holds one argument per parameter, in order. out holds one slice
	// per output, each exactly the byte size of the output's dense
	// row-major host copy, which RunDirect fills; a nil slice skips that
	// output. Every device buffer RunDirect creates is freed before it
	// returns, on success or failure. Neither in nor out is used after it
	// returns, except that when ctx ends first RunDirect returns ctx's
	// error at once and the abandoned run may still read in and write out
	// until it ends.
	RunDirect(ctx context.Context, dev int, in []DirectArg, out [][]byte) error
}

// DirectArg is one argument of DirectExecutable.RunDirect: a buffer of the
// backend lent for the run, or else host bytes (row-major, the machine's
// byte order, exactly the parameter's size) copied to the device.
type DirectArg struct {
	Host   []byte
	Buffer ir.Buffer
}

var (
	mu      sync.RWMutex
	drivers = map[string]Driver{}
)

// Register makes a driver available under name. It panics if name is empty,
// d is nil, or name is already registered: all three are programming errors
// at init time.
func Register(name string, d Driver) {
	mu.Lock()
	defer mu.Unlock()
	if name == "" {
		panic("driver: Register with an empty name")
	}
	if d == nil {
		panic("driver: Register of a nil driver for " + name)
	}
	if _, dup := drivers[name]; dup {
		panic(fmt.Sprintf("driver: Register called twice for %q", name))
	}
	drivers[name] = d
}

// Lookup returns the driver registered under name.
func Lookup(name string) (Driver, bool) {
	mu.RLock()
	defer mu.RUnlock()
	d, ok := drivers[name]
	return d, ok
}

// Names returns the registered names, sorted.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(drivers))
	for n := range drivers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
