package cluster

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tensorbridge/tensorbridge/cluster/clusterpb"
)

// attackDialer dials from 127.0.0.2: another source address than the
// job's processes, as an attacker from outside the job has.
var attackDialer = &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}

// idleConn opens a connection to addr that completes the HTTP/2 handshake
// (the client preface and an empty SETTINGS frame) and then sends nothing.
// It returns once the server's SETTINGS frame has come (the server
// accepted it), with a channel closed when the server closes it.
func idleConn(t *testing.T, addr string) (net.Conn, <-chan struct{}) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"); err != nil {
		t.Fatal(err)
	}
	var head [9]byte // the server's first frame: its SETTINGS
	if _, err := io.ReadFull(conn, head[:]); err != nil {
		t.Fatalf("no server preface: %v", err)
	}
	closed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, conn)
		close(closed)
	}()
	return conn, closed
}

// At the cap, connections that never carried an authenticated call evict
// each other, oldest first, and never the one of the job's client: 8
// idle connections fill a cap of 8, a client with the token makes a call,
// 40 more idle connections come, the open count never passes 8 and the
// client's connection is never replaced (its dialer counts one dial) and
// keeps working. Proved once by evicting the oldest connection whatever
// it carried: the client's connection was evicted and redialled.
func TestConnectionCapEvictsUnproven(t *testing.T) {
	const cap, token = 8, "cap-token"
	srv, err := NewServer(ServerOptions{Processes: 1, Job: "cap", Timeout: 20 * time.Second,
		Security: &Security{Token: []byte(token)}, Limits: Limits{MaxConnections: cap, IdleTimeout: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Serve(lis)
	t.Cleanup(srv.Stop)
	addr := lis.Addr().String()
	var closes []<-chan struct{}
	for range cap {
		c, closed := idleConn(t, addr)
		defer c.Close()
		closes = append(closes, closed)
	}
	var dials atomic.Int32
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, "tcp", a)
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	rpc := clusterpb.NewCoordinationClient(cc)
	call := func() error {
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), tokenKey, token), 10*time.Second)
		defer cancel()
		// Authenticated, then refused for want of a session secret.
		_, err := rpc.TryGet(ctx, &clusterpb.TryGetRequest{Key: "k", Index: 0}, grpc.WaitForReady(true))
		return err
	}
	if err := call(); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("first call: %v, want Unauthenticated (no session secret)", err)
	}
	<-closes[0] // the client's connection evicted the oldest idle one
	for range 40 {
		c, _ := idleConn(t, addr)
		defer c.Close()
		if n := srv.conns.count(); n > cap {
			t.Fatalf("%d connections open, over the cap of %d", n, cap)
		}
	}
	if err := call(); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("call after the flood: %v, want Unauthenticated (no session secret)", err)
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("the client dialled %d times, want 1: its connection was evicted", n)
	}
}

// 4 workers of a real job (separate processes, with a token) complete
// while 64 attackers on another loopback address (127.0.0.2) keep the
// coordinator's connections full: each opens a connection that completes
// the HTTP/2 handshake and stays idle, and opens another as soon as it is
// cut, with the cap at 16 and the idle timeout 1 s (both set through the
// environment, as a deployment would). The flood is cut and reconnects
// throughout (counted), and no worker is locked out. Proved once by
// evicting the oldest unproven connection whatever its address: the
// flood's reconnections evicted the workers' new connections before their
// first call, and a worker timed out joining.
func TestMultiProcessIdleFlood(t *testing.T) {
	const n, flood, token = 4, 64, "idle-flood-token"
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	coord := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	env := map[string]string{EnvTokenFile: tokenFile, EnvMaxConnections: "16", EnvIdleTimeout: "1s"}
	ws := []*worker{startWorker(t, ctx, "view", 0, n, coord, 10*time.Second, env)}
	// Wait for process 0's service, then flood it.
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", coord)
		if err == nil {
			c.Close()
			break
		}
		if i == 500 {
			t.Fatalf("the coordinator never listened: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop := make(chan struct{})
	var cut atomic.Int64
	var wg sync.WaitGroup
	for range flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10000 { // bounded; ends when the workers are done
				conn, err := attackDialer.Dial("tcp", coord)
				if err != nil {
					return
				}
				_, _ = io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
				done := make(chan struct{})
				go func() {
					_, _ = io.Copy(io.Discard, conn)
					close(done)
				}()
				select {
				case <-done:
					cut.Add(1)
					conn.Close()
				case <-stop:
					conn.Close()
					return
				}
			}
		}()
	}
	for i := 1; i < n; i++ {
		ws = append(ws, startWorker(t, ctx, "view", i, n, coord, 10*time.Second, env))
	}
	for _, w := range ws {
		w.next(t, "view")
	}
	for _, w := range ws {
		w.next(t, "done")
		if err := <-w.done; err != nil {
			t.Errorf("worker %d: %v", w.index, err)
		}
	}
	close(stop)
	wg.Wait()
	if cut.Load() == 0 {
		t.Fatalf("no flood connection was cut: the flood never reached the cap")
	}
	t.Logf("%d flood connections cut while the job ran", cut.Load())
}

// The connection cap and idle timeout from the environment: parsed when
// the options leave them unset, the options winning otherwise, and bad
// values refused naming the variable.
func TestConnectionLimitsFromEnv(t *testing.T) {
	cases := []struct {
		name    string
		env     map[string]string
		opts    Limits
		want    Limits
		wantErr string
	}{
		{"unset", nil, Limits{}, Limits{}, ""},
		{"env", map[string]string{EnvMaxConnections: "300", EnvIdleTimeout: "5s"}, Limits{}, Limits{MaxConnections: 300, IdleTimeout: 5 * time.Second}, ""},
		{"no cap", map[string]string{EnvMaxConnections: "-1"}, Limits{}, Limits{MaxConnections: -1}, ""},
		{"options win", map[string]string{EnvMaxConnections: "300", EnvIdleTimeout: "5s"}, Limits{MaxConnections: 7, IdleTimeout: time.Second},
			Limits{MaxConnections: 7, IdleTimeout: time.Second}, ""},
		{"zero cap", map[string]string{EnvMaxConnections: "0"}, Limits{}, Limits{}, EnvMaxConnections},
		{"not a number", map[string]string{EnvMaxConnections: "many"}, Limits{}, Limits{}, EnvMaxConnections},
		{"negative idle", map[string]string{EnvIdleTimeout: "-1s"}, Limits{}, Limits{}, EnvIdleTimeout},
		{"idle without unit", map[string]string{EnvIdleTimeout: "30"}, Limits{}, Limits{}, EnvIdleTimeout},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := c.opts
			err := connectionLimits(&l, func(k string) string { return c.env[k] })
			if c.wantErr != "" {
				var ce *ConfigError
				if !errors.As(err, &ce) || ce.Source != "env:"+c.wantErr {
					t.Fatalf("got %v, want a ConfigError from env:%s", err, c.wantErr)
				}
				return
			}
			if err != nil || l != c.want {
				t.Fatalf("got %+v, %v; want %+v", l, err, c.want)
			}
		})
	}
	// The defaults: 1,024 plus 2 per process; a quarter of the cluster
	// timeout, at most 30 s.
	if got := (Limits{}).maxConnections(4); got != 1032 {
		t.Errorf("default cap for 4 processes: %d, want 1032", got)
	}
	if got := (Limits{MaxConnections: -1}).maxConnections(4); got != 0 {
		t.Errorf("-1: cap %d, want none (0)", got)
	}
	for timeout, want := range map[time.Duration]time.Duration{20 * time.Second: 5 * time.Second, 10 * time.Minute: 30 * time.Second} {
		if got := (Limits{}).withDefaults(timeout).IdleTimeout; got != want {
			t.Errorf("idle timeout for a cluster timeout of %s: %s, want %s", timeout, got, want)
		}
	}
}
