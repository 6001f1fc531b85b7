package train

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
)

// otherConfig is testConfig with another learning rate: another run.
func otherConfig() Config {
	c := testConfig()
	c.Optimizer.LR = 3e-4
	return c
}

// ckptOf is testCheckpoint(step) of the run (model, cfg).
func ckptOf(t testing.TB, step int, model string, cfg Config) *Checkpoint {
	c := testCheckpoint(t, step)
	c.ModelDigest, c.ConfigDigest, c.Config = model, cfg.Digest(), cfg.Fields()
	return c
}

// snapshot maps every file under dir (relative path) to its bytes.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return out
	}
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || info.Name() == runLockName {
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

func names(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestRunDirClaim: which directories a run may use, which it refuses and
// why, and that a refused directory is left exactly as it was. (Fault
// injected once: judge without the RunDirOtherRun case let the "other
// run's manifest" row claim the directory and overwrite the manifest.)
func TestRunDirClaim(t *testing.T) {
	ctx := context.Background()
	ours, theirs := testConfig(), otherConfig()
	writeRun := func(dir string, cfg Config, steps ...int) {
		r, err := OpenRunDir(ctx, dir, "model-sha", cfg, RunDirOptions{Resume: true, Model: "m.onnx"})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		for _, s := range steps {
			if _, err := r.Write(ctx, ckptOf(t, s, "model-sha", cfg), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	legacy := func(dir string, cfg Config, steps ...int) { // checkpoints without a manifest
		for _, s := range steps {
			if _, err := WriteCheckpoint(ctx, dir, ckptOf(t, s, "model-sha", cfg), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name    string
		setup   func(dir string)
		opts    RunDirOptions
		reason  RunDirReason // "" : accepted
		mention string
	}{
		{"empty", func(string) {}, RunDirOptions{}, "", ""},
		{"missing", func(dir string) { os.Remove(dir) }, RunDirOptions{}, "", ""},
		{"other files only", func(dir string) { os.WriteFile(filepath.Join(dir, "log.jsonl"), []byte("{}\n"), 0o644) }, RunDirOptions{}, "", ""},
		{"other run's manifest", func(dir string) { writeRun(dir, theirs) }, RunDirOptions{Resume: true}, RunDirOtherRun, `lr: "0.0003" != "0.001"`},
		{"other run's checkpoints", func(dir string) { writeRun(dir, theirs, 5, 10) }, RunDirOptions{}, RunDirOtherRun, `lr: "0.0003" != "0.001"`},
		{"other model", func(dir string) {
			r, _ := OpenRunDir(ctx, dir, "another-model", ours, RunDirOptions{})
			r.Close()
		}, RunDirOptions{Resume: true}, RunDirOtherRun, "model digest"},
		{"this run's checkpoints, no resume", func(dir string) { writeRun(dir, ours, 5) }, RunDirOptions{}, RunDirNotResumed, "ckpt-000000005.tbck"},
		{"this run's checkpoints, resume", func(dir string) { writeRun(dir, ours, 5) }, RunDirOptions{Resume: true}, "", ""},
		{"this run's manifest, no checkpoint yet", func(dir string) { writeRun(dir, ours) }, RunDirOptions{}, "", ""},
		{"legacy, this run's", func(dir string) { legacy(dir, ours, 5) }, RunDirOptions{Resume: true}, "", ""},
		{"legacy, mixed runs", func(dir string) { legacy(dir, ours, 5); legacy(dir, theirs, 4) }, RunDirOptions{Resume: true}, RunDirOtherRun, "lr:"},
		{"legacy, unreadable", func(dir string) { os.WriteFile(filepath.Join(dir, CheckpointName(3)), []byte("junk"), 0o644) }, RunDirOptions{Resume: true}, RunDirUnreadable, "ckpt-000000003.tbck"},
		{"corrupt manifest", func(dir string) { os.WriteFile(filepath.Join(dir, RunManifestName), []byte("{"), 0o644) }, RunDirOptions{}, RunDirUnreadable, RunManifestName},
		{"edited manifest", func(dir string) {
			writeRun(dir, ours)
			p := filepath.Join(dir, RunManifestName)
			b, _ := os.ReadFile(p)
			os.WriteFile(p, bytes.Replace(b, []byte(`"config_digest": "`), []byte(`"config_digest": "0`), 1), 0o644)
		}, RunDirOptions{Resume: true}, RunDirUnreadable, "does not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ck")
			os.MkdirAll(dir, 0o755)
			tc.setup(dir)
			before := snapshot(t, dir)
			r, err := OpenRunDir(ctx, dir, "model-sha", ours, tc.opts)
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				defer r.Close()
				m, err := readManifest(filepath.Join(dir, RunManifestName))
				// The run's digest, computed here as documented.
				sum := sha256.Sum256([]byte("model=model-sha\nconfig=" + ours.Digest() + "\n"))
				if err != nil || m == nil || m.Digest != hex.EncodeToString(sum[:]) || m.ConfigDigest != ours.Digest() {
					t.Fatalf("manifest %+v, %v: want this run's", m, err)
				}
				return
			}
			var re *RunDirError
			if !errors.As(err, &re) || re.Reason != tc.reason || !errors.Is(err, errs.ErrInvalidInput) {
				t.Fatalf("err %v, want a *RunDirError %q wrapping ErrInvalidInput", err, tc.reason)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.mention) || strings.Contains(msg, "\n") || !strings.Contains(msg, dir) {
				t.Errorf("message %q: want one line naming %s and %q", msg, dir, tc.mention)
			}
			if after := snapshot(t, dir); len(after) != len(before) {
				t.Errorf("a refused directory changed: %v, was %v", names(after), names(before))
			} else {
				for k, v := range before {
					if after[k] != v {
						t.Errorf("a refused directory changed: %s", k)
					}
				}
			}
			// The same directory with ForceNew: the files found are moved,
			// byte for byte, into superseded-*, and the run starts there.
			if tc.opts.Resume {
				return
			}
			r, err = OpenRunDir(ctx, dir, "model-sha", ours, RunDirOptions{ForceNew: true, Model: "m.onnx"})
			if err != nil {
				t.Fatalf("--force-new-run: %v", err)
			}
			defer r.Close()
			moved := snapshot(t, r.Moved)
			for k, v := range before {
				if k == "log.jsonl" {
					continue
				}
				if moved[k] != v {
					t.Errorf("--force-new-run: %s not moved intact into %s (moved: %v)", k, r.Moved, names(moved))
				}
			}
			if ck, _ := listCheckpoints(dir); len(ck) != 0 {
				t.Errorf("--force-new-run left checkpoints %v", ck)
			}
		})
	}
	if _, err := OpenRunDir(ctx, t.TempDir(), "m", ours, RunDirOptions{Resume: true, ForceNew: true}); !errors.Is(err, errs.ErrInvalidInput) {
		t.Errorf("Resume with ForceNew: %v, want ErrInvalidInput", err)
	}
}

// TestRunDirOwnCheckpointsOnly replays issue 24's two runs in one
// directory through the checkpoint functions: pruning with keep 1 never
// deletes another run's checkpoints, and another run's checkpoint is never
// replaced. (Fault injected once: pruneCheckpoints without the digest
// filter deleted run A's ckpt-5 and ckpt-10 and failed this test.)
func TestRunDirOwnCheckpointsOnly(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a, b := testConfig(), otherConfig()
	for _, s := range []int{5, 10} {
		if _, err := WriteCheckpoint(ctx, dir, ckptOf(t, s, "model-sha", a), 0); err != nil {
			t.Fatal(err)
		}
	}
	before := snapshot(t, dir)
	for _, s := range []int{2, 4} {
		if _, err := WriteCheckpoint(ctx, dir, ckptOf(t, s, "model-sha", b), 1); err != nil {
			t.Fatal(err)
		}
	}
	after := snapshot(t, dir)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("run B's pruning touched run A's %s", k)
		}
	}
	if _, ok := after[CheckpointName(2)]; ok {
		t.Errorf("run B's own older checkpoint was not pruned: %v", names(after))
	}
	if _, ok := after[CheckpointName(4)]; !ok {
		t.Errorf("run B's newest checkpoint is gone: %v", names(after))
	}
	_, err := WriteCheckpoint(ctx, dir, ckptOf(t, 5, "model-sha", b), 1)
	if !errors.Is(err, errs.ErrInvalidInput) || !strings.Contains(err.Error(), "another run") {
		t.Errorf("writing over run A's ckpt-5: %v, want a refusal", err)
	}
	if got := snapshot(t, dir)[CheckpointName(5)]; got != before[CheckpointName(5)] {
		t.Error("run A's ckpt-5 was replaced")
	}
}

// TestRunDirInUse: a second RunDir on a directory another holds is
// refused, naming the holder; after Close it is free. (Fault injected
// once: OpenRunDir without the lock let both open.)
func TestRunDirInUse(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	r, err := OpenRunDir(ctx, dir, "model-sha", testConfig(), RunDirOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = OpenRunDir(ctx, dir, "model-sha", testConfig(), RunDirOptions{Resume: true})
	var re *RunDirError
	if !errors.As(err, &re) || re.Reason != RunDirInUse || !strings.Contains(err.Error(), "process") {
		t.Fatalf("second open: %v, want RunDirInUse naming the holding process", err)
	}
	r.Close()
	r2, err := OpenRunDir(ctx, dir, "model-sha", testConfig(), RunDirOptions{Resume: true})
	if err != nil {
		t.Fatalf("after Close: %v", err)
	}
	r2.Close()
}

// TestRunDirResumeFallback: a newest checkpoint that does not read
// (corrupt data, a truncated header) is passed over for the previous one,
// with a warning, and kept as NAME.unreadable; when none reads the error
// says so and nothing is renamed. (Fault injected once: Resume returning
// the first ReadCheckpoint error failed the fallback rows.)
func TestRunDirResumeFallback(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig()
	for _, tc := range []struct {
		name    string
		damage  func(b []byte) []byte
		damaged []int
		want    int // the step resumed from; 0: the error
	}{
		{"corrupt data", func(b []byte) []byte { b[len(b)-40] ^= 1; return b }, []int{10}, 7},
		{"truncated header", func(b []byte) []byte { return b[:20] }, []int{10}, 7},
		{"empty file", func(b []byte) []byte { return nil }, []int{10}, 7},
		{"two damaged", func(b []byte) []byte { return b[:len(b)/2] }, []int{10, 7}, 5},
		{"all damaged", func(b []byte) []byte { return b[:len(b)/2] }, []int{10, 7, 5}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			r, err := OpenRunDir(ctx, dir, "model-sha", cfg, RunDirOptions{Resume: true})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			want := map[int]*Checkpoint{}
			for _, s := range []int{5, 7, 10} {
				want[s] = ckptOf(t, s, "model-sha", cfg)
				if _, err := r.Write(ctx, want[s], 0); err != nil {
					t.Fatal(err)
				}
			}
			for _, s := range tc.damaged {
				p := filepath.Join(dir, CheckpointName(s))
				b, _ := os.ReadFile(p)
				os.WriteFile(p, tc.damage(b), 0o644)
			}
			var warnings []string
			c, path, err := r.Resume(ctx, func(m string) { warnings = append(warnings, m) })
			if tc.want == 0 {
				var re *RunDirError
				if !errors.As(err, &re) || re.Reason != RunDirUnreadable || strings.Contains(err.Error(), "\n") {
					t.Fatalf("err %v, want a one-line RunDirUnreadable", err)
				}
				if ck, _ := listCheckpoints(dir); len(ck) != 3 {
					t.Errorf("checkpoints renamed although none reads: %v", ck)
				}
				return
			}
			if err != nil || c == nil || c.Step != tc.want || filepath.Base(path) != CheckpointName(tc.want) {
				t.Fatalf("resumed %v from %s (%v), want step %d", c, path, err, tc.want)
			}
			sameCheckpoint(t, c, want[tc.want])
			if len(warnings) != len(tc.damaged) {
				t.Fatalf("warnings %q, want one per damaged checkpoint", warnings)
			}
			for i, s := range tc.damaged {
				if !strings.Contains(warnings[i], CheckpointName(s)) || !strings.Contains(warnings[i], "previous valid checkpoint") {
					t.Errorf("warning %q: want it to name %s and the fallback", warnings[i], CheckpointName(s))
				}
				if _, err := os.Stat(filepath.Join(dir, CheckpointName(s)+".unreadable")); err != nil {
					t.Errorf("%s not kept aside: %v", CheckpointName(s), err)
				}
			}
			// A later write of the same step does not meet the damaged file.
			if _, err := r.Write(ctx, want[10], 1); err != nil {
				t.Errorf("writing step 10 again: %v", err)
			}
		})
	}
}

// bigCheckpoint is a checkpoint of the test run holding 64 MiB, so that
// writing it takes long enough to be interrupted.
func bigCheckpoint(t *testing.T, step int) *Checkpoint {
	c := ckptOf(t, step, "model-sha", testConfig())
	big, err := ir.NewHostTensor(ir.Float32, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	c.Tensors["big"] = big
	return c
}

// waitTemp waits until dir holds a checkpoint's temporary file.
func waitTemp(t *testing.T, dir string, done <-chan error) {
	t.Helper()
	for {
		if m, _ := filepath.Glob(filepath.Join(dir, ".ckpt-*.tmp")); len(m) > 0 {
			return
		}
		select {
		case err := <-done:
			t.Skipf("the write ended (%v) before it could be interrupted", err)
		case <-time.After(200 * time.Microsecond):
		}
	}
}

// TestRunDirAbortAndCancel: Abort during a write (a second signal) and a
// context that ends during one both leave no temporary file and no
// checkpoint; after Abort nothing more is written. (Fault injected once:
// tempFile.abort without its os.Remove left the temporary file and failed
// the Abort row.)
func TestRunDirAbortAndCancel(t *testing.T) {
	for _, how := range []string{"abort", "cancel"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			r, err := OpenRunDir(context.Background(), dir, "model-sha", testConfig(), RunDirOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := r.Write(ctx, bigCheckpoint(t, 3), 0)
				done <- err
			}()
			waitTemp(t, dir, done)
			if how == "abort" {
				r.Abort()
				// Right after Abort, before the writer notices: no temporary file.
				if m, _ := filepath.Glob(filepath.Join(dir, ".ckpt-*")); len(m) != 0 {
					t.Errorf("after Abort: %v", m)
				}
			} else {
				cancel()
			}
			err = <-done
			want := ErrAborted
			if how == "cancel" {
				want = context.Canceled
			}
			if !errors.Is(err, want) {
				t.Errorf("Write: %v, want %v", err, want)
			}
			if m, _ := filepath.Glob(filepath.Join(dir, "*ckpt-*")); len(m) != 0 {
				t.Errorf("left behind: %v", m)
			}
			if how == "abort" {
				if _, err := r.Write(context.Background(), ckptOf(t, 4, "model-sha", testConfig()), 0); !errors.Is(err, ErrAborted) {
					t.Errorf("Write after Abort: %v, want ErrAborted", err)
				}
			}
		})
	}
}

// TestRunDirStaleTemp: the temporary file of a write a crash interrupted
// is removed when the run opens its own directory, and reported.
func TestRunDirStaleTemp(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, ".ckpt-123.tmp")
	os.WriteFile(stale, []byte("half a checkpoint"), 0o600)
	r, err := OpenRunDir(context.Background(), dir, "model-sha", testConfig(), RunDirOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) || len(r.Removed) != 1 || r.Removed[0] != stale {
		t.Errorf("stale temporary file: stat %v, Removed %v", err, r.Removed)
	}
}

// TestErrorsOneLine: bad input to the package is one line of text (no
// errors.Join line break) and still matches ErrInvalidInput (and
// npy.ErrFormat for a bad .npy). (Fault injected once: invalid() back on
// errors.Join failed every row.)
func TestErrorsOneLine(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "x.npy"), []byte("\x93NUMPY\x01\x00\xff\xff"), 0o644)
	_, lossErr := ParseLoss("a:b")
	_, dataErr := OpenData(filepath.Join(dir, "missing"), []string{"x"})
	_, npyErr := OpenData(dir, []string{"x"})
	_, ckErr := ReadCheckpoint(filepath.Join(dir, "x.npy"))
	_, optErr := DefaultOptimizer("lamb")
	for name, err := range map[string]error{"loss": lossErr, "data dir": dataErr, "npy": npyErr, "checkpoint": ckErr, "optimizer": optErr,
		"validate": Config{}.Validate(), "keep": func() error { _, e := WriteCheckpoint(context.Background(), dir, testCheckpoint(t, 1), -1); return e }()} {
		if err == nil || strings.ContainsAny(err.Error(), "\r\n") || !errors.Is(err, errs.ErrInvalidInput) {
			t.Errorf("%s: %q, want one line wrapping ErrInvalidInput", name, err)
		}
	}
}
