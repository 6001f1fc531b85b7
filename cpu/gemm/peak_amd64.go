//go:build amd64 && !purego

package gemm

// The peak loops in peak_amd64.s, for BenchmarkPeakFMA: n iterations of
// independent FMAs (peakAVX512: 24 chains of VFMADD231PS on ZMM; peakAVX2:
// 12 on YMM) and of a chain of dependent one-cycle adds (clockLoop: 32 an
// iteration), which measure the core's multiply-add throughput and clock.

//go:noescape
func peakAVX512(n int)

//go:noescape
func peakAVX2(n int)

//go:noescape
func clockLoop(n int)
