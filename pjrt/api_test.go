package pjrt_test

import (
	"context"
	"errors"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/device"
	"github.com/tensorbridge/tensorbridge/driver"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/pjrt"
)

func openXLACPU(t *testing.T, spec string) *tensorbridge.Backend {
	t.Helper()
	d, _ := driver.Lookup("xla-cpu")
	if av := d.Probe(context.Background()); !av.Available {
		testreq.Skipf(t, "run scripts/install-plugins.sh xla-cpu: %s", av.Reason)
	}
	b, err := tensorbridge.Open(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// TestPortableAPI runs a computation through package tensorbridge on the
// xla-cpu backend.
func TestPortableAPI(t *testing.T) {
	b := openXLACPU(t, "xla-cpu")
	ctx := context.Background()
	if b.Name() != "xla-cpu" || !strings.Contains(b.Selection().Reason, "pjrt_c_api_cpu_plugin.so") {
		t.Errorf("name %q, selection %+v", b.Name(), b.Selection())
	}
	devs := b.Devices()
	if len(devs) == 0 || devs[0].Platform != device.CPU {
		t.Fatalf("devices: %+v", devs)
	}
	exe, err := b.Compile(ctx, "axpy", func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		return []*ir.Node{graph.Add(graph.MulScalar(in[0], 2), in[1]), graph.ReduceAllMax(in[1])}, nil
	}, ir.MakeShape(ir.Float32, 3), ir.MakeShape(ir.Float32, 3))
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	outs, err := exe.Run(ctx, tensors.FromValue([]float32{1, 2, 3}), tensors.FromValue([]float32{0.5, -1, 4}))
	if err != nil {
		t.Fatal(err)
	}
	if got := outs[0].Value().([]float32); len(got) != 3 || got[0] != 2.5 || got[1] != 3 || got[2] != 10 {
		t.Errorf("2x+y = %v, want [2.5 3 10]", got)
	}
	if got := outs[1].Value().(float32); got != 4 {
		t.Errorf("max(y) = %v, want 4", got)
	}
	// Wrong input shapes are caught before the backend.
	if _, err := exe.Run(ctx, tensors.FromValue([]float32{1}), tensors.FromValue([]float32{1})); !errors.Is(err, tensorbridge.ErrInvalidInput) {
		t.Errorf("wrong shape: %v", err)
	}
	// The engine behind the portable API is this package's.
	if _, ok := b.Devices()[0].Attr("pjrt_id"); !ok {
		t.Error("device lacks PJRT attributes")
	}
	if _, err := b.MemoryStats(ctx, 0); err != nil && !errors.Is(err, tensorbridge.ErrUnsupported) {
		t.Errorf("MemoryStats: %v", err)
	}
}

// TestPortableAPIConfig opens two host devices through a spec config.
func TestPortableAPIConfig(t *testing.T) {
	b := openXLACPU(t, "xla-cpu:devices=2")
	if n := len(b.Devices()); n != 2 {
		t.Errorf("%d devices, want 2", n)
	}
	if _, err := tensorbridge.Open(context.Background(), "xla-cpu:warp=9"); err == nil || tensorbridge.KindOf(err) != tensorbridge.InvalidArgument {
		t.Errorf("bad config: %v", err)
	}
}

// TestAutoConsidersPJRT checks "auto" reports every PJRT backend it passed
// over with a reason.
func TestAutoConsidersPJRT(t *testing.T) {
	b, err := tensorbridge.Open(context.Background(), "auto")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sel := b.Selection()
	for _, c := range sel.Candidates {
		if c.Name == sel.Chosen {
			break
		}
		if !c.Registered || c.Reason == "" {
			t.Errorf("candidate %+v: the pjrt backends are linked in and must give a reason", c)
		}
	}
	if _, ok := b.Devices()[0].Attr("pjrt_id"); !ok && sel.Chosen != "cpu" {
		t.Errorf("auto chose %s, whose devices lack PJRT attributes", sel.Chosen)
	}
}

// TestCompileErrorThroughAPI checks a graph the lowering refuses surfaces
// as an error of the portable API, not a panic.
func TestCompileErrorThroughAPI(t *testing.T) {
	b := openXLACPU(t, "xla-cpu")
	_, err := b.Compile(context.Background(), "bad", func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		return []*ir.Node{graph.Exp(in[0])}, nil // Exp of an integer
	}, ir.MakeShape(ir.Int32, 2))
	if err == nil {
		t.Fatal("Exp of Int32 compiled")
	}
	if !strings.Contains(err.Error(), "Exp") {
		t.Errorf("error does not name the op: %v", err)
	}
}

var _ = pjrt.Kinds
