package llm

import (
	"slices"
	"testing"
)

// TestContextBuckets: the context buckets and the bucket a decode step
// picks, against hand-computed values.
func TestContextBuckets(t *testing.T) {
	for _, tc := range []struct {
		lo, max int
		want    []int
		pos     map[int]int // position -> bucket
	}{
		{128, 1024, []int{128, 256, 512, 1024}, map[int]int{0: 128, 127: 128, 128: 256, 144: 256, 511: 512, 512: 1024, 1023: 1024}},
		{16, 64, []int{16, 32, 64}, map[int]int{15: 16, 16: 32, 31: 32, 32: 64, 63: 64}},
		{128, 100, []int{100}, map[int]int{0: 100, 99: 100}},
		{16, 48, []int{16, 32, 48}, map[int]int{32: 48, 47: 48}},
	} {
		got := pow2Buckets(tc.lo, tc.max)
		if !slices.Equal(got, tc.want) {
			t.Errorf("pow2Buckets(%d, %d) = %v, want %v", tc.lo, tc.max, got, tc.want)
		}
		e := &Engine{cBuckets: got}
		for p, want := range tc.pos {
			if b := e.contextBucket(p); b != want {
				t.Errorf("buckets %v: position %d -> %d, want %d", got, p, b, want)
			}
		}
	}
}
