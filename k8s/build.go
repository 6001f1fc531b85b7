package k8s

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/tensorbridge/tensorbridge/catalog"
	"github.com/tensorbridge/tensorbridge/cluster"
)

// GKE's node labels and extended resources
// (https://cloud.google.com/kubernetes-engine/docs/concepts/tpus,
// https://cloud.google.com/kubernetes-engine/docs/how-to/gpus).
const (
	LabelTPUAccelerator = "cloud.google.com/gke-tpu-accelerator"
	LabelTPUTopology    = "cloud.google.com/gke-tpu-topology"
	LabelGPUAccelerator = "cloud.google.com/gke-accelerator"
	LabelNodePool       = "cloud.google.com/gke-nodepool"
	ResourceTPU         = corev1.ResourceName("google.com/tpu")
	ResourceGPU         = corev1.ResourceName("nvidia.com/gpu")
)

// Ports of the container: the coordination service (process 0) and, for
// `serve`, its REST and gRPC listeners.
const (
	PortCoordinator = cluster.DefaultPort
	PortHTTP        = 8000
	PortGRPC        = 8001
)

// ErrInvalid is matched by every error of this package's builders.
var ErrInvalid = errors.New("k8s: invalid manifest request")

// InvalidError names the option at fault.
type InvalidError struct {
	Option string
	Value  string
	Reason string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("k8s: %s %q: %s", e.Option, e.Value, e.Reason)
}

// Is matches ErrInvalid.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// Options describe the workload.
type Options struct {
	// Name names the JobSet or Deployment (a DNS-1035 label: it prefixes
	// the pods' host names).
	Name string
	// Namespace, if set, is written into the metadata.
	Namespace string
	// Image is the container image holding the tensorbridge binary as its
	// entrypoint (see the Dockerfile).
	Image string
	// Args are tensorbridge's arguments, e.g. ["doctor", "--cluster"] or
	// ["serve", "model.onnx"].
	Args []string
	// Slice is a TPU accelerator type: "v5e-16" (taken as v5litepod-16),
	// "v5litepod-16", "v4-16", "v5p-16", "v6e-16", "tpu7x-16".
	Slice string
	// Slices is the number of slices of a multislice JobSet (default 1).
	Slices int
	// Timeout is TENSORBRIDGE_CLUSTER_TIMEOUT for the pods ("" leaves the
	// default).
	Timeout string
	// GPUs per replica and the GKE GPU type label value (Deployment only),
	// e.g. 1 and "nvidia-h100-80gb".
	GPUs    int
	GPUType string
	// Replicas of a Deployment (default 1).
	Replicas int
	// TokenSecret names the Kubernetes Secret holding the job's cluster
	// token under the key "token" (JobSet only; default "<Name>-cluster-token").
	// It is mounted read-only and TENSORBRIDGE_CLUSTER_TOKEN_FILE points at
	// it; create it before applying the JobSet:
	//   kubectl create secret generic NAME-cluster-token --from-literal=token="$(openssl rand -hex 32)"
	TokenSecret string
	// MaxRestarts is the JobSet's failurePolicy.maxRestarts: how many times
	// the whole JobSet is recreated after a worker fails (0: never; the CLI's
	// default is 3).
	MaxRestarts int
	// HostNetwork puts a JobSet's pods on their nodes' network (for
	// multislice jobs whose cross-slice traffic needs it). Off by default:
	// the pods talk over the pod network, and the coordinator listens on
	// the pod's IP only.
	HostNetwork bool
	// PVC mounts a PersistentVolumeClaim read-write at PVCPath in every
	// pod of a JobSet: shared storage for a training run's --checkpoint-dir,
	// so that a pod the JobSet recreates resumes from the newest checkpoint
	// (train --resume). Empty mounts nothing.
	PVC, PVCPath string
}

// StorageVolume is the name of the PVC's volume in a JobSet's pods.
const StorageVolume = "storage"

// The cluster token's mount in a JobSet's pods.
const (
	TokenVolume    = "cluster-token"
	TokenMountPath = "/var/run/secrets/tensorbridge/cluster"
	TokenKey       = "token"
)

// GKEGPUTypes are the values of GKE's cloud.google.com/gke-accelerator node
// label for NVIDIA GPUs (https://cloud.google.com/kubernetes-engine/docs/how-to/gpus).
var GKEGPUTypes = []string{
	"nvidia-gb200", "nvidia-b200", "nvidia-h200-141gb", "nvidia-h100-mega-80gb", "nvidia-h100-80gb",
	"nvidia-a100-80gb", "nvidia-tesla-a100", "nvidia-l4", "nvidia-tesla-t4", "nvidia-tesla-v100",
	"nvidia-tesla-p100", "nvidia-tesla-p4",
}

// TPUSlice is a slice as GKE schedules it.
type TPUSlice struct {
	catalog.Slice
	// Accelerator and Topology are the node selector values.
	Accelerator, Topology string
}

// ResolveSlice reads an accelerator type and finds GKE's node labels for it
// in the catalog. "v5e-N" is accepted for "v5litepod-N".
func ResolveSlice(s string) (TPUSlice, error) {
	name := strings.ToLower(strings.TrimSpace(s))
	if rest, ok := strings.CutPrefix(name, "v5e-"); ok {
		name = "v5litepod-" + rest
	}
	sl, err := catalog.ParseAcceleratorType(name)
	if err != nil {
		return TPUSlice{}, &InvalidError{Option: "--slice", Value: s, Reason: err.Error()}
	}
	acc, ok := catalog.Lookup(sl.Generation)
	if !ok || acc.TPU == nil || len(acc.TPU.GKEAccelerators) == 0 || !acc.TPU.GKEAccelerators[0].Known() {
		return TPUSlice{}, &InvalidError{Option: "--slice", Value: s, Reason: "the catalog knows no GKE accelerator label for " + sl.Generation}
	}
	if sl.Topology == nil {
		return TPUSlice{}, &InvalidError{Option: "--slice", Value: s, Reason: "the catalog knows no topology for " + sl.Name}
	}
	return TPUSlice{Slice: sl, Accelerator: acc.TPU.GKEAccelerators[0].Value, Topology: sl.Topology.String()}, nil
}

var (
	dns1035 = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)
	dns1123 = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

func (o *Options) check() error {
	if !dns1035.MatchString(o.Name) || len(o.Name) > 40 {
		return &InvalidError{Option: "--name", Value: o.Name, Reason: "want a lower-case DNS label of at most 40 characters (letters, digits, '-'; starting with a letter): it prefixes the pods' host names"}
	}
	if strings.TrimSpace(o.Image) == "" {
		return &InvalidError{Option: "--image", Value: o.Image, Reason: "an image is required"}
	}
	if len(o.Args) == 0 {
		return &InvalidError{Option: "ARGS", Value: "", Reason: "give tensorbridge's arguments after --, e.g. -- doctor --cluster"}
	}
	return nil
}

// serving reports whether the arguments run `serve`.
func serving(args []string) bool { return len(args) > 0 && args[0] == "serve" }

// containerArgs are the arguments the container runs with: for serve,
// listeners on every interface unless the user chose theirs (serve listens
// on loopback by default, which a probe cannot reach).
func containerArgs(args []string) []string {
	out := slices.Clone(args)
	if !serving(args) {
		return out
	}
	has := func(flag string) bool {
		for _, a := range args {
			if a == flag || strings.HasPrefix(a, flag+"=") {
				return true
			}
		}
		return false
	}
	if !has("--http") {
		out = append(out, "--http", ":"+strconv.Itoa(PortHTTP))
	}
	if !has("--grpc") {
		out = append(out, "--grpc", ":"+strconv.Itoa(PortGRPC))
	}
	return out
}

// servePort is the port of serve's --http or --grpc listener as args set
// it, or def.
func servePort(args []string, flag string, def int32) int32 {
	for i, a := range args {
		v, ok := "", false
		if a == flag && i+1 < len(args) {
			v, ok = args[i+1], true
		} else if rest, found := strings.CutPrefix(a, flag+"="); found {
			v, ok = rest, true
		}
		if !ok {
			continue
		}
		if _, p, err := net.SplitHostPort(v); err == nil {
			if n, err := strconv.ParseInt(p, 10, 32); err == nil && n > 0 {
				return int32(n)
			}
		}
	}
	return def
}

// container is the tensorbridge container with its ports, probes and
// resources.
func container(o *Options, limits corev1.ResourceList, env []corev1.EnvVar, coordinator bool) corev1.Container {
	c := corev1.Container{
		Name:            "tensorbridge",
		Image:           o.Image,
		Args:            containerArgs(o.Args),
		Env:             env,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Resources:       corev1.ResourceRequirements{Limits: limits, Requests: limits},
	}
	if coordinator {
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: "coordinator", ContainerPort: PortCoordinator, Protocol: corev1.ProtocolTCP})
	}
	if serving(o.Args) {
		c.Ports = append(c.Ports,
			corev1.ContainerPort{Name: "http", ContainerPort: servePort(c.Args, "--http", PortHTTP), Protocol: corev1.ProtocolTCP},
			corev1.ContainerPort{Name: "grpc", ContainerPort: servePort(c.Args, "--grpc", PortGRPC), Protocol: corev1.ProtocolTCP})
		probe := func(path string, period, failures int32) *corev1.Probe {
			return &corev1.Probe{
				ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("http")}},
				PeriodSeconds:    period,
				FailureThreshold: failures,
			}
		}
		// A model compiles before the server is ready: the startup probe
		// allows 10 minutes, then liveness and readiness take over.
		c.StartupProbe = probe("/v2/health/live", 10, 60)
		c.LivenessProbe = probe("/v2/health/live", 10, 3)
		c.ReadinessProbe = probe("/v2/health/ready", 5, 3)
	}
	return c
}

func quantity(n int) resource.Quantity { return *resource.NewQuantity(int64(n), resource.DecimalSI) }

// JobSetFor builds the JobSet for opts: one replicated job "slice" with one
// Job per slice, parallelism = completions = hosts per slice, each pod on a
// node of the slice's GKE TPU node pool with all of its chips and a DNS
// host name, so that GKE's TPU_WORKER_HOSTNAMES resolve and worker 0 serves
// the coordinator, on its pod IP only (TENSORBRIDGE_COORDINATOR_BIND from
// status.podIP). Every pod mounts the cluster token Secret read-only and
// TENSORBRIDGE_CLUSTER_TOKEN_FILE names it. failurePolicy.maxRestarts is
// opts.MaxRestarts. Several slices get the exclusive-topology annotation
// (one slice per node pool) and the MEGASCALE_* variables. Host networking
// only with opts.HostNetwork.
func JobSetFor(o Options) (*JobSet, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	sl, err := ResolveSlice(o.Slice)
	if err != nil {
		return nil, err
	}
	if o.Slices == 0 {
		o.Slices = 1
	}
	if o.Slices < 1 {
		return nil, &InvalidError{Option: "--slices", Value: strconv.Itoa(o.Slices), Reason: "want at least 1"}
	}
	if o.MaxRestarts < 0 {
		return nil, &InvalidError{Option: "--max-restarts", Value: strconv.Itoa(o.MaxRestarts), Reason: "want 0 or more"}
	}
	secret := o.TokenSecret
	if secret == "" {
		secret = o.Name + "-cluster-token"
	}
	if !dns1123.MatchString(secret) || len(secret) > 253 {
		return nil, &InvalidError{Option: "--token-secret", Value: secret, Reason: "want a Secret name (lower-case DNS subdomain)"}
	}
	const rjob = "slice"
	env := []corev1.EnvVar{
		{Name: cluster.EnvJob, Value: o.Name},
		{Name: cluster.EnvTokenFile, Value: TokenMountPath + "/" + TokenKey},
		// Process 0 serves the coordinator on its pod's IP only.
		{Name: cluster.EnvBind, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
	}
	if o.Timeout != "" {
		env = append(env, corev1.EnvVar{Name: cluster.EnvTimeout, Value: o.Timeout})
	}
	var annotations map[string]string
	if o.Slices > 1 {
		annotations = map[string]string{ExclusiveTopologyAnnotation: LabelNodePool}
		env = append(env,
			corev1.EnvVar{Name: "MEGASCALE_NUM_SLICES", Value: strconv.Itoa(o.Slices)},
			corev1.EnvVar{Name: "MEGASCALE_SLICE_ID", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['" + JobIndexLabel + "']"}}},
			corev1.EnvVar{Name: "MEGASCALE_COORDINATOR_ADDRESS", Value: fmt.Sprintf("%s-%s-0-0.%s", o.Name, rjob, o.Name)},
		)
	}
	hosts := int32(sl.Hosts)
	c := container(&o, corev1.ResourceList{ResourceTPU: quantity(sl.ChipsPerHost)}, env, true)
	c.VolumeMounts = []corev1.VolumeMount{{Name: TokenVolume, MountPath: TokenMountPath, ReadOnly: true}}
	storage, err := pvcVolume(&o, &c)
	if err != nil {
		return nil, err
	}
	pod := corev1.PodTemplateSpec{
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			NodeSelector:                  map[string]string{LabelTPUAccelerator: sl.Accelerator, LabelTPUTopology: sl.Topology},
			TerminationGracePeriodSeconds: ptr(int64(30)),
			Containers:                    []corev1.Container{c},
			Volumes: []corev1.Volume{{Name: TokenVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: secret, DefaultMode: ptr(int32(0o400)), Items: []corev1.KeyToPath{{Key: TokenKey, Path: TokenKey}},
			}}}},
		},
	}
	if storage != nil {
		pod.Spec.Volumes = append(pod.Spec.Volumes, *storage)
	}
	if o.HostNetwork {
		pod.Spec.HostNetwork = true
		pod.Spec.DNSPolicy = corev1.DNSClusterFirstWithHostNet
	}
	js := &JobSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: JobSetAPIVersion, Kind: JobSetKind},
		ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace, Annotations: annotations},
		Spec: JobSetSpec{
			ReplicatedJobs: []ReplicatedJob{{
				Name:     rjob,
				Replicas: int32(o.Slices),
				Template: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
					Parallelism:    ptr(hosts),
					Completions:    ptr(hosts),
					CompletionMode: ptr(batchv1.IndexedCompletion),
					BackoffLimit:   ptr(int32(0)),
					Template:       pod,
				}},
			}},
			Network:       &Network{EnableDNSHostnames: ptr(true), PublishNotReadyAddresses: ptr(true)},
			SuccessPolicy: &SuccessPolicy{Operator: OperatorAll, TargetReplicatedJobs: []string{rjob}},
			// A failed worker fails its Job (backoffLimit 0), and the JobSet
			// is recreated whole, at most MaxRestarts times: a job of many
			// processes cannot go on without one of them.
			FailurePolicy: &FailurePolicy{MaxRestarts: int32(o.MaxRestarts)},
		},
	}
	return js, nil
}

// DeploymentFor builds a Deployment of stateless serving replicas: each on
// a single-host TPU slice (opts.Slice) or with opts.GPUs NVIDIA GPUs.
// Multi-host slices need a JobSet.
func DeploymentFor(o Options) (*appsv1.Deployment, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.Replicas < 1 {
		return nil, &InvalidError{Option: "--replicas", Value: strconv.Itoa(o.Replicas), Reason: "want at least 1"}
	}
	// Serving replicas stay on the pod network (HostNetwork false): their
	// listeners are reached through a Service, never on the node's address.
	spec := corev1.PodSpec{RestartPolicy: corev1.RestartPolicyAlways, TerminationGracePeriodSeconds: ptr(int64(30))}
	var limits corev1.ResourceList
	switch {
	case o.GPUs < 0:
		return nil, &InvalidError{Option: "--gpus", Value: strconv.Itoa(o.GPUs), Reason: "want 0 or more"}
	case o.GPUType != "" && o.GPUs == 0:
		return nil, &InvalidError{Option: "--gpu-type", Value: o.GPUType, Reason: "give --gpus N with it"}
	case o.Slice != "" && o.GPUs > 0:
		return nil, &InvalidError{Option: "--gpus", Value: strconv.Itoa(o.GPUs), Reason: "give either --slice or --gpus"}
	case o.Slice != "":
		sl, err := ResolveSlice(o.Slice)
		if err != nil {
			return nil, err
		}
		if sl.MultiHost() {
			return nil, &InvalidError{Option: "--slice", Value: o.Slice, Reason: fmt.Sprintf("spans %d hosts; a Deployment replica is one pod: use `tensorbridge k8s jobset`", sl.Hosts)}
		}
		spec.NodeSelector = map[string]string{LabelTPUAccelerator: sl.Accelerator, LabelTPUTopology: sl.Topology}
		limits = corev1.ResourceList{ResourceTPU: quantity(sl.ChipsPerHost)}
	case o.GPUs > 0:
		limits = corev1.ResourceList{ResourceGPU: quantity(o.GPUs)}
		if o.GPUType != "" && !slices.Contains(GKEGPUTypes, o.GPUType) {
			return nil, &InvalidError{Option: "--gpu-type", Value: o.GPUType, Reason: "not a GKE GPU type; known: " + strings.Join(GKEGPUTypes, ", ")}
		}
		if o.GPUType != "" {
			spec.NodeSelector = map[string]string{LabelGPUAccelerator: o.GPUType}
		}
	default:
		return nil, &InvalidError{Option: "--slice", Value: "", Reason: "give a single-host TPU slice (--slice v5e-4) or GPUs (--gpus 1)"}
	}
	labels := map[string]string{"app.kubernetes.io/name": "tensorbridge", "app.kubernetes.io/instance": o.Name}
	spec.Containers = []corev1.Container{container(&o, limits, nil, false)}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(o.Replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}, nil
}

// YAML serialises a manifest object as kubectl would read it.
func YAML(obj any) ([]byte, error) {
	b, err := yaml.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("k8s: %w", err)
	}
	return b, nil
}

func ptr[T any](v T) *T { return &v }

// pvcVolume is the JobSet pods' PersistentVolumeClaim volume (Options.PVC),
// mounted into c; nil when none is asked for.
func pvcVolume(o *Options, c *corev1.Container) (*corev1.Volume, error) {
	if o.PVC == "" && o.PVCPath == "" {
		return nil, nil
	}
	if !dns1123.MatchString(o.PVC) || len(o.PVC) > 253 {
		return nil, &InvalidError{Option: "--pvc", Value: o.PVC, Reason: "want CLAIM:/path with CLAIM a PersistentVolumeClaim name (lower-case DNS subdomain)"}
	}
	if !strings.HasPrefix(o.PVCPath, "/") || strings.Contains(o.PVCPath, ":") {
		return nil, &InvalidError{Option: "--pvc", Value: o.PVCPath, Reason: "want an absolute mount path"}
	}
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: StorageVolume, MountPath: o.PVCPath})
	return &corev1.Volume{Name: StorageVolume, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: o.PVC}}}, nil
}
