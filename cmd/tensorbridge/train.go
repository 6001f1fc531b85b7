package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/shard"
	"github.com/tensorbridge/tensorbridge/train"
)

func init() {
	register(command{name: "train", summary: "fine-tune an ONNX model's weights on .npy data; checkpoints, resume, write the trained ONNX", run: runTrain})
}

const trainSynopsis = `MODEL.onnx --data DIR --steps N --batch B --loss SPEC
    [--optimizer adamw|adam|sgd] [--lr F] [--betas B1,B2] [--eps F] [--weight-decay F] [--momentum F]
    [--freeze REGEXP] [--shuffle SEED] [--grad-accum K]
    [--backend NAME] [--mesh data=D[,model=M]] [--strategy dp|tp|fsdp] [--precision float32|bfloat16]
    [--checkpoint-dir DIR] [--checkpoint-every N] [--keep K] [--resume | --force-new-run]
    [--skip-nonfinite N] [--output OUT.onnx] [--log-json FILE] [--cpuprofile FILE]
    [--lr-schedule constant|cosine|linear] [--warmup-steps N] [--lr-schedule-steps N]
    [--clip-grad-norm F] [--eval-data DIR --eval-every N]`

// trainFlags are train's flags as given.
type trainFlags struct {
	data, loss, optimizer, betas, freeze, shuffle string
	steps, batch, gradAccum                       int
	lr, eps, weightDecay, momentum, clip          float64
	backend, mesh, strategy, precision            string
	ckptDir                                       string
	ckptEvery, keep                               int
	resume, forceNew                              bool
	skipNonFinite                                 int
	output, logJSON                               string
	schedule                                      string
	warmup, scheduleSteps                         int
	evalData                                      string
	evalEvery                                     int
	threads                                       int
	profile                                       string
	set                                           map[string]bool
	llm                                           llmTrainFlags // checkpoint directories
}

func addTrainFlags(fs *flag.FlagSet, f *trainFlags) {
	fs.StringVar(&f.data, "data", "", "directory of NAME.npy files: one per model input and per labels/targets name; samples on the first axis")
	fs.IntVar(&f.steps, "steps", 0, "total optimizer steps of the run, counted from its first step (a resumed run continues up to it)")
	fs.IntVar(&f.batch, "batch", 0, "samples per step (per micro-batch with --grad-accum)")
	fs.StringVar(&f.loss, "loss", "", "NAME (a scalar float output is the loss), cross_entropy:OUTPUT:LABELS or mse:OUTPUT:TARGETS")
	fs.StringVar(&f.optimizer, "optimizer", "adamw", "adamw, adam or sgd (as torch.optim's)")
	fs.Float64Var(&f.lr, "lr", 1e-3, "learning rate")
	fs.StringVar(&f.betas, "betas", "", "Adam/AdamW betas B1,B2 (default 0.9,0.999)")
	fs.Float64Var(&f.eps, "eps", 1e-8, "Adam/AdamW epsilon")
	fs.Float64Var(&f.weightDecay, "weight-decay", 0, "weight decay (default 0.01 for adamw, 0 for adam and sgd)")
	fs.Float64Var(&f.momentum, "momentum", 0, "SGD momentum (dampening 0, no Nesterov)")
	fs.StringVar(&f.freeze, "freeze", "", "Go regexp on initializer names: matching weights are not trained")
	fs.StringVar(&f.shuffle, "shuffle", "", "draw samples in a seeded random order (a new permutation each epoch) with this integer SEED")
	fs.IntVar(&f.gradAccum, "grad-accum", 1, "micro-batches of --batch per update (gradients averaged)")
	fs.StringVar(&f.backend, "backend", "", "backend name or auto (default: $TENSORBRIDGE_BACKEND, else auto)")
	fs.StringVar(&f.mesh, "mesh", "", "data=D[,model=M]: train over a mesh of devices")
	fs.StringVar(&f.strategy, "strategy", "", "dp (replicated weights), tp (weights split over the model axis as shard does; needs --mesh data=D,model=M) or fsdp (weights split over the data axis); default dp")
	fs.StringVar(&f.precision, "precision", "float32", "float32, or bfloat16 (bfloat16 compute, float32 master weights and optimizer state)")
	fs.StringVar(&f.ckptDir, "checkpoint-dir", "", "directory of checkpoints (written atomically)")
	fs.IntVar(&f.ckptEvery, "checkpoint-every", 0, "write a checkpoint every N steps (and at the end); 0: at the end only")
	fs.IntVar(&f.keep, "keep", 0, "keep the newest K checkpoints (0: all)")
	fs.BoolVar(&f.resume, "resume", false, "continue from the newest readable checkpoint of this run in --checkpoint-dir (start afresh when there is none)")
	fs.BoolVar(&f.forceNew, "force-new-run", false, "start a new run in a --checkpoint-dir that holds another run (or this run's checkpoints): the files found there are moved into a superseded-* subdirectory, never deleted")
	fs.IntVar(&f.skipNonFinite, "skip-nonfinite", 0, "tolerate up to N steps whose loss or gradient norm is NaN or infinite: their update is skipped and logged (0: the first one stops the run)")
	fs.StringVar(&f.output, "output", "", "write the trained model here: a copy of MODEL.onnx with the trained initializers")
	fs.StringVar(&f.logJSON, "log-json", "", `append one JSON object per step to FILE: {"step":i,"loss":L,"step_ms":T,...}`)
	fs.StringVar(&f.schedule, "lr-schedule", "constant", "constant, cosine or linear (transformers' schedules with warm-up)")
	fs.IntVar(&f.warmup, "warmup-steps", 0, "learning-rate warm-up steps")
	fs.IntVar(&f.scheduleSteps, "lr-schedule-steps", 0, "steps cosine and linear decay over (default --steps)")
	fs.Float64Var(&f.clip, "clip-grad-norm", 0, "clip the global gradient norm to F (torch.nn.utils.clip_grad_norm_); 0: off")
	fs.StringVar(&f.evalData, "eval-data", "", "directory of held-out .npy data (same names as --data)")
	fs.IntVar(&f.threads, "threads", 0, "confine the process to T CPUs (as run --threads) before opening the backend; 0: all")
	fs.StringVar(&f.profile, "cpuprofile", "", "write a Go CPU profile of the whole run to FILE (go tool pprof)")
	fs.IntVar(&f.evalEvery, "eval-every", 0, "with --eval-data, log the mean held-out loss every N steps (and at the end)")
	addLLMTrainFlags(fs, &f.llm)
}

// config turns the flags into the training configuration (Data left for
// the data set's digest). Errors are usage errors.
func (f *trainFlags) config() (train.Config, error) {
	var cfg train.Config
	loss, err := train.ParseLoss(f.loss)
	if err != nil {
		return cfg, usageErr("%v", err)
	}
	opt, err := train.DefaultOptimizer(train.OptimizerKind(f.optimizer))
	if err != nil {
		return cfg, usageErr("--optimizer: %v", err)
	}
	if f.set["lr"] {
		opt.LR = f.lr
	}
	if f.set["eps"] {
		opt.Eps = f.eps
	}
	if f.set["weight-decay"] {
		opt.WeightDecay = f.weightDecay
	}
	if f.set["momentum"] {
		if opt.Kind != train.SGD {
			return cfg, usageErr("--momentum is for --optimizer sgd (Adam and AdamW take --betas)")
		}
		opt.Momentum = f.momentum
	}
	if f.set["betas"] {
		if opt.Kind == train.SGD {
			return cfg, usageErr("--betas is for --optimizer adam or adamw (SGD takes --momentum)")
		}
		b1, b2, ok := strings.Cut(f.betas, ",")
		x1, err1 := strconv.ParseFloat(strings.TrimSpace(b1), 64)
		x2, err2 := strconv.ParseFloat(strings.TrimSpace(b2), 64)
		if !ok || err1 != nil || err2 != nil {
			return cfg, usageErr("--betas %q: want B1,B2, e.g. 0.9,0.999", f.betas)
		}
		opt.Beta1, opt.Beta2 = x1, x2
	}
	cfg = train.Config{Loss: loss, Optimizer: opt, Freeze: f.freeze, Batch: f.batch, GradAccum: f.gradAccum,
		ClipGradNorm: f.clip, Mesh: f.mesh, Strategy: f.strategy, Precision: f.precision}
	cfg.Schedule = train.Schedule{Kind: train.ScheduleKind(f.schedule), WarmupSteps: f.warmup, TotalSteps: f.scheduleSteps}
	if cfg.Schedule.TotalSteps == 0 {
		cfg.Schedule.TotalSteps = f.steps
	}
	if f.shuffle != "" {
		seed, err := strconv.ParseInt(f.shuffle, 10, 64)
		if err != nil {
			return cfg, usageErr("--shuffle %q: want an integer seed", f.shuffle)
		}
		cfg.Shuffle, cfg.ShuffleSeed = true, seed
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usageErr("%v", err)
	}
	return cfg, nil
}

// check refuses flag combinations and values before anything is opened.
func (f *trainFlags) check() error {
	switch {
	case f.data == "":
		return usageErr("--data DIR is required")
	case f.steps <= 0:
		return usageErr("--steps %d: want > 0", f.steps)
	case f.batch <= 0:
		return usageErr("--batch %d: want > 0", f.batch)
	case f.gradAccum <= 0:
		return usageErr("--grad-accum %d: want >= 1", f.gradAccum)
	case f.ckptEvery < 0 || f.keep < 0 || f.evalEvery < 0 || f.warmup < 0 || f.scheduleSteps < 0 || f.skipNonFinite < 0:
		return usageErr("--checkpoint-every, --keep, --eval-every, --warmup-steps, --lr-schedule-steps and --skip-nonfinite cannot be negative")
	case f.resume && f.ckptDir == "":
		return usageErr("--resume needs --checkpoint-dir")
	case f.forceNew && f.ckptDir == "":
		return usageErr("--force-new-run needs --checkpoint-dir")
	case f.forceNew && f.resume:
		return usageErr("--resume continues the run in --checkpoint-dir and --force-new-run starts another: give one")
	case f.ckptEvery > 0 && f.ckptDir == "":
		return usageErr("--checkpoint-every needs --checkpoint-dir")
	case (f.evalData == "") != (f.evalEvery == 0):
		return usageErr("--eval-data and --eval-every go together")
	}
	if f.mesh != "" {
		m, err := shard.ParseMesh(f.mesh)
		if err != nil {
			return usageErr("--mesh: %v", err)
		}
		if f.batch%m.Data != 0 {
			return usageErr("--batch %d: the mesh's data axis (%d devices) does not divide it", f.batch, m.Data)
		}
	}
	for _, path := range []string{f.output, f.logJSON} {
		if path != "" {
			if err := checkWritable(path); err != nil {
				return usageErr("%v", err)
			}
		}
	}
	return nil
}

// checkWritable checks that a file can be created in path's directory.
func checkWritable(path string) error {
	dir := filepath.Dir(path)
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("%s is a directory, want a file path", path)
	}
	f, err := os.CreateTemp(dir, ".tensorbridge-write-check-*")
	if err != nil {
		return fmt.Errorf("cannot write %s: %v", path, err)
	}
	name := f.Name()
	_ = f.Close()
	return os.Remove(name)
}

// runTrain is `tensorbridge train`; its errors are one line each.
func runTrain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if os.Getenv("GOGC") == "" {
		// A training run's heap is mostly large pointer-free buffers (the
		// weights; the cpu engine keeps a step's large values in its
		// arena, off the heap), which Go's collector marks for almost
		// nothing; at the default GOGC=100 the heap may grow to twice what
		// is live before a collection. 10 against 25 took 40-50 MiB off
		// the 100M Llama's LoRA peak RSS on cpu at the same step time
		// (BENCHMARKS.md, fine-tuning, "Memory: the arena"). GOGC in the
		// environment still decides.
		defer debug.SetGCPercent(debug.SetGCPercent(trainGCPercent))
	}
	return oneLine(trainCommand(ctx, args, stdout, stderr))
}

// trainGCPercent is train's GOGC unless the environment sets one.
const trainGCPercent = 10

// trainCommand parses train's flags and runs it.
func trainCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("train", stderr, trainSynopsis)
	var f trainFlags
	addTrainFlags(fs, &f)
	var sf settingsFlags
	addResourceFlags(fs, &sf)
	if err := parse(fs, reorder(fs, args)); err != nil {
		return err
	}
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	if fs.NArg() != 1 {
		return usageErr("want exactly one MODEL.onnx (or checkpoint DIR) argument, got %d", fs.NArg())
	}
	isLLM := isCheckpointDir(fs.Arg(0))
	if isLLM && f.loss == "" {
		f.loss = "causal_lm"
	}
	if err := f.check(); err != nil {
		return err
	}
	if isLLM {
		if err := f.checkLLM(); err != nil {
			return err
		}
	} else if err := f.refuseLLMFlags(); err != nil {
		return err
	}
	if err := checkOneProcess(ctx); err != nil {
		return err
	}
	cfg, err := f.config()
	if err != nil {
		return err
	}
	if f.profile != "" {
		stop, err := startCPUProfile(f.profile)
		if err != nil {
			return err
		}
		defer stop()
	}
	if isLLM {
		err = trainLLM(ctx, fs.Arg(0), &f, cfg, sf, stdout, stderr)
	} else {
		err = trainRun(ctx, fs.Arg(0), &f, cfg, sf, stdout, stderr)
	}
	var ee *exitError
	if err != nil && !errors.As(err, &ee) && errors.Is(err, errs.ErrInvalidInput) {
		err = &exitError{code: 2, err: err}
	}
	return err
}

// trainRun opens the backend, model and data and runs the training loop.
func trainRun(ctx context.Context, modelPath string, f *trainFlags, cfg train.Config, sf settingsFlags, stdout, stderr io.Writer) error {
	settings, err := sf.settings()
	if err != nil {
		return err
	}
	if _, err := os.Stat(modelPath); err != nil {
		return usageErr("model: %v", err)
	}
	if f.threads < 0 {
		return usageErr("--threads cannot be negative")
	}
	if f.threads > 0 {
		if _, err := limitThreads(f.threads); err != nil {
			return usageErr("%v", err)
		}
	}
	parsed := readModelAhead(modelPath)
	b, err := tensorbridge.Open(ctx, f.backend, tensorbridge.WithSettings(settings))
	if err != nil {
		return err
	}
	defer b.Close()
	om, err := parsed()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	m, err := b.LoadONNX(ctx, om, modelPath, tensorbridge.WithExactShapes())
	if err != nil {
		return err
	}
	defer m.Close()
	names := dataNamesFor(m, cfg.Loss)
	ds, err := train.OpenData(f.data, names)
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("--data: %w", err)}
	}
	defer ds.Close()
	if err := checkDataSpecs(m, ds, "--data"); err != nil {
		return err
	}
	warnBatchOverData(stderr, cfg, ds.Len())
	var eval *train.Dataset
	if f.evalData != "" {
		if eval, err = train.OpenData(f.evalData, names); err != nil {
			return &exitError{code: 2, err: fmt.Errorf("--eval-data: %w", err)}
		}
		defer eval.Close()
		if err := checkDataSpecs(m, eval, "--eval-data"); err != nil {
			return err
		}
	}
	cfg.Data = ds.Digest()
	tr, err := m.NewTrainer(ctx, cfg)
	if err != nil {
		return err
	}
	defer tr.Close()
	loop := &trainLoop{f: f, cfg: cfg, tr: tr, ds: ds, stdout: stdout, stderr: stderr,
		pos: ds.Start(cfg.Shuffle, cfg.ShuffleSeed), progress: isTerminal(stderr), exit: os.Exit, export: tr.Export}
	if eval != nil {
		loop.eval = eval
	}
	if f.ckptDir != "" {
		if loop.rd, err = openRunDir(ctx, modelPath, f, tr, stderr); err != nil {
			return err
		}
		defer loop.rd.Close()
	}
	return loop.run(ctx)
}

// warnBatchOverData warns when one step takes more samples than the data
// holds: Dataset.Next wraps around, so rows repeat within the step.
func warnBatchOverData(stderr io.Writer, cfg train.Config, n int) {
	per := cfg.Batch * max(1, cfg.GradAccum)
	if per <= n {
		return
	}
	flags := fmt.Sprintf("--batch %d", cfg.Batch)
	if cfg.GradAccum > 1 {
		flags += fmt.Sprintf(" x --grad-accum %d", cfg.GradAccum)
	}
	fmt.Fprintf(stderr, "tensorbridge train: warning: a step takes %d samples (%s) but --data holds %d: the data wraps around, so %d rows of each step repeat others\n",
		per, flags, n, per-n)
}

// dataNamesFor is the data files a run reads: the model's inputs and the
// loss's labels or targets.
func dataNamesFor(m *tensorbridge.Model, loss train.Loss) []string {
	var names []string
	for _, s := range m.Inputs() {
		names = append(names, s.Name)
	}
	if loss.Kind != train.LossOutput {
		names = append(names, loss.Target)
	}
	return names
}

// checkDataSpecs compares each data file's dtype and per-sample dims with
// the model input it feeds.
func checkDataSpecs(m *tensorbridge.Model, ds *train.Dataset, flagName string) error {
	for _, s := range m.Inputs() {
		dt, dims, ok := ds.Spec(s.Name)
		if !ok {
			continue
		}
		if dt != s.DType {
			return &exitError{code: 2, err: &errs.InputError{Name: s.Name, Problem: "dtype",
				Expected: s.DType.String() + " (the model input)", Got: dt.String() + " in " + flagName + " " + s.Name + ".npy"}}
		}
		if s.RankKnown {
			bad := len(dims)+1 != len(s.Dims)
			for i := 0; !bad && i < len(dims); i++ {
				d := s.Dims[i+1]
				bad = d.Param == "" && d.Value >= 0 && d.Value != dims[i]
			}
			if bad {
				return &exitError{code: 2, err: &errs.InputError{Name: s.Name, Problem: "shape",
					Expected: s.String() + " (the model input; the first axis is the sample)",
					Got:      fmt.Sprintf("samples of %v in %s %s.npy", dims, flagName, s.Name)}}
			}
		}
	}
	return nil
}

// trainData is what the loop reads batches from: a directory of .npy
// files (train.Dataset) or a checkpoint's JSONL data (llmData).
type trainData interface {
	Len() int
	Start(shuffle bool, seed int64) train.Position
	Next(p train.Position, b int) (map[string]*ir.Tensor, train.Position, error)
}

// trainLoop is one run of the training loop.
type trainLoop struct {
	f        *trainFlags
	cfg      train.Config
	tr       *tensorbridge.Trainer
	ds, eval trainData
	pos      train.Position
	// export writes --output (Trainer.Export for an ONNX model).
	export   func(ctx context.Context, path string) error
	stdout   io.Writer
	stderr   io.Writer
	log      *bufio.Writer
	logFile  *os.File
	progress bool
	stop     atomic.Bool
	// rd is the run's --checkpoint-dir (nil without one); skipped counts
	// the non-finite steps passed over; exit ends the process at a second
	// signal (os.Exit).
	rd      *train.RunDir
	skipped int
	exit    func(int)
}

func (l *trainLoop) run(ctx context.Context) error {
	if err := l.resume(ctx); err != nil {
		return err
	}
	st := l.tr.Stats()
	steps := fmt.Sprintf("steps %d to %d", l.tr.Updates()+1, l.f.steps)
	if l.tr.Updates() >= l.f.steps {
		steps = fmt.Sprintf("already at step %d of --steps %d", l.tr.Updates(), l.f.steps)
	}
	fmt.Fprintf(l.stdout, "training %d tensors (%d parameters), freezing %d tensors (%d parameters); %s, batch %d x %d, %s\n",
		st.Trained, st.TrainedElements, st.Frozen, st.FrozenElements, l.cfg.Optimizer.Kind, l.cfg.Batch, max(1, l.cfg.GradAccum), steps)
	for _, w := range st.Whole {
		fmt.Fprintf(l.stdout, "tp: %s\n", w)
	}
	if l.f.logJSON != "" {
		fl, err := os.OpenFile(l.f.logJSON, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("--log-json: %v", err)}
		}
		defer fl.Close()
		l.logFile, l.log = fl, bufio.NewWriter(fl)
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	defer close(done)
	go l.watch(sigs, done)
	// A step in flight finishes even when ctx ends (SIGINT cancels it in
	// main): the loop stops between steps.
	stepCtx := context.WithoutCancel(ctx)
	start, first := time.Now(), l.tr.Updates()
	var last float64
	for l.tr.Updates() < l.f.steps {
		if l.stop.Load() || ctx.Err() != nil {
			return l.interrupted(stepCtx)
		}
		batch, next, err := l.ds.Next(l.pos, l.cfg.Batch*max(1, l.cfg.GradAccum))
		if err != nil {
			return err
		}
		res, err := l.tr.Step(stepCtx, batch)
		if res.Skipped {
			if err := l.nonFinite(res, err, next); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("step %d: %w", l.tr.Updates()+1, err)
		}
		l.pos, last = next, res.Loss
		if err := l.logStep(res); err != nil {
			return err
		}
		l.showProgress(res, start, first)
		if err := l.periodic(stepCtx, res.Step); err != nil {
			return err
		}
	}
	if l.progress {
		fmt.Fprintln(l.stderr)
	}
	return l.finish(stepCtx, first, last)
}

// finish writes the final checkpoint and evaluation of a run that did
// steps first+1 to --steps, reports them, and writes --output.
func (l *trainLoop) finish(stepCtx context.Context, first int, last float64) error {
	done := l.tr.Updates() - first
	if done > 0 && l.f.ckptDir != "" && (l.f.ckptEvery == 0 || l.tr.Updates()%l.f.ckptEvery != 0) {
		if err := l.checkpoint(stepCtx); err != nil {
			return err
		}
	}
	if done > 0 && l.eval != nil && l.tr.Updates()%l.f.evalEvery != 0 {
		if err := l.evaluate(stepCtx, l.tr.Updates()); err != nil {
			return err
		}
	}
	var skipped string
	if l.skipped > 0 {
		skipped = fmt.Sprintf("; skipped %d step(s) whose loss or gradient norm was not finite", l.skipped)
	}
	switch {
	case done == 0:
		fmt.Fprintf(l.stdout, "trained 0 steps: resumed at step %d, at or past --steps %d\n", first, l.f.steps)
	case first == 0:
		fmt.Fprintf(l.stdout, "trained %d steps; last loss %.6g%s\n", done, last, skipped)
	default:
		fmt.Fprintf(l.stdout, "trained %d steps (%d to %d); last loss %.6g%s\n", done, first+1, l.tr.Updates(), last, skipped)
	}
	if l.f.output != "" {
		if err := l.export(stepCtx, l.f.output); err != nil {
			return fmt.Errorf("--output: %w", err)
		}
		fmt.Fprintf(l.stdout, "wrote %s\n", l.f.output)
	}
	return nil
}

// periodic writes checkpoints and runs evaluations on their schedules.
func (l *trainLoop) periodic(ctx context.Context, step int) error {
	if l.f.ckptEvery > 0 && step%l.f.ckptEvery == 0 {
		if err := l.checkpoint(ctx); err != nil {
			return err
		}
	}
	if l.eval != nil && step%l.f.evalEvery == 0 {
		return l.evaluate(ctx, step)
	}
	return nil
}

// evaluate logs the mean loss over the whole held-out set, in batches of
// --batch (the last may be smaller), weighted by sample count.
func (l *trainLoop) evaluate(ctx context.Context, step int) error {
	n := l.eval.Len()
	p := l.eval.Start(false, 0)
	var sum float64
	for done := 0; done < n; {
		b := min(l.cfg.Batch, n-done)
		batch, next, err := l.eval.Next(p, b)
		if err != nil {
			return err
		}
		loss, err := l.tr.Eval(ctx, batch)
		if err != nil {
			return fmt.Errorf("eval at step %d: %w", step, err)
		}
		sum += loss * float64(b)
		p, done = next, done+b
	}
	mean := sum / float64(n)
	fmt.Fprintf(l.stdout, "step %d: eval loss %.6g\n", step, mean)
	return l.writeLog(evalLine{Step: step, EvalLoss: jsonFloat(mean)})
}

// stepLine and evalLine are --log-json's lines, in this field order.
type stepLine struct {
	Step      int       `json:"step"`
	Loss      jsonFloat `json:"loss"`
	StepMS    float64   `json:"step_ms"`
	OutsideMS float64   `json:"outside_ms"`
	LR        float64   `json:"lr"`
	GradNorm  jsonFloat `json:"grad_norm"`
	// Skipped marks a step whose loss or gradient norm was not finite:
	// its update was not applied (--skip-nonfinite).
	Skipped bool `json:"skipped,omitempty"`
}

type evalLine struct {
	Step     int       `json:"step"`
	EvalLoss jsonFloat `json:"eval_loss"`
}

// jsonFloat is a float64 that writes NaN and infinities as JSON strings
// ("NaN", "+Inf"): a diverged run still logs a valid line.
type jsonFloat float64

func (f jsonFloat) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
		return json.Marshal(fmt.Sprint(float64(f)))
	}
	return json.Marshal(float64(f))
}

// logStep writes the step's JSON line and flushes it.
func (l *trainLoop) logStep(r tensorbridge.StepResult) error {
	return l.writeLog(stepLine{Step: r.Step, Loss: jsonFloat(r.Loss), StepMS: float64(r.Duration.Microseconds()) / 1000,
		OutsideMS: float64(r.Outside.Microseconds()) / 1000, LR: r.LR, GradNorm: jsonFloat(r.GradNorm), Skipped: r.Skipped})
}

func (l *trainLoop) writeLog(v any) error {
	if l.log == nil {
		return nil
	}
	line, err := json.Marshal(v)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	if _, err := l.log.Write(line); err != nil {
		return fmt.Errorf("--log-json: %w", err)
	}
	if err := l.log.Flush(); err != nil {
		return fmt.Errorf("--log-json: %w", err)
	}
	return nil
}

// showProgress prints step, loss, steps/s and ETA on a terminal.
func (l *trainLoop) showProgress(r tensorbridge.StepResult, start time.Time, first int) {
	if !l.progress {
		return
	}
	done := r.Step - first
	rate := float64(done) / time.Since(start).Seconds()
	eta := time.Duration(float64(l.f.steps-r.Step) / rate * float64(time.Second)).Round(time.Second)
	fmt.Fprintf(l.stderr, "\rstep %d/%d  loss %.5g  %.2f steps/s  ETA %s   ", r.Step, l.f.steps, r.Loss, rate, eta)
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
