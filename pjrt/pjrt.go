// Package pjrt is tensorbridge's backend for XLA runtimes loaded as PJRT
// plugins: TPUs (libtpu), NVIDIA and AMD GPUs, and XLA's own CPU compiler.
//
// Import it for its side effect of registering four backends:
//
//	import _ "github.com/tensorbridge/tensorbridge/pjrt"
//
//	"xla-cpu"  pjrt_c_api_cpu_plugin.so   (scripts/install-plugins.sh xla-cpu)
//	"tpu"      pjrt_c_api_tpu_plugin.so or libtpu.so
//	"cuda"     pjrt_c_api_cuda_plugin.so or jax's xla_cuda_plugin.so
//	"rocm"     pjrt_c_api_rocm_plugin.so or jax's xla_rocm_plugin.so
//
// The backend spec's config ("xla-cpu:CONFIG", comma-separated) takes:
// devices=N (xla-cpu's device count), plugin=PATH, async=true|false (the
// XLA CPU client's "asynchronous" create option: false, the default where
// the plugin knows the option, runs executions on the calling thread
// instead of the client's thread pool), depthwise=sum|conv
// (xla-cpu lowers depthwise convolutions as a window sum of products by
// default; conv keeps XLA's grouped convolution), and xla.OPTION=VALUE, an
// XLA DebugOptions field set by name on every compile
// (CompileOptionsProto.env_option_overrides; true/false, integers and
// numbers are typed, anything else is a string, as enum values are named),
// e.g. "xla-cpu:xla.xla_cpu_enable_fast_math=true". An unknown option name
// fails the compile with the plugin's "No such compile option".
//
// Plugin files are looked up on the search path of package discover
// ($TENSORBRIDGE_PLUGIN_PATH first, then the per-user and system plugin
// directories and Python packages). Probe only looks for the file (and,
// for accelerators, a device node); nothing is loaded until Open.
//
// # Plugin probe
//
// Before Open loads a plugin into the process, it loads it once in a child
// process (ProbePlugin: this program's executable re-run with EnvProbe set;
// this package's init function answers and exits before main). A plugin
// that is truncated, built for another machine, missing a library, of
// another PJRT API version, or that crashes or hangs while loading then
// gives an *errs.UnavailableError wrapping a *ProbeError, instead of
// killing the program. The result is cached per file version; set
// TENSORBRIDGE_PJRT_NO_PROBE=1 to skip the child.
//
// GoMLX graphs are lowered to StableHLO by package pjrt/lower, compiled by
// the plugin and run through the pure-Go PJRT binding of internal/capi: no
// cgo. Engine is the GoMLX backend; Executable exposes the StableHLO text
// and the plugin's executable serialization for compile caches.
//
// # Config
//
// The spec after the name is a comma-separated list:
//
//	devices=N    number of host devices of the xla-cpu plugin (for SPMD on a CPU)
//	plugin=PATH  the plugin file to load, bypassing the search path
//	cluster=auto|on|off  join a multi-process job (cluster.go): auto (the
//	             default) when the environment names one of more than one
//	             process, on to bootstrap also from a TPU VM's metadata,
//	             off never
//	async=true|false, depthwise=sum|conv, xla.OPTION=VALUE  (xla-cpu; above)
//
// XLA plugins log informational lines to stderr unless
// TF_CPP_MIN_LOG_LEVEL=2 (warnings and errors) is in the environment when
// the first plugin loads. This package never sets it (library code does not
// change the process environment while plugins may run): the tensorbridge
// CLI sets it at start; a program of its own sets it before Open.
//
// # Errors
//
// A missing plugin or device is an *errs.UnavailableError; a program the
// plugin refuses to compile is an *errs.CompileError with the plugin's
// message; a RESOURCE_EXHAUSTED from the runtime is an
// *errs.OutOfMemoryError; other runtime errors are *errs.Error values whose
// Kind follows the PJRT error code.
package pjrt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gomlx/gomlx/backends"

	"github.com/tensorbridge/tensorbridge/device"
	"github.com/tensorbridge/tensorbridge/discover"
	"github.com/tensorbridge/tensorbridge/driver"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/internal/capi"
	"github.com/tensorbridge/tensorbridge/ir"
)

// Kind describes one of the backends this package registers.
type Kind struct {
	// Name is the registered backend name.
	Name string
	// Plugin is the plugin name discover.PluginName derives from its file
	// ("cpu" for xla-cpu).
	Plugin string
	// Platform is the device family.
	Platform device.Platform
	// Nodes are glob patterns of the device files the hardware shows up
	// as; empty for the CPU.
	Nodes []string
}

// Kinds are the registered backends.
var Kinds = []Kind{
	{Name: "xla-cpu", Plugin: "cpu", Platform: device.CPU},
	{Name: "tpu", Plugin: "tpu", Platform: device.TPU, Nodes: []string{"/dev/accel[0-9]*", "/dev/vfio/[0-9]*"}},
	{Name: "cuda", Plugin: "cuda", Platform: device.CUDA, Nodes: []string{"/dev/nvidia[0-9]*"}},
	{Name: "rocm", Plugin: "rocm", Platform: device.ROCm, Nodes: []string{"/dev/kfd"}},
}

func init() {
	for _, k := range Kinds {
		driver.Register(k.Name, &Driver{Kind: k})
	}
}

// Driver opens the backend of one Kind.
type Driver struct {
	Kind Kind
	// Getenv and Home replace the environment and home directory when
	// looking for plugins; for tests. Nil and "" mean the process's own.
	Getenv func(string) (string, bool)
	Home   string
	// Glob replaces filepath.Glob for device nodes; for tests.
	Glob func(pattern string) ([]string, error)
	// SearchPath replaces discover.PluginSearchPath; for tests.
	SearchPath []discover.SearchDir
}

func (d *Driver) env() func(string) (string, bool) {
	if d.Getenv != nil {
		return d.Getenv
	}
	return os.LookupEnv
}

func (d *Driver) home() string {
	if d.Home != "" {
		return d.Home
	}
	if h, ok := d.env()("HOME"); ok {
		return h
	}
	h, _ := os.UserHomeDir()
	return h
}

// FindPlugin returns the first plugin file for the kind on the search
// path, with the search entry that found it, or an error naming what was
// searched.
func (d *Driver) FindPlugin() (discover.PluginFile, error) {
	path := d.SearchPath
	if path == nil {
		path = discover.PluginSearchPath(d.env(), d.home())
	}
	files, ferr := discover.FindPlugins("", path)
	for _, f := range files {
		if f.Name == d.Kind.Plugin {
			return f, nil
		}
	}
	var dirs []string
	for _, e := range path {
		if e.Kind == discover.SearchDirectory {
			dirs = append(dirs, e.Path)
		}
	}
	msg := fmt.Sprintf("no %s PJRT plugin (pjrt_c_api_%s_plugin.so) in %s or the Python package locations",
		d.Kind.Plugin, d.Kind.Plugin, strings.Join(dirs, ", "))
	switch d.Kind.Name {
	case "xla-cpu", "tpu":
		msg += fmt.Sprintf("; run scripts/install-plugins.sh %s (or tensorbridge plugins install %s)", d.Kind.Name, d.Kind.Name)
	case "cuda":
		msg += "; run tensorbridge plugins install cuda"
	}
	if ferr != nil {
		msg += fmt.Sprintf(" (search errors: %v)", ferr)
	}
	return discover.PluginFile{}, errors.New(msg)
}

// deviceNodes lists the kind's device files.
func (d *Driver) deviceNodes() []string {
	glob := d.Glob
	if glob == nil {
		glob = filepath.Glob
	}
	var out []string
	for _, p := range d.Kind.Nodes {
		m, _ := glob(p)
		out = append(out, m...)
	}
	return out
}

// Probe reports whether a plugin file for the kind exists and, for
// accelerators, whether a device node does. It loads nothing.
func (d *Driver) Probe(ctx context.Context) driver.Availability {
	if err := ctx.Err(); err != nil {
		return driver.Availability{Reason: err.Error()}
	}
	f, err := d.FindPlugin()
	if err != nil {
		return driver.Availability{Reason: err.Error()}
	}
	av := driver.Availability{Available: true,
		Reason: fmt.Sprintf("PJRT plugin %s (found via %s)", f.Path, f.Source)}
	if len(d.Kind.Nodes) > 0 {
		nodes := d.deviceNodes()
		if len(nodes) == 0 {
			return driver.Availability{Reason: fmt.Sprintf("PJRT plugin %s is installed but there is no %s device (no %s)",
				f.Path, d.Kind.Platform, strings.Join(d.Kind.Nodes, " or "))}
		}
		av.Devices = len(nodes)
		if d.Kind.Platform == device.ROCm {
			av.Devices = 0 // /dev/kfd is one node for all GPUs
		}
		av.Reason += fmt.Sprintf(" and device nodes %s", strings.Join(nodes, ", "))
	}
	return av
}

// config is the parsed driver config string.
type config struct {
	devices int
	plugin  string
	cluster clusterMode
	// async, if set, is the XLA CPU client's "asynchronous" create option:
	// false runs every execution on the calling thread instead of handing
	// it to the client's thread pool (the plugin's default is true).
	async *bool
	tune  tuning
}

// configHelp lists the driver config options.
const configHelp = "devices=N, plugin=PATH, cluster=auto|on|off, async=true|false, depthwise=sum|conv, xla.OPTION=VALUE"

// parseXLAValue types the value of an xla.NAME=VALUE option: true/false a
// bool, an integer an int64, a number a float64, anything else a string
// (enum options take their value's name).
func parseXLAValue(v string) any {
	switch v {
	case "true":
		return true
	case "false":
		return false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		return f
	}
	return v
}

func parseConfig(kind Kind, s string) (config, error) {
	var c config
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "devices":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return c, fmt.Errorf("devices=%q: want a positive integer", v)
			}
			if kind.Platform != device.CPU {
				return c, fmt.Errorf("devices=N only applies to xla-cpu; the %s device count is the hardware's", kind.Name)
			}
			c.devices = n
		case "cluster":
			m, err := parseClusterMode(v)
			if err != nil {
				return c, err
			}
			c.cluster = m
		case "plugin":
			if v == "" {
				return c, errors.New("plugin= needs a file path")
			}
			c.plugin = v
		case "async":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return c, fmt.Errorf("async=%q: want true or false", v)
			}
			if kind.Platform != device.CPU {
				return c, fmt.Errorf("async= only applies to xla-cpu")
			}
			c.async = &b
		case "depthwise":
			switch v {
			case "sum":
				c.tune.depthwiseConv = false
			case "conv":
				c.tune.depthwiseConv = true
			default:
				return c, fmt.Errorf("depthwise=%q: want sum (a window sum of products, the xla-cpu default) or conv (XLA's grouped convolution)", v)
			}
		default:
			name, ok := strings.CutPrefix(k, "xla.")
			if !ok || name == "" || !strings.Contains(part, "=") {
				return c, fmt.Errorf("unknown option %q (known: %s)", part, configHelp)
			}
			if name == "debug_options" {
				return c, errors.New("xla.debug_options cannot be set: it would replace every XLA default; name the options one by one")
			}
			for _, o := range c.tune.xlaOptions {
				if o.Name == name {
					return c, fmt.Errorf("xla.%s given twice", name)
				}
			}
			c.tune.xlaOptions = append(c.tune.xlaOptions, capi.OptionOverride{Name: name, Value: parseXLAValue(v)})
		}
	}
	return c, nil
}

// Open loads the plugin (once per process) and creates a PJRT client.
func (d *Driver) Open(ctx context.Context, opts *driver.Options) (driver.Backend, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if opts == nil {
		opts = &driver.Options{MemoryFraction: 0.9}
	}
	name := d.Kind.Name
	cfg, err := parseConfig(d.Kind, opts.Config)
	if err != nil {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Backend: name, Op: "open", Err: err}
	}
	path := cfg.plugin
	if path == "" {
		f, err := d.FindPlugin()
		if err != nil {
			return nil, &errs.UnavailableError{Name: name, Reason: err.Error()}
		}
		path = f.Path
	} else if _, err := os.Stat(path); err != nil {
		return nil, &errs.UnavailableError{Name: name, Reason: "plugin file given in the config cannot be read", Err: err}
	}
	// Multi-process job (cluster.go): nil for a single process.
	jobCfg, err := d.bootstrapCluster(ctx, cfg.cluster, opts.Cluster)
	if err != nil {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Backend: name, Op: "open", Err: fmt.Errorf("multi-process job: %w", err)}
	}
	if jobCfg != nil {
		jobCfg.Security = opts.ClusterSecurity
	}
	if len(d.Kind.Nodes) > 0 && len(d.deviceNodes()) == 0 {
		return nil, &errs.UnavailableError{Name: name, Reason: fmt.Sprintf("no %s device (no %s)", d.Kind.Platform, strings.Join(d.Kind.Nodes, " or "))}
	}
	if err := checkPlugin(ctx, d.Kind.Plugin, path); err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		reason := "PJRT plugin " + path + " failed its load check (done in a child process, so this one is unharmed)"
		var pe *ProbeError
		if errors.As(err, &pe) && pe.Fix != "" {
			reason += "; fix: " + strings.ReplaceAll(pe.Fix, "NAME", d.Kind.Name)
		}
		return nil, &errs.UnavailableError{Name: name, Reason: reason, Err: err}
	}
	plugin, err := capi.Load(path)
	if err != nil {
		return nil, &errs.UnavailableError{Name: name, Reason: "loading PJRT plugin " + path + " failed", Err: err}
	}
	var copts []capi.NamedValue
	if cfg.devices > 0 {
		copts = append(copts, capi.NamedValue{Name: capi.OptCPUDeviceCount, Value: int64(cfg.devices)})
	}
	if cfg.async != nil {
		copts = append(copts, capi.NamedValue{Name: capi.OptAsynchronous, Value: *cfg.async})
	}
	if d.Kind.Platform == device.CUDA || d.Kind.Platform == device.ROCm {
		if f := opts.MemoryFraction; f > 0 && f <= 1 {
			copts = append(copts,
				capi.NamedValue{Name: capi.OptMemoryFraction, Value: float32(f)},
				capi.NamedValue{Name: capi.OptPreallocate, Value: false})
		}
	}
	// --- multi-process job: join before the client exists (the plugin
	// uses the key-value store while it creates the client).
	var j *job
	if jobCfg != nil {
		if j, err = joinCluster(ctx, name, jobCfg); err != nil {
			return nil, clusterError(name, err)
		}
	}
	fail := func(client *capi.Client, err error) (driver.Backend, error) {
		if client != nil {
			_ = client.Close()
		}
		if j != nil {
			j.client.Abort()
		}
		return nil, err
	}
	var client *capi.Client
	dispatch := ""
	if j != nil {
		client, err = openInJob(ctx, j, plugin, d.Kind, copts)
	} else if d.Kind.Platform == device.CPU && cfg.async == nil {
		// Synchronous dispatch by default on xla-cpu: every execution
		// runs on the calling thread instead of hopping to the client's
		// pool, which costs a small model a third of its CPU time per
		// call (BENCHMARKS.md). A plugin that predates the option
		// refuses unknown create options with INVALID_ARGUMENT; it then
		// keeps its own asynchronous dispatch, and Dispatch says why.
		client, err = plugin.NewClient(ctx, append(copts, capi.NamedValue{Name: capi.OptAsynchronous, Value: false}))
		dispatch = "synchronous (create option asynchronous=false, the xla-cpu default)"
		if err != nil && capi.CodeOf(err) == capi.CodeInvalidArgument {
			dispatch = fmt.Sprintf("asynchronous: the plugin refused the create option asynchronous=false (%v)", err)
			client, err = plugin.NewClient(ctx, copts)
		}
	} else {
		client, err = plugin.NewClient(ctx, copts)
		if cfg.async != nil {
			dispatch = fmt.Sprintf("asynchronous=%v (config)", *cfg.async)
		}
	}
	// --- end of the multi-process part of client creation.
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return fail(nil, err)
		}
		return fail(nil, &errs.UnavailableError{Name: name, Reason: "creating a PJRT client with plugin " + path + " failed", Err: err})
	}
	eng, err := newEngine(name, client)
	if err != nil {
		return fail(client, err)
	}
	if cfg.devices > 0 && eng.NumDevices() != cfg.devices {
		n := eng.NumDevices()
		return fail(client, &errs.Error{Kind: errs.Unimplemented, Backend: name, Op: "open",
			Err: fmt.Errorf("devices=%d was asked but plugin %s created %d device(s); it does not honour the %q client option",
				cfg.devices, path, n, capi.OptCPUDeviceCount)})
	}
	eng.tune = cfg.tune
	b := &Backend{kind: d.Kind, eng: eng, pluginPath: path, job: j, runtimeDevices: eng.NumDevices(), dispatch: dispatch}
	if all, err := client.Devices(); err == nil {
		b.runtimeDevices = len(all)
	}
	if j != nil {
		if err := j.publish(ctx, name, eng.NumDevices()); err != nil {
			return fail(client, clusterError(name, err))
		}
	}
	return b, nil
}

// Backend is an open pjrt backend.
type Backend struct {
	kind       Kind
	eng        *Engine
	pluginPath string
	// job is the multi-process job joined at Open (cluster.go); nil for a
	// single process. runtimeDevices is how many devices the plugin lists,
	// addressable or not.
	job            *job
	runtimeDevices int

	once sync.Once
	devs []device.Info
	derr error

	// diskHits and diskMisses count compiles answered by the disk cache
	// (SetDiskCache) and compiles it had to run.
	diskHits, diskMisses atomic.Int64

	warm warmState // warm-start arms and the disk cache (warmstart.go)

	// dispatch says how the XLA CPU client dispatches executions and why
	// ("" for plugins without the choice).
	dispatch string
}

// Dispatch says how executions are dispatched and why: on xla-cpu,
// synchronously on the caller's thread unless the config says async=true
// or the plugin does not know the option; "" on other plugins.
func (b *Backend) Dispatch() string { return b.dispatch }

var (
	_ driver.Backend       = (*Backend)(nil)
	_ driver.MemoryStatser = (*Backend)(nil)
)

// Name returns the registered name.
func (b *Backend) Name() string { return b.kind.Name }

// Engine returns the GoMLX backend.
func (b *Backend) Engine() ir.Engine { return b.eng }

// PJRTEngine returns the engine with its pjrt-specific methods.
func (b *Backend) PJRTEngine() *Engine { return b.eng }

// Close closes the PJRT client and, in a multi-process job, leaves the job
// (waiting for every process to close, at most about twice the cluster
// timeout) with every goroutine and connection of the membership. The
// plugin stays loaded (plugins are never unloaded).
func (b *Backend) Close() error {
	err := b.eng.close()
	if b.job != nil {
		if lerr := b.job.leave(); lerr != nil {
			err = errors.Join(err, &errs.Error{Kind: errs.Unavailable, Backend: b.Name(), Op: "close", Err: fmt.Errorf("leaving the multi-process job: %w", lerr)})
		}
	}
	return err
}

// Devices describes the addressable devices from their PJRT descriptions.
func (b *Backend) Devices(ctx context.Context) ([]device.Info, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.once.Do(func() { b.devs, b.derr = b.describe(ctx) })
	if b.derr != nil {
		return nil, b.derr
	}
	out := make([]device.Info, len(b.devs))
	copy(out, b.devs)
	return out, nil
}

func (b *Backend) describe(ctx context.Context) ([]device.Info, error) {
	e := b.eng
	out := make([]device.Info, len(e.devices))
	// Host memory, read once, for devices whose plugin has no allocator
	// statistics (XLA's CPU devices share it).
	hostMemory := sync.OnceValue(func() device.Memory {
		host, _, err := discover.CPU(ctx, discover.Options{})
		if err != nil || host.Memory.Total == 0 {
			return device.Memory{}
		}
		return device.Memory{Total: host.Memory.Total, Source: "host " + host.Memory.Source + ", shared"}
	})
	for i, d := range e.devices {
		desc := d.Description()
		info := device.Info{
			ID:           fmt.Sprintf("%s:pjrt:%d", b.kind.Platform, desc.ID),
			Platform:     b.kind.Platform,
			Kind:         desc.Kind,
			Index:        i,
			CoreOnChip:   -1,
			ProcessIndex: desc.ProcessIndex,
		}
		attr := func(name string, v any) {
			info.SetAttr(device.Attribute{Name: name, Value: v, Source: "pjrt"})
		}
		attr("pjrt_id", desc.ID)
		attr("kind", desc.Kind)
		attr("process_index", desc.ProcessIndex)
		attr("description", desc.ToString)
		attr("platform", e.platform)
		attr("platform_version", e.version)
		attr("plugin", b.pluginPath)
		if hw, err := d.LocalHardwareID(); err == nil && hw >= 0 {
			attr("local_hardware_id", hw)
		}
		for _, nv := range desc.Attributes {
			attr(nv.Name, nv.Value)
			switch nv.Name {
			case "coords":
				if c, ok := nv.Value.([]int64); ok {
					info.Coords = make([]int, len(c))
					for j, v := range c {
						info.Coords[j] = int(v)
					}
				}
			case "core_on_chip":
				if c, ok := nv.Value.(int64); ok {
					info.CoreOnChip = int(c)
				}
			}
		}
		if b.job != nil && desc.ProcessIndex != b.job.cfg.ProcessIndex.Value {
			// A plugin that knows nothing of the job (XLA's CPU plugin)
			// numbers its own process 0: the job's index is what places
			// the device.
			info.ProcessIndex = b.job.cfg.ProcessIndex.Value
			info.SetAttr(device.Attribute{Name: "job_process_index", Value: info.ProcessIndex, Source: "cluster:" + b.job.cfg.ProcessIndex.Source})
		}
		if ms, err := d.MemoryStats(); err == nil {
			attr("bytes_in_use", ms.BytesInUse)
			if ms.BytesLimit.Valid && ms.BytesLimit.Value > 0 {
				attr("bytes_limit", ms.BytesLimit.Value)
				info.Memory = device.Memory{Total: uint64(ms.BytesLimit.Value), Source: "pjrt"}
			}
			if ms.PeakBytesInUse.Valid {
				attr("peak_bytes_in_use", ms.PeakBytesInUse.Value)
			}
		} else if b.kind.Platform == device.CPU {
			// XLA's CPU plugin has no allocator statistics: its devices
			// share host memory, which is what they can use.
			attr("memory_stats", "unavailable: "+firstLineOf(err.Error()))
			info.Memory = hostMemory()
		}
		out[i] = info
	}
	return out, nil
}

// LiveBuffers is the number of PJRT buffers of the client not yet freed.
func (b *Backend) LiveBuffers() int { return b.eng.client.LiveBuffers() }

// LostBuffers is the number of buffers dropped without being freed, which
// the binding's garbage-collection safety net freed.
func (b *Backend) LostBuffers() int64 { return b.eng.client.LostBuffers() }

// MemoryStats reads device i's allocator statistics from the plugin. A
// plugin without them (the XLA CPU plugin, for one) gives an
// *errs.UnsupportedError.
func (b *Backend) MemoryStats(ctx context.Context, i int) (driver.MemoryStats, error) {
	if err := ctx.Err(); err != nil {
		return driver.MemoryStats{}, err
	}
	if err := b.eng.check("memory stats"); err != nil {
		return driver.MemoryStats{}, err
	}
	if i < 0 || i >= len(b.eng.devices) {
		return driver.MemoryStats{}, &errs.Error{Kind: errs.InvalidArgument, Backend: b.Name(), Op: "memory stats",
			Err: fmt.Errorf("device index %d out of range [0, %d)", i, len(b.eng.devices))}
	}
	ms, err := b.eng.devices[i].MemoryStats()
	if err != nil {
		if errors.Is(err, capi.ErrUnimplemented) || errors.Is(err, capi.ErrPluginTooOld) {
			return driver.MemoryStats{}, &errs.UnsupportedError{Backend: b.Name(), What: "feature", Name: "memory statistics",
				Detail: "the plugin does not report device memory statistics", Err: err}
		}
		return driver.MemoryStats{}, wrap(b.Name(), "memory stats", b.eng.deviceName(backends.DeviceNum(i)), "", err)
	}
	st := driver.MemoryStats{Source: "pjrt"}
	if ms.BytesInUse > 0 {
		st.BytesInUse = uint64(ms.BytesInUse)
	}
	if ms.PeakBytesInUse.Valid && ms.PeakBytesInUse.Value > 0 {
		st.PeakBytesInUse = uint64(ms.PeakBytesInUse.Value)
	}
	if ms.BytesLimit.Valid && ms.BytesLimit.Value > 0 {
		st.BytesLimit = uint64(ms.BytesLimit.Value)
	}
	return st, nil
}

func firstLineOf(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
