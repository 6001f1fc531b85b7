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

// TestServePrefillChunkFlag: a --prefill-chunk below -1 (the default
// size) is a usage error (exit 2) naming the flag, before any backend is
// opened.
func TestServePrefillChunkFlag(t *testing.T) {
	code, _, stderr := run(t, "serve", "--prefill-chunk", "-2", "m.onnx")
	if code != 2 || !strings.Contains(stderr, "--prefill-chunk -2") {
		t.Errorf("exit %d, stderr %q; want 2 naming --prefill-chunk -2", code, stderr)
	}
}
