package onnx

import (
	"context"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tensorbridge/tensorbridge/ir"
)

// A minimal protobuf writer for seeds: field numbers from onnx.proto.

func pbBytes(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func pbVarint(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// encValueInfo encodes a float tensor ValueInfoProto with static dims.
func encValueInfo(name string, elem uint64, dims ...uint64) []byte {
	var shape []byte
	for _, d := range dims {
		shape = pbBytes(shape, 1, pbVarint(nil, 1, d)) // Dimension.dim_value
	}
	tensorType := pbVarint(nil, 1, elem)       // elem_type
	tensorType = pbBytes(tensorType, 2, shape) // shape
	typ := pbBytes(nil, 1, tensorType)         // TypeProto.tensor_type
	return pbBytes(pbBytes(nil, 1, []byte(name)), 2, typ)
}

func encNode(op string, in, out []string, attrs ...[]byte) []byte {
	var n []byte
	for _, s := range in {
		n = pbBytes(n, 1, []byte(s))
	}
	for _, s := range out {
		n = pbBytes(n, 2, []byte(s))
	}
	n = pbBytes(n, 4, []byte(op))
	for _, a := range attrs {
		n = pbBytes(n, 5, a)
	}
	return n
}

// encModel encodes a ModelProto importing ai.onnx at opset.
func encModel(opset uint64, nodes [][]byte, inputs, outputs [][]byte) []byte {
	var g []byte
	for _, n := range nodes {
		g = pbBytes(g, 1, n)
	}
	g = pbBytes(g, 2, []byte("g"))
	for _, in := range inputs {
		g = pbBytes(g, 11, in)
	}
	for _, out := range outputs {
		g = pbBytes(g, 12, out)
	}
	m := pbVarint(nil, 1, 8)                   // ir_version
	m = pbBytes(m, 8, pbVarint(nil, 2, opset)) // opset_import{version}
	return pbBytes(m, 7, g)
}

func reluModelBytes() []byte {
	return encModel(13, [][]byte{encNode("Relu", []string{"x"}, []string{"y"})},
		[][]byte{encValueInfo("x", 1, 2, 2)}, [][]byte{encValueInfo("y", 1, 2, 2)})
}

// TestParseEncoded goes through the protobuf decoder end to end.
func TestParseEncoded(t *testing.T) {
	m, err := Parse(reluModelBytes())
	if err != nil {
		t.Fatal(err)
	}
	outs := run(t, m, map[string]*ir.Tensor{"x": f32(t, []int{2, 2}, -1, 2, -3, 4)})
	expect(t, "y", outs["y"], ir.Float32, []int{2, 2}, floats(0, 2, 0, 4), 0)
}

// FuzzParse: Parse must never panic, and a model it accepts with static
// inputs must build or fail with an error, never a panic.
func FuzzParse(f *testing.F) {
	f.Add(reluModelBytes())
	f.Add(encModel(13, [][]byte{
		encNode("Shape", []string{"x"}, []string{"s"}),
		encNode("Reshape", []string{"x", "s"}, []string{"y"}),
	}, [][]byte{encValueInfo("x", 1, 3)}, [][]byte{encValueInfo("y", 1, 3)}))
	f.Add(encModel(11, [][]byte{
		encNode("Transpose", []string{"x"}, []string{"t"}),
		encNode("Softmax", []string{"t"}, []string{"y"}),
	}, [][]byte{encValueInfo("x", 1, 2, 3)}, [][]byte{encValueInfo("y", 1, 3, 2)}))
	f.Add(encModel(99, nil, nil, nil))
	f.Add([]byte{})
	f.Add([]byte("not a model"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			return
		}
		_, _ = m.Inputs(), m.Outputs()
		for _, in := range m.Inputs() {
			if !in.IsStatic() {
				return
			}
			n := 1
			for _, d := range in.Dims {
				n *= d.Value
			}
			if n > 1<<12 {
				return
			}
		}
		p, err := m.Specialize(nil, nil)
		if err != nil {
			return
		}
		g := ir.NewGraph(engine(t), "fuzz")
		defer g.Finalize()
		nodes := map[string]*ir.Node{}
		for _, prm := range p.Params() {
			nodes[prm.Name] = ir.Parameter(g, prm.Name, prm.Shape)
		}
		_, _ = p.Build(g, nodes)
		_ = context.Background()
	})
}
