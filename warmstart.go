package tensorbridge

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
)

// Warm start: a model specialisation compiled by an earlier process is
// found in the disk compile cache by a key computed before any graph is
// built — the model file's SHA-256, the input shapes (and the values of
// shape-setting inputs), the precision, the device, this build of
// tensorbridge, and (added by the backend) the plugin, its version, the
// devices and the compile options — so a restarted process skips building
// and lowering the model's graph. The backend answers the compile of a stub
// program with the same parameters with the stored executable.

// warmDriver is implemented by backends that can answer a compile by such
// a key (pjrt.Backend with a disk cache).
type warmDriver interface {
	// WarmLookup arms the next compile of stub with parameters params to
	// load the executable stored under key for program; outputs is its
	// output count.
	WarmLookup(ctx context.Context, key, program, stub string, params []ir.Shape) (found bool, outputs int, disarm func(), err error)
	// WarmRecord arms the next compile of program with parameters params
	// to store its executable under key when it has outputs outputs.
	WarmRecord(key, program string, params []ir.Shape, outputs int) (disarm func())
}

// warmStart returns the specialisation for these inputs loaded by its warm
// key, or nil and a function to call once the real compile is done (it
// records the compiled program under the key). A warm entry that fails to
// load is reported to the cache's problems and the model compiles as usual.
func (m *Model) warmStart(ctx context.Context, shapes map[string][]int, values map[string]*ir.Tensor,
	plan *onnx.Plan, params []onnx.Param, argShapes []ir.Shape) (*modelExec, func()) {
	wd, ok := m.b.drv.(warmDriver)
	if !ok || m.m.HasStructuredBoundary() || m.hasStrings() {
		// Sequences, optionals and strings shape the program through the
		// plan's Build, which a warm start skips: they always compile.
		return nil, func() {}
	}
	key, ok := m.warmKey(shapes, values, argShapes)
	if !ok {
		return nil, func() {}
	}
	program := "onnx:" + m.path
	nOut := len(m.m.Outputs())
	stub := program + "#warm"
	found, outputs, disarm, err := wd.WarmLookup(ctx, key, program, stub, argShapes)
	if err != nil {
		m.b.reportCache(err)
	}
	if found {
		exe, err := func() (*Executable, error) {
			defer disarm()
			if outputs != nOut {
				return nil, fmt.Errorf("warm start of %s: the stored program has %d outputs, the model %d", m.path, outputs, nOut)
			}
			if m.m.HasIndexOps() {
				// The index checks are recorded by Build, which a warm start
				// skips (indexcheck.go in package onnx); a program with an
				// index check output was never stored (one output per
				// model output).
				if err := buildOnHost(m.b.drv.Engine(), plan); err != nil {
					return nil, err
				}
				if plan.IndexChecks().HasOutput() {
					return nil, fmt.Errorf("warm start of %s: the program has an index check output", m.path)
				}
			}
			return m.b.Compile(ctx, stub, warmStub(nOut), argShapes...)
		}()
		if err == nil {
			return &modelExec{exe: exe, plan: plan, params: params, weights: plan.Weights(), outs: graphOutputs(plan)}, func() {}
		}
		m.b.reportCache(fmt.Errorf("warm start of %s did not load (compiling it): %w", m.path, err))
	}
	return nil, wd.WarmRecord(key, program, argShapes, nOut)
}

// warmStub builds the stub the backend answers with the stored executable:
// n distinct outputs that depend on every parameter, so the Executable
// keeps every parameter and every output in place, as the real program
// did (the backend stores only programs with one output per model output
// and no unused parameter).
func warmStub(n int) Func {
	return func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		dep := graph.Const(g, float32(0))
		for _, p := range in {
			dep = graph.Add(dep, graph.ReduceAllMax(graph.ConvertDType(p, ir.Float32)))
		}
		outs := make([]*ir.Node, n)
		for i := range outs {
			outs[i] = graph.AddScalar(dep, float64(i))
		}
		return outs, nil
	}
}

// warmKey is the key of one specialisation of the model; ok is false when
// the model file has no digest (decoded from bytes, or external data).
func (m *Model) warmKey(shapes map[string][]int, values map[string]*ir.Tensor, argShapes []ir.Shape) (string, bool) {
	digest, ok := m.m.SourceDigest()
	if !ok {
		return "", false
	}
	// Everything that changes the program goes in: the importer's options
	// (weights as parameters or as constants give different programs for
	// the same shapes) and the program's parameters, in order.
	params := make([]string, len(argShapes))
	for i, s := range argShapes {
		params[i] = s.String()
	}
	return fmt.Sprintf("model sha256 %s\nprecision %s\nimporter %+v\nspecialisation %s\nparameters %s\ndevice %d\nexact shapes %v\nbuild %s\n",
		hex.EncodeToString(digest[:]), m.precStr, m.prec, specialisationKey(shapes, values), strings.Join(params, ","),
		m.device, m.exact, buildIdentity()), true
}

// buildIdentity names this build of the program: its module versions and
// version-control revision where the toolchain recorded them, and the
// executable file's size and modification time, so any rebuild (which may
// change how graphs are built and lowered) misses the warm entries of the
// last one.
var buildIdentity = sync.OnceValue(func() string {
	id := "unknown build"
	if info, ok := debug.ReadBuildInfo(); ok {
		id = info.Main.Path + "@" + info.Main.Version
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" || s.Key == "vcs.modified" {
				id += " " + s.Key + "=" + s.Value
			}
		}
		for _, d := range info.Deps {
			id += " " + d.Path + "@" + d.Version
		}
	}
	if exe, err := os.Executable(); err == nil {
		if st, err := os.Stat(exe); err == nil {
			id += fmt.Sprintf(" exe %s %d bytes %s", exe, st.Size(), st.ModTime().UTC().Format("2006-01-02T15:04:05.000000000"))
		}
	}
	return id
})
