package shard

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/distributed"
	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
)

// Layout is how a model specialisation was split over a mesh.
type Layout struct {
	// Mesh is the GoMLX device mesh; nil on one device.
	Mesh *distributed.DeviceMesh
	// Splits per graph parameter, weights first, then inputs (in
	// Plan.Weights then Plan.Params order); outputs in model order.
	Weights, Inputs, Outputs []Plan
	// WeightsPerDevice is the bytes of weights each device holds.
	WeightsPerDevice int64
	// WeightsTotal is the bytes of all weights, unsplit.
	WeightsTotal int64
	// Notes say which weights could not be split, and why.
	Notes []string
	// IndexCheck: the program returns onnx.IndexCheckOutput, replicated,
	// after the model's outputs.
	IndexCheck bool
}

// Spec returns the GoMLX sharding spec of a split (nil on one device).
func (l *Layout) Spec(p Plan) (*distributed.ShardingSpec, error) {
	if l.Mesh == nil {
		return nil, nil
	}
	return distributed.NewShardingSpec(l.Mesh, toAxes(p)...)
}

func toAxes(p Plan) []distributed.AxisSpec {
	out := make([]distributed.AxisSpec, len(p))
	for i, a := range p {
		if a != "" {
			out[i] = distributed.AxisSpec{a}
		}
	}
	return out
}

// Build builds plan p (specialised with WeightsAsParams) on the fresh graph
// g for a mesh of mesh.Devices() devices, and compiles it: weights split by
// the tensor-parallel rules over the model axis, inputs and outputs by
// batch over the data axis (and outputs' last dimension over the model
// axis). The graph's parameters are the weights then the inputs; with more
// than one device, Graph.Run takes them device after device, in mesh
// order. With one device the program is not distributed.
//
// assign, when given, names the backend device of each mesh position
// (mesh order, data-major); by default positions 0..N-1 are devices 0..N-1.
func Build(g *ir.Graph, p *onnx.Plan, mesh Mesh, so Options, assign ...int) (l *Layout, err error) {
	defer func() {
		if r := recover(); r != nil {
			l, err = nil, fmt.Errorf("shard: building the program: %v", r)
		}
	}()
	l = &Layout{}
	if mesh.Devices() > 1 {
		if l.Mesh, err = distributed.NewDeviceMesh([]int{mesh.Data, mesh.Model}, []string{Data, Model}); err != nil {
			return nil, err
		}
		if err := g.SetAutoSharding(l.Mesh); err != nil {
			return nil, err
		}
		if len(assign) > 0 {
			devs := make([]backends.DeviceNum, len(assign))
			for i, d := range assign {
				devs[i] = backends.DeviceNum(d)
			}
			if err := g.SetDeviceAssignment(devs); err != nil {
				return nil, err
			}
		}
	}
	spec := func(pl Plan) *distributed.ShardingSpec {
		s, err := l.Spec(pl)
		if err != nil {
			panic(err)
		}
		return s
	}
	nodes := map[string]*ir.Node{}
	for _, w := range p.Weights() {
		pl, note := Weight(w.Name, w.Shape.Dimensions, mesh.Model, so)
		if note != "" {
			l.Notes = append(l.Notes, note)
		}
		bytes := int64(w.Shape.Memory())
		l.WeightsTotal += bytes
		if pl.Split() {
			bytes /= int64(mesh.Model)
		}
		l.WeightsPerDevice += bytes
		l.Weights = append(l.Weights, pl)
		nodes[w.Name] = graph.ShardedParameter(g, w.Name, w.Shape, spec(pl))
	}
	for _, in := range p.Params() {
		pl := Batch(in.Shape.Dimensions, mesh.Data)
		l.Inputs = append(l.Inputs, pl)
		nodes[in.Name] = graph.ShardedParameter(g, in.Name, in.Shape, spec(pl))
	}
	built, err := p.Build(g, nodes)
	if err != nil {
		return nil, err
	}
	var outs []*ir.Node
	var specs []*distributed.ShardingSpec
	for _, o := range p.Model().Outputs() {
		n := built[o.Name]
		if n == nil {
			return nil, fmt.Errorf("shard: output %q was not built", o.Name)
		}
		dims := n.Shape().Dimensions
		pl := Batch(dims, mesh.Data)
		if last := len(dims) - 1; last > 0 && mesh.Model > 1 && dims[last]%mesh.Model == 0 {
			pl[last] = Model
		}
		l.Outputs = append(l.Outputs, pl)
		outs = append(outs, n)
		specs = append(specs, spec(pl))
	}
	if n := built[onnx.IndexCheckOutput]; n != nil { // computed indices' range (onnx/indexcheck.go): replicated, one whole copy per device
		l.IndexCheck = true
		outs = append(outs, n)
		specs = append(specs, spec(make(Plan, n.Rank())))
	}
	if l.Mesh == nil {
		specs = nil
	}
	g.CompileWithSharding(outs, specs)
	return l, nil
}
