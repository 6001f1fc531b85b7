package pjrt

import (
	"context"
	"errors"
	"testing"

	"github.com/gomlx/gomlx/backends"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/internal/capi"
)

// compileDonating compiles in0 + in1 (float32 [3]) with in0 aliased to
// the output when alias is set (Builder.SetDonated).
func compileDonating(t *testing.T, eng *Engine, alias bool) *Executable {
	t.Helper()
	b := eng.Builder("donate").(*Builder)
	x := vec(f32s(1, 2, 3))
	p0, err := b.Parameter("in0", x.shape(), nil)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := b.Parameter("in1", x.shape(), nil)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := b.Add(p0, p1)
	if err != nil {
		t.Fatal(err)
	}
	if alias {
		if err := b.SetDonated(map[int]int{0: 0}); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := b.Compile([]backends.Op{sum}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return exe.(*Executable)
}

// TestDonatedBufferIsConsumedByTheRuntime checks that SetDonated reaches
// the compiled program: run through the binding with no non-donatable
// index, the runtime takes the aliased argument's buffer (it reports
// deleted: its memory now holds the output) and leaves the other one.
// Fault injected: Builder.Compile not copying the donation into
// lower.Program.Donated; the first buffer then stays alive and the test
// fails.
func TestDonatedBufferIsConsumedByTheRuntime(t *testing.T) {
	eng := cpuEngine(t)
	exe := compileDonating(t, eng, true)
	defer exe.Finalize()
	if got := exe.Program().Donated; len(got) != 1 || got[0] != 0 {
		t.Errorf("program's donation %v, want map[0:0]", got)
	}
	bufs := upload(t, eng, 0, vec(f32s(1, 2, 3)), vec(f32s(10, 20, 30)))
	defer func() {
		for _, b := range bufs {
			_ = eng.BufferFinalize(b)
		}
	}()
	dev, err := eng.device(0)
	if err != nil {
		t.Fatal(err)
	}
	args := [][]*capi.Buffer{{bufs[0].(*Buffer).PJRT(), bufs[1].(*Buffer).PJRT()}}
	outs, err := exe.PJRT().Execute(context.Background(), args, &capi.ExecuteOptions{Device: dev})
	if err != nil {
		t.Fatal(err)
	}
	res, err := eng.newBuffer("test", outs[0][0])
	if err != nil {
		t.Fatal(err)
	}
	got := download(t, eng, []backends.Buffer{res})
	if want := f32s(11, 22, 33); !equalF32(got[0].flat.([]float32), want) {
		t.Errorf("output %v, want %v", got[0].flat, want)
	}
	for i, want := range []bool{true, false} {
		deleted, err := args[0][i].IsDeleted()
		if err != nil {
			t.Fatal(err)
		}
		if deleted != want {
			t.Errorf("argument %d deleted by the run: %v, want %v", i, deleted, want)
		}
	}
}

// TestExecuteDonateFlags checks Execute's donate flags on an aliased and
// a plain program: a donated input is consumed (using it again is an
// error wrapping errs.ErrClosed) and the live buffer count stays flat; an
// input not donated stays readable with its value even where the program
// aliases it (Execute marks it non-donatable; fault injected: no
// NonDonatable in ExecuteContext, and the aliased, not-donated case fails
// reading its input back).
func TestExecuteDonateFlags(t *testing.T) {
	eng := cpuEngine(t)
	for _, tc := range []struct {
		name          string
		alias, donate bool
	}{
		{"aliased donated", true, true},
		{"aliased kept", true, false},
		{"plain donated", false, true},
		{"plain kept", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exe := compileDonating(t, eng, tc.alias)
			defer exe.Finalize()
			live := eng.client.LiveBuffers()
			for step := range 3 {
				bufs := upload(t, eng, 0, vec(f32s(1, 2, 3)), vec(f32s(10, 20, 30)))
				outs, err := exe.Execute(bufs, []bool{tc.donate, false}, 0)
				if err != nil {
					t.Fatal(err)
				}
				got := download(t, eng, outs)
				if want := f32s(11, 22, 33); !equalF32(got[0].flat.([]float32), want) {
					t.Fatalf("output %v, want %v", got[0].flat, want)
				}
				if tc.donate {
					_, err := exe.Execute(bufs, nil, 0)
					if !errors.Is(err, errs.ErrClosed) {
						t.Fatalf("running on a donated buffer: %v, want an error wrapping ErrClosed", err)
					}
				} else {
					kept := download(t, eng, bufs[:1])
					if want := f32s(1, 2, 3); !equalF32(kept[0].flat.([]float32), want) {
						t.Fatalf("kept input now %v, want %v", kept[0].flat, want)
					}
				}
				for _, b := range bufs {
					_ = eng.BufferFinalize(b)
				}
				if n := eng.client.LiveBuffers(); n != live {
					t.Fatalf("step %d: %d live buffers, %d before", step, n, live)
				}
			}
		})
	}
}

func equalF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
