package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tensorbridge/tensorbridge/ir"
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
	if !strings.Contains(stdout, "(step 5)") || !strings.Contains(stdout, "trained 7 steps (6 to 12)") {
		t.Errorf("resume stdout %q: want it to say it resumed at step 5 and did steps 6 to 12", stdout)
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
// the last finished step, which --resume then continues from, reporting
// the steps it did and the step it reached. While the child runs, a run
// of this process on its directory is refused (the lock holds across
// processes).
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
	// The directory is the child's while it runs: another process's run
	// (this one) is refused, naming it.
	code, _, errOut := run(t, append(args, "--resume")...)
	if want := fmt.Sprintf("in use by another run (process %d", cmd.Process.Pid); code != 2 || !strings.Contains(errOut, want) {
		t.Errorf("a second run on the directory: exit %d, stderr %q; want 2 with %q", code, errOut, want)
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
	if want := fmt.Sprintf("trained 2 steps (%d to %d)", c.Step+1, c.Step+2); code != 0 || !strings.Contains(stdout, want) {
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

// TestTrainCLIBadInput: each kind of bad input exits 2 with a one-line
// message naming the problem, never a panic. (Fault injected once: with
// package train's errors back on errors.Join, and runTrain without
// oneLine, six rows printed two lines.)
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
	set := setFlag
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
		{"force-new-run without a directory", with("--force-new-run"), "--checkpoint-dir"},
		{"negative skip-nonfinite", with("--skip-nonfinite", "-1"), "cannot be negative"},
		{"missing data directory", set(base, "--data", filepath.Join(tmp, "none")), "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := run(t, tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "panic") {
				t.Errorf("exit %d, stderr %q; want exit 2 mentioning %q", code, stderr, tc.want)
			}
			oneLineStderr(t, tc.name, stderr)
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
	files, err := filepath.Glob(filepath.Join(ck, "ckpt-*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || !strings.HasSuffix(files[1], train.CheckpointName(8)) {
		t.Errorf("checkpoints %v: want the newest two, ending at step 8", files)
	}
}

// setFlag returns a copy of args with flag's value replaced (or appended).
func setFlag(args []string, flag, v string) []string {
	out := append([]string(nil), args...)
	for i, a := range out {
		if a == flag {
			out[i+1] = v
			return out
		}
	}
	return append(out, flag, v)
}

// mlpData writes, in dir, a data set of the MLP fixture's samples rows (in
// that order); edit may change x (row-major, 16 values a sample).
func mlpData(t *testing.T, dir string, rows []int, edit func(x []float32)) string {
	t.Helper()
	xa, err := npy.ReadFile(filepath.Join(mlpDir, "data", "x.npy"))
	if err != nil {
		t.Fatal(err)
	}
	la, err := npy.ReadFile(filepath.Join(mlpDir, "data", "labels.npy"))
	if err != nil {
		t.Fatal(err)
	}
	xs, ls := xa.Data.([]float32), la.Data.([]int64)
	var x []float32
	var l []int64
	for _, r := range rows {
		x, l = append(x, xs[16*r:16*r+16]...), append(l, ls[r])
	}
	if edit != nil {
		edit(x)
	}
	writeNPYs(t, dir, map[string]*npy.Array{"x": {Shape: []int{len(rows), 16}, Data: x}, "labels": {Shape: []int{len(rows)}, Data: l}})
	return dir
}

// span is the integers from..to-1.
func span(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// tree maps every file under dir, but the lock file, to its bytes.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || info.Name() == ".tensorbridge-run.lock" {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameFiles(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d files, want %d", what, len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s missing or changed", what, k)
		}
	}
}

func oneLineStderr(t *testing.T, what, stderr string) {
	t.Helper()
	if strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") {
		t.Errorf("%s: stderr %q: want the error on one line", what, stderr)
	}
}

// TestTrainCLISharedCheckpointDir replays issue 24: run A (lr 0.01, 10
// steps) leaves ckpt-5 and ckpt-10; run B (lr 0.02, --keep 1, no --resume)
// and run C (A's configuration, no --resume) are refused with exit 2 and
// leave A's files byte for byte; B with --force-new-run starts in the
// directory with A's files moved, intact, into superseded-*; A's --resume
// is then refused there. (Faults injected once: without the RunDir check,
// B exited 0 having pruned A's checkpoints and C replaced A's ckpt-5.)
func TestTrainCLISharedCheckpointDir(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "ck")
	a := mlpArgs("--checkpoint-dir", ck, "--checkpoint-every", "5")
	b := setFlag(mlpArgs("--checkpoint-dir", ck, "--steps", "4", "--keep", "1"), "--lr", "0.02")
	if code, _, stderr := run(t, append(a, "--steps", "10")...); code != 0 {
		t.Fatalf("run A: exit %d: %s", code, stderr)
	}
	runA := tree(t, ck)
	if _, ok := runA["ckpt-000000010.tbck"]; !ok || len(runA) != 3 {
		t.Fatalf("run A left %v, want ckpt-5, ckpt-10 and the manifest", runA)
	}
	code, _, stderr := run(t, b...)
	if code != 2 || !strings.Contains(stderr, `lr: "0.01" != "0.02"`) || !strings.Contains(stderr, "belongs to another run") ||
		strings.Count(stderr, "configuration ") != 2 {
		t.Errorf("run B: exit %d, stderr %q; want 2 naming both configurations and lr", code, stderr)
	}
	oneLineStderr(t, "run B", stderr)
	sameFiles(t, "after run B", tree(t, ck), runA)
	code, _, stderr = run(t, append(a, "--steps", "5")...)
	if code != 2 || !strings.Contains(stderr, "--resume") {
		t.Errorf("run C: exit %d, stderr %q; want 2 pointing at --resume", code, stderr)
	}
	sameFiles(t, "after run C", tree(t, ck), runA)
	code, _, stderr = run(t, append(b, "--force-new-run")...)
	if code != 0 || !strings.Contains(stderr, "superseded-") {
		t.Fatalf("run B --force-new-run: exit %d, stderr %q", code, stderr)
	}
	asides, _ := filepath.Glob(filepath.Join(ck, "superseded-*"))
	if len(asides) != 1 {
		t.Fatalf("superseded directories %v, want one", asides)
	}
	sameFiles(t, "run A's files moved aside", tree(t, asides[0]), runA)
	if top, _ := filepath.Glob(filepath.Join(ck, "ckpt-*")); len(top) != 1 || filepath.Base(top[0]) != train.CheckpointName(4) {
		t.Errorf("checkpoints of run B: %v, want its ckpt-4 only", top)
	}
	if code, _, stderr := run(t, append(a, "--steps", "12", "--resume")...); code != 2 || !strings.Contains(stderr, "another run") {
		t.Errorf("run A --resume in run B's directory: exit %d, stderr %q; want 2", code, stderr)
	}
	if code, _, stderr := run(t, append(a, "--steps", "12", "--resume", "--force-new-run")...); code != 2 || !strings.Contains(stderr, "give one") {
		t.Errorf("--resume with --force-new-run: exit %d, stderr %q; want 2", code, stderr)
	}
}

// TestTrainCLIResumeFallback: with the newest checkpoint corrupt, --resume
// continues from the previous one, says so on stderr, reports the steps it
// did and the step it reached, and writes bitwise the model of 12
// uninterrupted steps. (Fault injected once: RunDir.Resume returning the
// read error exited 2 and failed this test.)
func TestTrainCLIResumeFallback(t *testing.T) {
	dir := t.TempDir()
	ck, full, part := filepath.Join(dir, "ck"), filepath.Join(dir, "full.onnx"), filepath.Join(dir, "part.onnx")
	if code, _, stderr := run(t, mlpArgs("--steps", "12", "--output", full)...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if code, _, stderr := run(t, mlpArgs("--steps", "10", "--checkpoint-dir", ck, "--checkpoint-every", "5")...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	newest := filepath.Join(ck, train.CheckpointName(10))
	raw, err := os.ReadFile(newest)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 0x40
	if err := os.WriteFile(newest, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := run(t, mlpArgs("--steps", "12", "--checkpoint-dir", ck, "--resume", "--output", part)...)
	if code != 0 {
		t.Fatalf("resume: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, train.CheckpointName(10)) || !strings.Contains(stderr, "previous valid checkpoint") || !strings.Contains(stderr, train.CheckpointName(5)) {
		t.Errorf("stderr %q: want it to name the unreadable ckpt-10 and the fallback to ckpt-5", stderr)
	}
	if !strings.Contains(stdout, "(step 5)") || !strings.Contains(stdout, "trained 7 steps (6 to 12)") {
		t.Errorf("stdout %q: want resumed at step 5 and 7 steps done, 6 to 12", stdout)
	}
	a, _ := os.ReadFile(full)
	b, _ := os.ReadFile(part)
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Error("resumed from ckpt-5 to step 12: the model differs from 12 uninterrupted steps")
	}
}

// TestTrainCLINonFinite: a NaN in sample 9 makes step 2's loss NaN. The
// run stops there with exit 1, naming step 2, before the update and before
// anything is checkpointed or pruned (ckpt-1 stays, with --keep 1). With
// --skip-nonfinite 1 the batch is passed over and logged, and the trained
// model is bitwise that of the data without samples 8 to 15 (the
// independent reference); a second bad batch stops it. (Faults injected
// once: the loop without its res.Skipped branch failed the skip row; with
// GuardNonFinite off in the Trainer, the skip row's model differed.)
func TestTrainCLINonFinite(t *testing.T) {
	dir := t.TempDir()
	nan := func(samples ...int) func(x []float32) {
		return func(x []float32) {
			for _, s := range samples {
				x[16*s+3] = float32(math.NaN())
			}
		}
	}
	bad := mlpData(t, filepath.Join(dir, "bad"), span(0, 40), nan(9))
	bad2 := mlpData(t, filepath.Join(dir, "bad2"), span(0, 40), nan(9, 20))
	clean := mlpData(t, filepath.Join(dir, "clean"), append(span(0, 8), span(16, 40)...), nil)

	ck, log := filepath.Join(dir, "ck"), filepath.Join(dir, "log.json")
	code, _, stderr := run(t, setFlag(mlpArgs("--steps", "5", "--checkpoint-dir", ck, "--checkpoint-every", "1", "--keep", "1", "--log-json", log), "--data", bad)...)
	if code != 1 || !strings.Contains(stderr, "step 2: non-finite loss") || !strings.Contains(stderr, "not applied") {
		t.Errorf("exit %d, stderr %q; want 1 naming step 2's non-finite loss", code, stderr)
	}
	if files, _ := filepath.Glob(filepath.Join(ck, "ckpt-*")); len(files) != 1 || filepath.Base(files[0]) != train.CheckpointName(1) {
		t.Errorf("checkpoints %v: want step 1's, kept", files)
	}
	raw, _ := os.ReadFile(log)
	if lines := strings.Split(strings.TrimSpace(string(raw)), "\n"); len(lines) != 2 ||
		!strings.HasPrefix(lines[1], `{"step":2,"loss":"NaN",`) || !strings.HasSuffix(lines[1], `"skipped":true}`) {
		t.Errorf("log %q: want step 1, then step 2 logged with loss NaN as skipped", lines)
	}

	skipped, want := filepath.Join(dir, "skipped.onnx"), filepath.Join(dir, "clean.onnx")
	code, stdout, stderr := run(t, setFlag(mlpArgs("--steps", "3", "--skip-nonfinite", "1", "--output", skipped), "--data", bad)...)
	if code != 0 || !strings.Contains(stderr, "step 2: non-finite loss") || !strings.Contains(stderr, "skipped (1 of --skip-nonfinite 1)") ||
		!strings.Contains(stdout, "trained 3 steps") || !strings.Contains(stdout, "skipped 1 step") {
		t.Fatalf("--skip-nonfinite 1: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, _, stderr := run(t, setFlag(mlpArgs("--steps", "3", "--output", want), "--data", clean)...); code != 0 {
		t.Fatalf("clean data: exit %d: %s", code, stderr)
	}
	a, _ := os.ReadFile(skipped)
	b, _ := os.ReadFile(want)
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Error("skipping the bad batch trained a model other than the data without it")
	}
	if code, _, stderr := run(t, setFlag(mlpArgs("--steps", "4", "--skip-nonfinite", "1"), "--data", bad2)...); code != 1 || strings.Count(stderr, "step 2: non-finite") != 2 || !strings.Contains(stderr, "the run stops") {
		// The batch skipped was not an update: the next batch is step 2 again.
		t.Errorf("a second bad batch past --skip-nonfinite 1: exit %d, stderr %q; want 1, stopping at step 2's second try", code, stderr)
	}
}

// TestTrainCLIMultiProcess: in a job of more than one process (the
// JobSet's environment), train refuses with exit 2 before opening
// anything, saying what is missing; a one-process job trains. (Fault
// injected once: runTrain without checkOneProcess trained in every row.)
func TestTrainCLIMultiProcess(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // "" : trains
	}{
		{"explicit 4", map[string]string{"TENSORBRIDGE_NUM_PROCESSES": "4", "TENSORBRIDGE_PROCESS_ID": "1", "TENSORBRIDGE_COORDINATOR": "127.0.0.1"}, "process 1 of a 4-process job"},
		{"GKE v5e-16", map[string]string{"TPU_WORKER_ID": "2", "TPU_WORKER_HOSTNAMES": "h0,h1,h2,h3", "TPU_SKIP_MDS_QUERY": "1"}, "process 2 of a 4-process job"},
		{"count without a coordinator", map[string]string{"TENSORBRIDGE_NUM_PROCESSES": "2"}, "coordinator"},
		{"one process", map[string]string{"TENSORBRIDGE_NUM_PROCESSES": "1", "TENSORBRIDGE_PROCESS_ID": "0"}, ""},
		{"GKE single-host slice", map[string]string{"TPU_WORKER_ID": "0", "TPU_WORKER_HOSTNAMES": "h0", "TPU_SKIP_MDS_QUERY": "1"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			code, _, stderr := run(t, mlpArgs("--steps", "1")...)
			if tc.want == "" {
				if code != 0 {
					t.Errorf("exit %d: %s", code, stderr)
				}
				return
			}
			if code != 2 || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "multi-process training is not built") {
				t.Errorf("exit %d, stderr %q; want 2 with %q and what is missing", code, stderr, tc.want)
			}
			if tc.name != "count without a coordinator" && !strings.Contains(stderr, "--mesh") {
				t.Errorf("stderr %q: want it to point at --mesh", stderr)
			}
			oneLineStderr(t, tc.name, stderr)
		})
	}
}

// TestTrainCLIBatchOverData: a step of 48 samples on 40 warns on stderr
// (the samples and that rows repeat) and trains on samples 0..39 then
// 0..7: its loss equals, bitwise, the loss of those 48 rows written out as
// a data set (the independent reference). A batch the data holds does not
// warn. (Fault injected once: without the warning, the first row failed.)
func TestTrainCLIBatchOverData(t *testing.T) {
	dir := t.TempDir()
	explicit := mlpData(t, filepath.Join(dir, "48"), append(span(0, 40), span(0, 8)...), nil)
	logA, logB := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	code, _, stderr := run(t, setFlag(mlpArgs("--steps", "1", "--grad-accum", "2", "--log-json", logA), "--batch", "24")...)
	if code != 0 || !strings.Contains(stderr, "warning: a step takes 48 samples") || !strings.Contains(stderr, "holds 40") || !strings.Contains(stderr, "8 rows of each step repeat") {
		t.Errorf("exit %d, stderr %q; want 0 with a warning naming 48 and 40", code, stderr)
	}
	code, _, stderr = run(t, setFlag(setFlag(mlpArgs("--steps", "1", "--grad-accum", "2", "--log-json", logB), "--batch", "24"), "--data", explicit)...)
	if code != 0 || strings.Contains(stderr, "warning") {
		t.Errorf("48 samples of 48: exit %d, stderr %q; want no warning", code, stderr)
	}
	a, b := readLog(t, logA), readLog(t, logB)
	if len(a) != 1 || len(b) != 1 || *a[0].Loss != *b[0].Loss {
		t.Errorf("loss %v wrapping, %v on the rows written out", a, b)
	}
}

// TestTrainCLISecondSignal: a second SIGTERM while a checkpoint is being
// written removes its temporary file before the process exits (143), and
// nothing is renamed into place. The write is a 64 MiB checkpoint, long
// enough to be caught in flight. (Fault injected once: watch without
// rd.Abort left the temporary file at exit and failed this test.)
func TestTrainCLISecondSignal(t *testing.T) {
	dir := t.TempDir()
	loss, _ := train.ParseLoss("loss")
	opt, _ := train.DefaultOptimizer(train.SGD)
	cfg := train.Config{Loss: loss, Optimizer: opt, Batch: 1}
	rd, err := train.OpenRunDir(context.Background(), dir, "model", cfg, train.RunDirOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var stderr bytes.Buffer
	type exit struct {
		code int
		left []string
	}
	exited := make(chan exit, 1)
	l := &trainLoop{stderr: &stderr, rd: rd, exit: func(code int) {
		left, _ := filepath.Glob(filepath.Join(dir, "*ckpt-*"))
		exited <- exit{code, left}
	}}
	sigs, done := make(chan os.Signal, 2), make(chan struct{})
	defer close(done)
	go l.watch(sigs, done)
	big, err := ir.NewHostTensor(ir.Float32, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	c := &train.Checkpoint{Step: 7, ModelDigest: "model", ConfigDigest: cfg.Digest(), Config: cfg.Fields(), Tensors: map[string]*ir.Tensor{"big": big}}
	wrote := make(chan error, 1)
	go func() {
		_, err := rd.Write(context.Background(), c, 0)
		wrote <- err
	}()
	for {
		if m, _ := filepath.Glob(filepath.Join(dir, ".ckpt-*.tmp")); len(m) > 0 {
			break
		}
		select {
		case err := <-wrote:
			t.Skipf("the write ended (%v) before it could be interrupted", err)
		case <-time.After(200 * time.Microsecond):
		}
	}
	sigs <- syscall.SIGTERM
	sigs <- syscall.SIGTERM
	e := <-exited
	if e.code != 143 || len(e.left) != 0 {
		t.Errorf("exit %d with %v in the directory; want 143 and no checkpoint file", e.code, e.left)
	}
	if err := <-wrote; !errors.Is(err, train.ErrAborted) {
		t.Errorf("the interrupted write: %v, want ErrAborted", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*ckpt-*")); len(left) != 0 {
		t.Errorf("after the write returned: %v", left)
	}
	if !strings.Contains(stderr.String(), "again") {
		t.Errorf("stderr %q", stderr.String())
	}
}

// TestTrainOneLine: oneLine flattens a multi-line error, keeps its exit
// code and its chain, and leaves one-line errors as they are.
func TestTrainOneLine(t *testing.T) {
	sentinel := errors.New("compiler said:\n  line 1\r\n  line 2\n")
	for _, tc := range []struct {
		in   error
		code int
	}{
		{fmt.Errorf("step 3: %w", sentinel), 0},
		{&exitError{code: 2, err: fmt.Errorf("--data: %w", sentinel)}, 2},
	} {
		out := oneLine(tc.in)
		msg := out.Error()
		var ee *exitError
		if errors.As(out, &ee) {
			msg = ee.err.Error()
		}
		if strings.ContainsAny(msg, "\r\n") || !strings.Contains(msg, "compiler said:; line 1; line 2") || !errors.Is(out, sentinel) {
			t.Errorf("oneLine(%q) = %q", tc.in, msg)
		}
		if tc.code != 0 && (ee == nil || ee.code != tc.code) {
			t.Errorf("exit code %v, want %d", ee, tc.code)
		}
	}
	plain := errors.New("one line")
	if oneLine(plain) != plain || oneLine(nil) != nil {
		t.Error("oneLine changed a one-line error")
	}
}
