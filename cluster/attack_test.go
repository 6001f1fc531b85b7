package cluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tensorbridge/tensorbridge/cluster/clusterpb"
)

// attackedWorker is role "attacked" of the multi-process tests: put 10
// keys, report "put", wait for the test's go-ahead on stdin (the attack
// happens meanwhile), read every process's keys and pass a barrier.
func attackedWorker(ctx context.Context, c *Client, n int) error {
	idx := c.Index()
	for k := range 10 {
		if err := c.Put(ctx, fmt.Sprintf("p%d/%d", idx, k), []byte(fmt.Sprintf("v%d.%d", idx, k))); err != nil {
			return err
		}
	}
	emit(report{Event: "put", Index: idx})
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return fmt.Errorf("waiting for the go-ahead: %w", err)
	}
	for o := range n {
		for k := range 10 {
			v, err := c.Get(ctx, fmt.Sprintf("p%d/%d", o, k), 0)
			if err != nil {
				return err
			}
			if want := fmt.Sprintf("v%d.%d", o, k); string(v) != want {
				return fmt.Errorf("p%d/%d = %q, want %q", o, k, v, want)
			}
		}
	}
	return c.Barrier(ctx, "after-attack")
}

// attacker is a client of the coordination service that is no process of
// the job: it speaks the protocol directly, with whatever token and session
// secret it chooses.
type attacker struct {
	rpc clusterpb.CoordinationClient
}

func newAttacker(t *testing.T, coord string, creds credentials.TransportCredentials) *attacker {
	t.Helper()
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(coord, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &attacker{rpc: clusterpb.NewCoordinationClient(conn)}
}

// ctx is a bounded context carrying token and session ("" leaves either out).
func (a *attacker) ctx(t *testing.T, token, session string) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, tokenKey, token)
	}
	if session != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, sessionKey, session)
	}
	return ctx
}

func (a *attacker) join(ctx context.Context, job string, count, index int32) error {
	_, err := a.rpc.Join(ctx, &clusterpb.JoinRequest{Job: job, ProcessCount: count,
		Process: &clusterpb.Process{Index: index, Host: "intruder", Pid: 1}}, grpc.WaitForReady(true))
	return err
}

// calls are every call that acts for process index, as an attacker makes
// them: each returns the call's error.
func (a *attacker) calls(index int32) map[string]func(context.Context) error {
	return map[string]func(context.Context) error{
		"put": func(ctx context.Context) error {
			_, err := a.rpc.Put(ctx, &clusterpb.PutRequest{Key: "tpu:topology", Value: []byte("forged"), Index: index})
			return err
		},
		"get": func(ctx context.Context) error {
			_, err := a.rpc.Get(ctx, &clusterpb.GetRequest{Key: "p0/0", TimeoutMs: 1, Index: index})
			return err
		},
		"try-get": func(ctx context.Context) error {
			_, err := a.rpc.TryGet(ctx, &clusterpb.TryGetRequest{Key: "p0/0", Index: index})
			return err
		},
		"barrier": func(ctx context.Context) error {
			_, err := a.rpc.Barrier(ctx, &clusterpb.BarrierRequest{Name: "after-attack", Index: index, TimeoutMs: 1})
			return err
		},
		"leave": func(ctx context.Context) error {
			_, err := a.rpc.Leave(ctx, &clusterpb.LeaveRequest{Index: index})
			return err
		},
		"session": func(ctx context.Context) error {
			s, err := a.rpc.Session(ctx)
			if err != nil {
				return err
			}
			if err := s.Send(&clusterpb.Heartbeat{Index: index}); err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		},
	}
}

func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Errorf("%s: %v (%v), want %v", what, got, err, want)
	}
}

// TestMultiProcessUnderAttack: 4 worker processes of a job with a cluster
// token run to the end (join, put, get, barrier, leave) while a fifth
// client, this test, attacks the coordinator: joins with a wrong or no
// token, another job id, another process count, an index out of range or
// taken; calls every per-process method without a session secret, with
// another process's and with a made-up one; floods the store without a
// session, and, with a stolen session, up to the per-process bound. Every
// attack gets its code and none fails the job.
//
// Each guard was proven by injecting its fault: with authenticate
// returning nil, the token-less join takes process 3's index and worker 3
// is refused; with checkSession checking only the index, every forged put,
// get, barrier and leave succeeds; with the per-process key bound removed,
// the stolen-session flood puts all 200 keys; with Join's old refusal that
// failed the whole job, the workers end with "process 3 refused".
func TestMultiProcessUnderAttack(t *testing.T) {
	const (
		n       = 4
		token   = "correct horse battery staple"
		job     = "attacked-job"
		maxKeys = 64
	)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	coord := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	env := map[string]string{EnvTokenFile: tokenFile, EnvJob: job, maxKeysEnv: strconv.Itoa(maxKeys)}
	var ws []*worker
	for i := range n - 1 {
		ws = append(ws, startWorker(t, ctx, "attacked", i, n, coord, 10*time.Second, env))
	}
	a := newAttacker(t, coord, nil)

	// While the job is still forming (process 3 has not started): joins
	// that must be refused to the attacker, without failing the job or
	// taking process 3's place.
	joins := []struct {
		name         string
		token, job   string
		count, index int32
		want         codes.Code
	}{
		{"no token", "", job, n, 3, codes.Unauthenticated},
		{"wrong token", "guess", job, n, 3, codes.Unauthenticated},
		{"token with a trailing space", token + " ", job, n, 3, codes.Unauthenticated},
		{"wrong job", token, "other-job", n, 3, codes.PermissionDenied},
		{"wrong process count", token, job, n + 1, 3, codes.InvalidArgument},
		{"index out of range", token, job, n, n, codes.InvalidArgument},
		{"negative index", token, job, n, -1, codes.InvalidArgument},
	}
	for _, j := range joins {
		wantCode(t, "join with "+j.name, a.join(a.ctx(t, j.token, ""), j.job, j.count, j.index), j.want)
	}
	ws = append(ws, startWorker(t, ctx, "attacked", n-1, n, coord, 10*time.Second, env))
	secrets := make([]string, n)
	for _, w := range ws {
		secrets[w.index] = w.next(t, "joined").Secret
		w.next(t, "put")
	}
	for i, s := range secrets {
		if len(s) != 64 {
			t.Fatalf("worker %d reported session secret %q", i, s)
		}
	}

	// The job is formed: a join with a taken index.
	wantCode(t, "join with a taken index", a.join(a.ctx(t, token, ""), job, n, 2), codes.AlreadyExists)
	// Every per-process call, as process 2: without a session secret, with
	// process 1's, with a made-up one, and with process 2's own but no token.
	for name, call := range a.calls(2) {
		wantCode(t, name+" without a session secret", call(a.ctx(t, token, "")), codes.Unauthenticated)
		wantCode(t, name+" with another process's session secret", call(a.ctx(t, token, secrets[1])), codes.PermissionDenied)
		wantCode(t, name+" with a made-up session secret", call(a.ctx(t, token, newSessionSecret())), codes.PermissionDenied)
		wantCode(t, name+" with the session secret but no token", call(a.ctx(t, "", secrets[2])), codes.Unauthenticated)
	}
	// Flood without a session: every put refused.
	for k := range 200 {
		_, err := a.rpc.Put(a.ctx(t, token, ""), &clusterpb.PutRequest{Key: fmt.Sprintf("flood/%d", k), Value: make([]byte, 1024), Index: 0})
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("flood put %d without a session: %v", k, err)
		}
	}
	// Flood with process 1's stolen session: the store takes what process 1
	// may still put (maxKeys less its 10), then refuses; an oversized value
	// and an overwrite of another process's key are refused too.
	stolen := a.ctx(t, token, secrets[1])
	accepted := 0
	var last error
	for k := range 200 {
		_, last = a.rpc.Put(stolen, &clusterpb.PutRequest{Key: fmt.Sprintf("flood/%d", k), Value: make([]byte, 1024), Index: 1})
		if last != nil {
			break
		}
		accepted++
	}
	wantCode(t, "flood past the per-process bound", last, codes.ResourceExhausted)
	if accepted != maxKeys-10 {
		t.Errorf("the store took %d flood keys from process 1, want %d (%d less the 10 it put)", accepted, maxKeys-10, maxKeys)
	}
	_, err := a.rpc.Put(stolen, &clusterpb.PutRequest{Key: "big", Value: make([]byte, DefaultMaxValueBytes+1), Index: 1})
	wantCode(t, "an oversized value", err, codes.ResourceExhausted)
	_, err = a.rpc.Put(stolen, &clusterpb.PutRequest{Key: string(bytes.Repeat([]byte("k"), DefaultMaxKeyBytes+1)), Index: 1})
	wantCode(t, "an oversized key", err, codes.InvalidArgument)
	_, err = a.rpc.Put(stolen, &clusterpb.PutRequest{Key: "p0/0", Value: []byte("forged"), Index: 1})
	wantCode(t, "overwriting process 0's key", err, codes.AlreadyExists)

	// The job goes on: every worker reads every key (the forged overwrite
	// did not land), passes the barrier and leaves in order.
	for _, w := range ws {
		if _, err := w.stdin.Write([]byte("go\n")); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range ws {
		w.next(t, "done")
		if err := <-w.done; err != nil {
			t.Errorf("worker %d: %v", w.index, err)
		}
	}
}

// TestServerCapsClientTimeouts: a Get or Barrier asking for an hour is cut
// at the server's MaxWait. (Injected fault: capWait returning the client's
// value; the Get then waits out the test's 20 s context instead of
// answering DEADLINE_EXCEEDED.)
func TestServerCapsClientTimeouts(t *testing.T) {
	const n = 2
	limits := Limits{MaxWait: 50 * time.Millisecond}
	clients, errs := startInProcessWith(t, n, 5*time.Second, func(i int, o *Options) { o.Limits = limits })
	for i, err := range errs {
		if err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
	}
	defer func() {
		for _, c := range clients {
			c.Abort()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := clients[0]
	if _, err := c.Get(ctx, "absent", time.Hour); !errors.Is(err, ErrKeyTimeout) {
		t.Errorf("get of an absent key asking for an hour: %v, want ErrKeyTimeout at the cap", err)
	}
	// A barrier that process 1 never reaches, asked with an hour: the cap
	// fails the job naming process 1, as the cluster timeout would.
	_, err := c.rpc.Barrier(c.outgoing(ctx), &clusterpb.BarrierRequest{Name: "never", Index: 0, TimeoutMs: time.Hour.Milliseconds()})
	if status.Code(err) != codes.Aborted {
		t.Errorf("barrier asking for an hour: %v, want the job failed (Aborted) at the cap", err)
	}
}

// startInProcessWith is startInProcess with each worker's bootstrap
// options adjusted by mod.
func startInProcessWith(t testing.TB, n int, timeout time.Duration, mod func(int, *Options)) ([]*Client, []error) {
	t.Helper()
	coord := freeAddr(t)
	clients := make([]*Client, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := Options{Env: envOf(gkeEnv(i, n, coord, timeout)), Hostname: fmt.Sprintf("worker-%d", i)}
			mod(i, &o)
			cfg, err := Bootstrap(context.Background(), o)
			if err != nil {
				errs[i] = err
				return
			}
			clients[i], errs[i] = Connect(context.Background(), cfg, Self{Devices: 1, DeviceKind: "fake"})
		}()
	}
	wg.Wait()
	return clients, errs
}

// testPKI is a CA and certificates it signed for 127.0.0.1, written as PEM
// files.
type testPKI struct {
	caFile, certFile, keyFile string
	ca                        *x509.Certificate
	caKey                     *ecdsa.PrivateKey
}

func newTestPKI(t *testing.T, dir string) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test job CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &testPKI{ca: ca, caKey: key, caFile: filepath.Join(dir, "ca.pem")}
	writePEM(t, p.caFile, "CERTIFICATE", der)
	p.certFile, p.keyFile = p.leaf(t, dir, "process")
	return p
}

// leaf writes a certificate for 127.0.0.1 signed by the CA, for server and
// client use.
func (p *testPKI) leaf(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kder)
	return certFile, keyFile
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestMutualTLS: a job of 2 over mutual TLS with a token forms and works;
// a client without a certificate, or with one of another CA, cannot even
// reach the service. (Injected fault: serverCreds returning no credentials;
// the workers' TLS handshakes then fail and the job does not form.)
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	pki := newTestPKI(t, dir)
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("tls-job-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	sec, err := LoadSecurity(tokenFile, pki.certFile, pki.keyFile, pki.caFile)
	if err != nil {
		t.Fatal(err)
	}
	if got := sec.String(); got != "token + mutual TLS" {
		t.Errorf("Security.String() = %q", got)
	}
	const n = 2
	coord := freeAddr(t)
	clients := make([]*Client, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg, err := Bootstrap(context.Background(), Options{Env: envOf(gkeEnv(i, n, coord, 5*time.Second)), Security: sec})
			if err != nil {
				errs[i] = err
				return
			}
			clients[i], errs[i] = Connect(context.Background(), cfg, Self{Devices: 1, DeviceKind: "fake"})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("worker %d over mutual TLS: %v", i, err)
		}
	}
	defer closeAll(t, clients)

	// No client certificate: the handshake fails, the join never arrives.
	other := newTestPKI(t, t.TempDir())
	otherCert, err := tls.LoadX509KeyPair(other.certFile, other.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		certs []tls.Certificate
	}{{"no client certificate", nil}, {"a certificate of another CA", []tls.Certificate{otherCert}}} {
		a := newAttacker(t, coord, credentials.NewTLS(&tls.Config{Certificates: c.certs, RootCAs: sec.RootCAs, ServerName: "127.0.0.1"}))
		ctx, cancel := context.WithTimeout(a.ctx(t, "tls-job-token", ""), 2*time.Second)
		_, err := a.rpc.Join(ctx, &clusterpb.JoinRequest{Job: "default", ProcessCount: n, Process: &clusterpb.Process{Index: 1}})
		cancel()
		if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
			t.Errorf("join with %s: %v, want the connection refused", c.name, err)
		}
	}
	if err := clients[1].Put(context.Background(), "after", []byte("ok")); err != nil {
		t.Errorf("the job after the refused handshakes: %v", err)
	}
}

// TestLoadSecurityErrors: bad token and TLS files are errors naming them.
func TestLoadSecurityErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	empty := write("empty", " \n")
	big := write("big", string(bytes.Repeat([]byte("x"), maxTokenBytes+1)))
	good := write("good", "  secret\n")
	cases := []struct {
		name                 string
		token, cert, key, ca string
		want                 string
	}{
		{"missing token file", filepath.Join(dir, "absent"), "", "", "", "absent"},
		{"empty token file", empty, "", "", "", "empty"},
		{"oversized token file", big, "", "", "", "larger than"},
		{"token with a control character", write("ctl", "a\x01b"), "", "", "", "printable"},
		{"half a TLS configuration", good, good, "", "", "together"},
		{"certificate that is no PEM", good, good, good, good, "certificate"},
	}
	for _, c := range cases {
		_, err := LoadSecurity(c.token, c.cert, c.key, c.ca)
		if !errors.Is(err, ErrConfig) || !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
			t.Errorf("%s: %v, want a config error mentioning %q", c.name, err, c.want)
		}
	}
	sec, err := LoadSecurity(good, "", "", "")
	if err != nil || string(sec.Token) != "secret" {
		t.Errorf("token file %q: %q %v, want the trimmed token", "  secret\\n", sec.Token, err)
	}
	if s := fmt.Sprint(sec); bytes.Contains([]byte(s), []byte("secret")) {
		t.Errorf("Security prints its token: %s", s)
	}
}

// TestBindAddress: TENSORBRIDGE_COORDINATOR_BIND narrows process 0's
// listener to one IP; a value that is no IP is a config error naming it.
func TestBindAddress(t *testing.T) {
	cases := []struct{ coord, bind, want string }{
		{"tb-slice-0-0.tb:8482", "", ":8482"},
		{"tb-slice-0-0.tb:8482", "10.4.0.7", "10.4.0.7:8482"},
		{"tb-slice-0-0.tb:8482", "fd00::7", "[fd00::7]:8482"},
		{"127.0.0.1:9000", "", "127.0.0.1:9000"},
	}
	for _, c := range cases {
		got, err := serveAddress(c.coord, c.bind)
		if err != nil || got != c.want {
			t.Errorf("serveAddress(%q, %q) = %q, %v; want %q", c.coord, c.bind, got, err, c.want)
		}
	}
	env := map[string]string{EnvCoordinator: "tb-0.tb", EnvProcessID: "0", EnvNumProcesses: "2", EnvBind: "10.4.0.7"}
	cfg, err := Bootstrap(context.Background(), Options{Env: envOf(env)})
	if err != nil || cfg.Bind != (String{"10.4.0.7", "env:" + EnvBind}) {
		t.Errorf("bootstrap with %s: %+v %v", EnvBind, cfg.Bind, err)
	}
	env[EnvBind] = "my-pod"
	if _, err := Bootstrap(context.Background(), Options{Env: envOf(env)}); !errors.Is(err, ErrConfig) {
		t.Errorf("bootstrap with %s=my-pod: %v, want a config error", EnvBind, err)
	}
}

// TestLargestValue: a value of exactly MaxValueBytes goes in and comes back
// out through the Client (gRPC's default 4 MiB receive limit would refuse
// the answer); one byte more is ErrKeyLimit. (Injected fault: the client's
// MaxCallRecvMsgSize option removed; the Get then fails with
// RESOURCE_EXHAUSTED from the client's own transport.)
func TestLargestValue(t *testing.T) {
	clients, errs := startInProcessWith(t, 1, 5*time.Second, func(int, *Options) {})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	c := clients[0]
	defer c.Abort()
	ctx := context.Background()
	v := bytes.Repeat([]byte{0xa5}, DefaultMaxValueBytes)
	if err := c.Put(ctx, "big", v); err != nil {
		t.Fatalf("put of %d bytes: %v", len(v), err)
	}
	got, err := c.Get(ctx, "big", 0)
	if err != nil || !bytes.Equal(got, v) {
		t.Fatalf("get of %d bytes: %d bytes, %v", len(v), len(got), err)
	}
	if err := c.Put(ctx, "bigger", append(v, 0)); !errors.Is(err, ErrKeyLimit) {
		t.Errorf("put of %d bytes: %v, want ErrKeyLimit", len(v)+1, err)
	}
}
