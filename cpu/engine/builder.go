package engine

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// replayFn adds a recorded op to builder t, given t's ops for its inputs,
// and returns t's ops for its outputs. The same function builds the op in
// the shadow builder (for shape inference and validation) and, at compile
// time, in the segment builders of ops this engine runs through its inner
// engine.
type replayFn func(t backends.Builder, in []backends.Op) ([]backends.Op, error)

// node is one recorded op.
type node struct {
	id     int
	op     backends.OpType
	in     []*value
	shapes []shapes.Shape // one per output
	replay replayFn
	attr   any // op parameters native kernels read (dotAttr, convAttr, ...)
	param  int // parameter position, or -1
	konst  backends.Buffer
	shadow []backends.Op
}

// value is the Op handle this builder hands out: output i of node n.
type value struct {
	n *node
	i int
	b *Builder
}

func (v *value) shape() shapes.Shape { return v.n.shapes[v.i] }

// Builder records a computation. Every op is also added to a shadow
// builder of the inner engine, which infers its shape and validates its
// arguments exactly as GoMLX's reference engine does; the shadow is
// discarded at Compile. Constants are parameters in the shadow, so their
// values are held once, by this builder.
type Builder struct {
	e        *Engine
	name     string
	shadow   backends.Builder
	nodes    []*node
	params   []*node
	compiled bool
}

var _ backends.Builder = (*Builder)(nil)

// Name returns the computation's name.
func (b *Builder) Name() string { return b.name }

// OpShape returns the shape of op.
func (b *Builder) OpShape(op backends.Op) (shapes.Shape, error) {
	v, err := b.val("OpShape", op)
	if err != nil {
		return shapes.Invalid(), err
	}
	return v.shape(), nil
}

// val checks that op is a value of this builder.
func (b *Builder) val(opName string, op backends.Op) (*value, error) {
	v, ok := op.(*value)
	if !ok || v == nil {
		return nil, fmt.Errorf("%s: op of type %T is not from the %s engine", opName, op, Name)
	}
	if v.b != b {
		return nil, fmt.Errorf("%s: op belongs to computation %q, not %q", opName, v.b.name, b.name)
	}
	return v, nil
}

// record adds an op with the given inputs: it builds the op in the shadow
// builder (which infers its shapes and refuses bad arguments), then keeps
// it as a node. It returns the node's outputs as values.
func (b *Builder) record(op backends.OpType, attr any, replay replayFn, ins ...backends.Op) ([]backends.Op, error) {
	if b.compiled {
		return nil, fmt.Errorf("%s: computation %q is already compiled", op, b.name)
	}
	n := &node{id: len(b.nodes), op: op, replay: replay, attr: attr, param: -1}
	shadowIn := make([]backends.Op, len(ins))
	f16 := false
	for i, in := range ins {
		v, err := b.val(op.String(), in)
		if err != nil {
			return nil, err
		}
		n.in = append(n.in, v)
		shadowIn[i] = v.n.shadow[v.i]
		f16 = f16 || isF16(v)
	}
	if f16 && op != backends.OpTypeConvertDType {
		return b.viaFloat32(op, attr, replay, n.in)
	}
	outs, err := shadowCall(op, func() ([]backends.Op, error) { return replay(b.shadow, shadowIn) })
	if err != nil {
		return nil, err
	}
	n.shadow = outs
	for _, o := range outs {
		s, err := b.shadow.OpShape(o)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		n.shapes = append(n.shapes, s)
	}
	b.nodes = append(b.nodes, n)
	res := make([]backends.Op, len(outs))
	for i := range outs {
		res[i] = &value{n: n, i: i, b: b}
	}
	return res, nil
}

// recordShaped records a single-output op the inner engine's builder does
// not have (so it cannot infer its shape): the caller has checked the
// arguments and gives the output shape; the shadow holds a parameter of
// that shape in its place, so later ops infer theirs.
func (b *Builder) recordShaped(op backends.OpType, out shapes.Shape, replay replayFn, ins ...backends.Op) (backends.Op, error) {
	if b.compiled {
		return nil, fmt.Errorf("%s: computation %q is already compiled", op, b.name)
	}
	n := &node{id: len(b.nodes), op: op, replay: replay, param: -1, shapes: []shapes.Shape{out}}
	for _, in := range ins {
		v, err := b.val(op.String(), in)
		if err != nil {
			return nil, err
		}
		n.in = append(n.in, v)
	}
	sh, err := b.shadow.Parameter(fmt.Sprintf("#%s%d", op, n.id), shadowShape(out), nil)
	if err != nil {
		return nil, err
	}
	n.shadow = []backends.Op{sh}
	b.nodes = append(b.nodes, n)
	return &value{n: n, b: b}, nil
}

// one records a single-output op.
func (b *Builder) one(op backends.OpType, attr any, f func(t backends.Builder, in []backends.Op) (backends.Op, error), ins ...backends.Op) (backends.Op, error) {
	outs, err := b.record(op, attr, func(t backends.Builder, in []backends.Op) ([]backends.Op, error) {
		o, err := f(t, in)
		if err != nil {
			return nil, err
		}
		return []backends.Op{o}, nil
	}, ins...)
	if err != nil {
		return nil, err
	}
	return outs[0], nil
}

type unaryFn = func(backends.Builder, backends.Op) (backends.Op, error)
type binaryFn = func(backends.Builder, backends.Op, backends.Op) (backends.Op, error)

func (b *Builder) unary(op backends.OpType, f unaryFn, x backends.Op) (backends.Op, error) {
	return b.one(op, nil, func(t backends.Builder, in []backends.Op) (backends.Op, error) { return f(t, in[0]) }, x)
}

func (b *Builder) binary(op backends.OpType, f binaryFn, x, y backends.Op) (backends.Op, error) {
	return b.one(op, nil, func(t backends.Builder, in []backends.Op) (backends.Op, error) { return f(t, in[0], in[1]) }, x, y)
}

// Parameter adds an input of the computation.
func (b *Builder) Parameter(name string, shape shapes.Shape, sharding *backends.ShardingSpec) (backends.Op, error) {
	if sharding != nil {
		return nil, fmt.Errorf("Parameter %q: sharding is not supported: the %s engine runs on one device", name, Name)
	}
	sh, err := b.shadow.Parameter(name, shadowShape(shape), nil)
	if err != nil {
		return nil, err
	}
	n := &node{id: len(b.nodes), op: backends.OpTypeParameter, shapes: []shapes.Shape{shape},
		param: len(b.params), shadow: []backends.Op{sh}, attr: name}
	b.nodes = append(b.nodes, n)
	b.params = append(b.params, n)
	return &value{n: n, b: b}, nil
}

// Constant adds a constant: its values are copied into a buffer the
// compiled computation owns.
func (b *Builder) Constant(flat any, dims ...int) (backends.Op, error) {
	dt, size, err := flatInfo(flat)
	if err != nil {
		return nil, fmt.Errorf("Constant: %w", err)
	}
	shape := shapes.Make(dt, dims...)
	if shape.Size() != size {
		return nil, fmt.Errorf("Constant: %d values for shape %s (%d elements)", size, shape, shape.Size())
	}
	sh, err := b.shadow.Parameter(fmt.Sprintf("#constant%d", len(b.nodes)), shadowShape(shape), nil)
	if err != nil {
		return nil, err
	}
	buf, err := b.e.inner.BufferFromFlatData(0, flat, shape)
	if err != nil {
		return nil, fmt.Errorf("Constant: %w", err)
	}
	n := &node{id: len(b.nodes), op: backends.OpTypeConstant, shapes: []shapes.Shape{shape},
		param: -1, konst: buf, shadow: []backends.Op{sh}}
	b.nodes = append(b.nodes, n)
	return &value{n: n, b: b}, nil
}

// flatInfo returns the dtype and length of a flat Go slice.
func flatInfo(flat any) (dtypes.DType, int, error) {
	dt, n, ok := sliceInfo(flat)
	if !ok || dt == dtypes.InvalidDType {
		return dtypes.InvalidDType, 0, fmt.Errorf("flat values of type %T are not a slice of a supported dtype", flat)
	}
	return dt, n, nil
}

// DistributedSPMD is refused: the engine runs on one device.
func (b *Builder) DistributedSPMD(numDevices int) error {
	return fmt.Errorf("DistributedSPMD(%d): the %s engine runs on one device", numDevices, Name)
}

// DistributedAutoSharding is refused: the engine runs on one device.
func (b *Builder) DistributedAutoSharding(meshes ...backends.Mesh) error {
	return fmt.Errorf("DistributedAutoSharding: the %s engine runs on one device", Name)
}

// DeviceAssignment accepts device 0 only.
func (b *Builder) DeviceAssignment(devices ...backends.DeviceNum) error {
	if len(devices) == 1 && devices[0] == 0 {
		return nil
	}
	return fmt.Errorf("DeviceAssignment(%v): the %s engine has one device, 0", devices, Name)
}

// AllReduce is refused: the engine runs on one device.
func (b *Builder) AllReduce(operands []backends.Op, reductionType backends.ReduceOpType, replicaGroups [][]int) ([]backends.Op, error) {
	return nil, fmt.Errorf("AllReduce: the %s engine runs on one device", Name)
}

// shadowCall runs f, turning a panic of the inner engine's builder (which
// raises some bad arguments that way) into an error naming the op.
func shadowCall(op backends.OpType, f func() ([]backends.Op, error)) (outs []backends.Op, err error) {
	defer func() {
		if r := recover(); r != nil {
			outs, err = nil, fmt.Errorf("%s: invalid arguments: %v", op, r)
		}
	}()
	return f()
}
