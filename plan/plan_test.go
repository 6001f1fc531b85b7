package plan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tensorbridge/tensorbridge/internal/capi"
	"github.com/tensorbridge/tensorbridge/modelgen"
	"github.com/tensorbridge/tensorbridge/onnx"
)

// libtpu runs in a child process (the test binary re-executed with
// TB_PLAN_CHILD naming the test) so that it never shares a process with
// the XLA CPU plugin, and with the environment Env asks for from the start,
// as the CLI gives it.
const childEnv = "TB_PLAN_CHILD"

func inChild(t *testing.T) bool {
	t.Helper()
	if os.Getenv(childEnv) == t.Name() {
		return true
	}
	if _, err := capi.FindPlugin("tpu"); err != nil {
		testreq.Skipf(t, "libtpu not installed (scripts/install-plugins.sh tpu): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(append(os.Environ(), childEnv+"="+t.Name()), pluginEnv("v5e-8")...)
	out, err := cmd.CombinedOutput()
	t.Logf("child:\n%s", filterLog(out))
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("child failed: %v", err)
	}
	return false
}

// pluginEnv is Env(slice) as NAME=VALUE entries for a child's environment.
func pluginEnv(slice string) []string {
	var out []string
	for _, v := range Env(slice, nil) {
		out = append(out, v.Name+"="+v.Value)
	}
	return out
}

// TestEnv: what a plan needs from the environment, and Run's refusal to
// load a plugin without it. (Injected fault: checkEnv returning nil; Run
// then goes on to load libtpu, and the refusal case fails.)
func TestEnv(t *testing.T) {
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	names := func(vs []EnvVar) []string {
		var out []string
		for _, v := range vs {
			out = append(out, v.Name+"="+v.Value)
		}
		return out
	}
	cases := []struct {
		name  string
		slice string
		env   map[string]string
		want  []string
	}{
		{"tpu, nothing set", "v5e-8", nil, []string{"TPU_SKIP_MDS_QUERY=1", "ALLOW_MULTIPLE_LIBTPU_LOAD=1", "TPU_WORKER_HOSTNAMES=localhost"}},
		{"tpu, the caller's values kept", "v5e-8", map[string]string{"TPU_SKIP_MDS_QUERY": "true", "ALLOW_MULTIPLE_LIBTPU_LOAD": "0", "TPU_WORKER_HOSTNAMES": "h0,h1"}, nil},
		{"gpu, cuda dir already in XLA_FLAGS", "h100-8", map[string]string{"XLA_FLAGS": "--xla_gpu_cuda_data_dir=/opt/cuda"}, nil},
	}
	for _, c := range cases {
		if got := names(Env(c.slice, env(c.env))); strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("%s: Env = %v, want %v", c.name, got, c.want)
		}
	}
	t.Setenv(envCUDADir, "/opt/cuda13")
	if got := names(Env("h100-1", env(map[string]string{"XLA_FLAGS": "--xla_dump_to=/tmp/x"}))); len(got) != 1 || got[0] != "XLA_FLAGS=--xla_dump_to=/tmp/x --xla_gpu_cuda_data_dir=/opt/cuda13" {
		t.Errorf("gpu with XLA_FLAGS of the caller's: %v", got)
	}
	if _, ok := os.LookupEnv("TPU_SKIP_MDS_QUERY"); ok {
		return // the refusal below needs the variable unset
	}
	_, err := Run(context.Background(), generated(t, "tiny"), Options{Slice: "v5e-4", Dims: map[string]int{"batch": 1, "sequence": 16}})
	var ee *EnvError
	if !errors.Is(err, ErrEnv) || !errors.As(err, &ee) || !strings.Contains(err.Error(), "TPU_SKIP_MDS_QUERY") {
		t.Errorf("Run without the environment: %v, want an EnvError naming TPU_SKIP_MDS_QUERY", err)
	}
}

func filterLog(b []byte) string {
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "plan_test.go") || strings.Contains(l, "train_test.go") || strings.HasPrefix(strings.TrimSpace(l), "---") || strings.Contains(l, "FAIL") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

func generated(t *testing.T, preset string) *onnx.Model {
	t.Helper()
	pb, err := modelgen.Generate(modelgen.Presets[preset])
	if err != nil {
		t.Fatal(err)
	}
	m, err := onnx.FromProtoWith(pb, onnx.LoadOptions{ShapesOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func logReport(t *testing.T, r *Report) {
	b, _ := json.Marshal(r)
	t.Logf("%s", b)
}

// On a tiny decoder each strategy compiles on v5e-4 and tensor
// parallelism shrinks the per-device weights and arguments by the degree.
func TestPlanTiny(t *testing.T) {
	if !inChild(t) {
		return
	}
	m := generated(t, "tiny")
	args := map[string]int64{}
	for _, strat := range []string{"tp", "dp", "dp=2,tp=2"} {
		r, err := Run(context.Background(), m, Options{Slice: "v5e-4", Strategy: strat, Dims: map[string]int{"batch": 4, "sequence": 16}, Model: "tiny"})
		if err != nil {
			t.Fatalf("%s: %v", strat, err)
		}
		logReport(t, r)
		if !r.Fits || r.PerDevice.ArgumentBytes == 0 || r.Flops == 0 || r.CostPerHourUSD == nil || *r.CostPerHourUSD != 4*1.20 {
			t.Errorf("%s: %+v", strat, r)
		}
		args[r.Strategy] = r.PerDevice.WeightsBytes
		args["compiled "+r.Strategy] = r.PerDevice.ArgumentBytes
	}
	// The compiler's own argument bytes shrink too (tp=4 holds a quarter of
	// the weights; dp=4 all of them and a quarter of the batch).
	if args["compiled tp=4"]*2 > args["compiled dp=4"] {
		t.Errorf("compiled argument bytes: tp=4 %d, dp=4 %d", args["compiled tp=4"], args["compiled dp=4"])
	}
	// The normalisation weights stay replicated: allow them 5%.
	if dp := float64(args["dp=4"]); float64(args["tp=4"]) > dp/4*1.05 || float64(args["dp=2,tp=2"]) > dp/2*1.05 {
		t.Errorf("per-device weights do not shrink by the model-parallel degree: %v", args)
	}
}

// Every TPU generation the catalog knows, single- and multi-host, compiles
// deviceless.
func TestPlanEverySlice(t *testing.T) {
	if !inChild(t) {
		return
	}
	m := generated(t, "tiny")
	for _, sl := range []string{"v4-8", "v4-16", "v5e-1", "v5e-8", "v5e-16", "v5p-8", "v5p-16", "v6e-1", "v6e-8", "v6e-16", "tpu7x-8", "tpu7x-16"} {
		r, err := Run(context.Background(), m, Options{Slice: sl, Strategy: "tp", Dims: map[string]int{"batch": 1, "sequence": 16}})
		if err != nil {
			t.Errorf("%s: %v", sl, err)
			continue
		}
		t.Logf("%s: %s, %d chips, %d devices, %d hosts, %s, HBM %d per device", sl, r.Topology, r.Chips, r.Devices, r.Hosts, r.DeviceKind, r.PerDevice.HBMBytes)
		if !r.Fits || r.Devices < r.Chips || r.PerDevice.HBMBytes <= 0 {
			t.Errorf("%s: %+v", sl, r)
		}
	}
}

// A BERT-base-sized encoder on one v5e chip: it fits, and the compiler's
// FLOPs are at least 2 x (weights that multiply) x tokens.
func TestPlanBERTBase(t *testing.T) {
	if !inChild(t) {
		return
	}
	m := generated(t, "bert-base")
	r, err := Run(context.Background(), m, Options{Slice: "v5e-1", Dims: map[string]int{"batch": 1, "sequence": 512}})
	if err != nil {
		t.Fatal(err)
	}
	logReport(t, r)
	c := modelgen.Presets["bert-base"]
	matmul := c.Params() - int64(c.Vocab*c.Hidden) // the embedding is gathered, not multiplied
	if !r.Fits || r.Flops < 2*float64(matmul)*512*0.95 {
		t.Errorf("fits %v, flops %.4g, want >= %.4g", r.Fits, r.Flops, 2*float64(matmul)*512)
	}
	if w := r.PerDevice.WeightsBytes; w != c.Params()*2 || r.PerDevice.ArgumentBytes < w {
		t.Errorf("weights %d (want %d), arguments %d", w, c.Params()*2, r.PerDevice.ArgumentBytes)
	}
}

// libtpu's compile-time out-of-memory refusal is a plan that does not fit,
// with the need and the capacity, not an error. It is recognised by the plugin's
// RESOURCE_EXHAUSTED code, not its message. (Injected fault: that check
// disabled; Run then fails with "no strategy could be compiled".)
func TestPlanDoesNotFit(t *testing.T) {
	if !inChild(t) {
		return
	}
	c, err := modelgen.Parse("layers=2,hidden=16384,heads=64,ffn=65536,vocab=32000")
	if err != nil {
		t.Fatal(err)
	}
	pb, _ := modelgen.Generate(c)
	m, err := onnx.FromProtoWith(pb, onnx.LoadOptions{ShapesOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(context.Background(), m, Options{Slice: "v5e-1", Dims: map[string]int{"batch": 1, "sequence": 128}})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r.FitReason)
	if r.Fits || !strings.Contains(r.FitReason, "does not fit: needs") || r.PerDevice.PeakBytes < c.Params()*2 {
		t.Errorf("fits %v, reason %q, need %d", r.Fits, r.FitReason, r.PerDevice.PeakBytes)
	}
	// Split over 8 chips it fits.
	r, err = Run(context.Background(), m, Options{Slice: "v5e-8", Strategy: "tp", Dims: map[string]int{"batch": 1, "sequence": 128}})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Fits {
		t.Errorf("tp=8: %s", r.FitReason)
	}
}

// The 7B and 70B shapes at sequence 2048 (each compile takes 40 s to a few
// minutes and up to a few GiB of host memory: run with TB_PLAN_LARGE=1).
func TestPlanLlama(t *testing.T) {
	if os.Getenv("TB_PLAN_LARGE") == "" {
		t.Skip("set TB_PLAN_LARGE=1 to plan the 7B and 70B shapes")
	}
	if !inChild(t) {
		return
	}
	// 7B in bfloat16 at batch 1 does fit one v5e chip by the compiler's
	// count (13.1 GiB of 15.75: measured, not asserted here as it takes
	// 80 s); in float32 it does not.
	cases := []struct {
		preset, slice, strategy, precision string
		fits                               bool
	}{
		{"llama-7b", "v5e-1", "", "float32", false},
		{"llama-7b", "v5e-8", "tp", "", true},
		{"llama-70b", "v5p-8", "tp", "", true},
		{"llama-70b", "v6e-8", "tp", "", true},
		{"llama-70b", "v5e-8", "tp", "", false},
	}
	for _, tc := range cases {
		m := generated(t, tc.preset)
		r, err := Run(context.Background(), m, Options{Slice: tc.slice, Strategy: tc.strategy, Precision: tc.precision, Dims: map[string]int{"batch": 1, "sequence": 2048}})
		if err != nil {
			t.Errorf("%s on %s: %v", tc.preset, tc.slice, err)
			continue
		}
		logReport(t, r)
		params := float64(modelgen.Presets[tc.preset].Params())
		if r.Fits != tc.fits {
			t.Errorf("%s on %s: fits %v, want %v: %s", tc.preset, tc.slice, r.Fits, tc.fits, r.FitReason)
		}
		if !r.Fits {
			continue
		}
		want := params * 2 / float64(r.ModelParallel)
		if w := float64(r.PerDevice.WeightsBytes); w < want*0.95 || w > want*1.05 || float64(r.PerDevice.ArgumentBytes) < want*0.95 {
			t.Errorf("%s on %s: weights per device %.4g, arguments %d, want %.4g within 5%%", tc.preset, tc.slice, w, r.PerDevice.ArgumentBytes, want)
		}
		if r.Flops < 2*params*2048 {
			t.Errorf("%s on %s: %.4g FLOPs < 2 x params x tokens = %.4g", tc.preset, tc.slice, r.Flops, 2*params*2048)
		}
	}
}

// GPUs: the CUDA plugin compiles deviceless for H100 given ptxas and
// libdevice (TENSORBRIDGE_CUDA_DIR); memory and fit come from the
// compiler, FLOPs are unknown (the plugin has no cost analysis).
func TestPlanGPU(t *testing.T) {
	if os.Getenv(childEnv) != t.Name() {
		if _, err := capi.FindPlugin("cuda"); err != nil || os.Getenv(envCUDADir) == "" {
			t.Skipf("needs the CUDA plugin (tensorbridge plugins install cuda) and %s (ptxas, libdevice): %v", envCUDADir, err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
		cmd.Env = append(append(os.Environ(), childEnv+"="+t.Name()), pluginEnv("h100-1")...)
		out, err := cmd.CombinedOutput()
		t.Logf("child:\n%s", filterLog(out))
		if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
			t.Fatalf("child failed: %v", err)
		}
		return
	}
	m := generated(t, "tiny")
	for _, sl := range []string{"h100-1", "h100-8"} {
		r, err := Run(context.Background(), m, Options{Slice: sl, Strategy: "tp", Dims: map[string]int{"batch": 1, "sequence": 16}})
		if err != nil {
			t.Fatalf("%s: %v", sl, err)
		}
		logReport(t, r)
		if !r.Fits || r.PerDevice.ArgumentBytes == 0 || r.PerDevice.HBMBytes != 80e9 {
			t.Errorf("%s: %+v", sl, r)
		}
	}
}

// BenchmarkPlanLlama7B plans the 7B shape at sequence 2048 on v5e-8 with
// tensor parallelism 8 and reports the process's peak resident memory:
//
//	go test -run '^$' -bench PlanLlama7B -benchtime 1x ./plan/
func BenchmarkPlanLlama7B(b *testing.B) {
	if _, err := capi.FindPlugin("tpu"); err != nil {
		b.Skipf("libtpu not installed: %v", err)
	}
	pb, err := modelgen.Generate(modelgen.Presets["llama-7b"])
	if err != nil {
		b.Fatal(err)
	}
	m, err := onnx.FromProtoWith(pb, onnx.LoadOptions{ShapesOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	for _, v := range Env("v5e-8", nil) {
		b.Setenv(v.Name, v.Value)
	}
	for b.Loop() {
		r, err := Run(context.Background(), m, Options{Slice: "v5e-8", Strategy: "tp=8", Dims: map[string]int{"batch": 1, "sequence": 2048}})
		if err != nil || !r.Fits {
			b.Fatalf("%v %+v", err, r)
		}
	}
	if raw, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(l, "VmHWM:") {
				var kb float64
				if _, err := fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(l, "VmHWM:")), "%g", &kb); err == nil {
					b.ReportMetric(kb/(1<<20), "peak-GiB")
				}
			}
		}
	}
}
