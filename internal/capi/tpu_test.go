package capi

import (
	"context"
	"errors"
	"fmt"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// libtpu without a TPU: the plugin loads, refuses to create a client, and
// compiles ahead of time against topologies named like "v5e:2x2".
//
// The test runs in a child process (the test binary re-executed) so that
// libtpu and the XLA CPU plugin never share a process, and so that the child
// starts with TPU_SKIP_MDS_QUERY=1 in its environment: without it libtpu
// spends minutes trying to reach the cloud metadata server at
// 169.254.169.254. With it set, libtpu makes no network connection (checked
// with strace; see notes/pjrt-findings.md).

const tpuChildEnv = "TB_CAPI_LIBTPU_CHILD"

func TestLibTPUWithoutTPU(t *testing.T) {
	if os.Getenv(tpuChildEnv) == "1" {
		libTPUChild(t)
		return
	}
	path, err := FindPlugin("tpu")
	if err != nil {
		testreq.Skipf(t, "plugin not installed: run scripts/install-plugins.sh tpu (%v)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestLibTPUWithoutTPU$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), tpuChildEnv+"=1", "TPU_SKIP_MDS_QUERY=1", "TENSORBRIDGE_PLUGIN_PATH="+path)
	out, err := cmd.CombinedOutput()
	t.Logf("child output:\n%s", out)
	if err != nil {
		t.Fatalf("libtpu child: %v", err)
	}
	if !strings.Contains(string(out), "--- PASS: TestLibTPUWithoutTPU") {
		t.Fatal("libtpu child did not report a pass")
	}
}

func libTPUChild(t *testing.T) {
	path, err := FindPlugin("tpu")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Load(path)
	if err != nil {
		t.Fatalf("Load libtpu: %v", err)
	}
	major, minor := p.Version()
	attrs, _ := p.Attributes()
	t.Logf("libtpu: PJRT C API %d.%d, PJRT_Api %d bytes, extensions %v, attributes %v", major, minor, p.APIStructSize(), p.Extensions(), attrs)
	ctx := context.Background()

	c, err := p.NewClient(ctx, nil)
	if err == nil {
		t.Log("PJRT_Client_Create succeeded: this machine has a TPU")
		c.Close()
	} else {
		var pe *Error
		if !errors.As(err, &pe) {
			t.Errorf("client error %v is not a *Error", err)
		}
		t.Logf("PJRT_Client_Create without a TPU: %v", err)
	}

	const prog = `module @aot {
  func.func public @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.add %a, %b : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}`
	cases := []struct {
		topology string
		opts     []NamedValue
		bounds   []int64 // chips along x, y, z
		kind     string  // device_kind as JAX reports it (reference doc §1.2/§3.1)
	}{
		{"v5e:2x2", nil, []int64{2, 2, 1}, "TPU v5 lite"},
		{"v5p:2x2x1", nil, []int64{2, 2, 1}, "TPU v5"},
		{"v6e:2x4", nil, []int64{2, 4, 1}, "TPU v6 lite"},
		{"v5p:2x2x1", []NamedValue{{"chip_config_name", "megachip_tccontrol"}}, []int64{2, 2, 1}, "TPU v5"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s%v", tc.topology, tc.opts), func(t *testing.T) {
			topo, err := p.NewTopology(ctx, tc.topology, tc.opts)
			if err != nil {
				t.Fatalf("NewTopology(%q): %v", tc.topology, err)
			}
			defer topo.Destroy()
			name, _ := topo.PlatformName()
			ver, _ := topo.PlatformVersion()
			tattrs, _ := topo.Attributes()
			ser, err := topo.Serialize()
			if err != nil || len(ser) == 0 {
				t.Errorf("Serialize: %d bytes, %v", len(ser), err)
			}
			descs, err := topo.DeviceDescriptions()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("platform %q version %q, %d devices, attributes %v, serialized %d bytes", name, strings.ReplaceAll(ver, "\n", " "), len(descs), tattrs, len(ser))
			if name != "tpu" {
				t.Errorf("platform %q, want tpu", name)
			}
			chips := tc.bounds[0] * tc.bounds[1] * tc.bounds[2]
			if int64(len(descs)) != chips {
				t.Fatalf("%d devices; a %v slice has %d chips (one device per chip)", len(descs), tc.bounds, chips)
			}
			seen := map[[3]int64]bool{}
			for _, d := range descs {
				if d.Kind != tc.kind {
					t.Errorf("device %d kind %q, want %q", d.ID, d.Kind, tc.kind)
				}
				coords, ok := Lookup(d.Attributes, "coords").([]int64)
				if !ok || len(coords) != 3 {
					t.Fatalf("device %d coords %#v; want 3 ints", d.ID, Lookup(d.Attributes, "coords"))
				}
				for i, v := range coords {
					if v < 0 || v >= tc.bounds[i] {
						t.Errorf("device %d coords %v outside %v", d.ID, coords, tc.bounds)
					}
				}
				key := [3]int64{coords[0], coords[1], coords[2]}
				if seen[key] {
					t.Errorf("coords %v appear twice", coords)
				}
				seen[key] = true
			}
			t.Logf("device 0: %+v", descs[0])

			for _, co := range []CompileOptions{{}, {NumReplicas: len(descs), DeviceAssignment: idsAsReplicas(descs)}} {
				x, err := topo.Compile(ctx, MLIR(prog), co, nil)
				if err != nil {
					t.Fatalf("PJRT_Compile with %d replicas: %v", max(co.NumReplicas, 1), err)
				}
				blob, err := x.Serialize()
				if err != nil || len(blob) == 0 {
					t.Errorf("Serialize: %d bytes, %v", len(blob), err)
				}
				n, err := x.NumOutputs()
				if err != nil || n != 1 {
					t.Errorf("NumOutputs = %d, %v", n, err)
				}
				r, _ := x.NumReplicas()
				ms, err := x.CompiledMemoryStats()
				if err != nil {
					t.Error(err)
				}
				// Two f32[4] arguments (16 bytes each, padded by the TPU
				// layout) and one f32[4] output.
				if ms.Argument < 32 || ms.Output < 16 {
					t.Errorf("memory stats %+v: arguments < 32 or output < 16 bytes", ms)
				}
				cost, err := x.CostAnalysis()
				if err != nil {
					t.Error(err)
				} else if f, ok := Lookup(cost, "flops").(float32); !ok || f != 4 {
					t.Errorf("flops = %v; a 4-element add is 4 flops", Lookup(cost, "flops"))
				}
				t.Logf("compiled for %d replica(s): %d-byte executable, memory %+v, cost %v", r, len(blob), ms, cost)
				if err := x.Destroy(); err != nil {
					t.Error(err)
				}
			}
		})
	}
	if _, err := p.NewTopology(ctx, "v99:1x1", nil); err == nil {
		t.Error("topology v99:1x1 accepted")
	} else {
		t.Logf("unknown topology: %v", err)
	}
}

func idsAsReplicas(descs []DeviceDescription) [][]int {
	out := make([][]int, len(descs))
	for i, d := range descs {
		out[i] = []int{d.ID}
	}
	return out
}
