package serve

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/tensorbridge/tensorbridge/errs"
)

// Limits are the server's connection limits and timeouts. Zero values take
// the defaults documented on each field; the handshake, header and idle
// timeouts default to at most 30 s and the connection cap to 10,000, so
// that a flood of idle or slow connections is cut off and cannot lock
// legitimate clients out for long.
type Limits struct {
	// ReadHeaderTimeout bounds the TLS handshake and reading a request's
	// headers (HTTP), and connection setup up to the HTTP/2 handshake
	// (gRPC) (default 10s).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole REST request, body included, and
	// receiving a gRPC request message, from its stream's headers (each
	// chunk of a long message due by its share of it, so that a declared
	// length reserved in the budget must be earned: recvGuard.pace): a
	// client trickling its body or message is cut off (default 30s).
	ReadTimeout time.Duration
	// WriteTimeout bounds a REST request from the end of its headers to
	// the end of its response (default: ReadTimeout + the longest model
	// timeout + 10s, so that it never cuts off a request the model would
	// still answer).
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection with no request (REST),
	// or a gRPC connection with no RPC, after this long (default 30s).
	IdleTimeout time.Duration
	// MaxConnections caps the connections open at once over the HTTP and
	// gRPC listeners together; further connections wait in the kernel's
	// accept queue until one closes (default 10,000; -1: no cap).
	MaxConnections int
	// GRPCMaxStreams caps the concurrent RPCs on one gRPC connection
	// (default 1,024).
	GRPCMaxStreams int
	// GRPCMinPingInterval is the shortest interval between client
	// keepalive pings the server tolerates; a client pinging more often
	// is disconnected with GOAWAY "too_many_pings" (default 10s).
	GRPCMinPingInterval time.Duration
}

func (l Limits) validate() error {
	for name, d := range map[string]time.Duration{"read header timeout": l.ReadHeaderTimeout, "read timeout": l.ReadTimeout,
		"write timeout": l.WriteTimeout, "idle timeout": l.IdleTimeout, "gRPC minimum ping interval": l.GRPCMinPingInterval} {
		if d < 0 {
			return &errs.Error{Kind: errs.InvalidArgument, Op: "serve", Err: fmt.Errorf("%s %s is negative", name, d)}
		}
	}
	if l.GRPCMaxStreams < 0 || l.MaxConnections < -1 {
		return &errs.Error{Kind: errs.InvalidArgument, Op: "serve",
			Err: fmt.Errorf("limits must be positive: max connections %d, gRPC max streams %d", l.MaxConnections, l.GRPCMaxStreams)}
	}
	return nil
}

// withDefaults fills the zero fields; the write timeout follows the
// longest model timeout of models.
func (l Limits) withDefaults(models []ModelSource) Limits {
	if l.ReadHeaderTimeout == 0 {
		l.ReadHeaderTimeout = 10 * time.Second
	}
	if l.ReadTimeout == 0 {
		l.ReadTimeout = 30 * time.Second
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = 30 * time.Second
	}
	if l.WriteTimeout == 0 {
		longest := time.Duration(0)
		for _, m := range models {
			longest = max(longest, m.Config.withDefaults().Timeout)
		}
		l.WriteTimeout = l.ReadTimeout + longest + 10*time.Second
	}
	if l.MaxConnections == 0 {
		l.MaxConnections = 10000
	}
	if l.GRPCMaxStreams == 0 {
		l.GRPCMaxStreams = 1024
	}
	if l.GRPCMinPingInterval == 0 {
		l.GRPCMinPingInterval = 10 * time.Second
	}
	return l
}

// NewHTTPServer returns the http.Server Run serves REST with: Handler,
// the timeouts of Options.Limits, and Options.TLS (serve it with
// ServeTLS(ln, "", "") when TLSConfig is set).
func (s *Server) NewHTTPServer() *http.Server {
	l := s.opts.Limits
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: l.ReadHeaderTimeout, ReadTimeout: l.ReadTimeout,
		WriteTimeout: l.WriteTimeout, IdleTimeout: l.IdleTimeout, MaxHeaderBytes: 64 << 10,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelInfo)}
	if s.opts.TLS != nil {
		hs.TLSConfig = s.opts.TLS.Clone()
	}
	return hs
}

// TLSConfig builds the server's TLS configuration from PEM files: its
// certificate chain and key, and, when clientCA is not "", the CA
// certificates a client's certificate must chain to (mutual TLS: clients
// without one are refused in the handshake). TLS 1.2 at least.
func TLSConfig(certFile, keyFile, clientCA string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Op: "serve tls", Err: errors.New("a certificate needs both --tls-cert and --tls-key")}
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Op: "serve tls", Err: fmt.Errorf("certificate %s with key %s: %w", certFile, keyFile, err)}
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCA != "" {
		pem, err := os.ReadFile(clientCA)
		if err != nil {
			return nil, &errs.Error{Kind: errs.InvalidArgument, Op: "serve tls", Err: fmt.Errorf("client CA: %w", err)}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &errs.Error{Kind: errs.InvalidArgument, Op: "serve tls", Err: fmt.Errorf("client CA %s: no PEM certificate in it", clientCA)}
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// connLimit caps the connections open over several listeners together.
type connLimit struct {
	sem chan struct{} // nil: no cap
}

func newConnLimit(n int) *connLimit {
	if n <= 0 {
		return &connLimit{}
	}
	return &connLimit{sem: make(chan struct{}, n)}
}

// wrap returns ln with Accept waiting for a free slot before it accepts,
// so that connections over the cap wait in the kernel's accept queue.
func (c *connLimit) wrap(ln net.Listener) net.Listener {
	if c.sem == nil {
		return ln
	}
	return &limitListener{Listener: ln, c: c, done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	c         *connLimit
	done      chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.c.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	conn, err := l.Listener.Accept()
	if err != nil {
		<-l.c.sem
		return nil, err
	}
	return &limitConn{Conn: conn, release: func() { <-l.c.sem }}, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
