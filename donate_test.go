package tensorbridge_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/ir"
)

// accumulate is state [n] + x [n] (the new state) and the sum of the old
// state: a program that carries state from one run to the next, as a KV
// cache or a training step's weights do.
func accumulate(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
	return []*ir.Node{graph.Add(in[0], in[1]), graph.ReduceAllSum(in[0])}, nil
}

func f32Vector(t *testing.T, v ...float32) *ir.Tensor {
	t.Helper()
	x, err := ir.TensorFromFlat(v, len(v))
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func readF32(t *testing.T, x *ir.Tensor) []float32 {
	t.Helper()
	var out []float32
	if err := x.ConstFlatData(func(flat any) { out = append(out, flat.([]float32)...) }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDonatedRunsMatchExactArithmetic runs the accumulation 64 steps with
// its state donated (kept on the device, updated in place) and without,
// and checks both against exact arithmetic (integers in float32): state
// after k steps is s0 + k*x. The donated state tensor of each step must be
// unusable afterwards (an error wrapping ErrClosed), and the live device
// buffer count flat from step to step.
//
// Faults injected: (1) ir.DonatedBuffer lending the tensor's buffer instead
// of taking it (t.DonateBuffer replaced by t.Buffer): on cpu the old state
// tensor stays valid and the second run succeeds, so the ErrClosed check
// fails; (2) pjrt's ExecuteContext not finalizing donated inputs after a
// run: on xla-cpu the live buffer count grows by one per step ("step 1:
// live buffers 3, 2 after the step before").
func TestDonatedRunsMatchExactArithmetic(t *testing.T) {
	ctx := context.Background()
	b := openTest(t)
	const n, steps = 5, 64
	s0 := []float32{1, -2, 3, 1000, 0}
	x := []float32{2, 1, -3, 7, 0.5}
	shape := ir.MakeShape(ir.Float32, n)
	for _, tc := range []struct {
		name   string
		donate tensorbridge.Donation
	}{
		{"donated", tensorbridge.Donation{0: 0}},
		{"not donated", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exe, err := b.CompileDonating(ctx, "accumulate", accumulate, tc.donate, shape, shape)
			if err != nil {
				t.Fatal(err)
			}
			defer exe.Close()
			xs := f32Vector(t, x...)
			state := f32Vector(t, s0...) // a host tensor: copied to the device for the first run
			live := -1
			for k := 0; k < steps; k++ {
				outs, err := exe.RunOnDevice(ctx, 0, state, xs)
				if err != nil {
					t.Fatalf("step %d: %v", k, err)
				}
				sum := readF32(t, outs[1])
				_ = outs[1].FinalizeAll()
				var want float32
				for i := range s0 {
					want += s0[i] + float32(k)*x[i]
				}
				if sum[0] != want {
					t.Fatalf("step %d: sum of the state %v, want %v", k, sum[0], want)
				}
				if tc.donate != nil {
					_, err := exe.RunOnDevice(ctx, 0, state, xs)
					if !errors.Is(err, tensorbridge.ErrClosed) {
						t.Fatalf("step %d: running again on the donated state: %v, want an error wrapping ErrClosed", k, err)
					}
					if state.CheckValid() == nil {
						t.Fatalf("step %d: the donated state tensor is still valid", k)
					}
				} else {
					_ = state.FinalizeAll()
				}
				state = outs[0]
				if now, _, counted := b.LiveBuffers(); counted {
					if live >= 0 && now != live {
						t.Fatalf("step %d: live buffers %d, %d after the step before", k, now, live)
					}
					live = now
				}
			}
			got := readF32(t, state)
			_ = state.FinalizeAll()
			for i := range s0 {
				if want := s0[i] + steps*x[i]; got[i] != want {
					t.Errorf("state[%d] after %d steps: %v, want %v", i, steps, got[i], want)
				}
			}
		})
	}
}

// TestDonatedRunOnHostOutputs: Run (host outputs) of a donating program
// consumes the donated input too, and gives the exact result.
func TestDonatedRunOnHostOutputs(t *testing.T) {
	ctx := context.Background()
	b := openTest(t)
	shape := ir.MakeShape(ir.Float32, 2)
	exe, err := b.CompileDonating(ctx, "accumulate", accumulate, tensorbridge.Donation{0: 0}, shape, shape)
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	state, xs := f32Vector(t, 1.5, 2), f32Vector(t, 0.25, -4)
	outs, err := exe.Run(ctx, state, xs)
	if err != nil {
		t.Fatal(err)
	}
	if got := readF32(t, outs[0]); got[0] != 1.75 || got[1] != -2 {
		t.Errorf("new state %v, want [1.75 -2]", got)
	}
	if _, err := exe.Run(ctx, state, xs); !errors.Is(err, tensorbridge.ErrClosed) {
		t.Errorf("running again on the donated host tensor: %v, want an error wrapping ErrClosed", err)
	}
}

// TestDonationRefused: donations the program cannot honour are refused at
// compile time (ErrInvalidInput naming the pair), and a run giving a
// donated input's tensor at another position too is refused before it
// reads memory it would overwrite.
func TestDonationRefused(t *testing.T) {
	ctx := context.Background()
	b := openTest(t)
	shape := ir.MakeShape(ir.Float32, 3)
	for _, tc := range []struct {
		name   string
		donate tensorbridge.Donation
	}{
		{"input out of range", tensorbridge.Donation{2: 0}},
		{"negative input", tensorbridge.Donation{-1: 0}},
		{"output out of range", tensorbridge.Donation{0: 2}},
		{"shape differs", tensorbridge.Donation{0: 1}}, // output 1 is a scalar
		{"two inputs to one output", tensorbridge.Donation{0: 0, 1: 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exe, err := b.CompileDonating(ctx, "accumulate", accumulate, tc.donate, shape, shape)
			if err == nil {
				_ = exe.Close()
				t.Fatal("compiled")
			}
			if !errors.Is(err, tensorbridge.ErrInvalidInput) {
				t.Fatalf("error %v, want one wrapping ErrInvalidInput", err)
			}
		})
	}
	exe, err := b.CompileDonating(ctx, "accumulate", accumulate, tensorbridge.Donation{0: 0}, shape, shape)
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	same := f32Vector(t, 1, 2, 3)
	if _, err := exe.RunOnDevice(ctx, 0, same, same); !errors.Is(err, tensorbridge.ErrInvalidInput) {
		t.Fatalf("one tensor for the donated input and another: %v, want ErrInvalidInput", err)
	}
	if same.CheckValid() != nil {
		t.Error("a refused run consumed its donated input")
	}
}
