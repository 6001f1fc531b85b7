package serve_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tensorbridge/tensorbridge/client"
	"github.com/tensorbridge/tensorbridge/serve"
)

// Slow and idle clients for TestHostileClients: slow HTTP and gRPC senders,
// slow gRPC messages, idle connections.

// n slow connections sending one byte a second, half trickling their
// headers and half their body: the server cuts every one off (read
// header timeout 1 s, read timeout 2 s) long before the 60 bytes each
// would send.
func testSlowConnections(t *testing.T, addr, token string, n int) {
	const maxBytes = 60
	var cut atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			msg := "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\n"
			if i%2 == 1 { // whole headers at once, then the body byte by byte
				head := msg + "Authorization: Bearer " + token + "\r\nContent-Length: 1000\r\n\r\n"
				if _, err := io.WriteString(conn, head); err != nil {
					t.Error(err)
					return
				}
				msg = strings.Repeat("1", maxBytes)
			}
			closed := make(chan struct{})
			go func() {
				_, _ = io.Copy(io.Discard, conn) // until the server closes it
				close(closed)
			}()
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for k := 0; k < maxBytes && k < len(msg); k++ {
				if _, err := conn.Write([]byte{msg[k]}); err != nil {
					cut.Add(1)
					return
				}
				select {
				case <-closed:
					cut.Add(1)
					return
				case <-tick.C:
				}
			}
		}()
	}
	wg.Wait()
	if got := cut.Load(); got != int64(n) {
		t.Fatalf("%d of %d slow connections were cut off before sending %d bytes", got, n, maxBytes)
	}
}

// n connections to the gRPC port trickling the HTTP/2 preface a byte a
// second are cut off by the connection timeout (the read header timeout,
// 1 s here). Slow messages on a connection set up are
// testSlowGRPCMessages'.
func testSlowGRPC(t *testing.T, addr string, n int) {
	preface := "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	var cut atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			closed := make(chan struct{})
			go func() {
				_, _ = io.Copy(io.Discard, conn)
				close(closed)
			}()
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for k := 0; k < len(preface); k++ {
				if _, err := conn.Write([]byte{preface[k]}); err != nil {
					cut.Add(1)
					return
				}
				select {
				case <-closed:
					cut.Add(1)
					return
				case <-tick.C:
				}
			}
		}()
	}
	wg.Wait()
	if got := cut.Load(); got != int64(n) {
		t.Fatalf("%d of %d slow gRPC connections were cut off before their preface was sent", got, n)
	}
}

// n gRPC ModelInfer streams that send their headers and then trickle the
// request message (a gRPC frame declaring 1,000 bytes, then a byte every
// 200 ms) or send nothing of it are each reset with an error status before
// the client has sent 100 bytes or waited 100 ticks (20 s, 10x the read
// timeout), and counted in the receive-timeout metric. grpc-go itself has
// no timeout on receiving a message: without the server's receive guard
// (proved once by leaving grpc.InTapHandle out of NewGRPCServer) every
// stream ran to the end of its bounded loop and the test failed. A raw
// HTTP/2 client, since grpc-go's client sends a message at once. A
// health Watch stream open across it all is not cut off: the guard ends
// with the first message of a streaming call (proved once by leaving the
// stream interceptor's wrapper out: the Watch was cut and counted).
func testSlowGRPCMessages(t *testing.T, ts *testServer, token string, n int) {
	const ticks = 100
	before := serverCounter(t, ts.s, serve.MetricGRPCRecvTimeouts)
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	conn, err := grpc.NewClient(ts.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	watch, err := healthpb.NewHealthClient(conn).Watch(watchCtx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatal(err)
	}
	watchEnded := make(chan error, 1)
	go func() {
		_, err := watch.Recv()
		watchEnded <- err
	}()
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if msg := slowGRPCMessage(hc, ts.grpcAddr, token, i%2 == 0, ticks); msg != "" {
				t.Errorf("stream %d (trickling %v): %s", i, i%2 == 0, msg)
			}
		}()
	}
	wg.Wait()
	if got := serverCounter(t, ts.s, serve.MetricGRPCRecvTimeouts) - before; got != float64(n) {
		t.Fatalf("%s rose by %v, want %d", serve.MetricGRPCRecvTimeouts, got, n)
	}
	select {
	case err := <-watchEnded:
		t.Fatalf("the health Watch stream ended: %v", err)
	default:
	}
}

// slowGRPCMessage sends one ModelInfer stream whose message trickles (or
// never comes) for at most ticks ticks of 200 ms and returns what went
// wrong: "" when the server reset it with an error status first.
func slowGRPCMessage(hc *http.Client, addr, token string, trickle bool, ticks int) string {
	pr, pw := io.Pipe()
	defer pw.Close()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/inference.GRPCInferenceService/ModelInfer", pr)
	if err != nil {
		return err.Error()
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	req.Header.Set("Authorization", "Bearer "+token)
	type answer struct {
		code string
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := hc.Do(req)
		if err != nil {
			done <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		code := resp.Header.Get("Grpc-Status")
		if code == "" {
			code = resp.Trailer.Get("Grpc-Status")
		}
		done <- answer{code: code}
	}()
	if trickle { // the 5-byte gRPC frame header: uncompressed, 1,000 bytes
		if _, err := pw.Write([]byte{0, 0, 0, 0x03, 0xe8}); err != nil {
			return "frame header: " + err.Error()
		}
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	check := func(a answer) string {
		if a.err != nil {
			return a.err.Error()
		}
		if a.code == "" || a.code == "0" {
			return fmt.Sprintf("grpc-status %q, want an error", a.code)
		}
		return ""
	}
	for range ticks {
		select {
		case a := <-done:
			return check(a)
		case <-tick.C:
		}
		if trickle {
			if _, err := pw.Write([]byte{1}); err != nil {
				return check(<-done) // the server reset the stream; its answer came or comes
			}
		}
	}
	return fmt.Sprintf("still open after %d ticks of 200 ms", ticks)
}

// serverCounter reads an unlabelled counter of s.
func serverCounter(t *testing.T, s *serve.Server, name string) float64 {
	t.Helper()
	mfs, err := s.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}

// idleHelperEnv names the server address for the child process that opens
// the idle connections (it has a file descriptor limit of its own).
const idleHelperEnv = "TENSORBRIDGE_TEST_IDLE_ADDR"

// 10,000 idle connections (opened by a child process, so that the
// client ends do not count against this process's file limit) fill the
// server's connection cap; a legitimate client's request still succeeds,
// once the read header timeout has cut the idle ones, and every idle
// connection is closed by the server.
func testIdleConnections(t *testing.T, addr string, hc *client.HTTP, good, want []client.Tensor) {
	n := 10000
	if raceEnabled {
		n = 3000 // the race detector's limit is 8,128 live goroutines; the server has one per connection
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestIdleConnectionsHelper$")
	cmd.Env = append(os.Environ(), idleHelperEnv+"="+addr, "TENSORBRIDGE_TEST_IDLE_N="+strconv.Itoa(n))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	var lines []string
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "connected ") && !strings.HasPrefix(line, "closed-by-server ") {
			continue // the test framework's own lines
		}
		lines = append(lines, line)
		if strings.HasPrefix(line, "connected ") {
			// The cap is full of idle connections: this client waits in
			// the accept queue until the server cuts some.
			res, err := hc.Infer(context.Background(), "mlp", &client.InferRequest{Inputs: good})
			if err != nil {
				t.Errorf("a legitimate request among %d idle connections: %v", n, err)
			} else {
				checkOutputs(t, res, want)
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("idle connection helper: %v (%v)", err, lines)
	}
	if fmt.Sprint(lines) != fmt.Sprintf("[connected %d closed-by-server %d]", n, n) {
		t.Fatalf("idle connection helper said %v", lines)
	}
}

// TestIdleConnectionsHelper is the child process of testIdleConnections:
// it opens the connections, says how many, and waits for the server to
// close each (at most a minute each).
func TestIdleConnectionsHelper(t *testing.T) {
	addr := os.Getenv(idleHelperEnv)
	if addr == "" {
		t.Skip("run by TestHostileClients")
	}
	n, _ := strconv.Atoi(os.Getenv("TENSORBRIDGE_TEST_IDLE_N"))
	raiseFileLimit(t)
	conns := make([]net.Conn, 0, n)
	for len(conns) < n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("after %d connections: %v", len(conns), err)
		}
		conns = append(conns, c)
	}
	fmt.Printf("connected %d\n", len(conns))
	var closed atomic.Int64
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(time.Minute))
			var b [1]byte
			if _, err := c.Read(b[:]); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				closed.Add(1)
			}
		}()
	}
	wg.Wait()
	fmt.Printf("closed-by-server %d\n", closed.Load())
}

// raiseFileLimit lifts the soft file descriptor limit to the hard one
// (10,000 connections need 10,000 descriptors in the server).
func raiseFileLimit(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skip("no file limit to read:", err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Logf("raising the file limit: %v", err)
		}
	}
	if lim.Cur < 10500 {
		t.Skipf("the file descriptor limit is %d; the test needs 10,500", lim.Cur)
	}
}
