package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/cluster"
	"github.com/tensorbridge/tensorbridge/device"
	"github.com/tensorbridge/tensorbridge/discover"
)

// clusterFlags are the explicit bootstrap values (doctor --cluster).
type clusterFlags struct {
	coordinator  string
	processID    int
	numProcesses int
	timeout      time.Duration
	auth         clusterAuthFlags
}

func addClusterFlags(fs interface {
	StringVar(*string, string, string, string)
	BoolVar(*bool, string, bool, string)
	IntVar(*int, string, int, string)
	DurationVar(*time.Duration, string, time.Duration, string)
}, f *clusterFlags) {
	fs.StringVar(&f.coordinator, "coordinator", "", "process 0's coordination service, host[:port] (default: $"+cluster.EnvCoordinator+", else from the TPU environment)")
	fs.IntVar(&f.processID, "process-id", -1, "this process's index (default: $"+cluster.EnvProcessID+", else TPU_WORKER_ID or the TPU VM's metadata)")
	fs.IntVar(&f.numProcesses, "num-processes", -1, "number of processes (default: $"+cluster.EnvNumProcesses+", else the TPU worker list)")
	fs.DurationVar(&f.timeout, "cluster-timeout", 0, "bound on every cluster wait (default: $"+cluster.EnvTimeout+", else 60s)")
	addClusterAuthFlags(fs, &f.auth)
}

// options are the bootstrap options of the flags, with the credentials
// their files hold.
func (f *clusterFlags) options() (cluster.Options, error) {
	sec, err := f.auth.security()
	if err != nil {
		return cluster.Options{}, err
	}
	o := cluster.Options{Coordinator: f.coordinator, Timeout: f.timeout, Security: sec}
	if f.processID >= 0 {
		o.ProcessID = &f.processID
	}
	if f.numProcesses >= 0 {
		o.NumProcesses = &f.numProcesses
	}
	return o, nil
}

// clusterView is what `doctor --cluster` prints: this process's bootstrap
// (each value with its source) and the global view every process agreed on
// at the barrier.
type clusterView struct {
	ProcessIndex  cluster.Int       `json:"process_index"`
	ProcessCount  cluster.Int       `json:"process_count"`
	Coordinator   cluster.String    `json:"coordinator"`
	SliceID       cluster.Int       `json:"slice_id"`
	NumSlices     cluster.Int       `json:"num_slices"`
	Slice         any               `json:"slice"`
	SliceError    string            `json:"slice_error,omitempty"`
	Timeout       cluster.Duration  `json:"timeout"`
	Hosts         []cluster.Process `json:"hosts"`
	TotalDevices  int               `json:"total_devices"`
	DeviceGrid    []int             `json:"device_grid"`
	DeviceGridSrc string            `json:"device_grid_source"`
	Mesh          string            `json:"mesh"`
	JoinedMs      int64             `json:"joined_ms"`
}

// runDoctorCluster bootstraps as a worker would, joins the job, passes a
// barrier with every process and prints the global view.
func runDoctorCluster(ctx context.Context, cf clusterFlags, df discoveryFlags, asJSON bool, stdout io.Writer) error {
	start := time.Now()
	co, err := cf.options()
	if err != nil {
		return err
	}
	cfg, err := cluster.Bootstrap(ctx, co)
	if err != nil {
		return err
	}
	// The local devices, as discovery sees them: accelerators, else the CPU.
	self := cluster.Self{Devices: 1, DeviceKind: "cpu"}
	if rep, err := discover.Discover(ctx, discover.Options{Root: df.root, SkipMetadata: df.noMetadata || cfg.MultiProcess()}); err == nil {
		n, kind := 0, ""
		for _, d := range rep.Devices {
			if d.Platform != device.CPU {
				n++
				kind = joinNonEmpty("", d.Kind)
			}
		}
		if n > 0 {
			self = cluster.Self{Devices: n, DeviceKind: kind}
		}
	}
	c, err := cluster.Connect(ctx, cfg, self)
	if err != nil {
		return err
	}
	if err := c.Barrier(ctx, "tensorbridge/doctor"); err != nil {
		c.Abort()
		return err
	}
	v := clusterView{
		ProcessIndex: cfg.ProcessIndex, ProcessCount: cfg.ProcessCount, Coordinator: cfg.Coordinator,
		SliceID: cfg.SliceID, NumSlices: cfg.NumSlices, SliceError: cfg.SliceError, Timeout: cfg.Timeout,
		Hosts: c.Processes(), JoinedMs: time.Since(start).Milliseconds(),
		Mesh: "the device grid below; a named mesh (data, model axes) over it is chosen per run with --mesh (run, bench, serve), e.g. --mesh data=2,model=4",
	}
	if cfg.Slice != nil {
		v.Slice = cfg.Slice
	}
	for _, p := range v.Hosts {
		v.TotalDevices += p.Devices
	}
	if cfg.Slice != nil && len(cfg.Slice.Topology) > 0 {
		v.DeviceGrid = append([]int(nil), cfg.Slice.Topology...)
		if cfg.NumSlices.Value > 1 {
			v.DeviceGrid = append([]int{cfg.NumSlices.Value}, v.DeviceGrid...)
		}
		v.DeviceGridSrc = "catalog topology of " + cfg.Slice.Name
	} else {
		per := 0
		if len(v.Hosts) > 0 {
			per = v.Hosts[0].Devices
		}
		v.DeviceGrid = []int{cfg.ProcessCount.Value, per}
		v.DeviceGridSrc = "processes x devices of process 0"
	}
	closeErr := c.Close(ctx)
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			return err
		}
		return closeErr
	}
	printBootstrap(stdout, cfg)
	fmt.Fprintf(stdout, "hosts          %d processes passed the barrier in %d ms:\n", len(v.Hosts), v.JoinedMs)
	for _, p := range v.Hosts {
		fmt.Fprintf(stdout, "  %3d  %-30s pid %-7d %d x %s  slice %d\n", p.Index, p.Host, p.PID, p.Devices, p.DeviceKind, p.SliceID)
	}
	grid := make([]string, len(v.DeviceGrid))
	for i, d := range v.DeviceGrid {
		grid[i] = fmt.Sprint(d)
	}
	fmt.Fprintf(stdout, "devices        %d in all; grid %s (%s)\n", v.TotalDevices, strings.Join(grid, "x"), v.DeviceGridSrc)
	fmt.Fprintf(stdout, "mesh           %s\n", v.Mesh)
	return closeErr
}

// printBootstrap prints a job's bootstrap, each value with the source that
// decided it: doctor --cluster and devices print it alike.
func printBootstrap(w io.Writer, cfg *cluster.Config) {
	fmt.Fprintf(w, "process_index  %d  (%s)\n", cfg.ProcessIndex.Value, cfg.ProcessIndex.Source)
	fmt.Fprintf(w, "process_count  %d  (%s)\n", cfg.ProcessCount.Value, cfg.ProcessCount.Source)
	fmt.Fprintf(w, "coordinator    %s  (%s)\n", cfg.Coordinator.Value, orNone(cfg.Coordinator.Source))
	fmt.Fprintf(w, "slice          %d of %d  (%s; %s)\n", cfg.SliceID.Value, cfg.NumSlices.Value, cfg.SliceID.Source, cfg.NumSlices.Source)
	switch {
	case cfg.Slice != nil:
		fmt.Fprintf(w, "tpu slice      %s  (%s)\n", cfg.Slice, cfg.AcceleratorType.Source)
	case cfg.SliceError != "":
		fmt.Fprintf(w, "tpu slice      unreadable: %s\n", cfg.SliceError)
	default:
		fmt.Fprintln(w, "tpu slice      none (no TPU_ACCELERATOR_TYPE or accelerator-type)")
	}
	fmt.Fprintf(w, "timeout        %v  (%s)\n", cfg.Timeout.Value, cfg.Timeout.Source)
}

// joinOptions are the explicit values of o (f.options()) as Open takes them.
func joinOptions(o cluster.Options) tensorbridge.ClusterOptions {
	return tensorbridge.ClusterOptions{Coordinator: o.Coordinator, ProcessID: o.ProcessID, NumProcesses: o.NumProcesses, Timeout: o.Timeout}
}
