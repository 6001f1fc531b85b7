package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tensorbridge/tensorbridge/npy"
	"github.com/tensorbridge/tensorbridge/train"
)

const mlpDir = "../../testdata/train/mlp_ce"

// mlpArgs is the MLP fixture's AdamW run (testdata/train/mlp_ce/adamw.json).
func mlpArgs(extra ...string) []string {
	return append([]string{"train", filepath.Join(mlpDir, "model.onnx"), "--data", filepath.Join(mlpDir, "data"),
		"--batch", "8", "--loss", "cross_entropy:logits:labels", "--optimizer", "adamw", "--lr", "0.01",
		"--betas", "0.9,0.999", "--eps", "1e-8", "--weight-decay", "0.01", "--backend", "cpu"}, extra...)
}

type logLine struct {
	Step     int      `json:"step"`
	Loss     *float64 `json:"loss"`
	StepMS   *float64 `json:"step_ms"`
	EvalLoss *float64 `json:"eval_loss"`
}

func readLog(t *testing.T, path string) []logLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []logLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l logLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("--log-json line %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

// TestTrainCLIMatchesPyTorch: every step's loss of `tensorbridge train` on
// the MLP fixture against PyTorch's (relative 1e-3), read from --log-json.
func TestTrainCLIMatchesPyTorch(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(mlpDir, "adamw.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct{ Losses []float64 }
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "log.json")
	code, stdout, stderr := run(t, mlpArgs("--steps", "12", "--log-json", log, "--output", filepath.Join(dir, "out.onnx"))...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "training 6 tensors (1732 parameters), freezing 0 tensors (0 parameters)") {
		t.Errorf("stdout %q: want the counts of trained and frozen weights (the MLP: 3 Linear layers, 1732 parameters)", stdout)
	}
	lines := readLog(t, log)
	if len(lines) != 12 {
		t.Fatalf("%d log lines, want 12", len(lines))
	}
	for i, l := range lines {
		if l.Step != i+1 || l.Loss == nil || l.StepMS == nil {
			t.Fatalf("line %d: %+v, want step %d with loss and step_ms", i, l, i+1)
		}
		// Measured up to 1.8e-7 (2026-11-26); the bound is 8.4 times that
		// (was 1e-3). Fault injected once: --eps 1e-7 for PyTorch's 1e-8
		// (losses off by about 9e-6 relative) failed it at steps 2-4; the
		// old bound passed it.
		if rel := math.Abs(*l.Loss-ref.Losses[i]) / ref.Losses[i]; rel > 1.5e-6 {
			t.Errorf("step %d: loss %.7g, PyTorch %.7g", i+1, *l.Loss, ref.Losses[i])
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "out.onnx")); err != nil {
		t.Errorf("--output not written: %v", err)
	}
}

// TestTrainCLIResumeBitwise: 5 steps, then --resume to 12, writes the same
// trained model, byte for byte, as 12 uninterrupted steps (with shuffling,
// so the data position and the permutation are restored too), and logs
// the same losses for steps 6 to 12.
func TestTrainCLIResumeBitwise(t *testing.T) {
	dir := t.TempDir()
	common := []string{"--shuffle", "7", "--lr-schedule", "cosine", "--warmup-steps", "2", "--lr-schedule-steps", "12"}
	full, part := filepath.Join(dir, "full.onnx"), filepath.Join(dir, "resumed.onnx")
	fullLog, partLog := filepath.Join(dir, "full.json"), filepath.Join(dir, "part.json")
	if code, _, stderr := run(t, mlpArgs(append(common, "--steps", "12", "--output", full, "--log-json", fullLog)...)...); code != 0 {
		t.Fatalf("uninterrupted: exit %d: %s", code, stderr)
	}
	ck := filepath.Join(dir, "ck")
	if code, _, stderr := run(t, mlpArgs(append(common, "--steps", "5", "--checkpoint-dir", ck, "--log-json", partLog)...)...); code != 0 {
		t.Fatalf("first 5: exit %d: %s", code, stderr)
	}
	code, stdout, stderr := run(t, mlpArgs(append(common, "--steps", "12", "--checkpoint-dir", ck, "--resume", "--output", part, "--log-json", partLog)...)...)
	if code != 0 {
		t.Fatalf("resume: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "step 5") {
		t.Errorf("resume stdout %q: want it to say it resumed at step 5", stdout)
	}
	a, err := os.ReadFile(full)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(part)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("5 steps + resume to 12 wrote a model different from 12 uninterrupted steps")
	}
	fl, pl := readLog(t, fullLog), readLog(t, partLog)
	if len(fl) != 12 || len(pl) != 12 {
		t.Fatalf("log lines: %d uninterrupted, %d in two runs; want 12 each", len(fl), len(pl))
	}
	for i := range fl {
		if *fl[i].Loss != *pl[i].Loss || fl[i].Step != pl[i].Step {
			t.Errorf("step %d: loss %v uninterrupted, %v in two runs", fl[i].Step, *fl[i].Loss, *pl[i].Loss)
		}
	}
	// A checkpoint of another configuration is refused, naming what differs.
	code, _, stderr = run(t, mlpArgs("--steps", "12", "--checkpoint-dir", ck, "--resume", "--lr", "0.02")...)
	if code != 2 || !strings.Contains(stderr, "lr:") {
		t.Errorf("resume with another --lr: exit %d, stderr %q; want 2 naming lr", code, stderr)
	}
}

// TestTrainCLIGradAccum: --grad-accum 2 with --batch 4 trains as --batch 8
// (the same samples per update), within float rounding.
func TestTrainCLIGradAccum(t *testing.T) {
	dir := t.TempDir()
	one, two := filepath.Join(dir, "one.json"), filepath.Join(dir, "two.json")
	if code, _, stderr := run(t, mlpArgs("--steps", "6", "--log-json", one)...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	args := mlpArgs("--steps", "6", "--log-json", two, "--grad-accum", "2")
	for i, a := range args {
		if a == "--batch" {
			args[i+1] = "4"
		}
	}
	if code, _, stderr := run(t, args...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	a, b := readLog(t, one), readLog(t, two)
	for i := range a {
		// Measured: agreement to ~1e-7 relative; 1e-5 leaves room.
		// Measured up to 8.9e-8 (2026-11-26); the bound is 9 times that
		// (was 1e-5).
		if rel := math.Abs(*a[i].Loss-*b[i].Loss) / *a[i].Loss; rel > 8e-7 {
			t.Errorf("step %d: batch 8 loss %.8g, 2 x 4 accumulated %.8g", i+1, *a[i].Loss, *b[i].Loss)
		}
	}
}

// envTrainChild makes TestTrainChild run the CLI with the arguments in it
// (separated by newlines), as a separate process the parent signals.
const envTrainChild = "TENSORBRIDGE_TEST_TRAIN_CHILD"

func TestTrainChild(t *testing.T) {
	args := os.Getenv(envTrainChild)
	if args == "" {
		t.Skip("the child of TestTrainCLISigterm")
	}
	os.Exit(Main(context.Background(), strings.Split(args, "\n"), os.Stdout, os.Stderr))
}

// TestTrainCLISigterm starts a long run in a child process, sends it
// SIGTERM once steps are logged, and expects exit 0 with a checkpoint of
// the last finished step, which --resume then continues from.
func TestTrainCLISigterm(t *testing.T) {
	dir := t.TempDir()
	ck, log := filepath.Join(dir, "ck"), filepath.Join(dir, "log.json")
	args := mlpArgs("--steps", "10000000", "--checkpoint-dir", ck, "--log-json", log)
	cmd := exec.Command(os.Args[0], "-test.run=^TestTrainChild$")
	cmd.Env = append(os.Environ(), envTrainChild+"="+strings.Join(args, "\n"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait (no time limit of our own: the test's -timeout bounds it) for a
	// few steps in the log.
	for {
		if raw, err := os.ReadFile(log); err == nil && bytes.Count(raw, []byte("\n")) >= 3 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v (want exit 0); stderr: %s", err, stderr.String())
	}
	lines := readLog(t, log)
	path, ok, err := train.LatestCheckpoint(ck)
	if err != nil || !ok {
		t.Fatalf("no checkpoint after SIGTERM: %v; stderr: %s", err, stderr.String())
	}
	c, err := train.ReadCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	if last := lines[len(lines)-1].Step; c.Step != last {
		t.Errorf("checkpoint at step %d, the last logged step is %d", c.Step, last)
	}
	code, stdout, errOut := run(t, mlpArgs("--steps", strconv.Itoa(c.Step+2), "--checkpoint-dir", ck, "--resume")...)
	if code != 0 || !strings.Contains(stdout, "trained "+strconv.Itoa(c.Step+2)+" steps") {
		t.Errorf("resume after SIGTERM: exit %d, stdout %q, stderr %q", code, stdout, errOut)
	}
}

// writeNPYs writes a data directory.
func writeNPYs(t *testing.T, dir string, arrays map[string]*npy.Array) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, a := range arrays {
		if err := npy.WriteFile(context.Background(), filepath.Join(dir, name+".npy"), a, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTrainCLIBadInput: each kind of bad input exits 2 with a message
// naming the problem, never a panic.
func TestTrainCLIBadInput(t *testing.T) {
	tmp := t.TempDir()
	x := make([]float32, 16*16)
	labels := make([]int64, 16)
	labels[5] = 4 // the MLP has 4 classes: 4 is out of range
	writeNPYs(t, filepath.Join(tmp, "badlabels"), map[string]*npy.Array{
		"x": {Shape: []int{16, 16}, Data: x}, "labels": {Shape: []int{16}, Data: labels}})
	writeNPYs(t, filepath.Join(tmp, "dtype"), map[string]*npy.Array{
		"x": {Shape: []int{16, 16}, Data: make([]float64, 16*16)}, "labels": {Shape: []int{16}, Data: make([]int64, 16)}})
	writeNPYs(t, filepath.Join(tmp, "shape"), map[string]*npy.Array{
		"x": {Shape: []int{16, 5}, Data: make([]float32, 16*5)}, "labels": {Shape: []int{16}, Data: make([]int64, 16)}})
	writeNPYs(t, filepath.Join(tmp, "counts"), map[string]*npy.Array{
		"x": {Shape: []int{16, 16}, Data: x}, "labels": {Shape: []int{15}, Data: make([]int64, 15)}})
	if err := os.MkdirAll(filepath.Join(tmp, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	notDir := filepath.Join(tmp, "file")
	if err := os.WriteFile(notDir, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	set := func(args []string, flag, v string) []string {
		out := append([]string(nil), args...)
		for i, a := range out {
			if a == flag {
				out[i+1] = v
				return out
			}
		}
		return append(out, flag, v)
	}
	base := mlpArgs("--steps", "2")
	with := func(extra ...string) []string { return append(append([]string(nil), base...), extra...) }
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"loss output not scalar", set(base, "--loss", "logits"), "want a scalar loss"},
		{"unknown output", set(base, "--loss", "cross_entropy:nope:labels"), `no output "nope"`},
		{"unknown labels", set(base, "--loss", "cross_entropy:logits:nope"), "nope"},
		{"labels out of range", set(base, "--data", filepath.Join(tmp, "badlabels")), "4 at sample element 5"},
		{"dtype", set(base, "--data", filepath.Join(tmp, "dtype")), "Float64"},
		{"shape", set(base, "--data", filepath.Join(tmp, "shape")), "[5]"},
		{"sample counts", set(base, "--data", filepath.Join(tmp, "counts")), "15"},
		{"empty data directory", set(base, "--data", filepath.Join(tmp, "empty")), "empty"},
		{"batch the data axis does not divide", with("--mesh", "data=3"), "does not divide"},
		{"model axis without tp", with("--mesh", "data=1,model=2"), "--strategy tp"},
		{"tp without a model axis", with("--strategy", "tp"), "model=M"},
		{"unwritable output", with("--output", filepath.Join(notDir, "out.onnx")), "cannot write"},
		{"bad optimizer", set(base, "--optimizer", "lamb"), "lamb"},
		{"bad betas", with("--betas", "0.9"), "--betas"},
		{"no steps", set(base, "--steps", "0"), "--steps"},
		{"resume without a directory", with("--resume"), "--checkpoint-dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := run(t, tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "panic") {
				t.Errorf("exit %d, stderr %q; want exit 2 mentioning %q", code, stderr, tc.want)
			}
		})
	}
}

// TestTrainCLIEvalAndKeep: --eval-data holding the first 8 samples, after
// step 5, gives the loss PyTorch computed at step 6 (which trains on those
// same 8 samples: 40 samples, batch 8) — an independent reference for the
// evaluation; --keep 2 with --checkpoint-every 2 leaves the newest two.
func TestTrainCLIEvalAndKeep(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(mlpDir, "adamw.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct{ Losses []float64 }
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	evalDir := filepath.Join(dir, "eval")
	first8 := map[string]*npy.Array{}
	for _, name := range []string{"x", "labels"} {
		a, err := npy.ReadFile(filepath.Join(mlpDir, "data", name+".npy"))
		if err != nil {
			t.Fatal(err)
		}
		switch d := a.Data.(type) {
		case []float32:
			first8[name] = &npy.Array{Shape: append([]int{8}, a.Shape[1:]...), Data: d[:8*len(d)/a.Shape[0]]}
		case []int64:
			first8[name] = &npy.Array{Shape: []int{8}, Data: d[:8]}
		default:
			t.Fatalf("%s: %T", name, a.Data)
		}
	}
	writeNPYs(t, evalDir, first8)
	log, ck := filepath.Join(dir, "log.json"), filepath.Join(dir, "ck")
	code, _, stderr := run(t, mlpArgs("--steps", "8", "--eval-data", evalDir, "--eval-every", "5",
		"--log-json", log, "--checkpoint-dir", ck, "--checkpoint-every", "2", "--keep", "2")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var evals []logLine
	for _, l := range readLog(t, log) {
		if l.EvalLoss != nil {
			evals = append(evals, l)
		}
	}
	if len(evals) != 2 || evals[0].Step != 5 || evals[1].Step != 8 {
		t.Fatalf("eval lines %+v: want steps 5 and 8 (every 5, and at the end)", evals)
	}
	// Measured 0 (2026-11-26); held to the per-step loss bound of
	// TestTrainCLIMatchesPyTorch (was 1e-3).
	if rel := math.Abs(*evals[0].EvalLoss-ref.Losses[5]) / ref.Losses[5]; rel > 1.5e-6 {
		t.Errorf("eval loss after step 5: %.7g, PyTorch's step-6 loss on the same samples %.7g", *evals[0].EvalLoss, ref.Losses[5])
	}
	files, err := filepath.Glob(filepath.Join(ck, "*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || !strings.HasSuffix(files[1], train.CheckpointName(8)) {
		t.Errorf("checkpoints %v: want the newest two, ending at step 8", files)
	}
}
