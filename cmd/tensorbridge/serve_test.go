package main

import (
	"strings"
	"testing"
)

// Usage errors of serve exit 2 with a message naming the problem, before
// any backend is opened.
func TestServeUsageErrors(t *testing.T) {
	empty := t.TempDir()
	cases := []struct {
		args []string
		says string
	}{
		{[]string{"serve"}, "name at least one MODEL.onnx or --models DIR"},
		{[]string{"serve", "--models", empty}, "no .onnx files there"},
		{[]string{"serve", "--http", "off", "--grpc", "", "../../testdata/models/mlp.onnx"}, "nothing to serve on"},
		{[]string{"serve", "--buckets", "batch=x", "m.onnx"}, "--buckets"},
		{[]string{"serve", "--tls-client-ca", "ca.pem", "m.onnx"}, "mutual TLS runs over TLS"},
		{[]string{"serve", "--tls-cert", "c.pem", "m.onnx"}, "go together"},
		{[]string{"serve", "--metrics-public", "m.onnx"}, "only matters with --auth-token-file"},
	}
	for _, c := range cases {
		code, _, stderr := run(t, c.args...)
		if code != 2 || !strings.Contains(stderr, c.says) {
			t.Errorf("%v: exit %d, stderr %q; want 2 with %q", c.args, code, stderr, c.says)
		}
	}
}
