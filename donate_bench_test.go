package tensorbridge_test

import (
	"context"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/ir"
)

// BenchmarkDonatedCacheUpdate times one step that writes a 4 KiB block
// into a 64 MiB state (a KV cache's shape of work) and reads a slice of
// it, with the state donated (updated in place) and not (the program
// writes a new copy of the whole state):
//
//	TENSORBRIDGE_TEST_BACKEND=xla-cpu go test -run '^$' -bench DonatedCacheUpdate -benchtime 20x .
func BenchmarkDonatedCacheUpdate(b *testing.B) {
	ctx := context.Background()
	be, err := tensorbridge.Open(ctx, testBackend())
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	const rows, width = 16384, 1024 // 64 MiB of float32
	state := ir.MakeShape(ir.Float32, rows, width)
	block := ir.MakeShape(ir.Float32, 1, width)
	at := ir.MakeShape(ir.Int32)
	step := func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		// The update depends on what the step reads from the state, as a
		// decode step's new keys depend on the cached ones it attends to.
		zero := graph.ConstAsDType(g, ir.Int32, 0)
		read := graph.ReduceAllSum(graph.Slice(in[0], graph.AxisRange(0, 8)))
		upd := graph.DynamicUpdateSlice(in[0], graph.Add(in[1], read), []*ir.Node{in[2], zero})
		return []*ir.Node{upd, read}, nil
	}
	if testBackend() == "cpu" {
		b.Skip("the cpu backend has no DynamicUpdateSlice")
	}
	for _, tc := range []struct {
		name   string
		donate tensorbridge.Donation
	}{{"donated", tensorbridge.Donation{0: 0}}, {"copied", nil}} {
		b.Run(tc.name, func(b *testing.B) {
			exe, err := be.CompileDonating(ctx, "update", step, tc.donate, state, block, at)
			if err != nil {
				b.Fatal(err)
			}
			defer exe.Close()
			s, _ := ir.NewHostTensor(ir.Float32, rows, width)
			x, _ := ir.NewHostTensor(ir.Float32, 1, width)
			outs, err := exe.RunOnDevice(ctx, 0, s, x, scalarI32(b, 3))
			if err != nil {
				b.Fatal(err)
			}
			cur := outs[0]
			_ = outs[1].FinalizeAll()
			b.ResetTimer()
			for i := range b.N {
				outs, err := exe.RunOnDevice(ctx, 0, cur, x, scalarI32(b, i%rows))
				if err != nil {
					b.Fatal(err)
				}
				if tc.donate == nil {
					_ = cur.FinalizeAll()
				}
				cur = outs[0]
				_ = outs[1].FinalizeAll()
			}
			b.StopTimer()
			_ = cur.FinalizeAll()
		})
	}
}

func scalarI32(b *testing.B, v int) *ir.Tensor {
	t, err := ir.TensorFromFlat([]int32{int32(v)})
	if err != nil {
		b.Fatal(err)
	}
	return t
}
