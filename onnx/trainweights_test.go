package onnx

import (
	"errors"
	"testing"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// SpecializeOptions.Weights makes exactly the named initializers weight
// parameters, small ones included, and refuses a name that is not an
// initializer or one the importer needs as a value (a Reshape's shape).
func TestSpecializeWeightsNamed(t *testing.T) {
	pb := model(17,
		[]onnxpb.ValueInfo{vi("x", onnxpb.Float, 2, 3)},
		[]onnxpb.ValueInfo{vi("y", onnxpb.Float, 6)},
		[]onnxpb.Tensor{tF32("w", []int64{3}, 1, 2, 3), tF32("b", []int64{1}, 0.5), tI64("shape", []int64{1}, 6)},
		node("Mul", []string{"x", "w"}, []string{"xw"}),
		node("Add", []string{"xw", "b"}, []string{"xb"}),
		node("Reshape", []string{"xb", "shape"}, []string{"y"}))
	m := mustModel(t, pb)
	shapes := map[string][]int{"x": {2, 3}}
	p, err := m.SpecializeWith(shapes, nil, SpecializeOptions{WeightsAsParams: true, Weights: []string{"b", "w"}})
	if err != nil {
		t.Fatal(err)
	}
	ws := p.Weights()
	if len(ws) != 2 || ws[0].Name != "w" || ws[1].Name != "b" {
		t.Errorf("weights %v: want w and b (3 and 1 elements), in initializer order", ws)
	}
	// Without names, both are below WeightMinElements and stay constants.
	p, err = m.SpecializeWith(shapes, nil, SpecializeOptions{WeightsAsParams: true})
	if err != nil || len(p.Weights()) != 0 {
		t.Errorf("size rule: weights %v, err %v; want none", p.Weights(), err)
	}
	for _, name := range []string{"shape", "nope"} {
		_, err := m.SpecializeWith(shapes, nil, SpecializeOptions{WeightsAsParams: true, Weights: []string{name}})
		var ie *errs.InputError
		if !errors.As(err, &ie) || ie.Name != name {
			t.Errorf("Weights [%s]: err %v, want an InputError naming it", name, err)
		}
	}
}
