package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The multi-process tests re-execute the test binary as the workers of a
// job: TestMain runs workerMain instead of the tests when roleEnv is set.
// Every worker gets a GKE-style environment (TPU_WORKER_ID,
// TPU_WORKER_HOSTNAMES of loopback hosts) plus the coordinator's loopback
// port, and reports on stdout as JSON lines.
const roleEnv = "TB_CLUSTER_TEST_ROLE"

func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(workerMain(role))
	}
	os.Exit(m.Run())
}

// report is a worker's line on stdout.
type report struct {
	Event string    `json:"event"` // "joined", "view", "done", "error"
	Index int       `json:"index"`
	View  *View     `json:"view,omitempty"`
	Kind  string    `json:"kind,omitempty"` // "missing", "lost", "refused", "coordinator", "other"
	Who   int       `json:"who"`            // the process the error names
	Host  string    `json:"host,omitempty"`
	Err   string    `json:"error,omitempty"`
	At    time.Time `json:"at"`
	// Secret is the worker's session secret ("joined" of role "attacked"
	// only: the attack test plays a process whose secret was stolen).
	Secret string `json:"secret,omitempty"`
}

// View is the global view a worker prints: the test checks that all agree.
type View struct {
	ProcessCount int       `json:"process_count"`
	Coordinator  string    `json:"coordinator"`
	Processes    []Process `json:"processes"`
}

func emit(r report) {
	r.At = time.Now()
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
}

func emitErr(index int, err error) int {
	r := report{Event: "error", Index: index, Err: err.Error(), Who: -1, Kind: "other"}
	var we *WorkerError
	var ce *CoordinatorError
	switch {
	case errors.As(err, &we):
		r.Kind, r.Who, r.Host = we.Kind.String(), we.Index, we.Host
	case errors.As(err, &ce):
		r.Kind = "coordinator"
	}
	emit(r)
	return 3
}

// maxKeysEnv sets Limits.MaxKeys in a worker (the attack test).
const maxKeysEnv = "TB_CLUSTER_TEST_MAXKEYS"

func workerMain(role string) int {
	ctx := context.Background()
	// As the CLI does: the token file named by the environment, read by the
	// program and handed to the library.
	var opts Options
	if f := os.Getenv(EnvTokenFile); f != "" {
		sec, err := LoadSecurity(f, "", "", "")
		if err != nil {
			return emitErr(-1, err)
		}
		opts.Security = sec
	}
	if v := os.Getenv(maxKeysEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return emitErr(-1, err)
		}
		opts.Limits.MaxKeys = n
	}
	cfg, err := Bootstrap(ctx, opts)
	if err != nil {
		return emitErr(-1, err)
	}
	idx := cfg.ProcessIndex.Value
	c, err := Connect(ctx, cfg, Self{Devices: 4, DeviceKind: "loopback"})
	if err != nil {
		return emitErr(idx, err)
	}
	// On an error path, leave as a real program must: on process 0 this
	// keeps the coordinator up long enough to tell the others why (after a
	// Close, Abort does nothing).
	defer c.Abort()
	joined := report{Event: "joined", Index: idx}
	if role == "attacked" {
		joined.Secret, _ = c.session.Load().(string)
	}
	emit(joined)
	switch role {
	case "attacked":
		if err := attackedWorker(ctx, c, cfg.ProcessCount.Value); err != nil {
			return emitErr(idx, err)
		}
	case "view":
		if err := c.Barrier(ctx, "view"); err != nil {
			return emitErr(idx, err)
		}
		emit(report{Event: "view", Index: idx, View: &View{ProcessCount: cfg.ProcessCount.Value, Coordinator: cfg.Coordinator.Value, Processes: c.Processes()}})
	case "kv":
		n := cfg.ProcessCount.Value
		var wg sync.WaitGroup
		errc := make(chan error, 64)
		for g := range 4 {
			wg.Add(2)
			go func() {
				defer wg.Done()
				for k := g; k < 100; k += 4 {
					if err := c.Put(ctx, fmt.Sprintf("p%d/%d", idx, k), []byte(fmt.Sprintf("v%d.%d", idx, k))); err != nil {
						errc <- err
						return
					}
				}
			}()
			go func() {
				defer wg.Done()
				for o := range n {
					for k := g; k < 100; k += 4 {
						v, err := c.Get(ctx, fmt.Sprintf("p%d/%d", o, k), 0)
						if err == nil && string(v) != fmt.Sprintf("v%d.%d", o, k) {
							err = fmt.Errorf("p%d/%d = %q", o, k, v)
						}
						if err != nil {
							errc <- err
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errc)
		if err := <-errc; err != nil {
			return emitErr(idx, err)
		}
	case "barrier":
		// Worker 3 never reaches the barrier: the test kills it.
		if idx == 3 {
			<-c.Done()
			return emitErr(idx, c.Err())
		}
		if err := c.Barrier(ctx, "step"); err != nil {
			return emitErr(idx, err)
		}
	case "wait":
		// Everyone waits for the job to fail (the test kills process 0).
		select {
		case <-c.Done():
			return emitErr(idx, c.Err())
		case <-time.After(4 * cfg.Timeout.Value):
			return emitErr(idx, errors.New("nothing happened"))
		}
	}
	if err := c.Close(ctx); err != nil {
		return emitErr(idx, err)
	}
	emit(report{Event: "done", Index: idx})
	return 0
}

// worker is a running worker process.
type worker struct {
	index   int
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	reports chan report
	done    chan error
}

// startWorkers starts n workers of role (all but those in skip), each
// bounded by a deadline of limit.
func startWorkers(t *testing.T, role string, n int, timeout, limit time.Duration, skip map[int]bool) []*worker {
	t.Helper()
	coord := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	var ws []*worker
	for i := range n {
		if skip[i] {
			continue
		}
		ws = append(ws, startWorker(t, ctx, role, i, n, coord, timeout, nil))
	}
	return ws
}

// startWorker starts worker i of n, with the GKE-style environment, the
// extra variables in env, and a pipe to its stdin; the test's cleanup
// kills it.
func startWorker(t *testing.T, ctx context.Context, role string, i, n int, coord string, timeout time.Duration, env map[string]string) *worker {
	t.Helper()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"="+role)
	for k, v := range gkeEnv(i, n, coord, timeout) {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &worker{index: i, cmd: cmd, stdin: in, reports: make(chan report, 16), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var r report
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				w.reports <- r
			}
		}
		close(w.reports)
		w.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Process.Kill()
	})
	return w
}

// next returns a worker's next report of the given event, failing the test
// if the worker reports something else or ends first.
func (w *worker) next(t *testing.T, event string) report {
	t.Helper()
	for r := range w.reports {
		if r.Event == event {
			return r
		}
		if r.Event == "error" {
			t.Fatalf("worker %d: %s", w.index, r.Err)
		}
	}
	t.Fatalf("worker %d ended without %q", w.index, event)
	return report{}
}

// lastError returns the worker's error report, or fails the test.
func (w *worker) lastError(t *testing.T) report {
	t.Helper()
	for r := range w.reports {
		if r.Event == "error" {
			return r
		}
	}
	t.Fatalf("worker %d ended without an error", w.index)
	return report{}
}

func TestMultiProcessGlobalView(t *testing.T) {
	ws := startWorkers(t, "view", 4, 10*time.Second, 60*time.Second, nil)
	var first []byte
	for _, w := range ws {
		v := w.next(t, "view").View
		if v.ProcessCount != 4 || len(v.Processes) != 4 {
			t.Fatalf("worker %d: view %+v", w.index, v)
		}
		for i, p := range v.Processes {
			if p.Index != i || p.Devices != 4 || p.PID <= 0 {
				t.Errorf("worker %d sees process %d as %+v", w.index, i, p)
			}
		}
		b, _ := json.Marshal(v)
		if first == nil {
			first = b
		} else if string(b) != string(first) {
			t.Errorf("worker %d's view differs:\n%s\n%s", w.index, b, first)
		}
		w.next(t, "done")
		if err := <-w.done; err != nil {
			t.Errorf("worker %d: %v", w.index, err)
		}
	}
}

func TestMultiProcessKeyValue(t *testing.T) {
	ws := startWorkers(t, "kv", 4, 10*time.Second, 60*time.Second, nil)
	for _, w := range ws {
		w.next(t, "done")
		if err := <-w.done; err != nil {
			t.Errorf("worker %d: %v", w.index, err)
		}
	}
}

func TestMultiProcessMissingWorker(t *testing.T) {
	const timeout = time.Second
	start := time.Now()
	ws := startWorkers(t, "view", 4, timeout, 30*time.Second, map[int]bool{3: true})
	for _, w := range ws {
		r := w.lastError(t)
		if r.Kind != "missing" || r.Who != 3 || r.Host != "127.0.0.1" {
			t.Errorf("worker %d: %+v, want process 3 missing", w.index, r)
		}
		if d := r.At.Sub(start); d > timeout+5*time.Second {
			t.Errorf("worker %d failed after %v (timeout %v)", w.index, d, timeout)
		}
		t.Logf("worker %d: %s", w.index, r.Err)
	}
}

func TestMultiProcessWorkerKilledMidBarrier(t *testing.T) {
	const timeout = 5 * time.Second
	ws := startWorkers(t, "barrier", 4, timeout, 60*time.Second, nil)
	for _, w := range ws {
		w.next(t, "joined")
	}
	time.Sleep(200 * time.Millisecond) // the others are in the barrier by now
	killed := time.Now()
	if err := ws[3].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, w := range ws[:3] {
		r := w.lastError(t)
		if r.Kind != "lost" || r.Who != 3 {
			t.Errorf("worker %d: %+v, want process 3 lost", w.index, r)
		}
		// The kill closes the connection: noticed at once, not after the timeout.
		if d := r.At.Sub(killed); d > timeout/2 {
			t.Errorf("worker %d noticed after %v", w.index, d)
		}
		t.Logf("worker %d after %v: %s", w.index, r.At.Sub(killed).Round(time.Millisecond), r.Err)
	}
}

func TestMultiProcessCoordinatorDeath(t *testing.T) {
	const timeout = 5 * time.Second
	ws := startWorkers(t, "wait", 4, timeout, 60*time.Second, nil)
	for _, w := range ws {
		w.next(t, "joined")
	}
	killed := time.Now()
	if err := ws[0].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, w := range ws[1:] {
		r := w.lastError(t)
		if r.Kind != "coordinator" {
			t.Errorf("worker %d: %+v, want the coordinator lost", w.index, r)
		}
		if d := r.At.Sub(killed); d > timeout/2 {
			t.Errorf("worker %d noticed after %v", w.index, d)
		}
		if !strings.Contains(r.Err, "127.0.0.1") {
			t.Errorf("worker %d: error does not name the coordinator: %s", w.index, r.Err)
		}
		t.Logf("worker %d after %v: %s", w.index, r.At.Sub(killed).Round(time.Millisecond), r.Err)
	}
}

// A stopped process (SIGSTOP) keeps its connections open: only the
// heartbeats tell. The others must fail within the cluster timeout plus a
// heartbeat or two.
func TestMultiProcessWorkerStopsHeartbeating(t *testing.T) {
	const timeout = time.Second
	ws := startWorkers(t, "wait", 4, timeout, 60*time.Second, nil)
	for _, w := range ws {
		w.next(t, "joined")
	}
	stopped := time.Now()
	if err := ws[3].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for _, w := range ws[:3] {
		r := w.lastError(t)
		if r.Who != 3 || r.Kind != "lost" || !strings.Contains(r.Err, "no heartbeat") {
			t.Errorf("worker %d: %+v, want process 3 lost for want of heartbeats", w.index, r)
		}
		if d := r.At.Sub(stopped); d > 3*timeout {
			t.Errorf("worker %d noticed after %v (timeout %v)", w.index, d, timeout)
		}
		t.Logf("worker %d after %v: %s", w.index, r.At.Sub(stopped).Round(time.Millisecond), r.Err)
	}
}

// A stopped coordinator: the workers' heartbeats go unanswered.
func TestMultiProcessCoordinatorStops(t *testing.T) {
	const timeout = time.Second
	ws := startWorkers(t, "wait", 4, timeout, 60*time.Second, nil)
	for _, w := range ws {
		w.next(t, "joined")
	}
	stopped := time.Now()
	if err := ws[0].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for _, w := range ws[1:] {
		r := w.lastError(t)
		if r.Kind != "coordinator" {
			t.Errorf("worker %d: %+v, want the coordinator lost", w.index, r)
		}
		if d := r.At.Sub(stopped); d > 3*timeout {
			t.Errorf("worker %d noticed after %v (timeout %v)", w.index, d, timeout)
		}
		t.Logf("worker %d after %v: %s", w.index, r.At.Sub(stopped).Round(time.Millisecond), r.Err)
	}
}
