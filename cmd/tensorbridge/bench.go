package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/device"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/npy"
	"github.com/tensorbridge/tensorbridge/precision"
)

func init() {
	register(command{name: "bench", summary: "benchmark an ONNX model: first-call split, latency percentiles, throughput, FLOP/s, precision cost", run: runBench})
}

const benchSynopsis = "MODEL [--backend B] [--batch 1,8] [--seq N] [--dim NAME=N] [--iters K | --duration D] [--warmup W] [--threads T] [--precision P [--mixed-precision false]] [--int-range LO:HI] [--seed S] [--save-io DIR] [--cpuprofile FILE] [--restart] [--json]"

// benchConfig is the parsed command line of `tensorbridge bench`.
type benchConfig struct {
	model     string
	backend   string
	batches   []int
	batchSet  bool // --batch was given (not the default)
	seq       int
	dims      map[string]int
	iters     int
	duration  time.Duration
	warmup    int
	threads   int
	precision string
	mixed     bool
	weights   string // --weights-on-device: "" (backend default), "true", "false"
	mesh      meshFlags
	intRange  intRange
	seed      uint64
	saveIO    string
	profile   string
	restart   bool
	firstOnly bool
	asJSON    bool
	settings  settingsFlags // memory fraction, cache, compile timeout, buckets
	args      []string      // the flags as given, for --restart's child processes
}

// dimFlags collects repeated --dim NAME=N flags.
type dimFlags map[string]int

func (f dimFlags) String() string {
	var parts []string
	for k, v := range f {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (f dimFlags) Set(s string) error {
	name, val, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return fmt.Errorf("want NAME=N, got %q", s)
	}
	var n int
	if _, err := fmt.Sscanf(val, "%d", &n); err != nil || fmt.Sprint(n) != val || n <= 0 {
		return fmt.Errorf("%s: want a positive integer, got %q", name, val)
	}
	if _, dup := f[name]; dup {
		return fmt.Errorf("%s given twice", name)
	}
	f[name] = n
	return nil
}

// parseBench parses and checks the command line; every problem is a usage
// error (exit code 2).
func parseBench(args []string, stderr io.Writer) (*benchConfig, error) {
	fs := newFlags("bench", stderr, benchSynopsis)
	c := &benchConfig{dims: map[string]int{}}
	backend := fs.String("backend", "", "backend name or auto (default: $TENSORBRIDGE_BACKEND, else auto)")
	batch := fs.String("batch", "1,8", "comma-separated batch sizes for the batch dimension")
	fs.IntVar(&c.seq, "seq", 0, "sequence length for inputs with a sequence dimension (default 128 when the model has one)")
	fs.Var(dimFlags(c.dims), "dim", "size of a named symbolic dimension, NAME=N (repeatable; wins over --batch and --seq)")
	fs.IntVar(&c.iters, "iters", 0, "timed runs per batch size (exclusive with --duration; default: --duration 5s)")
	fs.DurationVar(&c.duration, "duration", 0, "time spent in timed runs per batch size, at least 5 runs (exclusive with --iters)")
	fs.IntVar(&c.warmup, "warmup", 3, "untimed runs per batch size after the first two (which are reported separately)")
	fs.IntVar(&c.threads, "threads", 0, "confine the process to T CPUs (affinity, GOMAXPROCS and the XLA CPU plugin's PJRT_NPROC) before opening the backend; 0: all")
	fs.StringVar(&c.precision, "precision", "float32", "compute precision: float32, bfloat16, float16 or auto (the backend's setting)")
	addMeshFlags(fs, &c.mesh)
	fs.StringVar(&c.weights, "weights-on-device", "", "true: weights are device buffers shared by every compiled shape; false: compiled in as constants (default: true on tpu, cuda, rocm; false on cpu, xla-cpu)")
	fs.Func("mixed-precision", "true or false: with a 16-bit --precision, keep weights and accumulations in float32 (default true), as run, warmup and serve take it", func(v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
		c.mixed = b
		return nil
	})
	fs.BoolVar(&c.mixed, "mixed", true, "alias of --mixed-precision: --mixed=false computes everything in 16 bits")
	rng := fs.String("int-range", "", "integer inputs drawn from [LO, HI), as LO:HI (default: the embedding table size when an input indexes one, else 0:100)")
	seed := fs.Uint64("seed", 1, "seed of the generated inputs")
	fs.StringVar(&c.saveIO, "save-io", "", "write each batch size's inputs and first outputs as .npy files into DIR (for scripts/bench-ort.py)")
	fs.StringVar(&c.profile, "cpuprofile", "", "write a Go CPU profile of the whole benchmark to FILE (go tool pprof)")
	fs.BoolVar(&c.restart, "restart", false, "measure time to first inference of a fresh process with a cold, then a warm, compile cache (two child processes)")
	fs.BoolVar(&c.firstOnly, "first-only", false, "stop after the first inference of the first batch size (what --restart's child processes run)")
	fs.BoolVar(&c.asJSON, "json", false, "print the report as JSON")
	addResourceFlags(fs, &c.settings)
	if err := parse(fs, reorder(fs, args)); err != nil {
		return nil, err
	}
	if fs.NArg() != 1 {
		return nil, usageErr("want exactly one MODEL argument, got %d", fs.NArg())
	}
	c.model = fs.Arg(0)
	c.backend = *backend
	c.seed = *seed
	var err error
	if c.batches, err = parseIntList("batch", *batch); err != nil {
		return nil, usageErr("%v", err)
	}
	if c.seq < 0 {
		return nil, usageErr("--seq must be positive, got %d", c.seq)
	}
	if c.iters < 0 || c.duration < 0 || c.warmup < 0 || c.threads < 0 {
		return nil, usageErr("--iters, --duration, --warmup and --threads cannot be negative")
	}
	if c.iters > 0 && c.duration > 0 {
		return nil, usageErr("give --iters or --duration, not both")
	}
	if c.iters == 0 && c.duration == 0 {
		c.duration = 5 * time.Second
	}
	switch c.precision {
	case "float32", "bfloat16", "float16", "auto":
	default:
		return nil, usageErr("--precision %q: want float32, bfloat16, float16 or auto", c.precision)
	}
	c.intRange = intRange{lo: 0, hi: 100, from: "default range"}
	if *rng != "" {
		if c.intRange, err = parseRange(*rng); err != nil {
			return nil, usageErr("%v", err)
		}
	}
	if c.restart && c.firstOnly {
		return nil, usageErr("--restart and --first-only cannot be combined")
	}
	if c.threads > 0 {
		if n := availableCPUs(); c.threads > n {
			return nil, usageErr("--threads %d: this process may run on %d CPUs", c.threads, n)
		}
	}
	fs.Visit(func(f *flag.Flag) { c.batchSet = c.batchSet || f.Name == "batch" })
	c.args = reorder(fs, args)
	return c, nil
}

// benchReport is the output of `tensorbridge bench`.
type benchReport struct {
	Model     string   `json:"model"`
	Backend   string   `json:"backend"`
	Device    string   `json:"device"`
	Host      hostInfo `json:"host"`
	Threads   string   `json:"threads"`
	Precision string   `json:"precision"`
	// OpenS is the time to open the backend (loading a PJRT plugin);
	// LoadS the time of LoadModel (reading and checking the ONNX file).
	OpenS      float64       `json:"open_s"`
	LoadS      float64       `json:"load_s"`
	Batches    []batchReport `json:"batches"`
	FLOPSource string        `json:"flop_source,omitempty"`
	// PeakFLOPS is the device's peak for the precision in use, from the
	// catalog; PeakNote says where it came from or why there is none.
	PeakFLOPS float64         `json:"peak_flops_per_s,omitempty"`
	PeakNote  string          `json:"peak_note"`
	Cache     *tensorbridgeCS `json:"compile_cache,omitempty"`
	Restart   *restartReport  `json:"restart,omitempty"`
	Notes     []string        `json:"notes,omitempty"`
	// FirstResultUnixNano is, with --first-only, the wall clock when the
	// first inference returned: --restart's parent subtracts its child's
	// start from it.
	FirstResultUnixNano int64 `json:"first_result_unix_ns,omitempty"`
}

// latencyStats are percentiles over the timed runs, nearest-rank.
type latencyStats struct {
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	Mean float64 `json:"mean_ms"`
	Min  float64 `json:"min_ms"`
	Max  float64 `json:"max_ms"`
}

// batchReport is one batch size's measurements.
type batchReport struct {
	// Batch is the size of the batch dimension in this run's inputs, so
	// throughput counts Batch samples per run. BatchAxis says what the
	// model allows: "symbolic" (any size), "fixed" (this size only) or
	// "none" (no batch dimension; Batch is 1 and a run counts as one
	// sample).
	Batch     int              `json:"batch"`
	BatchAxis string           `json:"batch_axis"`
	Seq       int              `json:"seq,omitempty"`
	Inputs    []generatedInput `json:"inputs"`
	// CompileS is the time to specialise and compile the model for these
	// shapes: measured alone with Model.Warmup before the first Run, or,
	// when Warmup cannot be used, estimated as FirstRunS - SecondRunS (the
	// first Run then compiles). CompileMethod says which.
	// SecondRunS is the Run after the first.
	FirstRunS     float64            `json:"first_run_s"`
	SecondRunS    float64            `json:"second_run_s"`
	CompileS      float64            `json:"compile_s"`
	CompileMethod string             `json:"compile_method"`
	Warmup        int                `json:"warmup_runs"`
	Iters         int                `json:"timed_runs"`
	TimedS        float64            `json:"timed_s"`
	Latency       latencyStats       `json:"latency"`
	Throughput    float64            `json:"throughput_samples_per_s"`
	FLOPs         float64            `json:"flops_per_run,omitempty"`
	FLOPsByOp     map[string]float64 `json:"flops_by_op,omitempty"`
	AchievedFLOPS float64            `json:"achieved_flops_per_s,omitempty"`
	PeakShare     float64            `json:"peak_share,omitempty"`
	FLOPError     string             `json:"flop_error,omitempty"`
	// Accuracy is each output's relative L2 error against float32 on the
	// same backend and inputs, when --precision is not float32.
	Accuracy []outputAccuracy `json:"accuracy,omitempty"`
	Memory   *memoryReport    `json:"memory,omitempty"`
}

// outputAccuracy is the cost of the chosen precision on one output.
type outputAccuracy struct {
	Output     string  `json:"output"`
	RelativeL2 float64 `json:"relative_l2"`
	MaxAbsDiff float64 `json:"max_abs_diff"`
}

// memoryReport is the backend's memory figures after the timed runs.
type memoryReport struct {
	BytesInUse     uint64 `json:"bytes_in_use"`
	PeakBytesInUse uint64 `json:"peak_bytes_in_use"`
	Source         string `json:"source"`
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseBench(args, stderr)
	if err != nil {
		return err
	}
	if c.restart {
		return runRestart(ctx, c, stdout, stderr)
	}
	if c.profile != "" {
		stop, err := startCPUProfile(c.profile)
		if err != nil {
			return err
		}
		defer stop()
	}
	rep, err := bench(ctx, c, stderr)
	if err != nil {
		return err
	}
	return printBench(stdout, c, rep)
}

// bench runs the measurements of one process.
func bench(ctx context.Context, c *benchConfig, stderr io.Writer) (*benchReport, error) {
	rep := &benchReport{Model: c.model, Precision: c.precision}
	rep.Host = hostInfo{CPU: cpuModel(), CPUs: availableCPUs(), GoVersion: runtime.Version(), LoadBefore: loadAvg(), Malloc: mallocSetting()}
	if c.threads > 0 {
		desc, err := limitThreads(c.threads)
		if err != nil {
			return nil, err
		}
		rep.Threads = desc
	} else {
		rep.Threads = fmt.Sprintf("%d threads: all CPUs, GOMAXPROCS=%d", availableCPUs(), runtime.GOMAXPROCS(0))
	}
	rep.Host.GOMAXPROCS = runtime.GOMAXPROCS(0)
	if _, err := os.Stat(c.model); err != nil {
		return nil, fmt.Errorf("model %s: %w", c.model, err)
	}
	popts := precisionOptions(c.precision, c.mixed)
	switch c.weights {
	case "":
	case "true", "false":
		popts = append(popts, tensorbridge.WithWeightsOnDevice(c.weights == "true"))
	default:
		return nil, fmt.Errorf("--weights-on-device must be true or false, got %q", c.weights)
	}

	settings, err := c.settings.settings()
	if err != nil {
		return nil, err
	}
	parsed := readModelAhead(c.model) // read while the backend opens
	t0 := time.Now()
	b, err := tensorbridge.Open(ctx, c.backend, tensorbridge.WithSettings(settings), c.settings.clusterOption())
	if err != nil {
		return nil, err
	}
	printCPUHint(os.Stderr, b.Selection()) // cpuhint.go
	if c.settings.printConfig {
		fmt.Fprintf(os.Stderr, "backend %s\n%s", b.Name(), b.Settings())
	}
	defer b.Close()
	rep.OpenS = time.Since(t0).Seconds()
	rep.Backend = b.Name()
	var dev device.Info
	if devs := b.Devices(); len(devs) > 0 {
		dev = devs[0]
		rep.Device = dev.Kind
	}

	t0 = time.Now()
	mopts, err := c.mesh.options(ctx, b, c.model)
	if err != nil {
		return nil, err
	}
	om, err := parsed()
	if err != nil {
		return nil, err
	}
	pb := om.Proto() // read-only: FLOP counts and integer input ranges below
	m, err := b.LoadONNX(ctx, om, c.model, append(popts, mopts...)...)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	rep.LoadS = time.Since(t0).Seconds()
	rep.Precision = m.Precision()

	ranges := map[string]intRange{}
	if c.intRange.from != "--int-range" {
		ranges = inferIntRanges(pb, c.intRange)
	}
	seq := c.seq
	if seq == 0 {
		seq = 128
	}

	var ref *tensorbridge.Model // float32 reference for the accuracy cost
	defer func() {
		if ref != nil {
			_ = ref.Close()
		}
	}()
	var fb *tensorbridge.Backend // cpu backend to build graphs for FLOP counting
	defer func() {
		if fb != nil {
			_ = fb.Close()
		}
	}()

	plan, err := planBatches(m.Inputs(), c.batches, c.batchSet, c.dims)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	if plan.Note != "" {
		rep.Notes = append(rep.Notes, plan.Note)
	}
	for _, batch := range plan.Sizes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		gen, usesSeq, err := generateInputs(m.Inputs(), dimSizes{batch: batch, seq: seq, named: c.dims}, c.seed, ranges, c.intRange)
		if err != nil {
			return nil, usageErr("%v", err)
		}
		br := batchReport{Batch: batch, BatchAxis: plan.Axis, Inputs: gen, Warmup: c.warmup}
		if usesSeq {
			br.Seq = seq
		}
		in := inputMap(gen)

		compiled, err := compileAhead(ctx, m, in)
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		first, err := m.Run(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("batch %d: first run: %w", batch, err)
		}
		br.FirstRunS = time.Since(t0).Seconds()
		if c.firstOnly {
			rep.FirstResultUnixNano = time.Now().UnixNano()
			br.CompileS, br.CompileMethod = compiled.seconds, compiled.method
			if !compiled.done {
				br.CompileMethod = "included in first_run_s (no second run with --first-only)"
			}
			rep.Batches = append(rep.Batches, br)
			rep.Cache = cacheStats(b)
			finalizeAll(first)
			break
		}
		t0 = time.Now()
		second, err := m.Run(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("batch %d: second run: %w", batch, err)
		}
		br.SecondRunS = time.Since(t0).Seconds()
		finalizeAll(second)
		if compiled.done {
			br.CompileS, br.CompileMethod = compiled.seconds, compiled.method
		} else {
			br.CompileS = max(0, br.FirstRunS-br.SecondRunS)
			br.CompileMethod = "estimate: first_run_s - second_run_s (Model.Run compiles on first use)"
		}

		for i := 0; i < c.warmup; i++ {
			out, err := m.Run(ctx, in)
			if err != nil {
				return nil, fmt.Errorf("batch %d: warm-up run %d: %w", batch, i+1, err)
			}
			finalizeAll(out)
		}
		samples, total, err := timedRuns(ctx, m, in, c.iters, c.duration)
		if err != nil {
			return nil, fmt.Errorf("batch %d: %w", batch, err)
		}
		br.Iters, br.TimedS = len(samples), total.Seconds()
		br.Latency = percentiles(samples)
		br.Throughput = float64(batch*len(samples)) / total.Seconds()
		if ms, err := b.MemoryStats(ctx, 0); err == nil {
			br.Memory = &memoryReport{BytesInUse: ms.BytesInUse, PeakBytesInUse: ms.PeakBytesInUse, Source: ms.Source}
		}

		// FLOPs, off the clock.
		if fb == nil {
			if fb, err = tensorbridge.Open(ctx, "cpu"); err != nil {
				return nil, err
			}
		}
		fc, err := countFLOPs(fb.Engine(), pb, inputShapes(gen), nil)
		if err != nil {
			br.FLOPError = err.Error()
		} else if fc.Total > 0 {
			rep.FLOPSource = flopSourceONNX
			br.FLOPs, br.FLOPsByOp = fc.Total, fc.ByOp
			br.AchievedFLOPS = fc.Total * float64(len(samples)) / total.Seconds()
		}

		// Accuracy cost of the precision, against float32.
		if !strings.HasPrefix(rep.Precision, "float32") {
			if ref == nil {
				if ref, err = b.LoadModel(ctx, c.model, float32Options()...); err != nil {
					return nil, fmt.Errorf("loading the float32 reference: %w", err)
				}
			}
			want, err := ref.Run(ctx, in)
			if err != nil {
				return nil, fmt.Errorf("batch %d: float32 reference run: %w", batch, err)
			}
			br.Accuracy, err = compareOutputs(m.Outputs(), first, want)
			finalizeAll(want)
			if err != nil {
				return nil, fmt.Errorf("batch %d: %w", batch, err)
			}
		}
		if c.saveIO != "" {
			if err := saveIO(ctx, c, batch, gen, m.Outputs(), first); err != nil {
				return nil, err
			}
		}
		finalizeAll(first)
		rep.Batches = append(rep.Batches, br)
	}
	rep.Cache = cacheStats(b)
	rep.PeakFLOPS, rep.PeakNote = peakFor(dev, c.precision)
	if rep.PeakFLOPS > 0 {
		for i := range rep.Batches {
			if rep.Batches[i].AchievedFLOPS > 0 {
				rep.Batches[i].PeakShare = rep.Batches[i].AchievedFLOPS / rep.PeakFLOPS
			}
		}
	}
	rep.Host.LoadAfter = loadAvg()
	if rep.Host.LoadAfter[0] > float64(rep.Host.CPUs) {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the 1-minute load average (%.2f) exceeded the %d CPUs: other work competed for them, figures are pessimistic", rep.Host.LoadAfter[0], rep.Host.CPUs))
	}
	return rep, nil
}

// timedRuns runs the model iters times, or for at least d and 5 runs, and
// returns each run's latency in milliseconds and the total wall time.
func timedRuns(ctx context.Context, m *tensorbridge.Model, in map[string]*ir.Tensor, iters int, d time.Duration) ([]float64, time.Duration, error) {
	var samples []float64
	start := time.Now()
	for k := 0; ; k++ {
		if iters > 0 && k >= iters {
			break
		}
		if iters == 0 && k >= 5 && time.Since(start) >= d {
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		t0 := time.Now()
		out, err := m.Run(ctx, in)
		if err != nil {
			return nil, 0, fmt.Errorf("timed run %d: %w", k+1, err)
		}
		samples = append(samples, float64(time.Since(t0).Nanoseconds())/1e6)
		finalizeAll(out)
	}
	return samples, time.Since(start), nil
}

// percentiles computes nearest-rank percentiles: the p-th is the smallest
// sample with at least p% of the samples at or below it.
func percentiles(samples []float64) latencyStats {
	if len(samples) == 0 {
		return latencyStats{}
	}
	s := append([]float64(nil), samples...)
	sort.Float64s(s)
	rank := func(p float64) float64 {
		k := int(math.Ceil(p/100*float64(len(s)))) - 1
		return s[min(max(k, 0), len(s)-1)]
	}
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	return latencyStats{P50: rank(50), P90: rank(90), P99: rank(99), Mean: sum / float64(len(s)), Min: s[0], Max: s[len(s)-1]}
}

func finalizeAll(outs map[string]*ir.Tensor) {
	for _, t := range outs {
		if t != nil {
			t.FinalizeAll()
		}
	}
}

// compareOutputs returns, per float output, the relative L2 error of got
// against want and the largest absolute difference.
func compareOutputs(specs []tensorbridge.ValueSpec, got, want map[string]*ir.Tensor) ([]outputAccuracy, error) {
	var out []outputAccuracy
	for _, s := range specs {
		g, w := got[s.Name], want[s.Name]
		if g == nil || w == nil {
			return nil, fmt.Errorf("output %q missing from a run", s.Name)
		}
		gf, err := floatsOf(g)
		if err != nil {
			return nil, fmt.Errorf("output %q: %w", s.Name, err)
		}
		wf, err := floatsOf(w)
		if err != nil {
			return nil, fmt.Errorf("output %q: %w", s.Name, err)
		}
		if gf == nil || wf == nil {
			continue // not a float output
		}
		if len(gf) != len(wf) {
			return nil, fmt.Errorf("output %q: %d values against %d in float32", s.Name, len(gf), len(wf))
		}
		a := outputAccuracy{Output: s.Name, RelativeL2: precision.RelativeL2(gf, wf)}
		for k := range gf {
			a.MaxAbsDiff = max(a.MaxAbsDiff, math.Abs(float64(gf[k])-float64(wf[k])))
		}
		out = append(out, a)
	}
	return out, nil
}

// floatsOf returns a float tensor's values as float32 (nil for other
// dtypes).
func floatsOf(t *ir.Tensor) ([]float32, error) {
	switch t.DType() {
	case ir.Float32, ir.Float64, ir.BFloat16, ir.Float16:
	default:
		return nil, nil
	}
	a, err := npy.FromIR(t)
	if err != nil {
		return nil, err
	}
	switch d := a.Data.(type) {
	case []float32:
		return d, nil
	case []float64:
		f := make([]float32, len(d))
		for k, v := range d {
			f[k] = float32(v)
		}
		return f, nil
	}
	var f []float32
	err = t.ConstFlatData(func(flat any) {
		switch v := flat.(type) {
		case []ir.BFloat16Value:
			f = make([]float32, len(v))
			for k, x := range v {
				f[k] = x.Float32()
			}
		case []ir.Float16Value:
			f = make([]float32, len(v))
			for k, x := range v {
				f[k] = x.Float32()
			}
		}
	})
	if err == nil && f == nil {
		err = fmt.Errorf("cannot read %s values", t.DType())
	}
	return f, err
}

// saveIO writes one batch size's inputs and first outputs as .npy files:
// MODEL.bB.in.NAME.npy and MODEL.bB.out.NAME.npy, where MODEL is the model
// file's base name without extension.
func saveIO(ctx context.Context, c *benchConfig, batch int, gen []generatedInput, outs []tensorbridge.ValueSpec, got map[string]*ir.Tensor) error {
	if err := os.MkdirAll(c.saveIO, 0o755); err != nil {
		return fmt.Errorf("--save-io: %w", err)
	}
	base := strings.TrimSuffix(filepath.Base(c.model), filepath.Ext(c.model))
	write := func(kind, name string, t *ir.Tensor) error {
		a, err := npy.FromIR(t)
		if err != nil {
			return fmt.Errorf("--save-io %s %s: %w", kind, name, err)
		}
		p := filepath.Join(c.saveIO, fmt.Sprintf("%s.b%d.%s.%s.npy", base, batch, kind, safeFileName(name)))
		if err := npy.WriteFile(ctx, p, a, &npy.WriteOptions{BFloat16AsFloat32: true}); err != nil {
			return fmt.Errorf("--save-io: %w", err)
		}
		return nil
	}
	for _, g := range gen {
		if err := write("in", g.Name, g.tensor); err != nil {
			return err
		}
	}
	for _, s := range outs {
		if err := write("out", s.Name, got[s.Name]); err != nil {
			return err
		}
	}
	return nil
}

// printBench writes the report as JSON or as a table.
func printBench(w io.Writer, c *benchConfig, rep *benchReport) error {
	if c.asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(w, "%s on %s (%s), %s, precision %s\n", rep.Model, rep.Backend, orDash(rep.Device), rep.Threads, rep.Precision)
	fmt.Fprintf(w, "host: %s, %d CPUs, load %.2f before, %.2f after\n", rep.Host.CPU, rep.Host.CPUs, rep.Host.LoadBefore[0], rep.Host.LoadAfter[0])
	fmt.Fprintf(w, "malloc: %s\n", rep.Host.Malloc)
	if r := rep.Restart; r != nil {
		for _, p := range []struct {
			name string
			pt   restartPoint
		}{{"cold", r.Cold}, {"warm", r.Warm}} {
			hits := "no cache"
			if p.pt.Cache != nil {
				hits = fmt.Sprintf("cache %d hits, %d misses", p.pt.Cache.Hits, p.pt.Cache.Misses)
			}
			fmt.Fprintf(w, "%s start: first inference after %.3f s (open %.3f s, load %.3f s, first run %.3f s; %s), process exited after %.3f s\n",
				p.name, p.pt.FirstInferenceS, p.pt.OpenS, p.pt.LoadS, p.pt.FirstRunS, hits, p.pt.WallS)
		}
		fmt.Fprintf(w, "warm start is %.1fx sooner\n", r.Speedup)
	} else {
		fmt.Fprintf(w, "open %.3f s, load %.3f s\n", rep.OpenS, rep.LoadS)
		fmt.Fprintf(w, "%6s %5s %12s %11s %10s %9s %9s %9s %11s %10s\n",
			"batch", "seq", "first run s", "compile s", "2nd run s", "p50 ms", "p90 ms", "p99 ms", "samples/s", "GFLOP/s")
		for _, b := range rep.Batches {
			batch := fmt.Sprint(b.Batch)
			if b.BatchAxis == batchNone {
				batch = "-"
			}
			seq := "-"
			if b.Seq > 0 {
				seq = fmt.Sprint(b.Seq)
			}
			gf := "-"
			if b.AchievedFLOPS > 0 {
				gf = fmt.Sprintf("%.2f", b.AchievedFLOPS/1e9)
			}
			fmt.Fprintf(w, "%6s %5s %12.3f %11.3f %10.4f %9.3f %9.3f %9.3f %11.2f %10s\n",
				batch, seq, b.FirstRunS, b.CompileS, b.SecondRunS, b.Latency.P50, b.Latency.P90, b.Latency.P99, b.Throughput, gf)
		}
		for _, b := range rep.Batches {
			if b.FLOPError != "" {
				fmt.Fprintf(w, "batch %d: no FLOP count: %s\n", b.Batch, b.FLOPError)
			}
			for _, a := range b.Accuracy {
				fmt.Fprintf(w, "batch %d: %s costs relative L2 %.3g on %s (max abs diff %.3g) against float32\n",
					b.Batch, rep.Precision, a.RelativeL2, a.Output, a.MaxAbsDiff)
			}
		}
		if len(rep.Batches) > 0 {
			fmt.Fprintf(w, "compile: %s", rep.Batches[0].CompileMethod)
			if cs := rep.Cache; cs != nil {
				fmt.Fprintf(w, "; disk cache %s: %d hits, %d misses (set %s=off or a fresh directory for cold compiles)", cs.Dir, cs.Hits, cs.Misses, cacheDirEnv)
			}
			fmt.Fprintln(w)
		}
		if rep.FLOPSource != "" {
			fmt.Fprintf(w, "FLOPs: %s\n", rep.FLOPSource)
		}
		fmt.Fprintf(w, "peak: %s\n", rep.PeakNote)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}
