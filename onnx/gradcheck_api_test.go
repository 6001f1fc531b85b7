package onnx

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// mlpModel: Gemm, Relu, Gemm, LogSoftmax, plus MatMul, Add, Softmax.
// Every weight is a graph input so that the test differentiates them.
func mlpModel() *onnxpb.Model {
	return model(17,
		[]onnxpb.ValueInfo{vi("X", onnxpb.Float, 4, 6), vi("W1", onnxpb.Float, 6, 8), vi("B1", onnxpb.Float, 8),
			vi("W2", onnxpb.Float, 8, 3), vi("B2", onnxpb.Float, 3), vi("W3", onnxpb.Float, 6, 3), vi("B3", onnxpb.Float, 3)},
		[]onnxpb.ValueInfo{vi("logp", onnxpb.Float, 4, 3), vi("p", onnxpb.Float, 4, 3)},
		nil,
		onnxpb.Node{OpType: "Gemm", Name: "fc1", Input: []string{"X", "W1", "B1"}, Output: []string{"h"}},
		onnxpb.Node{OpType: "Relu", Name: "relu", Input: []string{"h"}, Output: []string{"hr"}},
		onnxpb.Node{OpType: "Gemm", Name: "fc2", Input: []string{"hr", "W2", "B2"}, Output: []string{"z"}},
		onnxpb.Node{OpType: "LogSoftmax", Name: "lsm", Input: []string{"z"}, Output: []string{"logp"}, Attribute: []onnxpb.Attribute{aInt("axis", 1)}},
		onnxpb.Node{OpType: "MatMul", Name: "mm", Input: []string{"X", "W3"}, Output: []string{"m"}},
		onnxpb.Node{OpType: "Add", Name: "add", Input: []string{"m", "B3"}, Output: []string{"mb"}},
		onnxpb.Node{OpType: "Softmax", Name: "sm", Input: []string{"mb"}, Output: []string{"p"}, Attribute: []onnxpb.Attribute{aInt("axis", 1)}},
	)
}

// cnnModel: Conv, BatchNormalization (inference), Relu, MaxPool, Flatten,
// Gemm. The running mean and variance are initializers (the variance must
// stay positive); everything else trainable is a graph input.
func cnnModel() *onnxpb.Model {
	return model(17,
		[]onnxpb.ValueInfo{vi("X", onnxpb.Float, 2, 1, 6, 6), vi("K", onnxpb.Float, 3, 1, 3, 3), vi("KB", onnxpb.Float, 3),
			vi("S", onnxpb.Float, 3), vi("SB", onnxpb.Float, 3), vi("WF", onnxpb.Float, 27, 4), vi("BF", onnxpb.Float, 4)},
		[]onnxpb.ValueInfo{vi("y", onnxpb.Float, 2, 4)},
		[]onnxpb.Tensor{tF32("mean", []int64{3}, 0.1, -0.2, 0.3), tF32("var", []int64{3}, 0.5, 1.5, 2)},
		onnxpb.Node{OpType: "Conv", Name: "conv", Input: []string{"X", "K", "KB"}, Output: []string{"c"}, Attribute: []onnxpb.Attribute{aInts("pads", 1, 1, 1, 1)}},
		onnxpb.Node{OpType: "BatchNormalization", Name: "bn", Input: []string{"c", "S", "SB", "mean", "var"}, Output: []string{"n"}},
		onnxpb.Node{OpType: "Relu", Name: "relu", Input: []string{"n"}, Output: []string{"r"}},
		onnxpb.Node{OpType: "MaxPool", Name: "pool", Input: []string{"r"}, Output: []string{"p"}, Attribute: []onnxpb.Attribute{aInts("kernel_shape", 2, 2), aInts("strides", 2, 2)}},
		onnxpb.Node{OpType: "Flatten", Name: "flat", Input: []string{"p"}, Output: []string{"f"}},
		onnxpb.Node{OpType: "Gemm", Name: "fc", Input: []string{"f", "WF", "BF"}, Output: []string{"y"}},
	)
}

// TestTrainableModelsGradients: an MLP and a CNN are accepted by
// CheckGradients and their gradients, built and run on the cpu backend,
// agree with finite differences in float64.
func TestTrainableModelsGradients(t *testing.T) {
	eng := cpuEngine(t)
	for _, tc := range []struct {
		name string
		pb   *onnxpb.Model
	}{{"mlp", mlpModel()}, {"cnn", cnnModel()}} {
		t.Run(tc.name, func(t *testing.T) {
			if err := toDouble(tc.pb); err != nil {
				t.Fatal(err)
			}
			m := mustModel(t, tc.pb)
			rng := rand.New(rand.NewPCG(7, 7))
			shapes := map[string][]int{}
			points := map[string][]float64{}
			for _, in := range m.Inputs() {
				dims := make([]int, len(in.Dims))
				n := 1
				for k, d := range in.Dims {
					dims[k] = d.Value
					n *= d.Value
				}
				shapes[in.Name] = dims
				x := make([]float64, n)
				for i := range x {
					x[i] = rng.NormFloat64()
				}
				points[in.Name] = x
			}
			plan, err := m.Specialize(shapes, nil)
			if err != nil {
				t.Fatal(err)
			}
			if r := gcCheck(t, eng, tc.name, plan, points, gcFloat64, rng, ""); r.status != "pass" {
				t.Fatalf("gradient %s: %s", r.status, r.detail)
			}
		})
	}
}

// TestCheckGradientsWeights: with WeightsAsParams, the weights are what
// CheckGradients differentiates; an initializer too small to be a weight
// parameter (WeightMinElements) is a constant, not a parameter.
func TestCheckGradientsWeights(t *testing.T) {
	w := make([]float32, 16)
	for i := range w {
		w[i] = float32(i)
	}
	pb := model(17, []onnxpb.ValueInfo{vi("X", onnxpb.Float, 2, 4)}, []onnxpb.ValueInfo{vi("Y", onnxpb.Float, 2, 4)},
		[]onnxpb.Tensor{tF32("W", []int64{4, 4}, w...), tF32("B", []int64{4}, 1, 1, 1, 1)},
		onnxpb.Node{OpType: "Gemm", Name: "fc", Input: []string{"X", "W", "B"}, Output: []string{"Y"}})
	plan, err := mustModel(t, pb).SpecializeWith(nil, nil, SpecializeOptions{WeightsAsParams: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := plan.CheckGradients(cpuEngine(t), []string{"W"}); err != nil {
		t.Fatal(err)
	}
	var ie *errs.InputError
	if err := plan.CheckGradients(cpuEngine(t), []string{"B"}); !errors.As(err, &ie) {
		t.Fatalf("CheckGradients(constant B) = %v, want an *errs.InputError", err)
	}
}

// dilatedPoolModel chains Relu and a MaxPool with dilations (which GoMLX
// v0.26.0 cannot differentiate), in the given order.
func dilatedPoolModel(poolFirst bool) *onnxpb.Model {
	pool := onnxpb.Node{OpType: "MaxPool", Name: "dilated_pool", Output: []string{"b"},
		Attribute: []onnxpb.Attribute{aInts("kernel_shape", 2, 2), aInts("dilations", 2, 2)}}
	relu := onnxpb.Node{OpType: "Relu", Name: "relu", Output: []string{"b"}}
	if poolFirst {
		pool.Input, pool.Output, relu.Input = []string{"X"}, []string{"a"}, []string{"a"}
	} else {
		relu.Input, relu.Output, pool.Input = []string{"X"}, []string{"a"}, []string{"a"}
	}
	nodes := []onnxpb.Node{relu, pool}
	if poolFirst {
		nodes = []onnxpb.Node{pool, relu}
	}
	return model(17, []onnxpb.ValueInfo{vi("X", onnxpb.Float, 1, 1, 6, 6)}, []onnxpb.ValueInfo{vi("b", onnxpb.Float, 1, 1, 4, 4)}, nil, nodes...)
}

// TestCheckGradientsRefuses: an op without a gradient, one listed in
// GradientWrong, and a bad wrt name are refused with the op and node named,
// wherever the op sits in the model. (Fault injected once: with
// gradPath.blame's per-node check disabled, the first two cases fail,
// naming "graph" instead of the MaxPool node.)
func TestCheckGradientsRefuses(t *testing.T) {
	eng := cpuEngine(t)
	plan := func(pb *onnxpb.Model) *Plan {
		p, err := mustModel(t, pb).Specialize(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name     string
		plan     *Plan
		wrt      []string
		op, node string
		inject   string // an op to list in GradientWrong for the case
	}{
		{"no gradient, last", plan(dilatedPoolModel(false)), []string{"X"}, "MaxPool", "dilated_pool", ""},
		{"no gradient, first", plan(dilatedPoolModel(true)), []string{"X"}, "MaxPool", "dilated_pool", ""},
		// The guard for wrong gradients, proven by listing Relu.
		{"listed wrong", plan(mlpModel()), []string{"W1"}, "Relu", "relu", "Relu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.inject != "" {
				GradientWrong[tc.inject] = "injected by the test"
				defer delete(GradientWrong, tc.inject)
			}
			err := tc.plan.CheckGradients(eng, tc.wrt)
			var ue *errs.UnsupportedError
			if !errors.As(err, &ue) || !errors.Is(err, errs.ErrUnsupported) {
				t.Fatalf("CheckGradients = %v, want an *errs.UnsupportedError", err)
			}
			if ue.Name != tc.op || !strings.Contains(ue.Detail, `"`+tc.node+`"`) {
				t.Fatalf("CheckGradients names op %q, detail %q; want op %q and node %q", ue.Name, ue.Detail, tc.op, tc.node)
			}
		})
	}
	t.Run("not a parameter", func(t *testing.T) {
		err := plan(mlpModel()).CheckGradients(eng, []string{"nope"})
		var ie *errs.InputError
		if !errors.As(err, &ie) || ie.Name != "nope" {
			t.Fatalf("CheckGradients = %v, want an *errs.InputError naming %q", err, "nope")
		}
	})
	t.Run("nothing trained", func(t *testing.T) {
		if err := plan(dilatedPoolModel(true)).CheckGradients(eng, nil); err != nil {
			t.Fatalf("CheckGradients(no parameters) = %v", err)
		}
	})
}
