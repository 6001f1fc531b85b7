package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tensorbridge/tensorbridge/cluster/clusterpb"
)

// Process 0 refuses to serve the coordination service where other
// machines can reach it (every interface, or a non-loopback IP) unless a
// token or mutual TLS authenticates callers or Insecure says to anyway;
// loopback needs neither. Connect refuses before it listens, with a
// config error naming the flags. Proved once by making checkExposure
// return nil: the exposed cases without authentication were accepted.
func TestCoordinatorExposure(t *testing.T) {
	tlsSec := &Security{Certificate: &tls.Certificate{}, RootCAs: x509.NewCertPool()}
	for _, c := range []struct {
		listen string
		sec    *Security
		refuse bool
	}{
		{":8482", nil, true},
		{"10.4.0.7:8482", &Security{}, true},
		{"[fd00::7]:8482", nil, true},
		{"127.0.0.1:9000", nil, false},
		{"[::1]:9000", nil, false},
		{"localhost:9000", nil, false},
		{":8482", &Security{Token: []byte("t")}, false},
		{":8482", tlsSec, false},
		{":8482", &Security{Insecure: true}, false},
	} {
		err := checkExposure(c.listen, c.sec)
		if (err != nil) != c.refuse || c.refuse && (!errors.Is(err, ErrConfig) ||
			!strings.Contains(err.Error(), "--cluster-token-file") || !strings.Contains(err.Error(), "--cluster-insecure")) {
			t.Errorf("%s with %v: %v, want refused %v (a config error naming the flags)", c.listen, c.sec, err, c.refuse)
		}
	}
	cfg := &Config{ProcessIndex: Int{0, SourceFlag}, ProcessCount: Int{2, SourceFlag}, Coordinator: String{"tb-slice-0-0.tb:8482", SourceFlag},
		Timeout: Duration{time.Second, SourceFlag}, Heartbeat: Duration{100 * time.Millisecond, SourceDerived}, Job: String{"j", SourceDefault}}
	if _, err := Connect(context.Background(), cfg, Self{}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), `coordinator security ":8482"`) {
		t.Fatalf("Connect as process 0 on every interface without a token: %v, want the exposure config error", err)
	}
}

// Serving on an address other machines can reach without authentication
// logs a warning naming it (what --cluster-insecure leads to); loopback,
// or a token, does not. Proved once by leaving the warning out of Serve.
func TestCoordinatorInsecureWarns(t *testing.T) {
	for _, c := range []struct {
		host  string
		sec   *Security
		warns bool
	}{
		{"0.0.0.0", &Security{Insecure: true}, true},
		{"127.0.0.1", nil, false},
		{"0.0.0.0", &Security{Token: []byte("t")}, false},
	} {
		var logs bytes.Buffer
		srv, err := NewServer(ServerOptions{Processes: 1, Job: "j", Timeout: 5 * time.Second, Security: c.sec, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		lis, err := net.Listen("tcp", net.JoinHostPort(c.host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		srv.Serve(lis)
		srv.Stop()
		warned := strings.Contains(logs.String(), "level=WARN") && strings.Contains(logs.String(), "addr="+lis.Addr().String())
		if warned != c.warns {
			t.Errorf("%s with %v: warned %v, want %v: %s", c.host, c.sec, warned, c.warns, logs.String())
		}
	}
}

// Without a token, a call that is merely not refused proves nothing: at
// the connection cap, 8 connections whose calls are all refused (no
// session secret) are evicted for the job's process, which joins, and
// whose connection is then never evicted by 40 more. Before, every call
// without a token proved its connection: the 8 held the cap and the job's
// process was shut out (proved once by proving on every call again: its
// join timed out).
func TestNoTokenProvesNothing(t *testing.T) {
	const cap = 8
	srv, err := NewServer(ServerOptions{Processes: 1, Job: "j", Timeout: 20 * time.Second,
		Limits: Limits{MaxConnections: cap, IdleTimeout: time.Minute}})
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
	refused := func() {
		a := newAttacker(t, addr, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := a.rpc.TryGet(ctx, &clusterpb.TryGetRequest{Key: "k", Index: 0}, grpc.WaitForReady(true))
		if status.Code(err) != codes.Unauthenticated && status.Code(err) != codes.Unavailable {
			t.Fatalf("a call without a session secret: %v", err)
		}
	}
	for range cap {
		refused()
	}
	job := newAttacker(t, addr, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := job.join(ctx, "j", 1, 0); err != nil {
		t.Fatalf("the job's process could not join past %d connections of refused calls: %v", cap, err)
	}
	for range 40 {
		refused()
		if n := srv.conns.count(); n > cap {
			t.Fatalf("%d connections open, over the cap of %d", n, cap)
		}
	}
	if err := job.join(ctx, "j", 1, 0); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("the job's connection after the flood: %v, want AlreadyExists (it still answers)", err)
	}
}

// A call whose request message trickles, or never comes, is cut off at
// the read timeout (counted), instead of holding its stream: a raw HTTP/2
// client opens Join, sends a gRPC prefix declaring 100 bytes and then a
// byte every 100 ms, or nothing. A process joining meanwhile is not
// affected. Proved once by leaving the InTapHandle out of Serve: both
// streams ran to the end of their loop and the test failed.
func TestCoordinatorReadTimeout(t *testing.T) {
	srv, err := NewServer(ServerOptions{Processes: 1, Job: "j", Timeout: 20 * time.Second, Limits: Limits{ReadTimeout: 500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Serve(lis)
	t.Cleanup(srv.Stop)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	for _, trickle := range []bool{true, false} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			if msg := slowCall(hc, lis.Addr().String(), trickle); msg != "" {
				t.Errorf("trickle %v: %s", trickle, msg)
			} else if d := time.Since(start); d > 5*time.Second {
				t.Errorf("trickle %v: cut off after %s, the read timeout is 500ms", trickle, d)
			}
		}()
	}
	job := newAttacker(t, lis.Addr().String(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := job.join(ctx, "j", 1, 0); err != nil {
		t.Fatalf("a join meanwhile: %v", err)
	}
	wg.Wait()
	if n := srv.recvTimeouts.Load(); n != 2 {
		t.Fatalf("%d calls cut off, want 2", n)
	}
}

// slowCall opens a Join stream whose message trickles (or never comes)
// for at most 100 ticks of 100 ms; "" when the server ended it with an
// error status first.
func slowCall(hc *http.Client, addr string, trickle bool) string {
	pr, pw := io.Pipe()
	defer pw.Close()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+clusterpb.Coordination_Join_FullMethodName, pr)
	if err != nil {
		return err.Error()
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	done := make(chan string, 1)
	go func() {
		resp, err := hc.Do(req)
		if err != nil {
			done <- "" // the stream was reset: cut off
			return
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		code := resp.Header.Get("Grpc-Status")
		if code == "" {
			code = resp.Trailer.Get("Grpc-Status")
		}
		if code == "" || code == "0" {
			done <- "answered with grpc-status " + code
			return
		}
		done <- ""
	}()
	if trickle {
		if _, err := pw.Write([]byte{0, 0, 0, 0, 100}); err != nil {
			return "prefix: " + err.Error()
		}
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for range 100 {
		select {
		case msg := <-done:
			return msg
		case <-tick.C:
		}
		if trickle {
			if _, err := pw.Write([]byte{1}); err != nil {
				return <-done
			}
		}
	}
	return "still open after 100 ticks"
}

// The connection cap and idle timeout a caller sets in Security (the
// CLI's --cluster-max-connections and --cluster-idle-timeout) override
// the ones Limits carries (from Options or the environment); unset, the
// Limits ones stand; bad ones are refused. Proved once by dropping the
// override in NewServer: the flags' values were ignored.
func TestSecurityOverridesConnectionLimits(t *testing.T) {
	fromEnv := Limits{MaxConnections: 300, IdleTimeout: 5 * time.Second}
	for _, c := range []struct {
		sec       *Security
		conns     int
		idle      time.Duration
		wantError bool
	}{
		{nil, 300, 5 * time.Second, false},
		{&Security{MaxConnections: 7, IdleTimeout: 2 * time.Second}, 7, 2 * time.Second, false},
		{&Security{MaxConnections: -1}, -1, 5 * time.Second, false},
		{&Security{MaxConnections: -2}, 0, 0, true},
		{&Security{IdleTimeout: -time.Second}, 0, 0, true},
	} {
		srv, err := NewServer(ServerOptions{Processes: 1, Timeout: time.Minute, Security: c.sec, Limits: fromEnv})
		if c.wantError {
			if !errors.Is(err, ErrConfig) {
				t.Errorf("%+v: %v, want a config error", c.sec, err)
			}
			continue
		}
		if err != nil || srv.limits.MaxConnections != c.conns || srv.limits.IdleTimeout != c.idle {
			t.Errorf("%+v: cap %d, idle %s (%v); want %d, %s", c.sec, srv.limits.MaxConnections, srv.limits.IdleTimeout, err, c.conns, c.idle)
		}
	}
	// The read timeout's default: a quarter of the cluster timeout, 1 to 10 s.
	for timeout, want := range map[time.Duration]time.Duration{2 * time.Second: time.Second, 20 * time.Second: 5 * time.Second, 10 * time.Minute: 10 * time.Second} {
		if got := (Limits{}).withDefaults(timeout).ReadTimeout; got != want {
			t.Errorf("read timeout for a cluster timeout of %s: %s, want %s", timeout, got, want)
		}
	}
}
