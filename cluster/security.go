package cluster

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Authentication of the coordination service.
//
// Anyone who reaches the coordinator's port could otherwise join with a
// wrong job id or index, leave or pass barriers for other processes, or
// write first into the key-value store the PJRT plugins read their topology
// from. So:
//
//   - A shared secret (Security.Token; the CLI reads it from
//     --cluster-token-file or the file $TENSORBRIDGE_CLUSTER_TOKEN_FILE
//     names, as a mounted Kubernetes Secret provides it) travels in the
//     metadata of every call (tokenKey) and is compared in constant time.
//     A call without it, or with another, is Unauthenticated.
//   - Join hands each process a random session secret (in the response
//     header, sessionKey). Every later call that acts for a process index
//     (Session heartbeats, Put, Get, TryGet, Barrier, Leave) must carry that
//     index's secret: without one it is Unauthenticated, with another
//     process's (or a made-up one) PermissionDenied.
//   - A join that presents a wrong token, job id, process count, or an
//     index out of range or already taken is refused to that caller alone;
//     the job goes on (the legitimate process, if it never joins, is then
//     reported missing when the join timeout passes).
//   - Optionally, mutual TLS (Security.Certificate, Security.RootCAs): every
//     process presents a certificate signed by the job's CA and checks the
//     coordinator's.
//
// The metadata keys are not secret; the values are never logged or put in
// an error message.
const (
	tokenKey   = "x-tensorbridge-cluster-token"
	sessionKey = "x-tensorbridge-session"
)

// EnvTokenFile names the file holding the job's shared secret. The CLI
// reads it (package cluster does not read the environment for it): it is
// the default of --cluster-token-file.
const EnvTokenFile = "TENSORBRIDGE_CLUSTER_TOKEN_FILE"

// maxTokenBytes bounds a token file: a token is a short random string, and
// a path pointing at something large is a mistake to report, not to read.
const maxTokenBytes = 4096

// Security is how the processes of a job prove they belong to it. The zero
// value authenticates nothing beyond the per-process session secrets (a
// single-machine or test job); a job reachable from other machines should
// set Token, and may add mutual TLS.
type Security struct {
	// Token is the job's shared secret, as every process has it (surrounding
	// whitespace already trimmed). Empty: calls are not authenticated.
	Token []byte
	// Certificate is this process's certificate and key: the coordinator's
	// server certificate on process 0, the client certificate on every
	// process. With RootCAs, the service runs over mutual TLS.
	Certificate *tls.Certificate
	// RootCAs verifies the others' certificates (the job's CA).
	RootCAs *x509.CertPool
	// ServerName is the name the coordinator's certificate must carry;
	// "" uses the host of the coordinator address.
	ServerName string
	// Insecure lets process 0 serve the coordination service on an address
	// other machines can reach with neither Token nor mutual TLS (the
	// CLI's --cluster-insecure); it then logs a warning. Without it Connect
	// refuses to (see checkExposure).
	Insecure bool
	// MaxConnections and IdleTimeout, when set, override Limits of the same
	// names for process 0's service: the CLI's --cluster-max-connections
	// and --cluster-idle-timeout (whose defaults are
	// $TENSORBRIDGE_CLUSTER_MAX_CONNECTIONS and
	// $TENSORBRIDGE_CLUSTER_IDLE_TIMEOUT, read by Bootstrap). They travel
	// with the credentials because Security is what a caller hands the
	// backend for its job (tensorbridge.WithClusterSecurity).
	MaxConnections int
	IdleTimeout    time.Duration
}

// String never shows the token.
func (s *Security) String() string {
	if s == nil {
		return "none"
	}
	var parts []string
	if len(s.Token) > 0 {
		parts = append(parts, "token")
	}
	if s.TLS() {
		parts = append(parts, "mutual TLS")
	}
	if len(parts) == 0 && s.Insecure {
		return "none (insecure allowed)"
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " + ")
}

// authenticates reports whether s proves who calls: a token or mutual TLS.
func (s *Security) authenticates() bool { return s != nil && (len(s.Token) > 0 || s.TLS()) }

// limits is l with s's overrides of the connection cap and idle timeout.
func (s *Security) limits(l Limits) Limits {
	if s != nil && s.MaxConnections != 0 {
		l.MaxConnections = s.MaxConnections
	}
	if s != nil && s.IdleTimeout > 0 {
		l.IdleTimeout = s.IdleTimeout
	}
	return l
}

// exposed reports whether an address to listen on (host:port, as
// serveAddress gives it) is reachable from other machines: any host but a
// loopback IP or localhost; an empty host is every interface.
func exposed(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() || host == "localhost" {
		return false
	}
	return true
}

// checkExposure refuses to serve the coordination service on listen, an
// address other machines can reach, when nothing proves who calls it (no
// token, no mutual TLS) and sec does not say Insecure: anyone who reached
// the port could then join the job, pass its barriers or write the
// key-value store its plugins read their topology from.
func checkExposure(listen string, sec *Security) error {
	if !exposed(listen) || sec.authenticates() || sec != nil && sec.Insecure {
		return nil
	}
	return &ConfigError{Field: "coordinator security", Value: listen,
		Reason: "process 0 would serve the coordination service on an address other machines can reach with neither a token nor mutual TLS, " +
			"so anyone who reaches the port could join the job or write its key-value store: give every process the job's token " +
			"(--cluster-token-file, or $" + EnvTokenFile + ") or --cluster-tls-cert, --cluster-tls-key and --cluster-tls-ca, " +
			"or --cluster-insecure to serve it unauthenticated anyway"}
}

// TLS reports whether s configures mutual TLS.
func (s *Security) TLS() bool { return s != nil && s.Certificate != nil && s.RootCAs != nil }

// check refuses half a TLS configuration and bad connection limits.
func (s *Security) check() error {
	if s == nil {
		return nil
	}
	if (s.Certificate != nil) != (s.RootCAs != nil) {
		return &ConfigError{Field: "cluster TLS", Reason: "mutual TLS needs both a certificate with its key and the CA that signs the job's certificates"}
	}
	if s.MaxConnections < -1 {
		return &ConfigError{Field: "coordinator connection cap", Value: fmt.Sprint(s.MaxConnections), Reason: "want a positive integer, or -1 for no cap"}
	}
	if s.IdleTimeout < 0 {
		return &ConfigError{Field: "coordinator idle timeout", Value: s.IdleTimeout.String(), Reason: "want a positive duration"}
	}
	return nil
}

// LoadSecurity reads the files the CLI's flags name: the token file ("" for
// none) and, for mutual TLS, the certificate, its key and the CA (all three
// or none).
func LoadSecurity(tokenFile, certFile, keyFile, caFile string) (*Security, error) {
	s := &Security{}
	if tokenFile != "" {
		tok, err := ReadToken(tokenFile)
		if err != nil {
			return nil, err
		}
		s.Token = tok
	}
	n := 0
	for _, f := range []string{certFile, keyFile, caFile} {
		if f != "" {
			n++
		}
	}
	switch n {
	case 0:
		return s, nil
	case 3:
	default:
		return nil, &ConfigError{Field: "cluster TLS", Reason: "give the certificate, its key and the CA together (--cluster-tls-cert, --cluster-tls-key, --cluster-tls-ca)"}
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, &ConfigError{Field: "cluster TLS certificate", Value: certFile, Reason: err.Error()}
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, &ConfigError{Field: "cluster TLS CA", Value: caFile, Reason: err.Error()}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, &ConfigError{Field: "cluster TLS CA", Value: caFile, Reason: "no PEM certificate in the file"}
	}
	s.Certificate, s.RootCAs = &cert, pool
	return s, nil
}

// ReadToken reads a token file: its content with surrounding whitespace
// trimmed (a Kubernetes Secret created from a literal has none, one made
// with echo has a newline). An empty or oversized file is an error naming
// the file, never a silently empty token.
func ReadToken(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &ConfigError{Field: "cluster token file", Value: path, Reason: err.Error()}
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenBytes+1))
	if err != nil {
		return nil, &ConfigError{Field: "cluster token file", Value: path, Reason: err.Error()}
	}
	if len(b) > maxTokenBytes {
		return nil, &ConfigError{Field: "cluster token file", Value: path, Reason: fmt.Sprintf("larger than %d bytes: not a token", maxTokenBytes)}
	}
	tok := []byte(strings.TrimSpace(string(b)))
	if len(tok) == 0 {
		return nil, &ConfigError{Field: "cluster token file", Value: path, Reason: "empty"}
	}
	for _, c := range tok {
		if c < 0x20 || c > 0x7e { // gRPC metadata carries printable ASCII only
			return nil, &ConfigError{Field: "cluster token file", Value: path, Reason: "the token must be printable ASCII (e.g. openssl rand -hex 32)"}
		}
	}
	return tok, nil
}

// equalSecret compares two secrets in constant time (over their SHA-256
// digests, so that not even the length leaks).
func equalSecret(a, b []byte) bool {
	da, db := sha256.Sum256(a), sha256.Sum256(b)
	return subtle.ConstantTimeCompare(da[:], db[:]) == 1
}

// newSessionSecret is 32 random bytes, hex-encoded.
func newSessionSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// firstMD is the first value of key in the incoming metadata, or "".
func firstMD(ctx context.Context, key string) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// authenticate checks the shared token of an incoming call.
func (s *Server) authenticate(ctx context.Context) error {
	if len(s.token) == 0 {
		return nil
	}
	got := firstMD(ctx, tokenKey)
	if got == "" {
		return status.Error(codes.Unauthenticated, "no cluster token (the job's shared secret, --cluster-token-file)")
	}
	if !equalSecret([]byte(got), s.token) {
		return status.Error(codes.Unauthenticated, "wrong cluster token")
	}
	return nil
}

func (s *Server) authUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := s.authenticate(ctx); err != nil {
		return nil, err
	}
	if s.security.authenticates() {
		s.proven(ctx)
	}
	return h(ctx, req)
}

func (s *Server) authStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := s.authenticate(ss.Context()); err != nil {
		return err
	}
	if s.security.authenticates() {
		s.proven(ss.Context())
	}
	return h(srv, ss)
}

// proven exempts the connection of ctx's call from eviction at the
// connection cap (see connLimit): a call that passed the token or came
// over mutual TLS, and, without either, a join the job accepted or a call
// carrying a joined process's session secret. Without a token a call that
// is merely not refused proves nothing: anyone may make one.
func (s *Server) proven(ctx context.Context) {
	if s.conns != nil {
		s.conns.prove(ctx)
	}
}

// checkSession checks that a call acting for process idx carries that
// process's session secret: Unauthenticated without one, PermissionDenied
// with a wrong one or for a process that has not joined.
func (s *Server) checkSession(ctx context.Context, idx int32) error {
	if err := s.checkIndex(idx); err != nil {
		return err
	}
	got := firstMD(ctx, sessionKey)
	if got == "" {
		return status.Errorf(codes.Unauthenticated, "no session secret for process %d (a process gets one when it joins)", idx)
	}
	s.mu.Lock()
	want := s.secrets[idx]
	s.mu.Unlock()
	if want == "" || !equalSecret([]byte(got), []byte(want)) {
		return status.Errorf(codes.PermissionDenied, "not process %d's session secret", idx)
	}
	s.proven(ctx)
	return nil
}

// serverCreds are the transport credentials of the coordinator: mutual TLS
// that requires and verifies a client certificate of the job's CA, or none.
func serverCreds(sec *Security) grpc.ServerOption {
	if !sec.TLS() {
		return grpc.EmptyServerOption{}
	}
	return grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{*sec.Certificate},
		ClientCAs:    sec.RootCAs,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}))
}

// clientCreds are a process's transport credentials for the coordinator
// at addr: mutual TLS (its certificate, the job's CA, the coordinator's
// name), or none.
func clientCreds(sec *Security, addr string) credentials.TransportCredentials {
	name := sec.ServerName
	if name == "" {
		name, _, _ = net.SplitHostPort(addr)
	}
	return credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{*sec.Certificate},
		RootCAs:      sec.RootCAs,
		ServerName:   name,
		MinVersion:   tls.VersionTLS12,
	})
}

// outgoing adds the token and, once joined, the session secret to an
// outgoing call's metadata.
func (c *Client) outgoing(ctx context.Context) context.Context {
	var kv []string
	if sec := c.cfg.Security; sec != nil && len(sec.Token) > 0 {
		kv = append(kv, tokenKey, string(sec.Token))
	}
	if v, _ := c.session.Load().(string); v != "" {
		kv = append(kv, sessionKey, v)
	}
	if len(kv) == 0 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

func (c *Client) unaryMD(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(c.outgoing(ctx), method, req, reply, cc, opts...)
}

func (c *Client) streamMD(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(c.outgoing(ctx), desc, cc, method, opts...)
}

// Limits bound what the coordination service keeps for the job. Every
// process is held to them separately, so that one process (or whoever holds
// its session secret) cannot fill the store for the others. The zero value
// of a field takes its default.
type Limits struct {
	// MaxKeys is how many keys one process may put (default 16384).
	MaxKeys int
	// MaxKeyBytes bounds a key and a barrier name (default 1 KiB).
	MaxKeyBytes int
	// MaxValueBytes bounds one value (default 4 MiB: gRPC's default message
	// size, larger than the topology a PJRT plugin exchanges).
	MaxValueBytes int
	// MaxBytes bounds the keys and values one process may put in all
	// (default 64 MiB).
	MaxBytes int64
	// MaxWait caps the timeout a client asks for in Get and Barrier
	// (default the larger of the cluster timeout and 10 minutes).
	MaxWait time.Duration
	// MaxConnections caps the connections the coordination service holds
	// open at once (default 1,024 plus 2 per process; -1: no cap). At the
	// cap a new connection evicts the oldest one that has carried no
	// authenticated call, or is closed when there is none, so that
	// connections from outside the job cannot lock its processes out
	// (each holds one connection, proven by its first call).
	MaxConnections int
	// IdleTimeout closes a connection that has had no call open for this
	// long (gRPC's MaxConnectionIdle), so that a flood of idle connections
	// holding the cap is cut well inside the cluster timeout (default the
	// smaller of a quarter of the cluster timeout and 30 s). A process of
	// the job always has its session stream open, so it is never idle.
	IdleTimeout time.Duration
	// MinPingInterval is the shortest interval between a client's
	// keepalive pings the service tolerates; a client pinging more often
	// is disconnected with GOAWAY "too_many_pings" (default 10 s; the
	// job's own clients send none).
	MinPingInterval time.Duration
	// ReadTimeout bounds receiving a call's request message (a stream's
	// first), from the call's headers: a caller that opens a call and
	// sends its message slowly, or not at all, is cut off instead of
	// holding the call, its goroutine and its bytes (grpc-go has no such
	// bound). Default: a quarter of the cluster timeout, between 1 s and
	// 10 s (the largest message, a 4 MiB put, takes milliseconds).
	ReadTimeout time.Duration
}

// Default limits; see Limits.
const (
	DefaultMaxKeys       = 16384
	DefaultMaxKeyBytes   = 1 << 10
	DefaultMaxValueBytes = 4 << 20
	DefaultMaxBytes      = 64 << 20
	DefaultMaxWait       = 10 * time.Minute
	// DefaultMinPingInterval is Limits.MinPingInterval's default.
	DefaultMinPingInterval = 10 * time.Second
)

// withDefaults fills unset limits; timeout is the cluster timeout.
func (l Limits) withDefaults(timeout time.Duration) Limits {
	if l.MaxKeys <= 0 {
		l.MaxKeys = DefaultMaxKeys
	}
	if l.MaxKeyBytes <= 0 {
		l.MaxKeyBytes = DefaultMaxKeyBytes
	}
	if l.MaxValueBytes <= 0 {
		l.MaxValueBytes = DefaultMaxValueBytes
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxWait <= 0 {
		l.MaxWait = max(DefaultMaxWait, timeout)
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = min(timeout/4, 30*time.Second)
	}
	if l.MinPingInterval <= 0 {
		l.MinPingInterval = DefaultMinPingInterval
	}
	if l.ReadTimeout <= 0 {
		l.ReadTimeout = min(max(timeout/4, time.Second), 10*time.Second)
	}
	return l
}

// maxConnections is the connection cap for a job of n processes; 0 means
// no cap.
func (l Limits) maxConnections(n int) int {
	switch {
	case l.MaxConnections < 0:
		return 0
	case l.MaxConnections == 0:
		return 1024 + 2*n
	}
	return l.MaxConnections
}

// capWait is the wait a client asked for (ms; <= 0 means the cluster
// timeout), capped by MaxWait.
func (s *Server) capWait(ms int64) time.Duration {
	if ms <= 0 {
		return min(s.timeout, s.limits.MaxWait)
	}
	if ms > s.limits.MaxWait.Milliseconds() {
		return s.limits.MaxWait
	}
	return time.Duration(ms) * time.Millisecond
}
