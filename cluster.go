package tensorbridge

import (
	"github.com/tensorbridge/tensorbridge/cluster"
	"github.com/tensorbridge/tensorbridge/driver"
)

// Multi-process jobs.
//
// A TPU slice of several hosts, or GPUs on several machines, runs one
// process per host; each opens the backend over its own (addressable)
// devices and the processes agree through a coordination service that
// process 0 runs (package cluster). The pjrt backends join the job their
// environment names (GKE's TPU variables, TENSORBRIDGE_COORDINATOR and
// friends, multislice) when it has more than one process, or the one
// WithCluster describes; a single process joins nothing.

// ClusterOptions are the explicit values of a multi-process job (what the
// --coordinator, --process-id and --num-processes flags give); unset values
// come from the environment.
type ClusterOptions = driver.Cluster

// ClusterSecurity is how this process proves to the job's coordination
// service that it belongs to the job: the shared token and, optionally,
// mutual TLS (see cluster.Security, cluster.LoadSecurity).
type ClusterSecurity = cluster.Security

// WithClusterSecurity authenticates the backend to its job's coordination
// service, whether the job comes from WithCluster or from the environment.
// The caller reads the secret: the CLI takes --cluster-token-file, or the
// file $TENSORBRIDGE_CLUSTER_TOKEN_FILE names (cluster.EnvTokenFile); the
// library never reads that variable itself.
func WithClusterSecurity(s *ClusterSecurity) Option {
	return func(o *openOptions) { o.driver.ClusterSecurity = s }
}

// ProcessInfo is a backend's place in its job; see Backend.Process.
type ProcessInfo = driver.ProcessInfo

// WithCluster makes Open join the multi-process job c describes, bootstrap
// from the environment and, on a Cloud TPU VM, its metadata filling what c
// leaves unset. A job of one process joins nothing. Backends without a
// multi-process mode (the pure-Go cpu backend) ignore it.
func WithCluster(c ClusterOptions) Option {
	return func(o *openOptions) { o.driver.Cluster = &c }
}

// Process reports the backend's place in its multi-process job: index,
// count and coordinator, each with the source that decided it, and the
// devices this process addresses against those of the whole job. A backend
// outside any job (or one that has no multi-process mode) is process 0 of 1
// over its own devices.
func (b *Backend) Process() ProcessInfo {
	if pr, ok := b.drv.(driver.ProcessReporter); ok {
		return pr.Process()
	}
	n := len(b.devices)
	return ProcessInfo{IndexSource: "default", Count: 1, CountSource: "default",
		AddressableDevices: n, RuntimeDevices: n, JobDevices: n, ProcessDevices: []int{n}}
}
