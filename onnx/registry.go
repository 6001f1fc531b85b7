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
	// typeOnly are input positions the op reads for their dtype only,
	// never their values or shape (CastLike's target_type): an empty
	// tensor there holds all the op needs (Model.ReadsValues).
	typeOnly []int
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

// onlyTypeOf marks input positions the op reads for their dtype only.
func (d *opDef) onlyTypeOf(inputs ...int) *opDef {
	d.typeOnly = append(d.typeOnly, inputs...)
	return d
}

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

// reviewedThrough is the newest opset every registration without an
// explicit newer version was written and tested against: ONNX versions of an
// op up to it are served by the registered converter in force, as before.
// Newer ONNX versions of an op (opsets 22 on) must each be registered or
// declared to keep the meaning of the version before them (sameAsPrevious),
// or the op is refused at load.
const reviewedThrough = 21

// onnxVersionInForce is the ONNX version of op that a model importing the
// given ai.onnx opset means: the largest since_version at most opset, from
// the ONNX schema table (opversions.go). 0 when the op is not in the table
// or the opset predates it.
func onnxVersionInForce(op string, opset int) int {
	v := 0
	for _, s := range onnxOpVersions[op] {
		if s <= opset {
			v = s
		}
	}
	return v
}

// lookupOp returns the converter for op in a model importing the given
// ai.onnx opset, and 0; or nil and the ONNX version of op the model means
// when that version is newer than what the importer implements.
//
// The ONNX version in force is found from the schema table. The registered
// version with the largest since at most it converts the node, provided
// every ONNX version after that registration up to the one in force (from
// opset 22 on) is declared in sameAsPrevious: a version whose change the
// importer does not implement is refused, never run with an older
// version's meaning. Opsets older than the oldest registered version fall
// back to it, since the semantics of opsets before 7 rarely differ for the
// importer's purposes and a model at opset 6 is better served than refused.
func lookupOp(op string, opset int) (*opDef, int) {
	defs := registry[op]
	if len(defs) == 0 {
		return nil, 0
	}
	want := onnxVersionInForce(op, opset)
	if want == 0 {
		want = opset
	}
	var best *opDef
	for _, d := range defs {
		if d.since <= want {
			best = d
		}
	}
	if best == nil {
		best = defs[0]
	}
	for _, v := range onnxOpVersions[op] {
		if v > best.since && v <= want && v > reviewedThrough && !sameAsPrevious[op][v] {
			return nil, want
		}
	}
	return best, 0
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
