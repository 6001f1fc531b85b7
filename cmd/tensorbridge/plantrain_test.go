package main

import (
	"encoding/json"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/internal/capi"
	"github.com/tensorbridge/tensorbridge/modelgen"
)

// planChild runs the calling test again in a child process with libtpu's
// environment set from the start (libtpu never shares a process with the
// XLA CPU plugin other tests load); it returns true in the child.
func planChild(t *testing.T) bool {
	t.Helper()
	const env = "TB_PLAN_CLI_CHILD"
	if os.Getenv(env) == t.Name() {
		return true
	}
	if _, err := capi.FindPlugin("tpu"); err != nil {
		testreq.Skipf(t, "libtpu not installed (tensorbridge plugins install tpu): %v", err) // scripts/setup.sh installs it for CI
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"="+t.Name(), "TPU_SKIP_MDS_QUERY=1")
	out, err := cmd.CombinedOutput()
	var keep []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "plantrain_test.go") || strings.HasPrefix(strings.TrimSpace(l), "---") {
			keep = append(keep, l)
		}
	}
	t.Logf("child:\n%s", strings.Join(keep, "\n"))
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("child failed: %v", err)
	}
	return false
}

// plan --train --json: the fields of the contract, exit 0 whether or not
// the step fits, non-zero only when it cannot be planned.
func TestPlanTrainCLI(t *testing.T) {
	if !planChild(t) {
		return
	}
	type perDevice struct {
		Weights   *int64 `json:"weights_bytes"`
		Gradients *int64 `json:"gradient_bytes"`
		Optimizer *int64 `json:"optimizer_bytes"`
		Temp      *int64 `json:"temp_bytes"`
		Peak      *int64 `json:"peak_bytes"`
		HBM       *int64 `json:"hbm_bytes"`
	}
	type report struct {
		PerDevice     *perDevice `json:"per_device"`
		Fits          *bool      `json:"fits"`
		StepSeconds   *float64   `json:"step_seconds"`
		DataParallel  *int       `json:"data_parallel"`
		ModelParallel *int       `json:"model_parallel"`
		Strategy      *string    `json:"strategy"`
	}
	tiny := modelgen.Presets["tiny"]
	// The generated decoders hold four float32 scalar initializers (eps,
	// scale, neg and zero: modelgen) besides Params(): floating-point
	// initializers, so trained by the Trainer's rule, and replicated (no
	// dimension to split): 16 bytes on every device.
	const scalars = 4 * 4
	cases := []struct {
		name     string
		args     []string
		fits     bool
		strategy string
		dp, mp   int
		weights  int64 // float32 bytes per device, from the preset's sizes
	}{
		{"fsdp fits", []string{"--generate", "tiny", "--slice", "v5e-4", "--train", "--batch", "4", "--dim", "sequence=16", "--strategy", "fsdp", "--json"},
			true, "fsdp", 4, 1, tiny.Params()*4/4 + scalars},
		{"dp fits", []string{"--generate", "tiny", "--slice", "v5e-4", "--train", "--batch", "4", "--dim", "sequence=16", "--strategy", "dp", "--optimizer", "sgd", "--labels-dtype", "int32", "--json"},
			true, "dp", 4, 1, tiny.Params()*4 + scalars},
		// 7B with AdamW on v5e-4: auto rules every strategy out by
		// arithmetic (no compile), and the command still exits 0.
		{"7b does not fit", []string{"--generate", "llama-7b", "--slice", "v5e-4", "--train", "--batch", "4", "--json"},
			false, "fsdp", 4, 1, modelgen.Presets["llama-7b"].Params()*4/4 + scalars},
	}
	for _, tc := range cases {
		code, out, errOut := run(t, append([]string{"plan"}, tc.args...)...)
		if code != 0 {
			t.Errorf("%s: exit %d: %s", tc.name, code, errOut)
			continue
		}
		var r report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Errorf("%s: %v in %s", tc.name, err, out)
			continue
		}
		t.Logf("%s: %s", tc.name, out)
		if r.PerDevice == nil || r.Fits == nil || r.StepSeconds == nil || r.DataParallel == nil || r.ModelParallel == nil || r.Strategy == nil {
			t.Errorf("%s: a top-level field is missing: %s", tc.name, out)
			continue
		}
		d := r.PerDevice
		if d.Weights == nil || d.Gradients == nil || d.Optimizer == nil || d.Temp == nil || d.Peak == nil || d.HBM == nil {
			t.Errorf("%s: a per_device field is missing: %s", tc.name, out)
			continue
		}
		if *r.Fits != tc.fits || *r.Strategy != tc.strategy || *r.DataParallel != tc.dp || *r.ModelParallel != tc.mp || *d.Weights != tc.weights || *d.Gradients != tc.weights {
			t.Errorf("%s: fits %v strategy %s dp %d mp %d weights %d gradients %d; want %v %s %d %d %d", tc.name, *r.Fits, *r.Strategy,
				*r.DataParallel, *r.ModelParallel, *d.Weights, *d.Gradients, tc.fits, tc.strategy, tc.dp, tc.mp, tc.weights)
		}
		if tc.fits && (*d.Peak <= 0 || *d.Peak > *d.HBM || *d.Temp <= 0 || *r.StepSeconds <= 0) {
			t.Errorf("%s: peak %d, HBM %d, temp %d, step %g s", tc.name, *d.Peak, *d.HBM, *d.Temp, *r.StepSeconds)
		}
	}
	fails := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no batch", []string{"--generate", "tiny", "--slice", "v5e-4", "--train"}, 2, "--batch"},
		{"bad optimizer", []string{"--generate", "tiny", "--slice", "v5e-4", "--train", "--batch", "4", "--optimizer", "lamb"}, 2, `"lamb"`},
		{"no logits", []string{"../../testdata/models/mlp.onnx", "--slice", "v5e-4", "--train", "--batch", "4"}, 2, "--loss"},
		{"train flags without --train", []string{"--generate", "tiny", "--slice", "v5e-4", "--batch", "4"}, 2, "only apply with --train"},
		{"inference strategy", []string{"--generate", "tiny", "--slice", "v5e-4", "--train", "--batch", "4", "--strategy", "tp=2"}, 1, "dp, tp, fsdp or auto"},
		{"bad labels dtype", []string{"--generate", "tiny", "--slice", "v5e-4", "--train", "--batch", "4", "--labels-dtype", "float32"}, 2, "--labels-dtype"},
		{"encoder", []string{"--generate", "bert-base", "--slice", "v5e-4", "--train", "--batch", "4"}, 2, "encoder"},
	}
	for _, tc := range fails {
		code, _, errOut := run(t, append([]string{"plan"}, tc.args...)...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d (%q), want exit %d naming %q", tc.name, code, errOut, tc.code, tc.want)
		}
	}
}
