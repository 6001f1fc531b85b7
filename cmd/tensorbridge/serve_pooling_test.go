package main

import (
	"strings"
	"testing"
)

// TestServePoolingFlag: a --pooling value other than last, mean or cls is
// a usage error (exit 2) naming the flag and the values it takes, before
// any backend is opened.
func TestServePoolingFlag(t *testing.T) {
	code, _, stderr := run(t, "serve", "--pooling", "max", "m.onnx")
	if code != 2 || !strings.Contains(stderr, "--pooling") || !strings.Contains(stderr, "last, mean or cls") {
		t.Errorf("exit %d, stderr %q; want 2 naming --pooling and last, mean or cls", code, stderr)
	}
}
