package onnx

import (
	"fmt"
	"sort"
)

// converterFunc converts one ONNX node. It reads inputs and attributes
// through the opCtx and sets every output. It may panic with an error (the
// opCtx helpers do, to keep converters short); the builder recovers and
// returns it as a *NodeError naming the node.
type converterFunc func(c *opCtx) error

// opDef is one version of one operator: the converter used for models whose
// ai.onnx opset is at least since and below the next registered version.
type opDef struct {
	op    string
	since int

	// conv builds graph nodes for the op. It may also set host outputs when
	// the result is known at build time (Shape, Size do).
	conv converterFunc
	// host evaluates the op on the host when every present input is known at
	// build time. Optional: without it such a node is built in the graph,
	// or, when a consumer needs its value, folded by running conv in a
	// separate small graph.
	host converterFunc
	// constInputs are input positions whose values must be known at build
	// time (a Reshape's shape, a Slice's starts...). constAll marks every
	// input so (ops whose output shape depends on input values).
	constInputs []int
	constAll    bool
	// shapeOnly says the outputs depend only on the inputs' shapes and
	// dtypes, not their values (Shape, Size): a value needed at build time
	// does not make the inputs needed.
	shapeOnly bool
}

// withHost sets the host evaluator.
func (d *opDef) withHost(f converterFunc) *opDef { d.host = f; return d }

// needs marks input positions whose values must be known at build time.
func (d *opDef) needs(inputs ...int) *opDef {
	d.constInputs = append(d.constInputs, inputs...)
	return d
}

// needsAll marks every input as needed at build time.
func (d *opDef) needsAll() *opDef { d.constAll = true; return d }

// onlyShapes marks the op as depending on its inputs' shapes only.
func (d *opDef) onlyShapes() *opDef { d.shapeOnly = true; return d }

// registry holds every version of every op, sorted by since.
var registry = map[string][]*opDef{}

// register adds version since of ONNX operator op (default domain) and
// returns it for chaining withHost, needs, needsAll, onlyShapes. It is meant
// to be called from init functions; registering the same (op, since) twice
// is a programming error and panics at program start.
func register(op string, since int, conv converterFunc) *opDef {
	d := &opDef{op: op, since: since, conv: conv}
	for _, o := range registry[op] {
		if o.since == since {
			panic(fmt.Sprintf("onnx: op %s version %d registered twice", op, since))
		}
	}
	registry[op] = append(registry[op], d)
	sort.Slice(registry[op], func(a, b int) bool { return registry[op][a].since < registry[op][b].since })
	return d
}

// registerSame registers several ops that share one converter and version.
func registerSame(since int, conv converterFunc, ops ...string) {
	for _, op := range ops {
		register(op, since, conv)
	}
}

// lookupOp returns the version of op in force for a model importing the
// given ai.onnx opset: the registered version with the largest since that
// is at most opset. Versions older than the oldest registered one fall back
// to it, since the semantics of opsets before 7 rarely differ for the
// importer's purposes and a model at opset 6 is better served than refused.
func lookupOp(op string, opset int) *opDef {
	defs := registry[op]
	if len(defs) == 0 {
		return nil
	}
	var best *opDef
	for _, d := range defs {
		if d.since <= opset {
			best = d
		}
	}
	if best == nil {
		best = defs[0]
	}
	return best
}

// SupportedOps returns the names of the ONNX operators (default domain) the
// importer converts, sorted.
func SupportedOps() []string {
	out := make([]string, 0, len(registry))
	for op := range registry {
		out = append(out, op)
	}
	sort.Strings(out)
	return out
}
