package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/config"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/shard"
)

// ModelConfig is one model's serving settings. Zero values take the
// defaults documented on each field.
type ModelConfig struct {
	// MaxBatch is the most rows merged into one run (default: the largest
	// configured bucket of the batch dimension, else 8 on the CPU backends
	// and 32 on accelerators; see defaultMaxBatch). 1 turns dynamic
	// batching off: every request runs on its own.
	MaxBatch int
	// MaxQueueDelay is how long the oldest queued request may wait for
	// others to merge with (default 0: run what is there as soon as a
	// replica is free; under load the queue still fills between runs).
	MaxQueueDelay time.Duration
	// MaxQueueSize bounds the requests waiting; one more is refused at once
	// with 503 "queue full" (default 1024).
	MaxQueueSize int
	// Timeout is the default per-request deadline, queueing included; a
	// request may shorten it with the "timeout" parameter (microseconds).
	// Expiry answers 503 (default 30s).
	Timeout time.Duration
	// Concurrency is how many runs each replica executes at once (default 1).
	Concurrency int
	// ConstantWeights compiles the weights into each program as constants
	// (tensorbridge.WithWeightsOnDevice(false)). By default serve passes
	// them as device buffers to every compiled shape: one copy per replica
	// instead of one inside each compiled shape, and compiles several times
	// faster, at a similar cost per row (BENCHMARKS.md, "Serving memory and
	// cold start").
	ConstantWeights bool
	// AllowCompile lets a request whose shapes warm-up did not compile run
	// anyway, compiling on the request path. By default nothing compiles
	// after ready: such a request is refused (400, naming the warmed
	// shapes), and a model whose shapes warm-up cannot know (a symbolic
	// dimension without configured sizes) fails to load.
	AllowCompile bool
}

func (c ModelConfig) withDefaults() ModelConfig {
	if c.MaxQueueSize <= 0 {
		c.MaxQueueSize = 1024
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 1
	}
	return c
}

// ModelSource names a model file to serve and its settings.
type ModelSource struct {
	Name   string // as clients address it; default: the file name without .onnx
	Path   string
	Config ModelConfig
	// Mesh, when it spans more than one device, serves the model as ONE
	// replica sharded over the mesh (tensorbridge.WithMesh with Shard)
	// instead of one replica per device. Merged batches are padded to a
	// multiple of the data axis where the model's bucket plan allows
	// padding the batch dimension; otherwise requests are not merged and
	// each must bring a batch the data axis divides.
	Mesh  *shard.Mesh
	Shard shard.Options
}

// replica is the model loaded on one device, or sharded over a mesh.
type replica struct {
	m        *tensorbridge.Model
	device   int    // the device, or the mesh's first device
	mesh     string // "" on one device
	shares   bool   // made by Replica: shares the first replica's compiled shapes
	inflight atomic.Int64
}

// model is one served model: its replicas, its batch plan and its queue.
type model struct {
	name     string
	path     string
	cfg      ModelConfig
	replicas []*replica
	inputs   []tensorbridge.ValueSpec
	outputs  []tensorbridge.ValueSpec
	// batchDim is the symbolic dimension requests are merged along: axis 0
	// of every input and output, and padded by the runtime's bucket plan.
	// "" when requests are never merged.
	batchDim string
	// whyNoMerge says why requests are not merged, when they are not.
	whyNoMerge string
	maxBatch   int
	defaultMax int   // maxBatch when neither the config nor the buckets set it
	sizes      []int // the batch dimension's bucket sizes up to maxBatch
	buckets    config.Buckets
	q          *queue
	met        *modelMetrics
	ready      atomic.Bool
	log        *slog.Logger
	// warm is, per symbolic input dimension, the sizes warm-up compiled
	// (every combination of them is compiled); nil until warm-up, and nil
	// after it when requests may compile (AllowCompile).
	warm map[string][]int
	// cold tracks the batch buckets compiled when the rest compile after
	// ready (coldstart.go).
	cold warmState
}

// loadModel loads src once per device in devices.
func loadModel(ctx context.Context, b *tensorbridge.Backend, src ModelSource, devices []int, log *slog.Logger) (*model, error) {
	m := &model{name: src.Name, path: src.Path, cfg: src.Config.withDefaults(), buckets: b.Settings().Buckets,
		log: log.With("model", src.Name), defaultMax: defaultMaxBatch(b.Name())}
	if src.Mesh != nil && src.Mesh.Devices() > 1 {
		tm, err := b.LoadModel(ctx, src.Path, tensorbridge.WithMesh(*src.Mesh, src.Shard))
		if err != nil {
			return nil, fmt.Errorf("model %s over mesh %s: %w", src.Name, src.Mesh, err)
		}
		m.replicas = append(m.replicas, &replica{m: tm, mesh: src.Mesh.String()})
		devices = nil
	}
	if err := m.loadReplicas(ctx, b, src, devices, nil); err != nil {
		return nil, err
	}
	first := m.replicas[0].m
	m.inputs, m.outputs = first.Inputs(), first.Outputs()
	if len(m.inputs) == 0 {
		m.close()
		return nil, &errs.Error{Kind: errs.InvalidArgument, Op: "serve", Err: fmt.Errorf("model %s (%s) has no inputs to serve", src.Name, src.Path)}
	}
	m.planBatching(first.BucketPlan())
	dims, why := m.warmupDims()
	if why != "" && !m.cfg.AllowCompile {
		m.close()
		return nil, &errs.Error{Kind: errs.InvalidArgument, Op: "serve",
			Err: fmt.Errorf("model %s (%s): warm-up cannot know every shape a request may bring: %s; nothing compiles after ready unless --allow-compile is given", src.Name, src.Path, why)}
	}
	// The compiled-shape cache must hold the whole warm-up set, or serving
	// would evict and recompile warmed shapes on the request path.
	if len(dims) > defaultMaxCompiled && len(devices) > 0 {
		m.close()
		m.replicas = nil
		if err := m.loadReplicas(ctx, b, src, devices, []tensorbridge.ModelOption{tensorbridge.WithMaxCompiled(len(dims))}); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// defaultMaxCompiled is tensorbridge's default bound on compiled
// specialisations per model (WithMaxCompiled).
const defaultMaxCompiled = 16

// loadReplicas loads src on the first of devices, with opts, and makes the
// others replicas of it (tensorbridge.Model.Replica): they share its
// compiled shapes, so warm-up compiles each shape once for all of them.
func (m *model) loadReplicas(ctx context.Context, b *tensorbridge.Backend, src ModelSource, devices []int, opts []tensorbridge.ModelOption) error {
	var first *tensorbridge.Model
	for _, d := range devices {
		var tm *tensorbridge.Model
		var err error
		if first == nil {
			tm, err = b.LoadModel(ctx, src.Path, append([]tensorbridge.ModelOption{tensorbridge.OnDevice(d),
				tensorbridge.WithWeightsOnDevice(!src.Config.ConstantWeights)}, opts...)...)
			first = tm
		} else {
			tm, err = first.Replica(ctx, d)
		}
		if err != nil {
			m.close()
			return fmt.Errorf("model %s on device %d: %w", src.Name, d, err)
		}
		m.replicas = append(m.replicas, &replica{m: tm, device: d, shares: tm != first})
	}
	return nil
}

// planBatching decides whether and along which dimension requests merge,
// and the batch sizes: a dimension qualifies when it is axis 0 of every
// input and output, nowhere else, and the runtime pads along it (its rows
// are independent). Otherwise every request runs on its own, exactly.
func (m *model) planBatching(plan []tensorbridge.DimPlan) {
	m.maxBatch = 1
	cand := ""
	for _, specs := range [][]tensorbridge.ValueSpec{m.inputs, m.outputs} {
		for _, s := range specs {
			if !s.RankKnown || len(s.Dims) == 0 || s.Dims[0].Param == "" {
				m.whyNoMerge = fmt.Sprintf("%q has no symbolic leading (batch) dimension", s.Name)
				return
			}
			if cand == "" {
				cand = s.Dims[0].Param
			}
			if s.Dims[0].Param != cand {
				m.whyNoMerge = fmt.Sprintf("%q leads with dimension %q, others with %q", s.Name, s.Dims[0].Param, cand)
				return
			}
			for _, d := range s.Dims[1:] {
				if d.Param == cand {
					m.whyNoMerge = fmt.Sprintf("%q uses dimension %q beyond axis 0", s.Name, cand)
					return
				}
			}
		}
	}
	padded := false
	for _, p := range plan {
		if p.Name == cand {
			padded = p.Padded
			if !p.Padded {
				m.whyNoMerge = fmt.Sprintf("the runtime does not pad dimension %q: %s", cand, p.Reason)
			}
		}
	}
	if !padded {
		if m.whyNoMerge == "" {
			m.whyNoMerge = fmt.Sprintf("the runtime has no bucket plan for dimension %q", cand)
		}
		return
	}
	maxBatch := m.cfg.MaxBatch
	configured := m.buckets.Sizes[cand]
	if maxBatch <= 0 {
		maxBatch = m.defaultMax
		if len(configured) > 0 {
			maxBatch = configured[len(configured)-1]
		}
	}
	if maxBatch == 1 {
		m.whyNoMerge = "batching is off (max batch 1)"
		return
	}
	// The sizes the runtime pads a merged batch of 1..maxBatch rows to, as
	// the model itself says (the settings' rule when there is no model yet).
	bucketSize := m.buckets.Bucket
	if len(m.replicas) > 0 {
		bucketSize = m.replicas[0].m.BucketSize
	}
	seen := map[int]bool{}
	for n := 1; ; n *= 2 {
		k := min(n, maxBatch)
		if s, err := bucketSize(cand, k); err == nil && !seen[s] {
			seen[s] = true
			m.sizes = append(m.sizes, s)
		}
		if k == maxBatch {
			break
		}
	}
	for _, s := range configured {
		if s <= maxBatch && !seen[s] {
			seen[s] = true
			m.sizes = append(m.sizes, s)
		}
	}
	if len(m.sizes) == 0 {
		m.whyNoMerge = fmt.Sprintf("no bucket of dimension %q holds up to %d rows", cand, maxBatch)
		return
	}
	sort.Ints(m.sizes)
	// A merged batch never needs a bucket the runtime lacks.
	if top := m.sizes[len(m.sizes)-1]; top < maxBatch {
		maxBatch = top
	}
	m.batchDim, m.maxBatch = cand, maxBatch
}

// warmupDims lists the assignments of symbolic dimensions that warm-up
// compiles: every size a run can have along each symbolic dimension,
// combined. Along the batch dimension those are the buckets merged batches
// are padded to; when requests are not merged, the sizes the runtime runs
// 1..max-batch rows at (each row count itself where the runtime does not
// pad); along any other dimension, its configured sizes. why is non-empty
// when a symbolic dimension has no configured sizes (or the model's inputs
// set shapes from their values), so warm-up cannot know its values.
func (m *model) warmupDims() (dims []map[string]int, why string) {
	values, names, why := m.warmValues()
	if why != "" {
		return nil, why
	}
	dims = []map[string]int{{}}
	for _, name := range names {
		values := values[name]
		var next []map[string]int
		for _, base := range dims {
			for _, v := range values {
				a := map[string]int{name: v}
				for k, x := range base {
					a[k] = x
				}
				next = append(next, a)
			}
		}
		dims = next
	}
	return dims, ""
}

// warmValues is, per symbolic input dimension (names in order of first
// appearance), the sizes runs can have along it; see warmupDims.
func (m *model) warmValues() (values map[string][]int, names []string, why string) {
	if len(m.replicas) > 0 {
		if v := m.replicas[0].m.ONNX().ValueInputs(); len(v) > 0 {
			return nil, nil, fmt.Sprintf("inputs %v set shapes from their values", v)
		}
	}
	values = map[string][]int{}
	var missing []string
	for k, s := range m.inputs {
		for axis, d := range s.Dims {
			name := d.Param
			if name == "" || values[name] != nil || slices.Contains(missing, name) {
				continue
			}
			switch {
			case name == m.batchDim:
				values[name] = m.sizes
			case len(m.buckets.Sizes[name]) > 0:
				values[name] = m.buckets.Sizes[name]
			case axis == 0 && k == 0 && m.batchDim == "":
				values[name] = m.aloneSizes(name)
			default:
				missing = append(missing, name)
				continue
			}
			names = append(names, name)
		}
	}
	if len(missing) > 0 {
		return nil, nil, missingSizes(missing)
	}
	return values, names, ""
}

// missingSizes says which symbolic dimensions have no configured sizes,
// and the --buckets entries that would give them some.
func missingSizes(dims []string) string {
	quoted := make([]string, len(dims))
	entries := make([]string, len(dims))
	for i, d := range dims {
		quoted[i], entries[i] = strconv.Quote(d), d+"=..."
	}
	if len(dims) == 1 {
		return fmt.Sprintf("dimension %s has no configured sizes (add %s to --buckets)", quoted[0], entries[0])
	}
	return fmt.Sprintf("dimensions %s and %s have no configured sizes (add %s to --buckets)",
		strings.Join(quoted[:len(dims)-1], ", "), quoted[len(dims)-1], strings.Join(entries, ";"))
}

// aloneSizes are the sizes the runtime runs 1..max-batch rows at along the
// leading dimension of a model whose requests are not merged: each row
// count itself where the runtime does not pad it, else its buckets.
func (m *model) aloneSizes(dim string) []int {
	limit := m.cfg.MaxBatch
	if c := m.buckets.Sizes[dim]; limit <= 0 && len(c) > 0 {
		limit = c[len(c)-1]
	}
	if limit <= 0 {
		limit = 32
	}
	bucketSize := m.buckets.Bucket
	if len(m.replicas) > 0 {
		bucketSize = m.replicas[0].m.BucketSize
	}
	var out []int
	for n := 1; n <= limit; n++ {
		if s, err := bucketSize(dim, n); err == nil && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	sort.Ints(out)
	return out
}

// admit refuses, before it is queued, a request whose run would need a
// shape warm-up did not compile (unless AllowCompile): each symbolic
// dimension, after the runtime's bucketing, must be a warmed size. A batch
// of up to max-batch rows always is: the batcher forms only warmed sizes.
// sym holds the request's symbolic dimensions.
func (m *model) admit(sym map[string]int) error {
	if m.warm == nil {
		return nil
	}
	r := m.replicas[0].m
	for k, spec := range m.inputs {
		for _, d := range spec.Dims {
			v, ok := sym[d.Param]
			if d.Param == "" || !ok {
				continue
			}
			if d.Param == m.batchDim && v >= 1 && v <= m.maxBatch {
				continue
			}
			if d.Param == m.batchDim && v == 0 {
				continue // an empty request is the exactness rules' to answer
			}
			b, err := r.BucketSize(d.Param, v)
			if err == nil && slices.Contains(m.warm[d.Param], b) {
				continue
			}
			got := fmt.Sprintf("%s = %d", d.Param, v)
			if err == nil && b != v {
				got += fmt.Sprintf(" (bucket %d)", b)
			}
			return &errs.InputError{Name: m.inputs[k].Name, Problem: "shape",
				Expected: "a shape warmed up at startup (" + m.warmString() + "; serve with --allow-compile to compile others on demand)",
				Got:      got}
		}
	}
	return nil
}

// warmString names the warmed sizes: "batch in [1 2 4 8], sequence in [16]".
func (m *model) warmString() string {
	_, names, _ := m.warmValues()
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s in %v", n, m.warm[n]))
	}
	return strings.Join(parts, ", ")
}

// warmup compiles every configured shape, once for all the replicas (they
// share compiled shapes, loadReplicas); the model is ready afterwards, also
// when warm-up could not know the shapes (logged).
func (m *model) warmup(ctx context.Context) error {
	dims, why := m.warmupDims()
	if why != "" {
		// Only with AllowCompile (loadModel refuses the model otherwise).
		m.log.Warn("warm-up skipped; the first requests of each shape compile (--allow-compile)", "reason", why)
		m.ready.Store(true)
		return nil
	}
	start := time.Now()
	total, err := m.replicas[0].m.Warmup(ctx, dims, nil)
	if err != nil {
		var unsup *errs.UnsupportedError
		if !errors.As(err, &unsup) {
			return m.warmErr(err)
		}
		m.log.Warn("warm-up skipped", "reason", err.Error())
	}
	m.log.Info("warm", "shapes", len(dims), "replicas", len(m.replicas), "compiled", total,
		"took", time.Since(start).Round(time.Millisecond).String())
	if !m.cfg.AllowCompile {
		m.warm, _, _ = m.warmValues()
	}
	m.ready.Store(true)
	return nil
}

// warmErr names the model (and its mesh) in a warm-up error.
func (m *model) warmErr(err error) error {
	if r := m.replicas[0]; r.mesh != "" {
		return fmt.Errorf("warming up model %s over mesh %s: %w", m.name, r.mesh, err)
	}
	return fmt.Errorf("warming up model %s: %w", m.name, err)
}

// describe is the model's line in the startup log.
func (m *model) describe() []any {
	batching := "merged along " + m.batchDim
	if m.batchDim == "" {
		batching = "off: " + m.whyNoMerge
	}
	var ins []string
	for _, s := range m.inputs {
		ins = append(ins, s.String())
	}
	mesh := "none (one replica per device)"
	if m.replicas[0].mesh != "" {
		mesh = m.replicas[0].mesh + " (one replica over the mesh)"
	}
	return []any{"path", m.path, "replicas", len(m.replicas), "mesh", mesh, "inputs", strings.Join(ins, "; "),
		"batching", batching, "max_batch", m.maxBatch, "batch_sizes", fmt.Sprint(m.sizes),
		"max_queue_delay", m.cfg.MaxQueueDelay.String(), "max_queue_size", m.cfg.MaxQueueSize,
		"timeout", m.cfg.Timeout.String()}
}

// pick returns the replica with the fewest runs in flight (the first such).
func (m *model) pick() *replica {
	best := m.replicas[0]
	for _, r := range m.replicas[1:] {
		if r.inflight.Load() < best.inflight.Load() {
			best = r
		}
	}
	return best
}

// bucketOf is the size the runtime pads a batch of n rows to.
func (m *model) bucketOf(n int) int {
	if m.batchDim == "" {
		return n
	}
	if i, ok := slices.BinarySearch(m.sizes, n); ok || i < len(m.sizes) {
		return m.sizes[i]
	}
	return n
}

func (m *model) close() {
	for _, r := range m.replicas {
		_ = r.m.Close()
	}
}

// metadataShape is a spec's shape for the protocol: -1 for a dimension that varies.
func metadataShape(s tensorbridge.ValueSpec) []int64 {
	out := make([]int64, len(s.Dims))
	for i, d := range s.Dims {
		out[i] = -1
		if d.Param == "" && d.Value >= 0 {
			out[i] = int64(d.Value)
		}
	}
	return out
}

// defaultMaxBatch is the most rows merged into one run when nothing sets
// it: 32 on accelerators, 8 on the CPU backends. A CPU run's temporaries
// grow with its rows and every replica runs at once, while rows per second
// stop growing long before 32 rows: serving the BERT-like encoder of
// BENCHMARKS.md on xla-cpu (4 replicas, 32 clients of 1-4 rows), merged
// batches of up to 8 kept the rows per second of up to 32 (2,040 against
// 2,077) at 0.52 against 0.65 ms of CPU a row, and grew 133 MiB under load
// against 227 (peak 401 against 604 MiB).
func defaultMaxBatch(backend string) int {
	if backend == "cpu" || backend == "xla-cpu" {
		return 8
	}
	return 32
}
