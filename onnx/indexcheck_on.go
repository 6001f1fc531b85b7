//go:build !tensorbridge_noindexcheck

package onnx

// indexChecksOff turns the run-time index checks off. It is true only in
// builds with the tensorbridge_noindexcheck tag, which exist to measure
// what the checks cost (BenchmarkIndexCheckCost in package tensorbridge).
const indexChecksOff = false
