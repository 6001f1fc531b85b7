//go:build tensorbridge_noindexcheck

package onnx

// indexChecksOff: see indexcheck_on.go. This build measures the cost of
// the run-time index checks by leaving them out; never ship it.
const indexChecksOff = true
