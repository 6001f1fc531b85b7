package tensorbridge

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tensorbridge/tensorbridge/driver"
	"github.com/tensorbridge/tensorbridge/errs"

	"github.com/tensorbridge/tensorbridge/internal/capi"
	"github.com/tensorbridge/tensorbridge/onnx"
	"github.com/tensorbridge/tensorbridge/pjrt"
	"github.com/tensorbridge/tensorbridge/shard"
)

// mlpPlan specialises testdata/models/mlp.onnx at batch rows, weights as
// parameters (what a sharded model compiles).
func mlpPlan(t *testing.T, batch int) *onnx.Plan {
	t.Helper()
	p := mlpPlanAt(batch)
	if p == nil {
		t.Fatal("specialising testdata/models/mlp.onnx failed")
	}
	return p
}

// mlpPlanAt is mlpPlan for a process without a *testing.T (nil on error).
func mlpPlanAt(batch int) *onnx.Plan {
	m, err := onnx.Load(filepath.Join("testdata", "models", "mlp.onnx"))
	if err != nil {
		return nil
	}
	shapes := map[string][]int{}
	for _, in := range m.Inputs() {
		var dims []int
		for _, d := range in.Dims {
			if d.Value > 0 {
				dims = append(dims, d.Value)
			} else {
				dims = append(dims, batch)
			}
		}
		shapes[in.Name] = dims
	}
	p, err := m.SpecializeWith(shapes, nil, onnx.SpecializeOptions{WeightsAsParams: true})
	if err != nil {
		return nil
	}
	return p
}

// With libtpu and no TPU: the sharded program of the MLP, lowered for every
// device of a multi-host slice, compiles against the slice's topology with
// the global device assignment (process by process, as every host of the
// job would compile it), and libtpu reports per-device memory. This proves
// the compile side of multi-host execution; running it needs the slice.
func TestMultiHostCompileLibTPU(t *testing.T) {
	path, err := capi.FindPlugin("tpu")
	if err != nil {
		testreq.Skipf(t, "libtpu not installed (scripts/setup.sh): %v", err)
	}
	for k, v := range map[string]string{"TPU_SKIP_MDS_QUERY": "1", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"} {
		if _, ok := os.LookupEnv(k); !ok {
			t.Setenv(k, v)
		}
	}
	p, err := capi.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		slice string
		name  string // libtpu's topology name for the slice (plan.Slice's Generation:Topology)
		mesh  shard.Mesh
		hosts int
	}{
		{"v5e-16", "v5e:4x4", shard.Mesh{Data: 4, Model: 4}, 4},
		{"v5e-16", "v5e:4x4", shard.Mesh{Data: 16, Model: 1}, 4},
		{"v4-16", "v4:2x2x2", shard.Mesh{Data: 2, Model: 8}, 2}, // libtpu lists 16 devices for v4:2x2x2 on 2 hosts
	} {
		t.Run(tc.slice+"/"+tc.mesh.String(), func(t *testing.T) {
			// The name is spelled out: this internal test cannot import
			// plan, which imports llm, which imports this package.
			name := tc.name
			top, err := p.NewTopology(context.Background(), name, nil)
			if err != nil {
				t.Fatalf("topology %s: %v", name, err)
			}
			defer top.Destroy()
			descs, err := top.DeviceDescriptions()
			if err != nil {
				t.Fatal(err)
			}
			devs := make([]shard.Device, len(descs))
			procs := map[int]int{}
			for i, d := range descs {
				devs[i] = pjrt.ShardDevice(d)
				procs[devs[i].Process]++
			}
			if len(procs) != tc.hosts {
				t.Fatalf("%s: libtpu lists %d processes, want %d", name, len(procs), tc.hosts)
			}
			assign, err := shard.GlobalAssignment(tc.mesh, devs)
			if err != nil {
				t.Fatal(err)
			}
			// Each process's share is whole data rows, consecutive.
			for pr := range procs {
				s, err := shard.LocalShare(tc.mesh, assign, devs, pr)
				if err != nil {
					t.Fatalf("process %d: %v", pr, err)
				}
				if len(s.Positions) != len(devs)/tc.hosts {
					t.Errorf("process %d executes %d positions, want %d", pr, len(s.Positions), len(devs)/tc.hosts)
				}
			}
			prog, _, err := lowerGlobal(mlpPlan(t, 32), tc.mesh, shard.Options{})
			if err != nil {
				t.Fatal(err)
			}
			text, err := prog.CompileText()
			if err != nil {
				t.Fatal(err)
			}
			exe, err := top.Compile(context.Background(), capi.MLIR(string(text)), pjrt.GlobalCompileOptions(assign), nil)
			if err != nil {
				t.Fatalf("libtpu refused the global program over %s: %v", name, err)
			}
			defer exe.Destroy()
			parts, err := exe.NumPartitions()
			if err != nil || parts != len(devs) {
				t.Errorf("compiled partitions %d (%v), want %d", parts, err, len(devs))
			}
			ms, err := exe.CompiledMemoryStats()
			if err != nil {
				t.Fatal(err)
			}
			if ms.Argument <= 0 {
				t.Errorf("no per-device argument bytes: %+v", ms)
			}
			t.Logf("%s (%s, %d hosts) mesh %s: assignment %v; per device argument %d B, output %d B, temp %d B, generated code %d B, peak %d B",
				tc.slice, name, tc.hosts, tc.mesh, assign, ms.Argument, ms.Output, ms.Temp, ms.GeneratedCode, ms.Peak)
		})
	}
}

// The xla-cpu job test re-executes the test binary as the processes of a
// job of 2 on loopback (TestMain runs multiHostWorker when multiHostRoleEnv
// is set), each with 2 host devices; each reports one JSON line.
const multiHostRoleEnv = "TB_MULTIHOST_ROLE"

type multiHostReport struct {
	Index, Count, JobDevices, GlobalDevices int
	LoadErr                                 string // loading the MLP over the job's mesh
	LoadKind                                string
	CompileErr                              string // compiling the job-wide program on this client
	Err                                     string `json:",omitempty"`
}

func multiHostWorker() int {
	var rep multiHostReport
	defer func() {
		b, _ := json.Marshal(rep)
		fmt.Println(string(b))
	}()
	ctx := context.Background()
	b, err := Open(ctx, "xla-cpu:devices=2")
	if err != nil {
		rep.Err = "open: " + err.Error()
		return 3
	}
	defer b.Close()
	pi := b.Process()
	rep.Index, rep.Count, rep.JobDevices = pi.Index, pi.Count, pi.JobDevices
	mesh := shard.Mesh{Data: pi.JobDevices, Model: 1}
	m, err := b.LoadModel(ctx, filepath.Join("testdata", "models", "mlp.onnx"), WithMesh(mesh, shard.Options{}))
	if err == nil {
		m.Close()
		rep.Err = "a mesh over the job loaded on a plugin that cannot run it"
		return 3
	}
	rep.LoadErr, rep.LoadKind = err.Error(), errs.KindOf(err).String()
	eng := b.drv.(*pjrt.Backend).PJRTEngine()
	gd, err := eng.GlobalDevices()
	if err != nil {
		rep.Err = "global devices: " + err.Error()
		return 3
	}
	rep.GlobalDevices = len(gd)
	// The job's view: process p addresses ids 2p and 2p+1. Compile the
	// program every process would compile, with that global assignment.
	var job []shard.Device
	for p := range pi.Count {
		for k := range pi.ProcessDevices[p] {
			job = append(job, shard.Device{ID: 2*p + k, Process: p})
		}
	}
	assign, err := shard.GlobalAssignment(mesh, job)
	if err != nil {
		rep.Err = "assignment: " + err.Error()
		return 3
	}
	share, err := shard.LocalShare(mesh, assign, job, pi.Index)
	if err != nil {
		rep.Err = "share: " + err.Error()
		return 3
	}
	prog, _, err := lowerGlobal(mlpPlanAt(pi.JobDevices*2), mesh, shard.Options{})
	if err != nil {
		rep.Err = "lower: " + err.Error()
		return 3
	}
	le, _, err := eng.CompileGlobal(ctx, prog, assign, share.IDs)
	if err == nil {
		le.Destroy()
		rep.Err = "xla-cpu compiled a program over devices it does not have"
		return 3
	}
	rep.CompileErr = err.Error()
	return 0
}

// TestMultiHostXLACPU: two processes of a job on loopback, xla-cpu with 2
// devices each. Loading a model over a mesh of the job's 4 devices is
// refused by name on every process (the plugin lists only its own 2
// devices), never run on the local devices alone; compiling the job-wide
// program with the global assignment fails in the plugin (it has no
// device ids 2 and 3).
func TestMultiHostXLACPU(t *testing.T) {
	if d, ok := driver.Lookup("xla-cpu"); !ok || !d.Probe(context.Background()).Available {
		testreq.Skipf(t, "%s", "xla-cpu unavailable (scripts/setup.sh)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	coord := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const n = 2
	reps := make([]multiHostReport, n)
	errc := make(chan error, n)
	for i := range n {
		go func() {
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), multiHostRoleEnv+"=1", "TENSORBRIDGE_COORDINATOR="+coord,
				fmt.Sprintf("TENSORBRIDGE_PROCESS_ID=%d", i), fmt.Sprintf("TENSORBRIDGE_NUM_PROCESSES=%d", n),
				"TENSORBRIDGE_CLUSTER_TIMEOUT=20s")
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if jerr := json.Unmarshal([]byte(lines[len(lines)-1]), &reps[i]); jerr != nil {
				errc <- fmt.Errorf("process %d: %v (%v): %s", i, jerr, err, out)
				return
			}
			errc <- err
		}()
	}
	for range n {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
	for i, r := range reps {
		t.Logf("process %d: %+v", i, r)
		if r.Err != "" || r.Index != i || r.Count != n || r.JobDevices != 4 || r.GlobalDevices != 2 {
			t.Errorf("process %d: %+v", i, r)
		}
		if r.LoadKind != errs.Unimplemented.String() || !strings.Contains(r.LoadErr, "lists 2 device(s)") {
			t.Errorf("process %d: load refused with %s %q; want Unimplemented naming the plugin's 2 devices", i, r.LoadKind, r.LoadErr)
		}
		if r.CompileErr == "" {
			t.Errorf("process %d: the job-wide compile did not fail", i)
		}
	}
}
