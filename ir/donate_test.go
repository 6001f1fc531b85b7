package ir_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/pjrt" // xla-cpu for TENSORBRIDGE_TEST_BACKEND
)

// openTest opens $TENSORBRIDGE_TEST_BACKEND (default cpu).
func openTest(t *testing.T) *tensorbridge.Backend {
	t.Helper()
	name := os.Getenv("TENSORBRIDGE_TEST_BACKEND")
	if name == "" {
		name = "cpu"
	}
	b, err := tensorbridge.Open(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func f32(t *testing.T, v ...float32) *ir.Tensor {
	t.Helper()
	x, err := ir.TensorFromFlat(v, len(v))
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func read(t *testing.T, x *ir.Tensor) []float32 {
	t.Helper()
	var out []float32
	if err := x.ConstFlatData(func(flat any) { out = append(out, flat.([]float32)...) }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBuilderFieldFound: GoMLX v0.26.0's Graph has the builder field
// SetDonation reaches. When an upgrade moves it, runs stay correct
// (donation switched off, TestDonationWithoutBuilderField) but lose
// donation's memory saving: this test is what says so in CI.
func TestBuilderFieldFound(t *testing.T) {
	if !ir.BuilderFieldFound() {
		t.Fatal("GoMLX's Graph has no builder field of type backends.Builder: donation is switched off")
	}
}

// compileSum builds state + x (float32 [3]) with SetDonation(state ->
// output 0) and compiles it.
func compileSum(t *testing.T, eng ir.Engine) *ir.Graph {
	t.Helper()
	g := ir.NewGraph(eng, "donated-sum")
	shape := ir.MakeShape(ir.Float32, 3)
	state, x := ir.Parameter(g, "state", shape), ir.Parameter(g, "x", shape)
	sum := graph.Add(state, x)
	if err := ir.SetDonation(g, map[int]int{0: 0}); err != nil {
		t.Fatalf("SetDonation: %v", err)
	}
	g.Compile(sum)
	t.Cleanup(g.Finalize)
	return g
}

// TestDonationWithoutBuilderField simulates a GoMLX whose Graph lost the
// builder field. Donation is switched off, not every compile: SetDonation
// succeeds; on a backend whose programs declare aliasing (pjrt) the
// program carries none (its outputs go to new buffers: copied, not in
// place) and one warning is logged however many programs are compiled;
// on cpu, which reuses donated buffers at run time, nothing is switched
// off and nothing is logged. Runs stay exact: a run that does not donate
// leaves its inputs valid and unchanged, and the portable API's donating
// runs give exact sums step after step with the donated state consumed
// as documented, the other input intact and no device buffer leaked.
// (Fault injected: SetDonation returning its former error when the field
// is missing; SetDonation and CompileDonating fail here.)
func TestDonationWithoutBuilderField(t *testing.T) {
	ctx := context.Background()
	b := openTest(t)
	eng := b.Engine()
	_, isPJRT := eng.(*pjrt.Engine)
	if isPJRT { // with the field, the program aliases state to its output
		if d := ir.Compiled(compileSum(t, eng)).(*pjrt.Executable).Program().Donated; d[0] != 0 || len(d) != 1 {
			t.Fatalf("with the builder field: program donation %v, want map[0:0]", d)
		}
	}
	warnings := ir.SimulateBuilderFieldMissing(t)

	g := compileSum(t, eng)
	if isPJRT {
		if d := ir.Compiled(g).(*pjrt.Executable).Program().Donated; len(d) != 0 {
			t.Errorf("without the builder field: program donation %v, want none", d)
		}
	}
	state, x := f32(t, 1, -2, 1000), f32(t, 0.5, 4, -7)
	var bufs []ir.Buffer
	for _, in := range []*ir.Tensor{state, x} {
		buf, owned, err := ir.DeviceBuffer(eng, 0, in)
		if err != nil {
			t.Fatal(err)
		}
		if owned {
			defer func() { _ = ir.FreeBuffer(eng, buf) }()
		}
		bufs = append(bufs, buf)
	}
	outs, err := ir.RunOwned(g, 0, bufs)
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, outs[0]); !slices.Equal(got, []float32{1.5, 2, 993}) {
		t.Errorf("state + x = %v, want [1.5 2 993]", got)
	}
	if got := read(t, state); state.CheckValid() != nil || !slices.Equal(got, []float32{1, -2, 1000}) {
		t.Errorf("input after the run: %v (valid: %v), want [1 -2 1000]", got, state.CheckValid())
	}

	// The portable API: 16 donating steps of state += x.
	shape := ir.MakeShape(ir.Float32, 3)
	exe, err := b.CompileDonating(ctx, "accumulate", func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		return []*ir.Node{graph.Add(in[0], in[1])}, nil
	}, tensorbridge.Donation{0: 0}, shape, shape)
	if err != nil {
		t.Fatalf("CompileDonating without the builder field: %v", err)
	}
	defer exe.Close()
	cur, live := f32(t, 1, -2, 1000), -1
	for k := 1; k <= 16; k++ {
		outs, err := exe.RunOnDevice(ctx, 0, cur, x)
		if err != nil {
			t.Fatalf("step %d: %v", k, err)
		}
		if cur.CheckValid() == nil {
			t.Fatalf("step %d: the donated state is still valid (the contract: consumed)", k)
		}
		cur = outs[0]
		if now, _, counted := b.LiveBuffers(); counted {
			if live >= 0 && now != live {
				t.Fatalf("step %d: live buffers %d, %d after the step before", k, now, live)
			}
			live = now
		}
	}
	got := read(t, cur)
	_ = cur.FinalizeAll()
	if want := []float32{1 + 16*0.5, -2 + 16*4, 1000 - 16*7}; !slices.Equal(got, want) {
		t.Errorf("state after 16 steps: %v, want %v", got, want)
	}
	if got := read(t, x); x.CheckValid() != nil || !slices.Equal(got, []float32{0.5, 4, -7}) {
		t.Errorf("the input not donated: %v, want [0.5 4 -7]", got)
	}

	w := warnings()
	switch {
	case isPJRT && (len(w) != 1 || !strings.Contains(w[0], "donation switched off")):
		t.Errorf("warnings %q, want one saying donation is switched off", w)
	case !isPJRT && len(w) != 0:
		t.Errorf("warnings %q on %s, which needs no notice, want none", w, b.Name())
	}
}
