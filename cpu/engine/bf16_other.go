//go:build !amd64 || purego

package engine

// Without the amd64 assembly the Go loops of bf16.go do all the values.

func roundBF16Arch(d, a []float32) int { return 0 }

func narrowBF16Arch(d []uint16, a []float32) int { return 0 }

func widenBF16Arch(d []float32, h []uint16) int { return 0 }
