// Package onnx imports ONNX models onto tensorbridge's IR (the GoMLX graph).
//
// Load or Parse decodes a model, checks its ai.onnx opset (MinOpset to
// MaxOpset) and checks every node against the op registry, reporting all
// unsupported ops at once (*UnsupportedOpsError). Inputs and Outputs
// describe the model's signature, symbolic dimensions keeping their names.
//
// Building is shape-specialised: Specialize fixes concrete input shapes
// (and the values of value inputs, see Model.ValueInputs), and Plan.Build
// emits a static graph. While building, every value is either known on the
// host (constants, initializers, shapes and whatever is computed only from
// them: Shape → Gather → Concat → Reshape chains fold into constants) or a
// graph node. Ops whose arguments must be static (a Reshape's shape, a
// Slice's starts, a Pad's pads, a Tile's repeats...) read them as host
// values and fail with *NotConstantError when they are computed at run time.
// Value inputs are user inputs whose values, not only shapes, determine
// the graph (an input feeding a Reshape's shape, NonZero's data...): the
// graph is specialised on their values. Run is a convenience that checks
// named inputs, specialises, builds, compiles and executes once.
//
// Models at an ai.onnx opset below MinOpset are accepted and converted with
// the oldest semantics registered for each op; opsets above MaxOpset are
// refused with *OpsetError.
//
// # Float16
//
// The pure-Go backend has no Float16 arithmetic, so Float16 values are
// computed as Float32 in the graph: Plan.Build takes and returns Float32
// nodes where the model says Float16, and Run widens Float16 inputs on the
// host (exactly) and rounds Float16 outputs back to nearest-even
// (ToGraphDType and ToModelDType do the same for other callers). Results
// can therefore be more accurate than a native Float16 computation, never
// less; an intermediate Cast to FLOAT16 does not round.
//
// # Adding an op
//
// Converters live in files by family (ops_elementwise.go, ops_math.go,
// ops_reduce.go, ops_shape.go, ops_nn.go, ops_misc.go, ops_loss.go,
// ops_dynamic.go for value-dependent shapes, ops_control.go for If, Loop
// and Scan, ops_sequence.go for build-time sequences); a new
// family gets a new ops_<family>.go with its own init function. To add an
// op:
//
//	func init() {
//		register("MyOp", 13, convMyOp)              // version in force from opset 13
//		register("MyOp", 18, convMyOp18).needs(1)  // input 1 must be known at build time
//	}
//
//	func convMyOp(c *opCtx) error {
//		x := c.in(0)                        // input 0 as a graph node
//		k := c.constInts(1)                 // input 1's value (host), or nil if omitted
//		a := c.attrInt("axis", 0)           // attribute with its ONNX default
//		c.set(0, graph.Something(x, ...))   // output 0
//		return nil
//	}
//
// The registry picks, for a model at opset V, the registration with the
// largest since <= V, so register once per opset that changed the op's
// semantics. Declare with needs (or needsAll) every input whose value the
// converter reads with hostIn/constInts/constFloats: Load uses it to find
// value inputs and the builder to fold the producers of those values.
// withHost adds a host evaluator, used when every input is known at build
// time (add one for ops that appear in shape computations); onlyShapes marks
// ops that read only their inputs' shapes. Converters may panic with an
// error (c.fail, the helpers, GoMLX ops): the builder recovers it into a
// *NodeError naming the node. Use the helpers in ops_util.go for numpy
// broadcasting (broadcastNodes), ONNX Gather (gatherAxis), constant padding
// (padConstant) and reversal (reverseAxis): the pure-Go backend has no Pad,
// Reverse or DynamicSlice, so converters must lower to ops it has.
// Float16 values are Float32 nodes (see above): use c.set, which keeps the
// logical dtype, and graphDType when creating typed constants.
//
// Test each op with a small hand-computed case in ops_<family>_test.go and
// check the conformance runner (package conformance) still passes.
//
// # Gradients
//
// Training differentiates the graphs Build makes with GoMLX's reverse-mode
// autodiff, so a converter must also use ops whose gradient GoMLX
// v0.26.0 can build: no ReduceWindow or convolution with explicit unit
// dilations, no input-dilated convolution. vjp.go registers the gradients
// GoMLX lacks; Plan.CheckGradients refuses, naming the ONNX op and node,
// a model whose trained path still has no gradient (gradcheck.go). After
// adding or changing an op, run go test -run TestGradCheck ./onnx: it
// checks every node test's gradient against finite differences in
// float64 and compares with testdata/gradcheck-golden.txt.
package onnx
