package pjrt

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tensorbridge/tensorbridge/cluster"
	"github.com/tensorbridge/tensorbridge/driver"
)

// The multi-process tests re-execute the test binary as the processes of a
// job on loopback (TestMain runs clusterWorker when clusterRoleEnv is set).
// Each opens xla-cpu with two host devices, the job coming from the
// TENSORBRIDGE_* variables as a GPU cluster's launcher would set them, and
// reports on stdout one JSON line.
const clusterRoleEnv = "TB_PJRT_CLUSTER_ROLE"

type clusterReport struct {
	Process driver.ProcessInfo `json:"process"`
	// Goroutines before Open and after Close (after settling).
	Before, After int
	Leftover      string `json:",omitempty"` // goroutine dump when After > Before
	// Sum is 1+2+...+8 moved through device 1 of the job's client.
	Sum float32
	Err string `json:",omitempty"`
}

func clusterWorker(role string) int {
	rep := clusterReport{Before: runtime.NumGoroutine()}
	out := func() int {
		b, _ := json.Marshal(rep)
		fmt.Println(string(b))
		if rep.Err != "" {
			return 3
		}
		return 0
	}
	ctx := context.Background()
	d := &Driver{Kind: Kinds[0]}
	opts := &driver.Options{Config: "devices=2", MemoryFraction: 0.9}
	if f := os.Getenv(cluster.EnvTokenFile); f != "" { // as the CLI reads it
		sec, err := cluster.LoadSecurity(f, "", "", "")
		if err != nil {
			rep.Err = "token: " + err.Error()
			return out()
		}
		opts.ClusterSecurity = sec
	}
	b, err := d.Open(ctx, opts)
	if err != nil {
		rep.Err = "open: " + err.Error()
		return out()
	}
	be := b.(*Backend)
	rep.Process = be.Process()
	if role == "run" {
		res, err := runOn(be.eng, 1)
		if err != nil {
			rep.Err = "run: " + err.Error()
		}
		rep.Sum = res
	}
	if err := b.Close(); err != nil && rep.Err == "" {
		rep.Err = "close: " + err.Error()
	}
	// gRPC's transport goroutines end shortly after their connection closes.
	deadline := time.Now().Add(5 * time.Second)
	for rep.After = runtime.NumGoroutine(); rep.After > rep.Before && time.Now().Before(deadline); rep.After = runtime.NumGoroutine() {
		time.Sleep(20 * time.Millisecond)
	}
	if rep.After > rep.Before {
		buf := make([]byte, 1<<20)
		rep.Leftover = string(buf[:runtime.Stack(buf, true)])
	}
	return out()
}

// runOn places 1..8 on device dev of e, reads them back and sums them on
// the host: the client of a job moves data to its devices as any other.
func runOn(e *Engine, dev int) (float32, error) {
	x := make([]float32, 8)
	for i := range x {
		x[i] = float32(i + 1)
	}
	buf, err := e.BufferFromFlatData(backends.DeviceNum(dev), x, shapes.Make(dtypes.Float32, 8))
	if err != nil {
		return 0, err
	}
	defer e.BufferFinalize(buf)
	got := make([]float32, 8)
	if err := e.BufferToFlatData(buf, got); err != nil {
		return 0, err
	}
	var sum float32
	for _, v := range got {
		sum += v
	}
	return sum, nil
}

func freeLoopback(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startJob runs n processes of a job and returns their reports by index.
func startJob(t *testing.T, role string, n int, extraEnv func(i int) []string) []clusterReport {
	t.Helper()
	if _, err := (&Driver{Kind: Kinds[0]}).FindPlugin(); err != nil {
		testreq.Skipf(t, "XLA CPU plugin not installed (%s): %v", installHint, err)
	}
	coord := freeLoopback(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	type result struct {
		i   int
		rep clusterReport
		err error
	}
	results := make(chan result, n)
	for i := range n {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), clusterRoleEnv+"="+role,
			cluster.EnvCoordinator+"="+coord,
			fmt.Sprintf("%s=%d", cluster.EnvProcessID, i),
			fmt.Sprintf("%s=%d", cluster.EnvNumProcesses, n),
			cluster.EnvTimeout+"=20s")
		if extraEnv != nil {
			cmd.Env = append(cmd.Env, extraEnv(i)...)
		}
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			var r clusterReport
			var rerr error = fmt.Errorf("process %d printed no report", i)
			sc := bufio.NewScanner(stdout)
			sc.Buffer(make([]byte, 1<<20), 4<<20)
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "{") && json.Unmarshal(sc.Bytes(), &r) == nil {
					rerr = nil
				}
			}
			if werr := cmd.Wait(); werr != nil && rerr == nil && r.Err == "" {
				rerr = fmt.Errorf("process %d: %v", i, werr)
			}
			results <- result{i, r, rerr}
		}()
	}
	reps := make([]clusterReport, n)
	for range n {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		reps[r.i] = r.rep
	}
	return reps
}

// Every process of a job of 2 to 4 opens xla-cpu with the job's key-value
// store behind its client: all have joined and published their devices when
// Open returns, Close leaves the job in order, and no goroutine is left.
// The XLA CPU plugin ignores the key-value callbacks, so what this proves is
// the job's plumbing around the client, not a cross-process program.
func TestClusterOpenJoinsJob(t *testing.T) {
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			reps := startJob(t, "open", n, nil)
			for i, r := range reps {
				if r.Err != "" {
					t.Fatalf("process %d: %s", i, r.Err)
				}
				p := r.Process
				if p.Index != i || p.Count != n || p.IndexSource != "env:"+cluster.EnvProcessID || p.CountSource != "env:"+cluster.EnvNumProcesses ||
					p.CoordinatorSource != "env:"+cluster.EnvCoordinator {
					t.Errorf("process %d: %+v", i, p)
				}
				if p.AddressableDevices != 2 || p.JobDevices != 2*n || len(p.ProcessDevices) != n {
					t.Errorf("process %d devices: addressable %d, job %d %v; want 2, %d", i, p.AddressableDevices, p.JobDevices, p.ProcessDevices, 2*n)
				}
				// The CPU plugin knows only its own devices: no global view.
				if p.RuntimeDevices != 2 {
					t.Errorf("process %d: the runtime lists %d devices, want 2", i, p.RuntimeDevices)
				}
				if r.After > r.Before {
					t.Errorf("process %d: %d goroutines before Open, %d after Close:\n%s", i, r.Before, r.After, r.Leftover)
				}
			}
		})
	}
}

// Open passes driver.Options.ClusterSecurity to the job: processes with the
// job's token join; one with another token is refused, and the other then
// reports it missing. (Injected fault: pjrt.Open not copying
// opts.ClusterSecurity into the job's config; the coordinator then runs
// without a token and the wrong-token process joins.)
func TestClusterOpenWithToken(t *testing.T) {
	dir := t.TempDir()
	tokens := map[string]string{"good": "the-job-token", "bad": "another-token"}
	for name, tok := range tokens {
		if err := os.WriteFile(dir+"/"+name, []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	reps := startJob(t, "open", 2, func(int) []string { return []string{cluster.EnvTokenFile + "=" + dir + "/good"} })
	for i, r := range reps {
		if r.Err != "" {
			t.Fatalf("process %d with the token: %s", i, r.Err)
		}
	}
	reps = startJob(t, "open", 2, func(i int) []string {
		f := dir + "/good"
		if i == 1 {
			f = dir + "/bad"
		}
		return []string{cluster.EnvTokenFile + "=" + f, cluster.EnvTimeout + "=2s"}
	})
	if !strings.Contains(reps[1].Err, "refused") || !strings.Contains(reps[1].Err, "wrong cluster token") {
		t.Errorf("process 1 with another token: %q, want refused for a wrong token", reps[1].Err)
	}
	if !strings.Contains(reps[0].Err, "process 1") || !strings.Contains(reps[0].Err, "missing") {
		t.Errorf("process 0: %q, want process 1 missing", reps[0].Err)
	}
}

// A client created in a job runs programs on its own devices as any other.
func TestClusterClientRuns(t *testing.T) {
	reps := startJob(t, "run", 2, nil)
	for i, r := range reps {
		if r.Err != "" {
			t.Fatalf("process %d: %s", i, r.Err)
		}
		if r.Sum != 36 {
			t.Errorf("process %d: sum of 1..8 = %v, want 36", i, r.Sum)
		}
	}
}

// cluster=off keeps a process out of the job its environment names.
func TestClusterOff(t *testing.T) {
	d := &Driver{Kind: Kinds[0], Getenv: func(k string) (string, bool) {
		switch k {
		case cluster.EnvCoordinator:
			return "127.0.0.1:1", true
		case cluster.EnvProcessID:
			return "1", true
		case cluster.EnvNumProcesses:
			return "2", true
		}
		return os.LookupEnv(k)
	}}
	cfg, err := d.bootstrapCluster(context.Background(), clusterOff, nil)
	if err != nil || cfg != nil {
		t.Fatalf("cluster=off: %v, %v", cfg, err)
	}
}

func TestBootstrapCluster(t *testing.T) {
	one, two := 1, 2
	for _, tc := range []struct {
		name  string
		env   map[string]string
		mode  clusterMode
		c     *driver.Cluster
		count int // 0: no job
		err   string
	}{
		{name: "nothing", mode: clusterAuto},
		{name: "env count 1", env: map[string]string{cluster.EnvNumProcesses: "1", cluster.EnvProcessID: "0"}, mode: clusterAuto},
		{name: "env job", env: map[string]string{cluster.EnvNumProcesses: "2", cluster.EnvProcessID: "1", cluster.EnvCoordinator: "10.0.0.1"}, mode: clusterAuto, count: 2},
		{name: "gke single host", env: map[string]string{"TPU_WORKER_ID": "0", "TPU_WORKER_HOSTNAMES": "h0"}, mode: clusterAuto},
		{name: "gke 4 hosts", env: map[string]string{"TPU_WORKER_ID": "2", "TPU_WORKER_HOSTNAMES": "h0,h1,h2,h3"}, mode: clusterAuto, count: 4},
		{name: "options", mode: clusterAuto, c: &driver.Cluster{Coordinator: "h0:1234", ProcessID: &one, NumProcesses: &two}, count: 2},
		{name: "no coordinator", env: map[string]string{cluster.EnvNumProcesses: "2", cluster.EnvProcessID: "1", "TPU_SKIP_MDS_QUERY": "1"}, mode: clusterAuto, err: "coordinator"},
		{name: "off with options", mode: clusterOff, c: &driver.Cluster{}, err: "cluster=off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &Driver{Kind: Kinds[0], Getenv: func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }}
			cfg, err := d.bootstrapCluster(context.Background(), tc.mode, tc.c)
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one about %s", err, tc.err)
				}
			case err != nil:
				t.Fatal(err)
			case tc.count == 0 && cfg != nil:
				t.Fatalf("joined %+v", cfg)
			case tc.count > 0 && (cfg == nil || cfg.ProcessCount.Value != tc.count):
				t.Fatalf("config %+v, want %d processes", cfg, tc.count)
			}
		})
	}
}
