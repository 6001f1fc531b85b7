package tensorbridge_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"github.com/tensorbridge/tensorbridge/ir"
	_ "github.com/tensorbridge/tensorbridge/pjrt"
	"github.com/tensorbridge/tensorbridge/shard"
)

func f32Tensor(t *testing.T, dims []int, v []float32) *ir.Tensor {
	t.Helper()
	raw := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
	}
	x, err := ir.TensorFromBytes(ir.Float32, dims, raw)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func f32Values(t *testing.T, x *ir.Tensor) []float32 {
	t.Helper()
	raw, err := ir.TensorBytes(x)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}

// TestCompileSharded: y = x W^T with W [6, 4] split by rows over
// model=2 (each device holds 3 rows), y kept split by columns and its sum
// replicated, against exact integer arithmetic; a run with the wrong
// number of device lists, and RunSharded of a one-device program, are
// refused.
func TestCompileSharded(t *testing.T) {
	ctx := context.Background()
	b, err := tensorbridge.Open(ctx, "xla-cpu:devices=2")
	if err != nil {
		testreq.Skipf(t, "xla-cpu: %v", err)
	}
	defer b.Close()
	mesh := shard.Mesh{Data: 1, Model: 2}
	fn := func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		y := graph.Einsum("ni,oi->no", in[0], in[1])
		return []*ir.Node{y, graph.ReduceAllSum(y)}, nil
	}
	split0, split1 := shard.Plan{shard.Model, ""}, shard.Plan{"", shard.Model}
	exe, err := b.CompileSharded(ctx, "spmd-matmul", mesh, []int{0, 1}, fn,
		[]ir.Shape{ir.MakeShape(ir.Float32, 2, 4), ir.MakeShape(ir.Float32, 6, 4)},
		[]shard.Plan{nil, split0}, []shard.Plan{split1, nil})
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	x := []float32{1, 2, 3, 4, -1, 0, 2, 5}
	w := make([]float32, 24)
	for i := range w {
		w[i] = float32(i%7 - 3)
	}
	want := make([]float32, 12) // [2, 6]
	var sum float32
	for n := range 2 {
		for o := range 6 {
			for i := range 4 {
				want[n*6+o] += x[n*4+i] * w[o*4+i]
			}
			sum += want[n*6+o]
		}
	}
	xt := f32Tensor(t, []int{2, 4}, x)
	args := [][]*ir.Tensor{{xt, f32Tensor(t, []int{3, 4}, w[:12])}, {xt, f32Tensor(t, []int{3, 4}, w[12:])}}
	outs, err := exe.RunSharded(ctx, args)
	if err != nil {
		t.Fatal(err)
	}
	for d, o := range outs {
		if dev, err := o[0].Device(); err != nil || int(dev) != d {
			t.Errorf("device %d's output is on %v (%v)", d, dev, err)
		}
		got := f32Values(t, o[0])
		for n := range 2 {
			for j := range 3 {
				if g, wv := got[n*3+j], want[n*6+3*d+j]; g != wv {
					t.Errorf("device %d y[%d][%d] = %v, want %v", d, n, 3*d+j, g, wv)
				}
			}
		}
		if s := f32Values(t, o[1]); s[0] != sum {
			t.Errorf("device %d: sum %v, want %v", d, s[0], sum)
		}
		for _, x := range o {
			_ = x.FinalizeAll()
		}
	}
	if _, err := exe.RunSharded(ctx, args[:1]); !errors.Is(err, tensorbridge.ErrInvalidInput) {
		t.Errorf("one device's inputs for two: %v, want ErrInvalidInput", err)
	}
	one, err := b.Compile(ctx, "one", func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) { return in, nil }, ir.MakeShape(ir.Float32, 2, 4))
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	if _, err := one.RunSharded(ctx, [][]*ir.Tensor{{xt}}); tensorbridge.KindOf(err) != tensorbridge.InvalidArgument {
		t.Errorf("RunSharded of a one-device program: %v, want InvalidArgument", err)
	}
}
