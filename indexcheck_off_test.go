//go:build tensorbridge_noindexcheck

package tensorbridge_test

// indexChecksOff mirrors the onnx package's build tag (see
// BenchmarkIndexCheckCost).
const indexChecksOff = true
