package serve

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/tensorbridge/tensorbridge/errs"
	pb "github.com/tensorbridge/tensorbridge/serve/inferencepb"
)

// UnauthenticatedError says a request lacked the bearer token or carried a
// wrong one (HTTP 401, gRPC Unauthenticated). It never holds the token.
type UnauthenticatedError struct {
	Reason string // "missing", "malformed", "wrong token", "no valid token on the server"
}

func (e *UnauthenticatedError) Error() string {
	return "unauthenticated: " + e.Reason + ` (send "Authorization: Bearer <token>")`
}

// tokenFile is the bearer token read from a file: its content with
// surrounding whitespace trimmed. The file is stat'ed on every check and
// read again when it changes (another file, size or modification time), so
// a rotated Kubernetes Secret (whose mount swaps a symlink) takes effect
// on the next request. Only the token's SHA-256 is kept; it is compared in
// constant time.
type tokenFile struct {
	path string
	log  *slog.Logger
	mu   sync.Mutex
	fi   os.FileInfo // what was read; nil when the last read failed
	sum  [sha256.Size]byte
	ok   bool // a non-empty token is loaded
}

// newTokenFile reads the token file; an unreadable or empty file is an
// error at startup.
func newTokenFile(path string, log *slog.Logger) (*tokenFile, error) {
	t := &tokenFile{path: path, log: log}
	if err := t.load(); err != nil {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Op: "serve auth", Err: err}
	}
	return t, nil
}

// load reads the file. On failure no token is valid (closed, not open).
func (t *tokenFile) load() error {
	fi, err := os.Stat(t.path)
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("token file %s is not a regular file", t.path)
	}
	var b []byte
	if err == nil {
		b, err = os.ReadFile(t.path)
	}
	tok := strings.TrimSpace(string(b))
	if err == nil && tok == "" {
		err = fmt.Errorf("token file %s is empty", t.path)
	}
	t.fi, t.ok = fi, err == nil
	if err != nil {
		clear(t.sum[:])
		return err
	}
	t.sum = sha256.Sum256([]byte(tok))
	return nil
}

// changed says whether the file at path is no longer the one read.
func (t *tokenFile) changed() bool {
	fi, err := os.Stat(t.path)
	if err != nil || t.fi == nil {
		return true
	}
	return !os.SameFile(fi, t.fi) || fi.Size() != t.fi.Size() || !fi.ModTime().Equal(t.fi.ModTime())
}

// check verifies an Authorization value ("Bearer <token>").
func (t *tokenFile) check(authorization string) error {
	scheme, tok, found := strings.Cut(strings.TrimSpace(authorization), " ")
	switch {
	case authorization == "":
		return &UnauthenticatedError{Reason: "missing"}
	case !found || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "":
		return &UnauthenticatedError{Reason: "malformed (not a bearer token)"}
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	t.mu.Lock()
	if t.changed() {
		if err := t.load(); err != nil {
			t.log.Error("auth token file unreadable: every authenticated request is refused until it is fixed", "error", err.Error())
		} else {
			t.log.Info("auth token reloaded", "file", t.path)
		}
	}
	sum, ok := t.sum, t.ok
	t.mu.Unlock()
	if !ok {
		return &UnauthenticatedError{Reason: "no valid token on the server"}
	}
	if subtle.ConstantTimeCompare(got[:], sum[:]) != 1 {
		return &UnauthenticatedError{Reason: "wrong token"}
	}
	return nil
}

// openPaths are the REST paths that need no token: liveness and readiness,
// for probes.
var openPaths = map[string]bool{"/v2/health/live": true, "/v2/health/ready": true}

// authHTTP requires the token on every path but the open ones (and
// /metrics with MetricsPublic).
func (s *Server) authHTTP(next http.Handler) http.Handler {
	if s.auth == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if openPaths[r.URL.Path] || (s.opts.MetricsPublic && r.URL.Path == "/metrics") {
			next.ServeHTTP(w, r)
			return
		}
		if err := s.auth.check(r.Header.Get("Authorization")); err != nil {
			s.logUnauthenticated(err, r.RemoteAddr, r.Method+" "+r.URL.Path)
			w.Header().Set("WWW-Authenticate", `Bearer realm="tensorbridge"`)
			if isOAIPath(r.URL.Path) {
				writeOAIError(w, err) // OpenAI's error object, as its clients read it
			} else {
				writeErr(w, err)
			}
			return
		}
		next.ServeHTTP(w, r)
	})
}

// logUnauthenticated logs a refused request: who, what and why, never the
// token. At most one line a second, with the count refused since the last.
func (s *Server) logUnauthenticated(err error, remote, what string) {
	var ue *UnauthenticatedError
	reason := err.Error()
	if errors.As(err, &ue) {
		reason = ue.Reason
	}
	s.authLog.Lock()
	defer s.authLog.Unlock()
	s.authLog.refused++
	if now := time.Now(); now.Sub(s.authLog.last) >= time.Second {
		s.log.Warn("unauthenticated request refused", "remote", remote, "request", what, "reason", reason,
			"refused_since_last_line", s.authLog.refused)
		s.authLog.last, s.authLog.refused = now, 0
	}
}

// openMethods are the gRPC methods that need no token: liveness,
// readiness and the health service.
var openMethods = map[string]bool{
	pb.GRPCInferenceService_ServerLive_FullMethodName:  true,
	pb.GRPCInferenceService_ServerReady_FullMethodName: true,
	pb.GRPCInferenceService_ModelReady_FullMethodName:  true,
	healthpb.Health_Check_FullMethodName:               true,
	healthpb.Health_Watch_FullMethodName:               true,
	healthpb.Health_List_FullMethodName:                true,
}

// grpcAuth checks the "authorization" metadata of a call to method.
func (s *Server) grpcAuth(ctx context.Context, method string) error {
	if s.auth == nil || openMethods[method] {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	var v string
	if a := md.Get("authorization"); len(a) > 0 {
		v = a[0]
	}
	if err := s.auth.check(v); err != nil {
		remote := ""
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			remote = p.Addr.String()
		}
		s.logUnauthenticated(err, remote, method)
		return grpcErr(err)
	}
	return nil
}

func (s *Server) grpcAuthUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := s.grpcAuth(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (s *Server) grpcAuthStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := s.grpcAuth(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return h(srv, ss)
}
