package serve_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tensorbridge/tensorbridge/serve"
)

// Serving on an address other machines can reach, with nothing that
// authenticates callers (no token, no client certificates), logs a
// warning at start naming the address; loopback, or a token, does not.
// Proved once by leaving the warnOpen call out of Run: the test failed on
// the open case.
func TestWarnUnauthenticatedOpen(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("t0k\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := openBackend(t, batchBuckets(t, "batch=1,2"))
	for _, c := range []struct {
		name, host, token string
		warns             bool
	}{
		{"all interfaces, no token", "0.0.0.0", "", true},
		{"loopback, no token", "127.0.0.1", "", false},
		{"all interfaces, token", "0.0.0.0", tok, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			logs := &lockedBuffer{}
			s, err := serve.New(context.Background(), serve.Options{Backend: b, Logger: slog.New(slog.NewTextHandler(logs, nil)), AuthTokenFile: c.token,
				Models: []serve.ModelSource{{Path: filepath.Join(modelsDir, "mlp.onnx"), Config: testCfg}}, Replicas: 1, Version: "test"})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ln, err := net.Listen("tcp", net.JoinHostPort(c.host, "0"))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx, ln, nil) }()
			for !s.Ready() {
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			warned := strings.Contains(logs.String(), "level=WARN msg=\"serving without authentication on a non-loopback address")
			if warned != c.warns || c.warns && !strings.Contains(logs.String(), "addr="+ln.Addr().String()) {
				t.Fatalf("warned %v, want %v: %s", warned, c.warns, logs.String())
			}
		})
	}
}
