package k8s

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/tensorbridge/tensorbridge/cluster"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// goldenCases are the manifests kept as golden files: the exact YAML the
// CLI prints for them.
var goldenCases = []struct {
	file  string
	build func() (any, error)
}{
	{"jobset-v5e-16-doctor.yaml", func() (any, error) {
		return JobSetFor(Options{Name: "tb-doctor", Image: "ghcr.io/example/tensorbridge:v0", Slice: "v5e-16", MaxRestarts: 3, Args: []string{"doctor", "--cluster", "--json"}})
	}},
	{"jobset-v5e-16-x2-serve.yaml", func() (any, error) {
		return JobSetFor(Options{Name: "llm", Namespace: "ml", Image: "ghcr.io/example/tensorbridge:v0", Slice: "v5e-16", Slices: 2, Timeout: "120s", MaxRestarts: 3,
			Args: []string{"serve", "/models/llama.onnx"}})
	}},
	{"jobset-v5p-16.yaml", func() (any, error) {
		return JobSetFor(Options{Name: "train", Image: "img:1", Slice: "v5p-16", MaxRestarts: 5, HostNetwork: true, TokenSecret: "train-token", Args: []string{"doctor", "--cluster"}})
	}},
	{"deployment-v5e-4-serve.yaml", func() (any, error) {
		return DeploymentFor(Options{Name: "bert", Image: "img:1", Slice: "v5e-4", Replicas: 3, Args: []string{"serve", "/models/bert.onnx"}})
	}},
	{"deployment-gpu-serve.yaml", func() (any, error) {
		return DeploymentFor(Options{Name: "bert-gpu", Image: "img:1", GPUs: 1, GPUType: "nvidia-h100-80gb", Replicas: 2, Args: []string{"serve", "/models/bert.onnx", "--http", "0.0.0.0:9000"}})
	}},
}

func TestGolden(t *testing.T) {
	for _, c := range goldenCases {
		t.Run(c.file, func(t *testing.T) {
			obj, err := c.build()
			if err != nil {
				t.Fatal(err)
			}
			got, err := YAML(obj)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", c.file)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./k8s -update to write it)", err)
			}
			if string(got) != string(want) {
				t.Errorf("%s differs from the golden file:\n%s", c.file, got)
			}
		})
	}
}

// crd is testdata/jobset-crd-v1alpha2-spec.yaml.
func crd(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile("testdata/jobset-crd-v1alpha2-spec.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// validate checks v against an OpenAPI v3 schema node of the CRD: type,
// required properties, enums, minimums, and that no property is unknown.
func validate(path string, schema map[string]any, v any) []string {
	var errs []string
	if _, elided := schema["x-tensorbridge-elided"]; elided {
		return nil
	}
	typ, _ := schema["type"].(string)
	switch typ {
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want an object, got %T", path, v)}
		}
		props, _ := schema["properties"].(map[string]any)
		req, _ := schema["required"].([]any)
		for _, r := range req {
			if _, ok := obj[r.(string)]; !ok {
				errs = append(errs, fmt.Sprintf("%s: required field %q missing", path, r))
			}
		}
		for k, sub := range obj {
			ps, ok := props[k].(map[string]any)
			if !ok {
				if props != nil {
					errs = append(errs, fmt.Sprintf("%s: field %q is not in the CRD", path, k))
				}
				continue
			}
			errs = append(errs, validate(path+"."+k, ps, sub)...)
		}
	case "array":
		arr, ok := v.([]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want an array, got %T", path, v)}
		}
		items, _ := schema["items"].(map[string]any)
		for i, it := range arr {
			errs = append(errs, validate(fmt.Sprintf("%s[%d]", path, i), items, it)...)
		}
	case "string":
		s, ok := v.(string)
		if !ok {
			return []string{fmt.Sprintf("%s: want a string, got %T", path, v)}
		}
		if enum, ok := schema["enum"].([]any); ok {
			found := false
			for _, e := range enum {
				found = found || e == s
			}
			if !found {
				errs = append(errs, fmt.Sprintf("%s: %q is not one of %v", path, s, enum))
			}
		}
	case "integer":
		n, ok := v.(float64)
		if !ok || n != float64(int64(n)) {
			return []string{fmt.Sprintf("%s: want an integer, got %v", path, v)}
		}
		if m, ok := schema["minimum"].(float64); ok && n < m {
			errs = append(errs, fmt.Sprintf("%s: %v below the minimum %v", path, n, m))
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			errs = append(errs, fmt.Sprintf("%s: want a boolean, got %T", path, v))
		}
	}
	return errs
}

func asMap(t *testing.T, obj any) map[string]any {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestJobSetsValidateAgainstCRD(t *testing.T) {
	c := crd(t)
	if c["group"] != "jobset.x-k8s.io" || c["kind"] != "JobSet" || c["version"] != "v1alpha2" || c["served"] != true {
		t.Fatalf("fixture: %v %v %v %v", c["group"], c["kind"], c["version"], c["served"])
	}
	spec := c["spec"].(map[string]any)
	for _, slices := range []int{1, 2, 4} {
		for _, slice := range []string{"v5e-16", "v5e-4", "v4-16", "v5p-16", "v6e-16", "tpu7x-16", "v5litepod-256"} {
			js, err := JobSetFor(Options{Name: "job", Image: "img", Slice: slice, Slices: slices, Args: []string{"serve", "m.onnx"}})
			if err != nil {
				t.Fatalf("%s x%d: %v", slice, slices, err)
			}
			m := asMap(t, js)
			if m["apiVersion"] != c["group"].(string)+"/"+c["version"].(string) || m["kind"] != c["kind"] {
				t.Errorf("apiVersion %v kind %v", m["apiVersion"], m["kind"])
			}
			for _, e := range validate("spec", spec, m["spec"]) {
				t.Errorf("%s x%d: %s", slice, slices, e)
			}
		}
	}
}

// The CRD's defaults that the emitted JobSets rely on by leaving fields
// out, and the enums they use.
func TestCRDDefaultsAndEnums(t *testing.T) {
	spec := crd(t)["spec"].(map[string]any)
	get := func(path ...string) map[string]any {
		n := spec
		for _, p := range path {
			next, ok := n[p].(map[string]any)
			if !ok {
				t.Fatalf("CRD fixture has no %s", strings.Join(path, "."))
			}
			n = next
		}
		return n
	}
	rj := get("properties", "replicatedJobs", "items", "properties")
	if d := rj["replicas"].(map[string]any)["default"]; d != float64(1) {
		t.Errorf("replicas default %v", d)
	}
	if d := get("properties", "failurePolicy", "properties", "restartStrategy")["default"]; d != "Recreate" {
		t.Errorf("restartStrategy default %v", d)
	}
	req := get("properties", "replicatedJobs", "items")["required"].([]any)
	var names []string
	for _, r := range req {
		names = append(names, r.(string))
	}
	sort.Strings(names)
	if !reflect.DeepEqual(names, []string{"name", "template"}) {
		t.Errorf("replicatedJobs required %v", names)
	}
	ops := get("properties", "successPolicy", "properties", "operator")["enum"].([]any)
	if !reflect.DeepEqual(ops, []any{OperatorAll, OperatorAny}) {
		t.Errorf("successPolicy.operator enum %v", ops)
	}
	// The webhook defaults enableDNSHostnames to true in v1alpha2, but the
	// CRD has no default: the JobSets say it explicitly.
	if _, ok := get("properties", "network", "properties", "enableDNSHostnames")["default"]; ok {
		t.Log("the CRD now defaults enableDNSHostnames")
	}
}

// GKE's node labels and chips per host by generation, as the GKE TPU
// documentation and xpk give them
// (https://cloud.google.com/kubernetes-engine/docs/concepts/tpus,
// https://github.com/AI-Hypercomputer/xpk/blob/main/src/xpk/core/system_characteristics.py).
func TestJobSetSliceFacts(t *testing.T) {
	cases := []struct {
		slice, accel, topo string
		hosts, chips       int
	}{
		{"v5e-16", "tpu-v5-lite-podslice", "4x4", 4, 4},
		{"v5litepod-16", "tpu-v5-lite-podslice", "4x4", 4, 4},
		{"v5e-64", "tpu-v5-lite-podslice", "8x8", 16, 4},
		{"v4-16", "tpu-v4-podslice", "2x2x2", 2, 4},
		{"v5p-16", "tpu-v5p-slice", "2x2x2", 2, 4},
		{"v6e-16", "tpu-v6e-slice", "4x4", 4, 4},
		{"tpu7x-16", "tpu7x", "2x2x2", 2, 4},
	}
	for _, c := range cases {
		js, err := JobSetFor(Options{Name: "j", Image: "i", Slice: c.slice, Args: []string{"doctor"}})
		if err != nil {
			t.Fatalf("%s: %v", c.slice, err)
		}
		job := js.Spec.ReplicatedJobs[0].Template.Spec
		pod := job.Template.Spec
		if *job.Parallelism != int32(c.hosts) || *job.Completions != int32(c.hosts) {
			t.Errorf("%s: parallelism %d completions %d, want %d hosts", c.slice, *job.Parallelism, *job.Completions, c.hosts)
		}
		if pod.NodeSelector[LabelTPUAccelerator] != c.accel || pod.NodeSelector[LabelTPUTopology] != c.topo {
			t.Errorf("%s: node selector %v", c.slice, pod.NodeSelector)
		}
		q := pod.Containers[0].Resources.Limits[ResourceTPU]
		if q.Value() != int64(c.chips) {
			t.Errorf("%s: google.com/tpu %v, want %d", c.slice, q.String(), c.chips)
		}
		if pod.HostNetwork || *js.Spec.Network.EnableDNSHostnames != true {
			t.Errorf("%s: on the host network, or DNS host names not set", c.slice)
		}
		if len(js.Annotations) != 0 {
			t.Errorf("%s: one slice has annotations %v", c.slice, js.Annotations)
		}
	}
	js, err := JobSetFor(Options{Name: "j", Image: "i", Slice: "v5e-16", Slices: 3, Args: []string{"doctor"}})
	if err != nil {
		t.Fatal(err)
	}
	if js.Annotations[ExclusiveTopologyAnnotation] != LabelNodePool || js.Spec.ReplicatedJobs[0].Replicas != 3 {
		t.Errorf("3 slices: annotations %v replicas %d", js.Annotations, js.Spec.ReplicatedJobs[0].Replicas)
	}
}

func TestBadRequests(t *testing.T) {
	ok := Options{Name: "j", Image: "i", Slice: "v5e-16", Args: []string{"doctor"}}
	cases := []struct {
		name   string
		mod    func(*Options)
		deploy bool
		option string
	}{
		{"bad name", func(o *Options) { o.Name = "Bad_Name" }, false, "--name"},
		{"no image", func(o *Options) { o.Image = "" }, false, "--image"},
		{"no args", func(o *Options) { o.Args = nil }, false, "ARGS"},
		{"unknown slice", func(o *Options) { o.Slice = "v9-8" }, false, "--slice"},
		{"bad size", func(o *Options) { o.Slice = "v5e-3" }, false, "--slice"},
		{"negative slices", func(o *Options) { o.Slices = -1 }, false, "--slices"},
		{"negative max restarts", func(o *Options) { o.MaxRestarts = -1 }, false, "--max-restarts"},
		{"bad token secret name", func(o *Options) { o.TokenSecret = "Not_A_Secret" }, false, "--token-secret"},
		{"unknown GPU type", func(o *Options) { o.Slice = ""; o.GPUs = 1; o.GPUType = "nvidia-bogus" }, true, "--gpu-type"},
		{"GPU type without GPUs", func(o *Options) { o.Slice = ""; o.GPUType = "nvidia-l4" }, true, "--gpu-type"},
		{"negative GPUs", func(o *Options) { o.Slice = ""; o.GPUs = -1 }, true, "--gpus"},
		{"multi-host deployment", func(o *Options) {}, true, "--slice"},
		{"slice and gpus", func(o *Options) { o.Slice = "v5e-4"; o.GPUs = 1 }, true, "--gpus"},
		{"nothing to run on", func(o *Options) { o.Slice = "" }, true, "--slice"},
	}
	for _, c := range cases {
		o := ok
		c.mod(&o)
		var err error
		if c.deploy {
			_, err = DeploymentFor(o)
		} else {
			_, err = JobSetFor(o)
		}
		var ie *InvalidError
		if !errors.Is(err, ErrInvalid) || !errors.As(err, &ie) || ie.Option != c.option {
			t.Errorf("%s: %v, want an InvalidError on %s", c.name, err, c.option)
		}
	}
}

// The validator itself finds what it is meant to find.
func TestValidatorCatches(t *testing.T) {
	spec := crd(t)["spec"].(map[string]any)
	js, err := JobSetFor(Options{Name: "j", Image: "i", Slice: "v5e-16", Args: []string{"doctor"}})
	if err != nil {
		t.Fatal(err)
	}
	m := asMap(t, js)["spec"].(map[string]any)
	m["successPolicy"].(map[string]any)["operator"] = "Every"
	m["surprise"] = true
	rj := m["replicatedJobs"].([]any)[0].(map[string]any)
	delete(rj, "name")
	rj["replicas"] = float64(-1)
	errs := validate("spec", spec, m)
	want := []string{`"Every" is not one of`, `field "surprise" is not in the CRD`, `required field "name" missing`, `below the minimum`}
	for _, w := range want {
		found := false
		for _, e := range errs {
			found = found || strings.Contains(e, w)
		}
		if !found {
			t.Errorf("validator missed %q: %v", w, errs)
		}
	}
}

// TestJobSetSecurity: every JobSet mounts the cluster token Secret
// read-only where TENSORBRIDGE_CLUSTER_TOKEN_FILE points, binds the
// coordinator to the pod IP (downward API), restarts at most MaxRestarts
// times, and stays off the host network unless asked; a Deployment is never
// on the host network.
func TestJobSetSecurity(t *testing.T) {
	for _, c := range []struct {
		o          Options
		secret     string
		hostNet    bool
		maxRestart int32
	}{
		{Options{Name: "llm", Image: "i", Slice: "v5e-16", Args: []string{"serve", "m.onnx"}}, "llm-cluster-token", false, 0},
		{Options{Name: "llm", Image: "i", Slice: "v5e-16", Slices: 2, TokenSecret: "shared", MaxRestarts: 4, HostNetwork: true, Args: []string{"doctor"}}, "shared", true, 4},
	} {
		js, err := JobSetFor(c.o)
		if err != nil {
			t.Fatal(err)
		}
		pod := js.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec
		ctr := pod.Containers[0]
		env := map[string]corev1.EnvVar{}
		for _, e := range ctr.Env {
			env[e.Name] = e
		}
		if len(pod.Volumes) != 1 || pod.Volumes[0].Secret == nil || pod.Volumes[0].Secret.SecretName != c.secret || *pod.Volumes[0].Secret.DefaultMode != 0o400 {
			t.Errorf("%+v: volumes %+v, want Secret %s mode 0400", c.o, pod.Volumes, c.secret)
		}
		if len(ctr.VolumeMounts) != 1 || !ctr.VolumeMounts[0].ReadOnly || ctr.VolumeMounts[0].Name != pod.Volumes[0].Name {
			t.Errorf("%+v: mounts %+v, want the token volume read-only", c.o, ctr.VolumeMounts)
		}
		if got := env[cluster.EnvTokenFile].Value; got != ctr.VolumeMounts[0].MountPath+"/"+pod.Volumes[0].Secret.Items[0].Path {
			t.Errorf("%+v: %s=%q does not name the mounted token", c.o, cluster.EnvTokenFile, got)
		}
		if f := env[cluster.EnvBind].ValueFrom; f == nil || f.FieldRef == nil || f.FieldRef.FieldPath != "status.podIP" {
			t.Errorf("%+v: %s not from status.podIP: %+v", c.o, cluster.EnvBind, env[cluster.EnvBind])
		}
		if js.Spec.FailurePolicy == nil || js.Spec.FailurePolicy.MaxRestarts != c.maxRestart {
			t.Errorf("%+v: failure policy %+v, want maxRestarts %d", c.o, js.Spec.FailurePolicy, c.maxRestart)
		}
		if pod.HostNetwork != c.hostNet || (c.hostNet && pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet) {
			t.Errorf("%+v: hostNetwork %v dnsPolicy %q", c.o, pod.HostNetwork, pod.DNSPolicy)
		}
	}
	for _, o := range []Options{
		{Name: "b", Image: "i", Slice: "v5e-4", Args: []string{"serve", "m"}},
		{Name: "b", Image: "i", GPUs: 1, GPUType: "nvidia-l4", Args: []string{"serve", "m"}},
	} {
		d, err := DeploymentFor(o)
		if err != nil {
			t.Fatal(err)
		}
		if d.Spec.Template.Spec.HostNetwork {
			t.Errorf("%+v: serving Deployment on the host network", o)
		}
	}
}

// A training JobSet with --pvc mounts the claim read-write at the path in
// every pod, so that a pod the JobSet recreates (failurePolicy.maxRestarts)
// finds the run's checkpoints and `train --resume` continues from the
// newest; a bad claim or a relative path is refused naming --pvc.
func TestJobSetPVC(t *testing.T) {
	o := Options{Name: "ft", Image: "i", Slice: "v5e-16", MaxRestarts: 3, PVC: "ckpt", PVCPath: "/ckpt",
		Args: []string{"train", "m.onnx", "--checkpoint-dir", "/ckpt/run", "--resume"}}
	js, err := JobSetFor(o)
	if err != nil {
		t.Fatal(err)
	}
	pod := js.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec
	var claim string
	for _, v := range pod.Volumes {
		if v.Name == StorageVolume && v.PersistentVolumeClaim != nil {
			claim = v.PersistentVolumeClaim.ClaimName
		}
	}
	var mounted bool
	for _, m := range pod.Containers[0].VolumeMounts {
		mounted = mounted || (m.Name == StorageVolume && m.MountPath == "/ckpt" && !m.ReadOnly)
	}
	if claim != "ckpt" || !mounted {
		t.Errorf("claim %q mounted %v: want the PVC ckpt mounted read-write at /ckpt", claim, mounted)
	}
	if js.Spec.FailurePolicy == nil || js.Spec.FailurePolicy.MaxRestarts != 3 {
		t.Errorf("failurePolicy %+v: want maxRestarts 3", js.Spec.FailurePolicy)
	}
	for _, bad := range []Options{{PVC: "Ckpt", PVCPath: "/ckpt"}, {PVC: "ckpt", PVCPath: "ckpt"}, {PVC: "", PVCPath: "/ckpt"}} {
		b := o
		b.PVC, b.PVCPath = bad.PVC, bad.PVCPath
		var ie *InvalidError
		if _, err := JobSetFor(b); !errors.As(err, &ie) || ie.Option != "--pvc" {
			t.Errorf("%+v: err %v, want an InvalidError naming --pvc", bad, err)
		}
	}
}
