// Package lower translates GoMLX graphs into StableHLO programs.
//
// Builder implements every method of GoMLX v0.26.0's backends.Builder
// except Compile: each op is recorded as a go-xla stablehlo value, and
// Finish returns the finished program as MLIR text together with what is
// needed to compile and call it (parameter and output shapes, replica and
// partition counts, device assignment). Package pjrt wraps a Builder with a
// Compile that hands the text to a PJRT plugin; keeping the lowering apart
// lets it be tested, and its text inspected or used as a cache key, on
// hosts without any plugin.
//
// Every method returns an error, never panics: inputs that go-xla would
// reject by panicking are caught and reported naming the op. Ops whose
// StableHLO form is restricted (abs, sign and negate of unsigned integers,
// total-order comparison of integers, real and imaginary parts of real
// numbers) are rewritten into equivalent StableHLO so GoMLX's documented
// semantics hold for every dtype GoMLX allows.
package lower

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"unsafe"

	"github.com/gomlx/go-xla/pkg/stablehlo"
	xdtypes "github.com/gomlx/go-xla/pkg/types/dtypes"
	xbf16 "github.com/gomlx/go-xla/pkg/types/dtypes/bfloat16"
	xshapes "github.com/gomlx/go-xla/pkg/types/shapes"
	"github.com/gomlx/go-xla/pkg/types/shardy"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/x448/float16"

	"github.com/tensorbridge/tensorbridge/cache"
	"github.com/tensorbridge/tensorbridge/errs"
)

// BackendName names the backend in errors raised by the lowering.
const BackendName = "pjrt"

// Strategy is how a program is spread over devices.
type Strategy int

// Strategies, matching GoMLX's distributed.Strategy.
const (
	// SingleDevice programs run on one device. They are portable (any
	// device) unless a DeviceAssignment fixes the device.
	SingleDevice Strategy = iota
	// SPMD programs run one replica per device; cross-device work is
	// explicit (AllReduce). Inputs and outputs are given per device.
	SPMD
	// AutoSharding programs are partitioned by XLA's Shardy from the
	// sharding annotations on parameters and outputs.
	AutoSharding
)

func (s Strategy) String() string {
	switch s {
	case SingleDevice:
		return "single-device"
	case SPMD:
		return "spmd"
	case AutoSharding:
		return "auto-sharding"
	}
	return fmt.Sprintf("Strategy(%d)", int(s))
}

// Program is a finished StableHLO program and what is needed to run it.
type Program struct {
	// Name is the computation name given to the Builder.
	Name string
	// Text is the StableHLO module in MLIR text form, as go-xla writes it.
	// It is deterministic for a given graph, so it can key a compile cache.
	Text []byte
	// ParamNames (as given to Parameter) and ParamShapes describe the
	// inputs, in parameter order.
	ParamNames  []string
	ParamShapes []shapes.Shape
	// OutputShapes describe the outputs, in the order given to Finish.
	OutputShapes []shapes.Shape
	// Strategy is how the program is distributed.
	Strategy Strategy
	// NumReplicas and NumPartitions are the module's replica and partition
	// counts (both 1 for a single-device program).
	NumReplicas, NumPartitions int
	// DeviceAssignment lists the engine device numbers the program runs on,
	// one per replica (SPMD) or partition (AutoSharding). Nil means a
	// portable single-device program that runs on whichever device the
	// caller picks.
	DeviceAssignment []int
	// Constants are the hoisted constants: large constants whose values
	// Text does not hold. In Text each is a parameter declared after those
	// of ParamShapes, in this order; CompileText turns them back into
	// constants. They never become inputs of the compiled program.
	Constants []HoistedConstant
	// WeightsDigest identifies the values of Constants (see
	// cache.WeightsHasher); empty when there are none. Text does not hold
	// those values, so a compile cache key must include it.
	WeightsDigest string
	// Donated maps a parameter's position (in ParamShapes) to the output
	// that replaces it, as a training step's weights and optimizer state
	// are replaced by their updates: CompileText marks each such parameter
	// with tf.aliasing_output, which XLA turns into the module's
	// input/output aliasing, so the compiler reuses the parameter's buffer
	// for the output instead of allotting another. Nil donates nothing.
	// The caller that runs such a program must not read a donated argument
	// after the run.
	Donated map[int]int
}

// HoistThreshold is the element count from which a constant (of an
// integer or floating-point dtype) is hoisted out of Program.Text.
// go-xla writes every element of a constant as a decimal literal, and XLA
// parses them back: for models whose weights are constants that dominates
// both lowering (which runs even when a compile cache answers) and
// compiling. A hoisted constant is written by CompileText as raw
// hexadecimal instead, which is quick to write and to parse; XLA still
// sees a constant, so it can fold it and pick its layout at compile time
// (passing weights as parameters instead made ResNet-18 runs on xla-cpu
// 2.7x slower). Small constants are left as go-xla writes them.
const HoistThreshold = 4096

// hoistable reports whether a constant of xflat's element type can be
// written in MLIR's hexadecimal form: integers and floats, whose raw bytes
// are the element layout MLIR expects (not bool, which MLIR packs, nor
// complex).
func hoistable(xflat any) bool {
	switch xflat.(type) {
	case []int8, []int16, []int32, []int64, []uint8, []uint16, []uint32, []uint64,
		[]float16.Float16, []xbf16.BFloat16, []float32, []float64:
		return true
	}
	return false
}

// CompileText returns the program as it is compiled: Text with each
// hoisted constant turned back from a parameter into a constant, its
// values written as raw little-endian hexadecimal (MLIR's dense<"0x...">
// form). It is Text itself when nothing was hoisted.
//
// Parameters in Donated are marked as donated to their outputs (Donate).
func (p *Program) CompileText() ([]byte, error) {
	text, err := p.unhoist()
	if err != nil || len(p.Donated) == 0 {
		return text, err
	}
	return Donate(text, p.Donated)
}

// unhoist is Text with the hoisted constants made constants again.
func (p *Program) unhoist() ([]byte, error) {
	if len(p.Constants) == 0 {
		return p.Text, nil
	}
	text := p.Text
	start := bytes.Index(text, []byte("func.func @main("))
	if start < 0 {
		return nil, fmt.Errorf("program %q: no main function in its text", p.Name)
	}
	lineEnd := bytes.IndexByte(text[start:], '\n')
	if lineEnd < 0 {
		return nil, fmt.Errorf("program %q: main function has no body", p.Name)
	}
	lineEnd += start + 1
	header := text[start:lineEnd]
	// The hoisted constants are the last parameters, in order: cut them
	// from the signature, with the separator before the first.
	first := bytes.Index(header, []byte("%"+p.Constants[0].Name+": "))
	if first < 0 {
		return nil, fmt.Errorf("program %q: hoisted constant %s is not a parameter of main", p.Name, p.Constants[0].Name)
	}
	cutFrom := first
	if bytes.HasSuffix(header[:first], []byte(", ")) {
		cutFrom -= 2
	}
	types := make([]string, len(p.Constants))
	pos := first
	for i, c := range p.Constants {
		decl := []byte("%" + c.Name + ": ")
		if !bytes.HasPrefix(header[pos:], decl) {
			return nil, fmt.Errorf("program %q: hoisted constant %s is not the #%d hidden parameter of main", p.Name, c.Name, i)
		}
		pos += len(decl)
		end := bytes.IndexByte(header[pos:], '>')
		if end < 0 {
			return nil, fmt.Errorf("program %q: cannot read the type of hoisted constant %s", p.Name, c.Name)
		}
		types[i] = string(header[pos : pos+end+1])
		pos += end + 1
		if i+1 < len(p.Constants) {
			if !bytes.HasPrefix(header[pos:], []byte(", ")) {
				return nil, fmt.Errorf("program %q: unexpected text after hoisted constant %s", p.Name, c.Name)
			}
			pos += 2
		}
	}
	size := len(text) + 64
	for _, c := range p.Constants {
		size += 2*len(c.Data) + 128
	}
	out := make([]byte, 0, size)
	out = append(out, text[:start+cutFrom]...)
	out = append(out, header[pos:]...)
	for i, c := range p.Constants {
		out = append(out, "    %"...)
		out = append(out, c.Name...)
		out = append(out, ` = stablehlo.constant dense<"0x`...)
		out = hex.AppendEncode(out, c.Data)
		out = append(out, `"> : `...)
		out = append(out, types[i]...)
		out = append(out, '\n')
	}
	out = append(out, text[lineEnd:]...)
	return out, nil
}

// HoistedConstant is one constant passed as a hidden parameter.
type HoistedConstant struct {
	// Name is the hidden parameter's name in the StableHLO text.
	Name string
	// Shape is the constant's dtype and dimensions.
	Shape shapes.Shape
	// Data is its raw little-endian contents, Shape.Size() elements of
	// Shape.DType (Go int and uint stored as 64-bit).
	Data []byte
}

// NumDevices is the number of devices one execution uses.
func (p *Program) NumDevices() int { return max(1, p.NumReplicas*p.NumPartitions) }

// Portable reports whether the program may run on any single device.
func (p *Program) Portable() bool { return p.Strategy == SingleDevice && p.DeviceAssignment == nil }

// Builder records GoMLX ops as StableHLO. Create one with New. It is not
// safe for concurrent use, as GoMLX builds a graph from one goroutine.
type Builder struct {
	backend    string // backend name for errors
	name       string
	numDevices int // devices of the engine, for validation; 0 if unknown

	b  *stablehlo.Builder
	fn *stablehlo.Function

	finished bool

	paramNames  []string // as given to Parameter
	hloNames    []string // as written in the StableHLO text
	paramShapes []shapes.Shape

	strategy         Strategy
	progDevices      int // devices the program runs on (1 unless distributed)
	meshes           []*shardy.DeviceMesh
	deviceAssignment []int

	closures map[closureKey]*stablehlo.Function

	hoisted      []HoistedConstant
	hoistedInput map[*stablehlo.Value]bool

	depthwiseAsSum bool // see WithDepthwiseWindowSum
	poolsLast      bool // see WithChannelsLastPooling
	poolRewriting  bool // inside poolChannelsLast's own ReduceWindow
}

// Node is the backends.Op the Builder hands out: a StableHLO value with
// its GoMLX shape.
type Node struct {
	value *stablehlo.Value
	shape shapes.Shape
	b     *Builder
}

// Shape returns the node's shape.
func (n *Node) Shape() shapes.Shape { return n.shape }

// New starts a program named name for an engine with numDevices devices
// (0 when unknown, which skips device-range checks).
func New(name string, numDevices int) *Builder {
	b := &Builder{
		backend:     BackendName,
		name:        name,
		numDevices:  numDevices,
		b:           stablehlo.New(name),
		progDevices: 1,
		closures:    map[closureKey]*stablehlo.Function{},
	}
	b.fn = b.b.Main()
	return b
}

// WithBackendName sets the backend name errors report ("xla-cpu", "tpu");
// the default is "pjrt".
func (b *Builder) WithBackendName(name string) *Builder {
	if name != "" {
		b.backend = name
	}
	return b
}

// Name returns the computation name.
func (b *Builder) Name() string { return b.name }

// opError is the error of a failed op: it names the computation and op.
func (b *Builder) opError(op string, err error) error {
	if err == nil {
		return nil
	}
	var ue *errs.UnsupportedError
	if errors.As(err, &ue) {
		return err
	}
	return fmt.Errorf("%s: computation %q: op %s: %w", b.backend, b.name, op, err)
}

// unsupported returns the error for an op/dtype combination StableHLO
// cannot express.
func (b *Builder) unsupported(op, detail string) error {
	return &errs.UnsupportedError{Backend: b.backend, What: "op", Name: op,
		Detail: fmt.Sprintf("computation %q: %s", b.name, detail)}
}

// guard turns a panic inside go-xla (which it raises on some malformed
// arguments) into an error naming the op. It must be deferred directly.
func (b *Builder) guard(op string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%s: computation %q: op %s: invalid arguments (the StableHLO builder rejected them: %v)",
			b.backend, b.name, op, r)
	}
}

func (b *Builder) checkOpen(op string) error {
	if b == nil || b.fn == nil {
		return fmt.Errorf("%s: op %s on a nil builder", BackendName, op)
	}
	if b.finished {
		return fmt.Errorf("%s: computation %q: op %s after the computation was compiled", b.backend, b.name, op)
	}
	return nil
}

// nodes checks that ops are non-nil Nodes of this builder.
func (b *Builder) nodes(op string, ops ...backends.Op) ([]*Node, error) {
	if err := b.checkOpen(op); err != nil {
		return nil, err
	}
	out := make([]*Node, len(ops))
	for i, o := range ops {
		if o == nil {
			return nil, fmt.Errorf("%s: computation %q: op %s: input #%d is nil", b.backend, b.name, op, i)
		}
		n, ok := o.(*Node)
		if !ok || n == nil {
			return nil, fmt.Errorf("%s: computation %q: op %s: input #%d is a %T, not an op of this backend", b.backend, b.name, op, i, o)
		}
		if n.b != b {
			return nil, fmt.Errorf("%s: computation %q: op %s: input #%d was built by computation %q; ops cannot cross computations",
				b.backend, b.name, op, i, n.b.name)
		}
		out[i] = n
	}
	return out, nil
}

func (b *Builder) node(v *stablehlo.Value) *Node {
	return &Node{value: v, shape: fromXShape(v.Shape()), b: b}
}

// OpShape returns the shape of an op.
func (b *Builder) OpShape(op backends.Op) (shapes.Shape, error) {
	n, ok := op.(*Node)
	if !ok || n == nil || n.b != b {
		return shapes.Invalid(), fmt.Errorf("%s: computation %q: OpShape of %T, which is not an op of this computation", b.backend, b.name, op)
	}
	return n.shape, nil
}

// reservedName matches the names go-xla gives its own values and the
// names of hoisted constants (hoistedPrefix followed by a number).
var reservedName = regexp.MustCompile(`^((arg)?[0-9]+|` + hoistedPrefix + `[0-9]+)$`)

// hoistedPrefix starts the StableHLO names of hoisted constants.
const hoistedPrefix = "hoisted_const_"

// Parameter declares an input. The name appears in the StableHLO text
// (normalised to letters, digits and underscores) and must be unique.
func (b *Builder) Parameter(name string, shape shapes.Shape, sharding *backends.ShardingSpec) (op backends.Op, err error) {
	defer b.guard("Parameter", &err)
	if err := b.checkOpen("Parameter"); err != nil {
		return nil, err
	}
	if err := validShape(shape); err != nil {
		return nil, b.opError("Parameter", fmt.Errorf("parameter %q: %w", name, err))
	}
	hloName := stablehlo.NormalizeIdentifier(name)
	if hloName == "" || reservedName.MatchString(hloName) {
		// go-xla reserves "argN" and plain numbers for its own values.
		hloName = "param_" + hloName
	}
	if slices.Contains(b.hloNames, hloName) {
		return nil, b.opError("Parameter", fmt.Errorf("parameter %q (StableHLO name %q) is declared twice", name, hloName))
	}
	var spec *shardy.ShardingSpec
	if sharding != nil {
		if b.strategy != AutoSharding {
			return nil, b.opError("Parameter", fmt.Errorf("parameter %q has a sharding spec but the computation is not using DistributedAutoSharding", name))
		}
		if spec, err = b.toShardy(sharding); err != nil {
			return nil, b.opError("Parameter", fmt.Errorf("parameter %q: %w", name, err))
		}
	}
	v, err := b.fn.NamedInputWithSharding(hloName, toXShape(shape), spec)
	if err != nil {
		return nil, b.opError("Parameter", fmt.Errorf("parameter %q: %w", name, err))
	}
	b.paramNames = append(b.paramNames, name)
	b.hloNames = append(b.hloNames, hloName)
	b.paramShapes = append(b.paramShapes, shape.Clone())
	return b.node(v), nil
}

// Constant embeds flat (a slice of a GoMLX element type) with the given
// dimensions in the program.
func (b *Builder) Constant(flat any, dims ...int) (op backends.Op, err error) {
	defer b.guard("Constant", &err)
	if err := b.checkOpen("Constant"); err != nil {
		return nil, err
	}
	xflat, err := toXFlat(flat)
	if err != nil {
		return nil, b.opError("Constant", err)
	}
	for _, d := range dims {
		if d < 0 {
			return nil, b.opError("Constant", fmt.Errorf("negative dimension in %v", dims))
		}
	}
	if size := shapeSize(dims); len(dims) > 0 && size == 0 {
		// go-xla writes a zero-size literal with too few nesting levels
		// (dense<[[], []]> for 2x0x5), which XLA rejects: broadcast a scalar.
		zero := reflect.Zero(reflect.TypeOf(xflat).Elem()).Interface()
		sv, err := b.fn.ConstantFromScalar(zero)
		if err != nil {
			return nil, b.opError("Constant", err)
		}
		v, err := stablehlo.BroadcastInDim(sv, xshapes.Make(sv.Shape().DType, dims...), nil)
		if err != nil {
			return nil, b.opError("Constant", err)
		}
		return b.node(v), nil
	}
	if len(dims) > 0 && shapeSize(dims) >= HoistThreshold && hoistable(xflat) {
		return b.hoist(flat, xflat, dims)
	}
	v, err := b.fn.ConstantFromFlatAndDimensions(xflat, dims...)
	if err != nil {
		return nil, b.opError("Constant", err)
	}
	return b.node(v), nil
}

// hoist declares a large constant as a hidden parameter of the program
// text and keeps its data, which CompileText writes back as a constant.
// xflat is flat converted by toXFlat.
func (b *Builder) hoist(flat, xflat any, dims []int) (backends.Op, error) {
	v := reflect.ValueOf(xflat)
	if n := shapeSize(dims); v.Len() != n {
		return nil, b.opError("Constant", fmt.Errorf("%d values for dimensions %v (%d elements)", v.Len(), dims, n))
	}
	dt := dtypes.FromGoType(reflect.TypeOf(flat).Elem())
	size := int(v.Type().Elem().Size())
	if dt == dtypes.InvalidDType || size != dt.Size() {
		// Not expected for the types toXFlat accepts; keep the literal.
		c, err := b.fn.ConstantFromFlatAndDimensions(xflat, dims...)
		if err != nil {
			return nil, b.opError("Constant", err)
		}
		return b.node(c), nil
	}
	shape := shapes.Make(dt, slices.Clone(dims)...)
	name := hoistedPrefix + strconv.Itoa(len(b.hoisted))
	in, err := b.fn.NamedInput(name, toXShape(shape))
	if err != nil {
		return nil, b.opError("Constant", err)
	}
	raw := unsafe.Slice((*byte)(v.UnsafePointer()), v.Len()*size)
	b.hoisted = append(b.hoisted, HoistedConstant{Name: name, Shape: shape, Data: bytes.Clone(raw)})
	if b.hoistedInput == nil {
		b.hoistedInput = map[*stablehlo.Value]bool{}
	}
	b.hoistedInput[in] = true
	return b.node(in), nil
}

func shapeSize(dims []int) int {
	n := 1
	for _, d := range dims {
		n *= d
	}
	return n
}

// DistributedSPMD makes the program run as numDevices replicas.
func (b *Builder) DistributedSPMD(numDevices int) error {
	if err := b.checkOpen("DistributedSPMD"); err != nil {
		return err
	}
	if b.strategy != SingleDevice {
		return b.opError("DistributedSPMD", fmt.Errorf("a distribution strategy (%s) is already set", b.strategy))
	}
	if numDevices < 1 || (b.numDevices > 0 && numDevices > b.numDevices) {
		return b.opError("DistributedSPMD", fmt.Errorf("%d devices requested, the engine has %d", numDevices, b.numDevices))
	}
	if len(b.paramNames) > 0 {
		return b.opError("DistributedSPMD", errors.New("must be called before any Parameter"))
	}
	b.strategy = SPMD
	b.progDevices = numDevices
	b.b.WithNumReplicas(numDevices)
	b.b.WithNumPartitions(1)
	return nil
}

// DistributedAutoSharding makes the program partitioned by Shardy over the
// given meshes.
func (b *Builder) DistributedAutoSharding(meshes ...backends.Mesh) (err error) {
	defer b.guard("DistributedAutoSharding", &err)
	if err := b.checkOpen("DistributedAutoSharding"); err != nil {
		return err
	}
	if b.strategy != SingleDevice {
		return b.opError("DistributedAutoSharding", fmt.Errorf("a distribution strategy (%s) is already set", b.strategy))
	}
	if len(meshes) == 0 {
		return b.opError("DistributedAutoSharding", errors.New("no mesh given"))
	}
	if len(b.paramNames) > 0 {
		return b.opError("DistributedAutoSharding", errors.New("must be called before any Parameter"))
	}
	devices := 0
	var sm []*shardy.DeviceMesh
	for _, m := range meshes {
		mesh, err := shardy.NewDeviceMesh(m.Name, m.AxesSizes, m.AxesNames)
		if err != nil {
			return b.opError("DistributedAutoSharding", fmt.Errorf("mesh %q: %w", m.Name, err))
		}
		if len(m.LogicalDeviceAssignment) > 0 {
			if err := mesh.SetLogicalDeviceAssignment(m.LogicalDeviceAssignment...); err != nil {
				return b.opError("DistributedAutoSharding", fmt.Errorf("mesh %q: %w", m.Name, err))
			}
		}
		devices = max(devices, mesh.NumDevices())
		sm = append(sm, mesh)
	}
	if b.numDevices > 0 && devices > b.numDevices {
		return b.opError("DistributedAutoSharding", fmt.Errorf("meshes need %d devices, the engine has %d", devices, b.numDevices))
	}
	b.strategy = AutoSharding
	b.meshes = sm
	b.progDevices = devices
	b.b.WithShardy(sm...)
	return nil
}

// DeviceAssignment fixes the engine devices the program runs on: one per
// replica or partition (one for a single-device program).
func (b *Builder) DeviceAssignment(devices ...backends.DeviceNum) error {
	if err := b.checkOpen("DeviceAssignment"); err != nil {
		return err
	}
	if len(devices) != b.progDevices {
		return b.opError("DeviceAssignment", fmt.Errorf("the computation runs on %d device(s), %d were assigned", b.progDevices, len(devices)))
	}
	seen := map[backends.DeviceNum]bool{}
	out := make([]int, len(devices))
	for i, d := range devices {
		if d < 0 || (b.numDevices > 0 && int(d) >= b.numDevices) {
			return b.opError("DeviceAssignment", fmt.Errorf("device %d out of range [0, %d)", d, b.numDevices))
		}
		if seen[d] {
			return b.opError("DeviceAssignment", fmt.Errorf("device %d assigned twice", d))
		}
		seen[d] = true
		out[i] = int(d)
	}
	b.deviceAssignment = out
	return nil
}

func (b *Builder) toShardy(s *backends.ShardingSpec) (*shardy.ShardingSpec, error) {
	var mesh *shardy.DeviceMesh
	for _, m := range b.meshes {
		if m.Name() == s.Mesh {
			mesh = m
		}
	}
	if mesh == nil {
		names := make([]string, len(b.meshes))
		for i, m := range b.meshes {
			names[i] = m.Name()
		}
		return nil, fmt.Errorf("sharding names mesh %q; the computation's meshes are %q", s.Mesh, names)
	}
	spec := shardy.NewShardingSpec(mesh)
	for _, axes := range s.Axes {
		if len(axes) == 0 {
			spec.AddReplicated()
		} else {
			spec.AddShardedAxis(axes...)
		}
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	return spec, nil
}

// Finish ends the program with the given outputs (and, for AutoSharding,
// optional output shardings) and renders it. The Builder cannot be used
// afterwards.
func (b *Builder) Finish(outputs []backends.Op, shardings []*backends.ShardingSpec) (p *Program, err error) {
	defer b.guard("Compile", &err)
	if len(outputs) == 0 {
		return nil, b.opError("Compile", errors.New("no outputs"))
	}
	nodes, err := b.nodes("Compile", outputs...)
	if err != nil {
		return nil, err
	}
	var specs []*shardy.ShardingSpec
	if len(shardings) > 0 {
		if b.strategy != AutoSharding {
			return nil, b.opError("Compile", errors.New("output shardings need DistributedAutoSharding"))
		}
		if len(shardings) != len(outputs) {
			return nil, b.opError("Compile", fmt.Errorf("%d output shardings for %d outputs", len(shardings), len(outputs)))
		}
		specs = make([]*shardy.ShardingSpec, len(shardings))
		for i, s := range shardings {
			if s == nil {
				continue
			}
			if specs[i], err = b.toShardy(s); err != nil {
				return nil, b.opError("Compile", fmt.Errorf("output #%d: %w", i, err))
			}
		}
	}
	values := make([]*stablehlo.Value, len(nodes))
	outShapes := make([]shapes.Shape, len(nodes))
	for i, n := range nodes {
		values[i] = n.value
		outShapes[i] = n.shape.Clone()
	}
	b.finished = true
	if len(b.hoisted) > 0 {
		// Hidden parameters go after the user's, whatever the order the
		// constants and parameters were declared in: go-xla writes the
		// signature in Inputs order and refers to inputs by name.
		user := make([]*stablehlo.Value, 0, len(b.fn.Inputs))
		var hidden []*stablehlo.Value
		for _, in := range b.fn.Inputs {
			if b.hoistedInput[in] {
				hidden = append(hidden, in)
			} else {
				user = append(user, in)
			}
		}
		b.fn.Inputs = append(user, hidden...)
	}
	if err := b.fn.ReturnWithShardingAndAttributes(values, specs, nil); err != nil {
		return nil, b.opError("Compile", err)
	}
	text, err := b.b.Build()
	if err != nil {
		return nil, b.opError("Compile", err)
	}
	p = &Program{
		Name:          b.name,
		Text:          text,
		ParamNames:    slices.Clone(b.paramNames),
		ParamShapes:   b.paramShapes,
		OutputShapes:  outShapes,
		Strategy:      b.strategy,
		NumReplicas:   1,
		NumPartitions: 1,
	}
	if len(b.hoisted) > 0 {
		p.Constants = b.hoisted
		w := cache.NewWeightsHasher()
		for _, c := range b.hoisted {
			w.Add(c.Name, c.Shape.DType.String(), c.Shape.Dimensions, c.Data)
		}
		p.WeightsDigest = w.Sum()
	}
	switch b.strategy {
	case SPMD:
		p.NumReplicas = b.progDevices
	case AutoSharding:
		p.NumPartitions = b.progDevices
	}
	switch {
	case b.deviceAssignment != nil:
		p.DeviceAssignment = slices.Clone(b.deviceAssignment)
	case b.strategy != SingleDevice:
		p.DeviceAssignment = make([]int, b.progDevices)
		for i := range p.DeviceAssignment {
			p.DeviceAssignment[i] = i
		}
	}
	return p, nil
}

// validShape rejects tuples, invalid dtypes and negative dimensions.
func validShape(s shapes.Shape) error {
	if !s.Ok() || s.IsTuple() || s.DType == dtypes.InvalidDType {
		return fmt.Errorf("invalid shape %s", s)
	}
	for _, d := range s.Dimensions {
		if d < 0 {
			return fmt.Errorf("negative dimension in shape %s", s)
		}
	}
	return nil
}

// GoMLX's and go-xla's dtype enums both follow PJRT_Buffer_Type, so the
// conversion is a cast; TestDTypeNumbering checks the names agree.
func toXDType(dt dtypes.DType) xdtypes.DType { return xdtypes.DType(dt) }

func fromXDType(dt xdtypes.DType) dtypes.DType { return dtypes.DType(dt) }

func toXShape(s shapes.Shape) xshapes.Shape {
	return xshapes.Make(toXDType(s.DType), slices.Clone(s.Dimensions)...)
}

func fromXShape(s xshapes.Shape) shapes.Shape {
	if !s.Ok() || s.IsTuple() {
		return shapes.Invalid()
	}
	return shapes.Make(fromXDType(s.DType), slices.Clone(s.Dimensions)...)
}

var (
	_ backends.StandardOps   = (*Builder)(nil)
	_ backends.CollectiveOps = (*Builder)(nil)
)
