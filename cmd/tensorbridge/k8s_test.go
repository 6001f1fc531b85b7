package main

import (
	"os"
	"strings"
	"testing"
)

// The CLI prints exactly the golden manifests of package k8s.
func TestK8sCLIMatchesGolden(t *testing.T) {
	cases := []struct {
		golden string
		args   []string
	}{
		{"jobset-v5e-16-doctor.yaml", []string{"k8s", "jobset", "--slice", "v5e-16", "--image", "ghcr.io/example/tensorbridge:v0", "--name", "tb-doctor", "--", "doctor", "--cluster", "--json"}},
		{"jobset-v5e-16-x2-serve.yaml", []string{"k8s", "jobset", "--slice", "v5e-16", "--slices", "2", "--image", "ghcr.io/example/tensorbridge:v0", "--name", "llm", "--namespace", "ml", "--cluster-timeout", "120s", "--", "serve", "/models/llama.onnx"}},
		{"deployment-v5e-4-serve.yaml", []string{"k8s", "deployment", "--slice", "v5e-4", "--replicas", "3", "--image", "img:1", "--name", "bert", "--", "serve", "/models/bert.onnx"}},
	}
	for _, c := range cases {
		code, out, errOut := run(t, c.args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, code, errOut)
		}
		want, err := os.ReadFile("../../k8s/testdata/" + c.golden)
		if err != nil {
			t.Fatal(err)
		}
		if out != string(want) {
			t.Errorf("%s: CLI output differs:\n%s", c.golden, out)
		}
	}
	code, _, errOut := run(t, "k8s", "deployment", "--slice", "v5e-16", "--image", "i", "--name", "x", "--", "serve", "m")
	if code != 2 || !strings.Contains(errOut, "spans 4 hosts") {
		t.Errorf("multi-host deployment: exit %d, %s", code, errOut)
	}
}

// Bad k8s requests exit 2 with a message naming the option, once prefixed
// (issue 19: --slices 0 was taken as 1, --gpu-type nvidia-bogus exited 0,
// errors read "tensorbridge k8s: k8s:").
func TestK8sCLIRefuses(t *testing.T) {
	js := []string{"k8s", "jobset", "--slice", "v5e-16", "--image", "i", "--name", "x"}
	dep := []string{"k8s", "deployment", "--image", "i", "--name", "x"}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"zero slices", append(js, "--slices", "0", "--", "doctor"), "--slices 0"},
		{"negative slices", append(js, "--slices", "-3", "--", "doctor"), "--slices -3"},
		{"negative max restarts", append(js, "--max-restarts", "-1", "--", "doctor"), "--max-restarts"},
		{"zero replicas", append(dep, "--gpus", "1", "--replicas", "0", "--", "serve", "m"), "--replicas 0"},
		{"unknown GPU type", append(dep, "--gpus", "1", "--gpu-type", "nvidia-bogus", "--", "serve", "m"), "nvidia-h100-80gb"},
		{"unknown slice", append(dep, "--slice", "v9-8", "--", "serve", "m"), "--slice"},
	}
	for _, c := range cases {
		code, out, errOut := run(t, c.args...)
		if code != 2 || out != "" || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "k8s: k8s:") {
			t.Errorf("%s: exit %d, stdout %d bytes, stderr %q; want exit 2 naming %q once prefixed", c.name, code, len(out), errOut, c.want)
		}
	}
}
