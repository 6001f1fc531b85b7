package main

// train's checkpoint directory, resume, signals, non-finite steps, the
// one-process rule and one-line errors.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/cluster"
	"github.com/tensorbridge/tensorbridge/discover"
	"github.com/tensorbridge/tensorbridge/train"
)

// checkOneProcess refuses to run train as one process of a multi-process
// job: the process count is cluster.Bootstrap's reading of the environment
// (TENSORBRIDGE_NUM_PROCESSES, GKE's TPU worker list, multislice; a TPU
// VM's metadata server is not asked, as the pjrt backends' cluster=auto
// does not). Multi-process training is not built: each process would
// train the same model alone, and all would write one --checkpoint-dir.
func checkOneProcess(ctx context.Context) error {
	noMetadata := func(context.Context) (*discover.TPUEnvironment, error) { return nil, nil }
	cfg, err := cluster.Bootstrap(ctx, cluster.Options{TPU: noMetadata})
	if err != nil {
		return usageErr("the environment describes a multi-process job that does not parse (%v); train runs as one process only: multi-process training is not built", err)
	}
	if cfg.MultiProcess() {
		return usageErr("this is process %d of a %d-process job (process count from %s): multi-process training is not built, so every process would train the same model alone and write the same --checkpoint-dir; run train as one process on one host, over that host's devices with --mesh data=D",
			cfg.ProcessIndex.Value, cfg.ProcessCount.Value, cfg.ProcessCount.Source)
	}
	return nil
}

// openRunDir claims --checkpoint-dir for this run (train.OpenRunDir) and
// says on stderr what it moved aside or cleaned up.
func openRunDir(ctx context.Context, modelPath string, f *trainFlags, tr *tensorbridge.Trainer, stderr io.Writer) (*train.RunDir, error) {
	rd, err := train.OpenRunDir(ctx, f.ckptDir, tr.ModelDigest(), tr.Config(),
		train.RunDirOptions{Resume: f.resume, ForceNew: f.forceNew, Model: modelPath})
	if err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	if rd.Moved != "" {
		fmt.Fprintf(stderr, "tensorbridge train: --force-new-run: moved the files found in %s into %s; a new run starts at step 1\n", f.ckptDir, rd.Moved)
	}
	for _, path := range rd.Removed {
		fmt.Fprintf(stderr, "tensorbridge train: removed %s, the temporary file of an interrupted write\n", path)
	}
	return rd, nil
}

// watch turns the first SIGINT/SIGTERM into a stop after the current step
// and ends the process at the second, removing the temporary file of a
// checkpoint being written first (RunDir.Abort).
func (l *trainLoop) watch(sigs chan os.Signal, done chan struct{}) {
	select {
	case s := <-sigs:
		l.stop.Store(true)
		fmt.Fprintf(l.stderr, "\ntensorbridge train: %v: finishing the current step, then writing a checkpoint (signal again to exit at once)\n", s)
	case <-done:
		return
	}
	select {
	case s := <-sigs:
		if l.rd != nil {
			l.rd.Abort()
		}
		fmt.Fprintf(l.stderr, "tensorbridge train: %v again: exiting without a checkpoint (one being written was removed)\n", s)
		code := 130
		if s == syscall.SIGTERM {
			code = 143
		}
		l.exit(code)
	case <-done:
	}
}

// interrupted writes a checkpoint after a signal and ends the run cleanly.
func (l *trainLoop) interrupted(ctx context.Context) error {
	if l.f.ckptDir == "" {
		fmt.Fprintf(l.stderr, "tensorbridge train: stopped after step %d; no --checkpoint-dir, so nothing was saved\n", l.tr.Updates())
		return nil
	}
	if err := l.checkpoint(ctx); err != nil {
		return err
	}
	fmt.Fprintf(l.stderr, "tensorbridge train: stopped after step %d; resume with --resume\n", l.tr.Updates())
	return nil
}

// resume restores the run's newest readable checkpoint with --resume; a
// newer one that does not read is reported on stderr and passed over.
func (l *trainLoop) resume(ctx context.Context) error {
	if !l.f.resume {
		return nil
	}
	warn := func(msg string) { fmt.Fprintf(l.stderr, "tensorbridge train: %s\n", msg) }
	c, path, err := l.rd.Resume(ctx, warn)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if c == nil {
		fmt.Fprintf(l.stdout, "no checkpoint in %s: starting from step 1\n", l.f.ckptDir)
		return nil
	}
	if err := l.tr.Restore(ctx, c); err != nil {
		return &exitError{code: 2, err: fmt.Errorf("--resume %s: %w", path, err)}
	}
	l.pos = c.Position
	fmt.Fprintf(l.stdout, "resumed from %s (step %d)\n", path, c.Step)
	return nil
}

// checkpoint writes the trainer's state and the data position into the
// run's directory, pruning to --keep of the run's own checkpoints.
func (l *trainLoop) checkpoint(ctx context.Context) error {
	c, err := l.tr.State()
	if err != nil {
		return err
	}
	c.Position = l.pos
	path, err := l.rd.Write(ctx, c, l.f.keep)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	fmt.Fprintf(l.stderr, "checkpoint %s (step %d)\n", path, c.Step)
	return nil
}

// nonFinite handles a step whose loss or gradient norm was NaN or
// infinite (err, a *train.NonFiniteError): the Trainer did not apply its
// update. Within --skip-nonfinite the batch is passed over and logged;
// past it the run stops, before any checkpoint is written or pruned, so
// the last checkpoint keeps the last good state.
func (l *trainLoop) nonFinite(res tensorbridge.StepResult, err error, next train.Position) error {
	l.skipped++
	if lerr := l.logStep(res); lerr != nil {
		return lerr
	}
	if l.skipped > l.f.skipNonFinite {
		return fmt.Errorf("%w; the run stops (nothing was checkpointed or pruned after step %d; --skip-nonfinite N passes over up to N such steps)",
			err, l.tr.Updates())
	}
	l.pos = next
	fmt.Fprintf(l.stderr, "tensorbridge train: %v; its batch is skipped (%d of --skip-nonfinite %d)\n", err, l.skipped, l.f.skipNonFinite)
	return nil
}

// oneLine makes err's message one line (a lower layer's line breaks, a
// compiler's diagnostics say, become "; "), keeping its chain and, for an
// *exitError, its exit code.
func oneLine(err error) error {
	if err == nil || !strings.ContainsAny(err.Error(), "\r\n") {
		return err
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err == nil || !strings.ContainsAny(ee.err.Error(), "\r\n") {
			return err
		}
		return &exitError{code: ee.code, err: oneLineError{err}}
	}
	return oneLineError{err}
}

// oneLineError is an error whose message is flattened to one line.
type oneLineError struct{ err error }

func (e oneLineError) Error() string {
	var lines []string
	for _, l := range strings.FieldsFunc(e.err.Error(), func(r rune) bool { return r == '\n' || r == '\r' }) {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "; ")
}

func (e oneLineError) Unwrap() error { return e.err }
