package tensorbridge

import (
	"context"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/tensorbridge/tensorbridge/cache"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
)

// specialisation returns the compiled executable for these (padded)
// shapes, compiling it once however many callers ask at the same time.
func (m *Model) specialisation(ctx context.Context, shapes map[string][]int, values map[string]*ir.Tensor, strs map[string]*StringTensor) (*modelExec, func(), error) {
	return m.execs.GetOrCompile(ctx, m.specialisationKey(shapes, values, strs), func(ctx context.Context) (*modelExec, int64, error) {
		return m.compile(ctx, shapes, values, strs)
	})
}

// specialisationKey is the key of the compiled specialisation for these
// (padded) shapes, values of shape-setting inputs and STRING inputs.
func (m *Model) specialisationKey(shapes map[string][]int, values map[string]*ir.Tensor, strs map[string]*StringTensor) string {
	return m.precStr + "|" + specialisationKey(shapes, values) + stringsKey(strs)
}

// WarmupProgress is called after each specialisation Warmup compiles.
type WarmupProgress func(done, total int, dims map[string]int, took time.Duration, err error)

// Warmup compiles, ahead of the first request, the specialisation each
// assignment of symbolic dimensions needs (after bucketing), so that
// serving starts without compile stalls. It returns how many were compiled
// (already compiled ones are not counted) and the first error.
func (m *Model) Warmup(ctx context.Context, dims []map[string]int, progress WarmupProgress) (int, error) {
	if len(m.m.ValueInputs()) > 0 {
		return 0, &errs.UnsupportedError{What: "feature", Name: "warmup",
			Detail: fmt.Sprintf("inputs %v set shapes from their values, which warmup cannot know", m.m.ValueInputs())}
	}
	if m.sharded != nil { // on a mesh (sharded.go)
		return m.warmupSharded(ctx, dims, progress)
	}
	compiled := 0
	for k, assign := range dims {
		start := time.Now()
		shapes := map[string][]int{}
		for _, s := range m.m.Inputs() {
			var ds []int
			for _, d := range s.Dims {
				switch {
				case d.Param != "":
					n, ok := assign[d.Param]
					if !ok {
						return compiled, &errs.InputError{Name: s.Name, Problem: "dimension",
							Expected: "a size for " + d.Param, Got: fmt.Sprint(assign)}
					}
					ds = append(ds, n)
				default:
					ds = append(ds, d.Value)
				}
			}
			shapes[s.Name] = ds
		}
		if !m.exact && len(m.buckets.dims) > 0 {
			padded, _, err := m.buckets.bucketShapes(m.m.Inputs(), shapes, m.bcfg)
			if err != nil {
				return compiled, err
			}
			shapes = padded
		}
		before := m.execs.Stats().Misses
		_, done, err := m.specialisation(ctx, shapes, nil, nil)
		if err == nil {
			done()
			if m.execs.Stats().Misses > before {
				compiled++
			}
		}
		if progress != nil {
			progress(k+1, len(dims), assign, time.Since(start), err)
		}
		if err != nil {
			return compiled, err
		}
	}
	return compiled, nil
}

// CompileStats counts what the model's cache of compiled specialisations
// did: hits, compiles started (Misses), callers that joined a compile in
// progress (Shared), timeouts, evictions.
func (m *Model) CompileStats() cache.MemoryStats { return m.execs.Stats() }

// Compiled reports how many specialisations are compiled now.
func (m *Model) Compiled() int { return m.execs.Len() }

// specialisationKey identifies a compiled specialisation: every input's
// dims and, for inputs that determine shapes, their values.
func specialisationKey(shapes map[string][]int, values map[string]*ir.Tensor) string {
	names := make([]string, 0, len(shapes))
	for n := range shapes {
		names = append(names, n)
	}
	sort.Strings(names)
	// Built by hand rather than with fmt: it runs on every call.
	buf := make([]byte, 0, 64)
	for _, n := range names {
		buf = strconv.AppendQuote(buf, n)
		buf = append(buf, ':')
		for i, d := range shapes[n] {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = strconv.AppendInt(buf, int64(d), 10)
		}
		buf = append(buf, ';')
		if v, ok := values[n]; ok {
			raw, err := ir.TensorBytes(v)
			if err != nil {
				buf = fmt.Appendf(buf, "=%v;", v) // unreachable for host tensors; still distinct per value
			}
			buf = append(buf, '=')
			buf = hex.AppendEncode(buf, raw)
			buf = append(buf, ';')
		}
	}
	return string(buf)
}

// compile specialises the model to these (padded) shapes, shape-setting
// values and STRING inputs and compiles the result, or loads it from an
// earlier process's warm start; the int64 is its size for the cache (1:
// the model's cache bounds entries, not bytes).
func (m *Model) compile(ctx context.Context, shapes map[string][]int, values map[string]*ir.Tensor, strs map[string]*StringTensor) (*modelExec, int64, error) {
	plan, err := m.m.SpecializeStrings(shapes, values, strs, m.prec)
	if err != nil {
		return nil, 0, err
	}
	if err := plan.CheckEngine(m.b.drv.Engine()); err != nil {
		return nil, 0, err
	}
	params := plan.Params()
	weights := plan.Weights() // graph parameters before the inputs (weights.go)
	argShapes := make([]ir.Shape, 0, len(weights)+len(params))
	for _, p := range append(append([]onnx.Param(nil), weights...), params...) {
		argShapes = append(argShapes, p.Shape)
	}
	// Warm start (warmstart.go): load a specialisation an earlier process
	// compiled, found by a key computed before any graph is built.
	warm, recorded := m.warmStart(ctx, shapes, values, plan, params, argShapes)
	if warm != nil {
		return warm, 1, nil
	}
	defer recorded()
	// End of warm start.
	fn := func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		nodes := make(map[string]*ir.Node, len(weights)+len(params))
		for i, p := range weights {
			nodes[p.Name] = in[i]
		}
		for i, p := range params {
			nodes[p.Name] = in[len(weights)+i]
		}
		built, err := plan.Build(g, nodes)
		if err != nil {
			return nil, err
		}
		outSpecs := graphOutputs(plan) // after Build: sequences and optionals flattened (values.go), STRING outputs left on the host (strings.go)
		outs := make([]*ir.Node, 0, len(outSpecs))
		for _, o := range outSpecs {
			n, ok := built[o.Name]
			if !ok {
				return nil, fmt.Errorf("onnx: output %q was not built", o.Name)
			}
			outs = append(outs, n)
		}
		if n := built[onnx.IndexCheckOutput]; n != nil { // computed indices' range (indexcheck.go)
			outs = append(outs, n)
		}
		return outs, nil
	}
	if hostOnlyOutputs(m.m.Outputs()) {
		if err := buildOnHost(m.b.drv.Engine(), plan); err != nil { // strings.go
			return nil, 0, err
		}
		return &modelExec{plan: plan, params: params, weights: weights}, 1, nil
	}
	exe, err := m.b.compileSync("onnx:"+m.path, fn, argShapes)
	if err != nil {
		return nil, 0, err
	}
	return &modelExec{exe: exe, plan: plan, params: params, weights: weights, outs: graphOutputs(plan)}, 1, nil
}

// graphOutputs are the outputs the compiled graph returns, in order: the
// model's outputs with sequences and optionals flattened into tensors
// (values.go; known once the plan is built), less the STRING outputs, which
// are computed on the host (strings.go).
func graphOutputs(plan *onnx.Plan) []onnx.ValueSpec {
	var out []onnx.ValueSpec
	for _, o := range plan.FlatOutputs() {
		if o.DType != onnx.String {
			out = append(out, o)
		}
	}
	return out
}
