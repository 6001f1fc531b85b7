package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tensorbridge/tensorbridge/catalog"
	"github.com/tensorbridge/tensorbridge/discover"
)

// DefaultPort is the coordinator's port when the address names none. It is
// the port JAX's Cloud TPU cluster detection uses for its coordinator
// (jax/_src/clusters/cloud_tpu_cluster.py,
// https://github.com/jax-ml/jax/blob/main/jax/_src/clusters/cloud_tpu_cluster.py),
// which no TPU runtime listens on.
const DefaultPort = 8482

// DefaultTimeout bounds every wait of the cluster (join, barriers, lost
// heartbeats, an unreachable coordinator) unless TENSORBRIDGE_CLUSTER_TIMEOUT
// or Options.Timeout says otherwise.
const DefaultTimeout = 60 * time.Second

// Environment variables read by Bootstrap (besides the TPU ones).
const (
	EnvCoordinator  = "TENSORBRIDGE_COORDINATOR"     // host or host:port of process 0's service
	EnvProcessID    = "TENSORBRIDGE_PROCESS_ID"      // this process's index
	EnvNumProcesses = "TENSORBRIDGE_NUM_PROCESSES"   // how many processes the job has
	EnvTimeout      = "TENSORBRIDGE_CLUSTER_TIMEOUT" // Go duration, e.g. "30s"
	EnvJob          = "TENSORBRIDGE_JOB"             // job id; processes of other jobs are refused
	// EnvMaxConnections and EnvIdleTimeout set Limits.MaxConnections and
	// Limits.IdleTimeout of process 0's coordination service when
	// Options.Limits leaves them unset.
	EnvMaxConnections = "TENSORBRIDGE_CLUSTER_MAX_CONNECTIONS" // integer; -1: no cap
	EnvIdleTimeout    = "TENSORBRIDGE_CLUSTER_IDLE_TIMEOUT"    // Go duration
	// EnvBind is the IP process 0's coordination service listens on (the
	// coordinator address's port); unset: see ListenAddress. The Kubernetes
	// manifests set it to the pod's IP (status.podIP).
	EnvBind = "TENSORBRIDGE_COORDINATOR_BIND"
)

// Sources of a value, as Config records them. Environment and metadata
// sources carry the variable or key: "env:TPU_WORKER_ID",
// "metadata:agent-worker-number".
const (
	SourceFlag    = "flag"
	SourceDefault = "default"
	SourceDerived = "derived"
)

// Int is a setting and where its value came from.
type Int struct {
	Value  int    `json:"value"`
	Source string `json:"source"`
}

// String is a setting and where its value came from.
type String struct {
	Value  string `json:"value"`
	Source string `json:"source"`
}

// Config is what a process knows about its job before it talks to anyone:
// who it is, how many they are, where the coordinator is, and the slice.
// Every value says which source decided it.
type Config struct {
	// ProcessIndex is this process's global index, 0..ProcessCount-1.
	ProcessIndex Int `json:"process_index"`
	ProcessCount Int `json:"process_count"`
	// Coordinator is process 0's service address, host:port; empty for a
	// single process.
	Coordinator String `json:"coordinator"`
	// Hosts are the hosts of the job's processes by global index, when the
	// environment lists them (GKE, TPU VM metadata); HostsSource says which.
	Hosts       []string `json:"hosts,omitempty"`
	HostsSource string   `json:"hosts_source,omitempty"`
	// SliceID and NumSlices place the process in a multislice job (both 0
	// and 1 outside one). HostsPerSlice is the process count of one slice.
	SliceID       Int `json:"slice_id"`
	NumSlices     Int `json:"num_slices"`
	HostsPerSlice Int `json:"hosts_per_slice"`
	// AcceleratorType and Topology are the TPU slice as the host reports it;
	// Slice is the catalog's reading of them (nil when not a TPU host or
	// when they do not parse; SliceError then says why).
	AcceleratorType String         `json:"accelerator_type"`
	Topology        String         `json:"topology"`
	Slice           *catalog.Slice `json:"slice,omitempty"`
	SliceError      string         `json:"slice_error,omitempty"`
	// Timeout bounds every wait; Heartbeat is the interval of heartbeats.
	Timeout   Duration `json:"timeout"`
	Heartbeat Duration `json:"heartbeat"`
	// Job is the job id shared by all processes.
	Job String `json:"job"`
	// Bind is the IP process 0's service listens on ("" : ListenAddress).
	Bind String `json:"bind,omitempty"`
	// Host is this process's host name.
	Host string `json:"host"`
	// Security authenticates the job's calls (from Options.Security; never
	// serialised). Limits bound the coordination service process 0 runs.
	Security *Security `json:"-"`
	Limits   Limits    `json:"-"`
	// Logger receives the warnings of process 0's service (nil:
	// slog.Default()).
	Logger *slog.Logger `json:"-"`
}

// Duration is a time setting and its source.
type Duration struct {
	Value  time.Duration `json:"value_ns"`
	Source string        `json:"source"`
}

// MultiProcess reports whether the job has more than one process.
func (c *Config) MultiProcess() bool { return c.ProcessCount.Value > 1 }

// Options are the inputs of Bootstrap. The zero value reads the process's
// environment and, on a TPU VM, the metadata server.
type Options struct {
	// Explicit values from the command line (--coordinator, --process-id,
	// --num-processes); "" or nil leave them to the environment.
	Coordinator  string
	ProcessID    *int
	NumProcesses *int
	// Timeout overrides TENSORBRIDGE_CLUSTER_TIMEOUT when positive.
	Timeout time.Duration
	// Env looks up environment variables; nil means os.LookupEnv.
	Env func(string) (string, bool)
	// TPU returns the TPU environment merged with the metadata server's
	// answers (package discover: env first, metadata only on a host with
	// evidence of a GCE VM). It is called only when neither the explicit
	// values nor GKE's variables decide the process index; nil means
	// discover.Discover with Env.
	TPU func(ctx context.Context) (*discover.TPUEnvironment, error)
	// Hostname overrides os.Hostname.
	Hostname string
	// Security is the job's shared secret and TLS material, as the caller
	// read them (the CLI: --cluster-token-file, $TENSORBRIDGE_CLUSTER_TOKEN_FILE,
	// --cluster-tls-*). Bootstrap never reads them from the environment.
	Security *Security
	// Limits bound the coordination service's key-value store and waits
	// (zero fields take the defaults).
	Limits Limits
}

// Bootstrap works out the job from, in this order: explicit values (Options,
// then TENSORBRIDGE_* variables), GKE's TPU variables (TPU_WORKER_ID,
// TPU_PROCESS_ADDRESSES or TPU_WORKER_HOSTNAMES; worker 0 is the
// coordinator), a Cloud TPU VM's metadata (agent-worker-number,
// worker-network-endpoints), and multislice (MEGASCALE_NUM_SLICES,
// MEGASCALE_SLICE_ID, MEGASCALE_COORDINATOR_ADDRESS): an earlier source
// decides a value, later ones fill what is left. With none of them the job
// is a single process. Bad or contradictory values are a *ConfigError.
func Bootstrap(ctx context.Context, opts Options) (*Config, error) {
	env := opts.Env
	if env == nil {
		env = os.LookupEnv
	}
	get := func(k string) string {
		v, _ := env(k)
		return strings.TrimSpace(v)
	}
	if err := opts.Security.check(); err != nil {
		return nil, err
	}
	c := &Config{Host: opts.Hostname, Security: opts.Security, Limits: opts.Limits}
	if c.Host == "" {
		c.Host, _ = os.Hostname()
	}

	// 1. Explicit values.
	if opts.Coordinator != "" {
		c.Coordinator = String{opts.Coordinator, SourceFlag}
	} else if v := get(EnvCoordinator); v != "" {
		c.Coordinator = String{v, "env:" + EnvCoordinator}
	}
	explicitInt := func(dst *Int, flag *int, name, key string) error {
		if flag != nil {
			*dst = Int{*flag, SourceFlag}
			return nil
		}
		if v := get(key); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				return &ConfigError{Field: name, Value: v, Source: "env:" + key, Reason: "not an integer"}
			}
			*dst = Int{n, "env:" + key}
		}
		return nil
	}
	if err := explicitInt(&c.ProcessIndex, opts.ProcessID, "process index", EnvProcessID); err != nil {
		return nil, err
	}
	if err := explicitInt(&c.ProcessCount, opts.NumProcesses, "process count", EnvNumProcesses); err != nil {
		return nil, err
	}

	// 2. GKE: the webhook's TPU_WORKER_ID and worker list.
	var worker Int
	var workers []string
	var workersSource string
	if v := get("TPU_WORKER_ID"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, &ConfigError{Field: "worker id", Value: v, Source: "env:TPU_WORKER_ID", Reason: "not a non-negative integer"}
		}
		worker = Int{n, "env:TPU_WORKER_ID"}
	}
	for _, k := range []string{"TPU_PROCESS_ADDRESSES", "TPU_WORKER_HOSTNAMES"} {
		if v := get(k); v != "" {
			workers, workersSource = splitList(v), "env:"+k
			break
		}
	}
	megaCoord := String{}
	if v := get("MEGASCALE_COORDINATOR_ADDRESS"); v != "" {
		megaCoord = String{v, "env:MEGASCALE_COORDINATOR_ADDRESS"}
	}
	var numSlices, sliceID Int
	for _, kv := range []struct {
		dst *Int
		key string
	}{{&numSlices, "MEGASCALE_NUM_SLICES"}, {&sliceID, "MEGASCALE_SLICE_ID"}} {
		if v := get(kv.key); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return nil, &ConfigError{Field: strings.ToLower(kv.key), Value: v, Source: "env:" + kv.key, Reason: "not a non-negative integer"}
			}
			*kv.dst = Int{n, "env:" + kv.key}
		}
	}
	c.AcceleratorType = envString(get, "TPU_ACCELERATOR_TYPE")
	c.Topology = envString(get, "TPU_TOPOLOGY")

	// 3. A Cloud TPU VM's metadata, when nothing above placed this process.
	explicitDone := c.ProcessIndex.Source != "" && c.ProcessCount.Source != "" && (c.Coordinator.Source != "" || c.ProcessCount.Value <= 1)
	skipMDS := get("TPU_SKIP_MDS_QUERY") != ""
	if worker.Source == "" && !explicitDone && !skipMDS {
		tpuFn := opts.TPU
		if tpuFn == nil {
			tpuFn = func(ctx context.Context) (*discover.TPUEnvironment, error) {
				rep, err := discover.Discover(ctx, discover.Options{Env: env})
				if rep == nil {
					return nil, err
				}
				return &rep.TPU, err
			}
		}
		t, err := tpuFn(ctx)
		if err != nil && t == nil {
			return nil, fmt.Errorf("cluster: reading the TPU environment and metadata: %w", err)
		}
		if t != nil {
			src := func(field string) string { return t.Sources[field] }
			if t.WorkerID != nil && strings.HasPrefix(src("worker_id"), "metadata:") {
				worker = Int{*t.WorkerID, src("worker_id")}
			}
			if len(workers) == 0 && len(t.WorkerHostnames) > 0 && strings.HasPrefix(src("worker_hostnames"), "metadata:") {
				workers, workersSource = t.WorkerHostnames, src("worker_hostnames")
			}
			if c.AcceleratorType.Source == "" && t.AcceleratorType != "" {
				c.AcceleratorType = String{t.AcceleratorType, src("accelerator_type")}
			}
			if c.Topology.Source == "" && t.Topology != "" {
				c.Topology = String{t.Topology, src("topology")}
			}
			if megaCoord.Source == "" && t.MegascaleCoordinatorAddress != "" {
				megaCoord = String{t.MegascaleCoordinatorAddress, src("megascale_coordinator_address")}
			}
			if numSlices.Source == "" && t.MegascaleNumSlices != nil {
				numSlices = Int{*t.MegascaleNumSlices, src("megascale_num_slices")}
			}
			if sliceID.Source == "" && t.MegascaleSliceID != nil {
				sliceID = Int{*t.MegascaleSliceID, src("megascale_slice_id")}
			}
		}
	}

	// Slice placement: one slice unless multislice says more.
	c.NumSlices = Int{1, SourceDefault}
	if numSlices.Source != "" {
		c.NumSlices = numSlices
	}
	if c.NumSlices.Value < 1 {
		return nil, &ConfigError{Field: "number of slices", Value: strconv.Itoa(c.NumSlices.Value), Source: c.NumSlices.Source, Reason: "must be at least 1"}
	}
	c.SliceID = Int{0, SourceDefault}
	if sliceID.Source != "" {
		c.SliceID = sliceID
	}
	if c.SliceID.Value >= c.NumSlices.Value {
		return nil, &ConfigError{Field: "slice id", Value: strconv.Itoa(c.SliceID.Value), Source: c.SliceID.Source,
			Reason: fmt.Sprintf("outside 0..%d (%d slices, from %s)", c.NumSlices.Value-1, c.NumSlices.Value, c.NumSlices.Source)}
	}
	if len(workers) > 0 {
		c.HostsPerSlice = Int{len(workers), workersSource}
		if worker.Source != "" && worker.Value >= len(workers) {
			return nil, &ConfigError{Field: "worker id", Value: strconv.Itoa(worker.Value), Source: worker.Source,
				Reason: fmt.Sprintf("outside the %d workers listed by %s", len(workers), workersSource)}
		}
	}

	// Fill what the explicit layer left from the TPU layers.
	if c.ProcessIndex.Source == "" && worker.Source != "" {
		if c.NumSlices.Value > 1 {
			if c.HostsPerSlice.Source == "" {
				return nil, &ConfigError{Field: "process index", Source: worker.Source, Reason: "a multislice job needs the slice's worker list (TPU_WORKER_HOSTNAMES or TPU_PROCESS_ADDRESSES) to number its processes"}
			}
			c.ProcessIndex = Int{c.SliceID.Value*c.HostsPerSlice.Value + worker.Value, SourceDerived + ":slice_id*hosts_per_slice+" + worker.Source}
		} else {
			c.ProcessIndex = worker
		}
	}
	if c.ProcessCount.Source == "" && c.HostsPerSlice.Source != "" {
		if c.NumSlices.Value > 1 {
			c.ProcessCount = Int{c.NumSlices.Value * c.HostsPerSlice.Value, SourceDerived + ":num_slices*" + workersSource}
		} else {
			c.ProcessCount = Int{c.HostsPerSlice.Value, workersSource}
		}
	}
	if c.HostsPerSlice.Source != "" && c.NumSlices.Value == 1 {
		c.Hosts, c.HostsSource = hostsOf(workers), workersSource
	}
	if c.Coordinator.Source == "" {
		switch {
		case c.NumSlices.Value > 1 && megaCoord.Source != "":
			c.Coordinator = String{withPort(hostOf(megaCoord.Value)), megaCoord.Source}
		case len(workers) > 0:
			c.Coordinator = String{withPort(hostOf(workers[0])), workersSource + "[0]"}
		}
	} else {
		c.Coordinator.Value = withPort(c.Coordinator.Value)
	}
	if c.ProcessIndex.Source == "" {
		c.ProcessIndex = Int{0, SourceDefault}
	}
	if c.ProcessCount.Source == "" {
		c.ProcessCount = Int{1, SourceDefault}
	}
	if c.HostsPerSlice.Source == "" {
		c.HostsPerSlice = Int{c.ProcessCount.Value / c.NumSlices.Value, SourceDerived}
	}

	// Checks.
	if c.ProcessCount.Value < 1 {
		return nil, &ConfigError{Field: "process count", Value: strconv.Itoa(c.ProcessCount.Value), Source: c.ProcessCount.Source, Reason: "must be at least 1"}
	}
	if c.ProcessIndex.Value < 0 || c.ProcessIndex.Value >= c.ProcessCount.Value {
		return nil, &ConfigError{Field: "process index", Value: strconv.Itoa(c.ProcessIndex.Value), Source: c.ProcessIndex.Source,
			Reason: fmt.Sprintf("outside 0..%d (process count %d from %s)", c.ProcessCount.Value-1, c.ProcessCount.Value, c.ProcessCount.Source)}
	}
	if c.ProcessCount.Value > 1 {
		if c.Coordinator.Value == "" {
			return nil, &ConfigError{Field: "coordinator", Source: "", Reason: fmt.Sprintf("%d processes (from %s) need a coordinator address: set --coordinator or %s", c.ProcessCount.Value, c.ProcessCount.Source, EnvCoordinator)}
		}
		if _, _, err := net.SplitHostPort(c.Coordinator.Value); err != nil {
			return nil, &ConfigError{Field: "coordinator", Value: c.Coordinator.Value, Source: c.Coordinator.Source, Reason: "want host or host:port: " + err.Error()}
		}
	}

	// Slice.
	if c.AcceleratorType.Value != "" {
		sl, err := catalog.ResolveSlice(c.AcceleratorType.Value, c.Topology.Value)
		if err != nil {
			c.SliceError = err.Error()
		} else {
			c.Slice = &sl
		}
	}

	// Timeout, heartbeat, job.
	c.Timeout = Duration{DefaultTimeout, SourceDefault}
	if opts.Timeout > 0 {
		c.Timeout = Duration{opts.Timeout, SourceFlag}
	} else if v := get(EnvTimeout); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, &ConfigError{Field: "cluster timeout", Value: v, Source: "env:" + EnvTimeout, Reason: "want a positive Go duration such as 30s"}
		}
		c.Timeout = Duration{d, "env:" + EnvTimeout}
	}
	c.Heartbeat = Duration{HeartbeatInterval(c.Timeout.Value), SourceDerived + ":timeout/10"}
	if v := get(EnvBind); v != "" {
		if net.ParseIP(strings.Trim(v, "[]")) == nil {
			return nil, &ConfigError{Field: "coordinator bind address", Value: v, Source: "env:" + EnvBind, Reason: "want an IP address (the pod's, status.podIP)"}
		}
		c.Bind = String{strings.Trim(v, "[]"), "env:" + EnvBind}
	}
	c.Job = String{"default", SourceDefault}
	if v := get(EnvJob); v != "" {
		c.Job = String{v, "env:" + EnvJob}
	}
	if err := connectionLimits(&c.Limits, get); err != nil {
		return nil, err
	}
	return c, nil
}

// connectionLimits fills l's connection cap and idle timeout from
// TENSORBRIDGE_CLUSTER_MAX_CONNECTIONS and TENSORBRIDGE_CLUSTER_IDLE_TIMEOUT
// where the caller left them unset.
func connectionLimits(l *Limits, get func(string) string) error {
	if v := get(EnvMaxConnections); v != "" && l.MaxConnections == 0 {
		n, err := strconv.Atoi(v)
		if err != nil || n == 0 || n < -1 {
			return &ConfigError{Field: "coordinator connection cap", Value: v, Source: "env:" + EnvMaxConnections,
				Reason: "want a positive integer, or -1 for no cap"}
		}
		l.MaxConnections = n
	}
	if v := get(EnvIdleTimeout); v != "" && l.IdleTimeout == 0 {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return &ConfigError{Field: "coordinator idle timeout", Value: v, Source: "env:" + EnvIdleTimeout, Reason: "want a positive Go duration such as 15s"}
		}
		l.IdleTimeout = d
	}
	return nil
}

// HeartbeatInterval is the heartbeat period for a cluster timeout: a tenth
// of it, between 20 ms and 5 s, so that a lost process is noticed well
// inside the timeout.
func HeartbeatInterval(timeout time.Duration) time.Duration {
	return min(max(timeout/10, 20*time.Millisecond), 5*time.Second)
}

func envString(get func(string) string, k string) String {
	if v := get(k); v != "" {
		return String{v, "env:" + k}
	}
	return String{}
}

// splitList splits a comma-separated list, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// hostOf drops a port from "host:port" (and brackets from "[v6]:port");
// a bare host or IPv6 address is returned as it is.
func hostOf(s string) string {
	if h, _, err := net.SplitHostPort(s); err == nil {
		return h
	}
	return s
}

func hostsOf(list []string) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = hostOf(s)
	}
	return out
}

// withPort adds DefaultPort to an address that names no port.
func withPort(s string) string {
	if _, _, err := net.SplitHostPort(s); err == nil {
		return s
	}
	return net.JoinHostPort(strings.Trim(s, "[]"), strconv.Itoa(DefaultPort))
}
