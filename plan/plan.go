// Package plan says what a model needs on a TPU slice before anyone pays
// for one. It compiles the model ahead of time with the real libtpu against
// the slice's topology (PJRT_TopologyDescription_Create + PJRT_Compile; no
// TPU needed, see docs/pjrt-findings.md) and reports, per device, the
// compiler's own memory figures against the chip's memory, whether it fits,
// the compiler's FLOPs and bytes accessed, a roofline step time from the
// catalog's peak figures, throughput and cost.
//
// It never reads weight bytes: models are loaded by shape only
// (onnx.LoadOptions.ShapesOnly) and weights are graph parameters, so a model
// whose weights file is absent, or far larger than this machine, plans the
// same. Package modelgen makes such models from a few sizes.
package plan

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tensorbridge/tensorbridge/catalog"
	"github.com/tensorbridge/tensorbridge/internal/capi"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
	"github.com/tensorbridge/tensorbridge/pjrt/lower"
	"github.com/tensorbridge/tensorbridge/shard"
)

// Options choose the slice, the strategy and the shapes.
type Options struct {
	// Slice is a Cloud TPU accelerator type ("v5e-8", "v5litepod-16",
	// "v5p-8", "v6e-4", "v4-8", "tpu7x-8").
	Slice string
	// Strategy is "auto", "dp", "tp", "tp=N" or "dp=N,tp=M" (also written
	// "data=N,model=M"). "" is auto.
	Strategy string
	// Dims gives each symbolic input dimension a size ("batch", "sequence").
	Dims map[string]int
	// Precision is "bfloat16" (the default: what TPUs compute in) or
	// "float32".
	Precision string
	// PricePerChipHour overrides the price table, in USD; 0 uses it.
	PricePerChipHour float64
	// Shard tunes the tensor-parallel rules.
	Shard shard.Options
	// Model names the model in the report.
	Model string
}

// Device is one device's figures.
type Device struct {
	WeightsBytes       int64   `json:"weights_bytes"`
	ArgumentBytes      int64   `json:"argument_bytes"`
	OutputBytes        int64   `json:"output_bytes"`
	AliasBytes         int64   `json:"alias_bytes"`
	TempBytes          int64   `json:"temp_bytes"`
	GeneratedCodeBytes int64   `json:"generated_code_bytes"`
	PeakBytes          int64   `json:"peak_bytes"`
	HBMBytes           int64   `json:"hbm_bytes"`
	Flops              float64 `json:"flops"`
	BytesAccessed      float64 `json:"bytes_accessed"`
}

// Rejected is a strategy auto tried and did not pick.
type Rejected struct {
	Strategy string `json:"strategy"`
	Reason   string `json:"reason"`
}

// Report is the plan for one model on one slice with one strategy.
type Report struct {
	Model               string         `json:"model"`
	Slice               string         `json:"slice"`
	Topology            string         `json:"topology"` // libtpu's name, e.g. "v5e:2x4"
	Chips               int            `json:"chips"`
	Hosts               int            `json:"hosts"`
	Devices             int            `json:"devices"`
	DeviceKind          string         `json:"device_kind"`
	MultiHostNote       string         `json:"multi_host_note,omitempty"`
	Strategy            string         `json:"strategy"`
	DataParallel        int            `json:"data_parallel"`
	ModelParallel       int            `json:"model_parallel"`
	MeshDevices         []int          `json:"mesh_devices"` // device ids, data-major, by coordinates
	Precision           string         `json:"precision"`
	Dims                map[string]int `json:"dims"`
	Params              int64          `json:"params"`
	WeightsBytes        int64          `json:"weights_bytes"`
	Fits                bool           `json:"fits"`
	FitReason           string         `json:"fit_reason"`
	Flops               float64        `json:"flops"`
	BytesAccessed       float64        `json:"bytes_accessed"`
	PeakFlopsChip       float64        `json:"peak_flops_per_chip"`
	PeakSource          string         `json:"peak_source"`
	HBMBandwidth        float64        `json:"hbm_bandwidth_per_chip"`
	BandwidthSource     string         `json:"hbm_bandwidth_source"`
	HBMChipBytes        uint64         `json:"hbm_per_chip_catalog_bytes"`
	ComputeSeconds      float64        `json:"compute_seconds"`
	MemorySeconds       float64        `json:"memory_seconds"`
	StepSeconds         float64        `json:"step_seconds"`
	Bound               string         `json:"bound"`
	Batch               int            `json:"batch"`
	InferencesPerSecond float64        `json:"inferences_per_second"`
	TokensPerSecond     float64        `json:"tokens_per_second,omitempty"`
	PricePerChipHour    float64        `json:"price_per_chip_hour_usd,omitempty"`
	CostPerHourUSD      *float64       `json:"cost_per_hour_usd"`
	CostPerMillionUSD   *float64       `json:"cost_per_million_inferences_usd"`
	PriceSource         string         `json:"price_source"`
	PerDevice           Device         `json:"per_device"`
	CompileSeconds      float64        `json:"compile_seconds"`
	Rejected            []Rejected     `json:"rejected,omitempty"`
	Notes               []string       `json:"notes,omitempty"`
}

// ErrNoLibTPU is returned when libtpu is not installed.
var ErrNoLibTPU = errors.New("plan: libtpu is not installed (tensorbridge plugins install tpu)")

var (
	tpuOnce   sync.Once
	tpuPlugin *capi.Plugin
	tpuErr    error
)

// libTPU loads libtpu once per process; Run has checked its environment
// (env.go).
func libTPU() (*capi.Plugin, error) {
	tpuOnce.Do(func() {
		path, err := capi.FindPlugin("tpu")
		if err != nil {
			tpuErr = fmt.Errorf("%w: %v", ErrNoLibTPU, err)
			return
		}
		tpuPlugin, tpuErr = capi.Load(path)
	})
	return tpuPlugin, tpuErr
}

// Slice resolves an accelerator type: "v5e-N" is accepted for
// "v5litepod-N".
func Slice(s string) (catalog.Slice, catalog.Accelerator, error) {
	name := strings.ToLower(strings.TrimSpace(s))
	if rest, ok := strings.CutPrefix(name, "v5e-"); ok {
		name = "v5litepod-" + rest
	}
	sl, err := catalog.ParseAcceleratorType(name)
	if err != nil {
		return sl, catalog.Accelerator{}, err
	}
	acc, ok := catalog.Lookup(sl.Generation)
	if !ok {
		return sl, acc, fmt.Errorf("plan: no catalog entry for %s", sl.Generation)
	}
	if sl.Topology == nil {
		return sl, acc, fmt.Errorf("plan: the catalog lists no topology for %s", s)
	}
	return sl, acc, nil
}

// topology is a libtpu topology with its devices in mesh order.
type topology struct {
	t     *capi.Topology
	name  string
	ids   []int // by coordinates
	kind  string
	hbm   int64 // per device, libtpu's device_memory_bytes_limit
	hosts int
	gpu   bool
}

func openTopology(ctx context.Context, p *capi.Plugin, sl catalog.Slice) (*topology, error) {
	return openNamedTopology(ctx, p, sl.Generation+":"+sl.Topology.String(), nil)
}

func openNamedTopology(ctx context.Context, p *capi.Plugin, name string, opts []capi.NamedValue) (*topology, error) {
	t, err := p.NewTopology(ctx, name, opts)
	if err != nil {
		return nil, fmt.Errorf("plan: libtpu topology %q: %w", name, err)
	}
	descs, err := t.DeviceDescriptions()
	if err != nil {
		_ = t.Destroy()
		return nil, err
	}
	top := &topology{t: t, name: name}
	ids := make([]int, len(descs))
	coords := make([][]int, len(descs))
	cores := make([]int, len(descs))
	procs := map[int]bool{}
	for i, d := range descs {
		ids[i] = d.ID
		procs[d.ProcessIndex] = true
		top.kind = d.Kind
		if c, ok := capi.Lookup(d.Attributes, "coords").([]int64); ok {
			for _, x := range c {
				coords[i] = append(coords[i], int(x))
			}
		}
		if c, ok := capi.Lookup(d.Attributes, "core_on_chip").(int64); ok {
			cores[i] = int(c)
		}
		if h, ok := capi.Lookup(d.Attributes, "device_memory_bytes_limit").(int64); ok && (top.hbm == 0 || h < top.hbm) {
			top.hbm = h
		}
	}
	top.ids = shard.Coords(ids, coords, cores)
	top.hosts = len(procs)
	return top, nil
}

// Strategies lists the meshes auto tries on n devices: tensor parallel
// over all of them, data parallel over all, and every power-of-two split
// between.
func Strategies(n int) []shard.Mesh {
	var out []shard.Mesh
	for m := n; m >= 1; m-- {
		if n%m == 0 && (m == n || m == 1 || m&(m-1) == 0) {
			out = append(out, shard.Mesh{Data: n / m, Model: m})
		}
	}
	return out
}

// ParseStrategy reads a strategy for n devices; auto returns nil.
func ParseStrategy(s string, n int) ([]shard.Mesh, error) {
	switch s = strings.TrimSpace(s); s {
	case "", "auto":
		return nil, nil
	case "dp":
		return []shard.Mesh{{Data: n, Model: 1}}, nil
	case "tp":
		return []shard.Mesh{{Data: 1, Model: n}}, nil
	}
	s = strings.NewReplacer("dp=", "data=", "tp=", "model=").Replace(s)
	m, err := shard.ParseMesh(s)
	if err != nil {
		return nil, err
	}
	if !strings.Contains(s, "data=") {
		m.Data = n / m.Model
	}
	if m.Devices() != n {
		return nil, fmt.Errorf("plan: strategy %s spans %d devices, the slice has %d", m, m.Devices(), n)
	}
	return []shard.Mesh{m}, nil
}

func strategyName(m shard.Mesh) string {
	switch {
	case m.Devices() == 1:
		return "single"
	case m.Model == 1:
		return fmt.Sprintf("dp=%d", m.Data)
	case m.Data == 1:
		return fmt.Sprintf("tp=%d", m.Model)
	}
	return fmt.Sprintf("dp=%d,tp=%d", m.Data, m.Model)
}

// Run plans model m on the slice. With strategy auto it tries every
// strategy and returns the cheapest that fits (or, when none fits, the one
// that comes closest), with why each other lost.
func Run(ctx context.Context, m *onnx.Model, o Options) (*Report, error) {
	if err := checkEnv(o.Slice); err != nil {
		return nil, err
	}
	var sl catalog.Slice
	var acc catalog.Accelerator
	var top *topology
	if g, ok := gpuSlice(o.Slice); ok {
		var err error
		if sl, acc, top, err = openGPU(ctx, g); err != nil {
			return nil, err
		}
	} else {
		var err error
		if sl, acc, err = Slice(o.Slice); err != nil {
			return nil, err
		}
		p, err := libTPU()
		if err != nil {
			return nil, err
		}
		if top, err = openTopology(ctx, p, sl); err != nil {
			return nil, err
		}
	}
	defer top.t.Destroy()
	n := len(top.ids)
	meshes, err := ParseStrategy(o.Strategy, n)
	if err != nil {
		return nil, err
	}
	auto := meshes == nil
	if auto {
		meshes = Strategies(n)
	}
	spec, shapes, err := specialise(m, o)
	if err != nil {
		return nil, err
	}
	var reports []*Report
	var rejected []Rejected
	for _, mesh := range meshes {
		if b := batchOf(m, shapes); mesh.Data > 1 && (b == 0 || b%mesh.Data != 0) {
			rejected = append(rejected, Rejected{Strategy: strategyName(mesh),
				Reason: fmt.Sprintf("the batch (%d) is not a multiple of the data axis (%d)", b, mesh.Data)})
			continue
		}
		r, err := planOne(ctx, m, spec, shapes, o, sl, acc, top, mesh)
		if err != nil {
			if !auto {
				return nil, err
			}
			rejected = append(rejected, Rejected{Strategy: strategyName(mesh), Reason: err.Error()})
			continue
		}
		reports = append(reports, r)
	}
	if len(reports) == 0 {
		return nil, fmt.Errorf("plan: no strategy could be compiled: %v", rejected)
	}
	sort.SliceStable(reports, func(i, j int) bool { return better(reports[i], reports[j]) })
	best := reports[0]
	for _, r := range reports[1:] {
		rejected = append(rejected, Rejected{Strategy: r.Strategy, Reason: lostBecause(r, best)})
	}
	if auto {
		best.Rejected = rejected
		best.Notes = append(best.Notes, "strategy chosen by auto: the fastest step (so the cheapest per inference on this slice) among those that fit")
	}
	return best, nil
}

// better orders fitting plans first, then faster steps, then less memory.
func better(a, b *Report) bool {
	if a.Fits != b.Fits {
		return a.Fits
	}
	if !a.Fits {
		return a.PerDevice.PeakBytes < b.PerDevice.PeakBytes
	}
	if a.StepSeconds != b.StepSeconds {
		return a.StepSeconds < b.StepSeconds
	}
	return a.PerDevice.PeakBytes < b.PerDevice.PeakBytes
}

func lostBecause(r, best *Report) string {
	if !r.Fits {
		return "does not fit: " + r.FitReason
	}
	return fmt.Sprintf("fits, but its step takes %.3g s against %.3g s (%s-bound; %s of %s peak per device)",
		r.StepSeconds, best.StepSeconds, r.Bound, fmtBytes(r.PerDevice.PeakBytes), fmtBytes(r.PerDevice.HBMBytes))
}

func specialise(m *onnx.Model, o Options) (onnx.SpecializeOptions, map[string][]int, error) {
	spec := onnx.SpecializeOptions{Compute: ir.BFloat16, WeightsAsParams: true}
	switch o.Precision {
	case "", "bfloat16":
	case "float32":
		spec.Compute = ir.Float32
	default:
		return spec, nil, fmt.Errorf("plan: precision %q: bfloat16 or float32", o.Precision)
	}
	shapes := map[string][]int{}
	for _, in := range m.Inputs() {
		var dims []int
		for k, d := range in.Dims {
			switch {
			case d.Value >= 0:
				dims = append(dims, d.Value)
			case d.Param != "":
				v, ok := o.Dims[d.Param]
				if !ok {
					return spec, nil, fmt.Errorf("plan: input %q dimension %d is %q: give its size with --dim %s=N", in.Name, k, d.Param, d.Param)
				}
				dims = append(dims, v)
			default:
				return spec, nil, fmt.Errorf("plan: input %q dimension %d is unnamed and unknown", in.Name, k)
			}
		}
		shapes[in.Name] = dims
	}
	return spec, shapes, nil
}

// batchOf is the first input's leading dimension.
func batchOf(m *onnx.Model, shapes map[string][]int) int {
	for _, in := range m.Inputs() {
		if d := shapes[in.Name]; len(d) > 0 {
			return d[0]
		}
	}
	return 0
}

// libtpu's compile-time out-of-memory messages: "Used 215.17G of 31.25G
// hbm" (https://github.com/EnzymeAD/Enzyme-JAX/pull/2422) and, from libtpu
// 0.0.52, "the total memory required for HLO temporaries (18.47G) exceeds
// available HBM (15.75G)".
var oomREs = []*regexp.Regexp{
	regexp.MustCompile(`(?i)used\s+([0-9.]+)([KMGT]?)\s+of\s+([0-9.]+)([KMGT]?)\s+hbm`),
	regexp.MustCompile(`(?i)\(([0-9.]+)([KMGT]?)\)\s+exceeds\s+available\s+HBM\s+\(([0-9.]+)([KMGT]?)\)`),
}

func planOne(ctx context.Context, m *onnx.Model, spec onnx.SpecializeOptions, shapes map[string][]int, o Options,
	sl catalog.Slice, acc catalog.Accelerator, top *topology, mesh shard.Mesh) (*Report, error) {
	p, err := m.SpecializeWith(shapes, nil, spec)
	if err != nil {
		return nil, err
	}
	n := len(top.ids)
	eng := lower.NewEngine("plan", n) // lowers only: nothing runs, no plugin
	g := ir.NewGraph(eng, "plan")
	defer g.Finalize()
	s, err := shard.Build(g, p, mesh, o.Shard)
	if err != nil {
		return nil, err
	}
	prog := eng.Program()
	r := &Report{Model: o.Model, Slice: o.Slice, Topology: top.name, Chips: sl.Chips, Hosts: top.hosts, Devices: n,
		DeviceKind: top.kind, Strategy: strategyName(mesh), DataParallel: mesh.Data, ModelParallel: mesh.Model,
		MeshDevices: top.ids, Precision: spec.Compute.String(), Dims: o.Dims, WeightsBytes: s.WeightsTotal,
		Batch: batchOf(m, shapes), Notes: s.Notes}
	for _, w := range p.Weights() {
		r.Params += int64(w.Shape.Size())
	}
	if top.hosts > 1 {
		r.MultiHostNote = fmt.Sprintf("libtpu compiles the whole %d-host slice from one process without a TPU: the program is the per-device SPMD program every host runs", top.hosts)
	}
	r.PerDevice.WeightsBytes = s.WeightsPerDevice
	r.PerDevice.HBMBytes = top.hbm
	if acc.Memory.Known() {
		r.HBMChipBytes = acc.Memory.Value
	}
	opts := capi.CompileOptions{NumReplicas: 1, NumPartitions: n, DeviceAssignment: [][]int{top.ids[:n]}}
	if n > 1 {
		opts.UseSPMDPartitioning, opts.UseShardyPartitioner = true, true
	}
	text, err := prog.CompileText()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	exe, err := top.t.Compile(ctx, capi.MLIR(string(text)), opts, nil)
	r.CompileSeconds = time.Since(start).Seconds()
	if err != nil && top.gpu && strings.Contains(err.Error(), "ptxas") {
		return nil, fmt.Errorf("plan: the CUDA plugin compiles for %s without a GPU, but needs ptxas from a CUDA 13 toolkit "+
			"(the nvidia-cuda-nvcc wheel's nvidia/cu13): set %s to the directory holding bin/ptxas: %w", top.kind, envCUDADir, err)
	}
	if err != nil {
		// Classified by the PJRT error code (outOfMemory, train.go); the
		// message is read only for the figures it gives.
		if outOfMemory(err) {
			r.Fits = false
			r.Notes = append(r.Notes, "libtpu refused the program at compile time for lack of HBM; memory and cost figures other than the need it reported are unknown")
			r.FitReason, r.PerDevice.PeakBytes = oomReason(err)
			finish(r, acc, o)
			return r, nil
		}
		return nil, fmt.Errorf("plan: libtpu compile for %s (%s): %w", top.name, r.Strategy, err)
	}
	defer exe.Destroy()
	ms, err := exe.CompiledMemoryStats()
	if err != nil {
		return nil, fmt.Errorf("plan: compiled memory stats: %w", err)
	}
	d := &r.PerDevice
	d.ArgumentBytes, d.OutputBytes, d.AliasBytes, d.TempBytes, d.GeneratedCodeBytes = ms.Argument, ms.Output, ms.Alias, ms.Temp, ms.GeneratedCode
	d.PeakBytes = ms.Peak
	if d.PeakBytes == 0 {
		d.PeakBytes = ms.Argument + ms.Output - ms.Alias + ms.Temp
		r.Notes = append(r.Notes, "libtpu gave no peak: peak is argument + output - alias + temp")
	}
	if cost, err := exe.CostAnalysis(); err == nil && len(cost) > 0 {
		d.Flops = number(capi.Lookup(cost, "flops"))
		d.BytesAccessed = number(capi.Lookup(cost, "bytes accessed"))
	} else {
		r.Notes = append(r.Notes, "no cost analysis: "+err.Error())
	}
	total := d.PeakBytes + d.GeneratedCodeBytes
	r.Fits = total <= d.HBMBytes
	if r.Fits {
		r.FitReason = fmt.Sprintf("fits: %s of %s per device (peak %s + code %s)", fmtBytes(total), fmtBytes(d.HBMBytes), fmtBytes(d.PeakBytes), fmtBytes(d.GeneratedCodeBytes))
	} else {
		r.FitReason = fmt.Sprintf("does not fit: needs %s of %s per device (peak %s + code %s)", fmtBytes(total), fmtBytes(d.HBMBytes), fmtBytes(d.PeakBytes), fmtBytes(d.GeneratedCodeBytes))
	}
	finish(r, acc, o)
	return r, nil
}

// finish fills the whole-step figures, the roofline and the costs.
func finish(r *Report, acc catalog.Accelerator, o Options) {
	d := r.PerDevice
	// libtpu's cost analysis of an SPMD program is per device (the
	// partitioned program), so the step is devices times it.
	r.Flops = d.Flops * float64(r.Devices)
	r.BytesAccessed = d.BytesAccessed * float64(r.Devices)
	perChip := float64(r.Devices) / float64(max(1, r.Chips)) // devices per chip
	if acc.PeakBF16.Known() {
		r.PeakFlopsChip, r.PeakSource = acc.PeakBF16.Value, acc.PeakBF16.Source
	}
	if acc.MemoryBandwidth.Known() {
		r.HBMBandwidth, r.BandwidthSource = acc.MemoryBandwidth.Value, acc.MemoryBandwidth.Source
	}
	if r.PeakFlopsChip > 0 && d.Flops > 0 {
		r.ComputeSeconds = d.Flops / (r.PeakFlopsChip / perChip)
	}
	if r.HBMBandwidth > 0 && d.BytesAccessed > 0 {
		r.MemorySeconds = d.BytesAccessed / (r.HBMBandwidth / perChip)
	}
	r.StepSeconds = max(r.ComputeSeconds, r.MemorySeconds)
	r.Bound = "compute"
	if r.MemorySeconds > r.ComputeSeconds {
		r.Bound = "memory"
	}
	if r.StepSeconds > 0 {
		r.InferencesPerSecond = float64(r.Batch) / r.StepSeconds
		if s, ok := r.Dims["sequence"]; ok {
			r.TokensPerSecond = float64(r.Batch*s) / r.StepSeconds
		}
	}
	price, src := o.PricePerChipHour, "--price"
	if price == 0 {
		if pr, ok := Prices[acc.Generation]; ok {
			price, src = pr.OnDemand, pr.Source
		} else {
			src = "no price known for " + acc.Generation + ": give one with --price (USD per chip-hour)"
		}
	}
	r.PriceSource = src
	if price > 0 {
		r.PricePerChipHour = price
		h := price * float64(r.Chips)
		r.CostPerHourUSD = &h
		if r.InferencesPerSecond > 0 {
			c := h / (r.InferencesPerSecond * 3600) * 1e6
			r.CostPerMillionUSD = &c
		}
	}
}

func number(v any) float64 {
	switch x := v.(type) {
	case float32:
		return float64(x)
	case float64:
		return x
	case int64:
		return float64(x)
	}
	return 0
}

func parseSize(num, unit string) float64 {
	f, _ := strconv.ParseFloat(num, 64)
	switch unit {
	case "K":
		f *= 1 << 10
	case "M":
		f *= 1 << 20
	case "G":
		f *= 1 << 30
	case "T":
		f *= 1 << 40
	}
	return f
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func fmtBytes(n int64) string {
	const gib = 1 << 30
	switch {
	case n >= gib:
		return fmt.Sprintf("%.2f GiB", float64(n)/gib)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d B", n)
}
