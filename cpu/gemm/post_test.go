package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestSgemmPost checks SgemmPost against Sgemm followed by the epilogue's
// three ops in plain Go, bit for bit, on shapes that take the dot-product
// path (one tile and many) and the packed path (one and several panels
// in k, edge tiles), on 1 and 2 threads.
func TestSgemmPost(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	shapes := []struct{ m, n, k int }{
		{5, 10, 200},    // dot-product path, one tile
		{64, 196, 384},  // dot-product path, many tiles
		{200, 300, 64},  // packed (shallow k)
		{601, 700, 300}, // packed, two panels in k, edge tiles
		{3, 1000, 16},   // packed, B read in place
	}
	for _, s := range shapes {
		a, b := randMat(rng, s.m*s.k), randMat(rng, s.k*s.n)
		post := &Post{Bias: randMat(rng, s.m), Lo: -0.5, Hi: 1, HasLo: true, HasHi: true}
		A, B := Matrix{Data: a, RowStride: s.k, ColStride: 1}, Matrix{Data: b, RowStride: s.n, ColStride: 1}
		want := make([]float32, s.m*s.n)
		if err := Sgemm(s.m, s.n, s.k, A, B, want, s.n, false, 1); err != nil {
			t.Fatal(err)
		}
		for i := range s.m {
			for j := range s.n {
				want[i*s.n+j] = min(max(want[i*s.n+j]+post.Bias[i], post.Lo), post.Hi)
			}
		}
		for _, threads := range []int{1, 2} {
			t.Run(fmt.Sprintf("%dx%dx%d/threads=%d", s.m, s.n, s.k, threads), func(t *testing.T) {
				got := make([]float32, s.m*s.n)
				if err := SgemmWith(s.m, s.n, s.k, A, B, got, s.n, Options{Post: post}, threads); err != nil {
					t.Fatal(err)
				}
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("C[%d][%d] = %v, want %v", i/s.n, i%s.n, got[i], want[i])
					}
				}
			})
		}
	}
	if err := SgemmWith(2, 2, 2, Matrix{Data: make([]float32, 4), RowStride: 2, ColStride: 1}, Matrix{Data: make([]float32, 4), RowStride: 2, ColStride: 1},
		make([]float32, 4), 2, Options{Post: &Post{Bias: make([]float32, 1)}}, 1); err == nil {
		t.Fatal("a bias shorter than the rows of C was accepted")
	}
}

func randMat(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = rng.Float32()*2 - 1
	}
	return s
}

// TestAPack: products that share an APack give Sgemm's bits on the first
// call (which packs A), on the next ones (which read the kept slivers),
// from concurrent callers, and when the APack meets another A or another
// shape (it packs again rather than reuse the wrong slivers).
func TestAPack(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var ap APack
	shapes := []struct{ m, n, k int }{{200, 300, 64}, {601, 700, 300}, {601, 700, 300}, {3, 1000, 16}, {13, 40, 100}}
	for i, s := range shapes {
		a, b := randMat(rng, s.m*s.k), randMat(rng, s.k*s.n)
		A, B := Matrix{Data: a, RowStride: s.k, ColStride: 1}, Matrix{Data: b, RowStride: s.n, ColStride: 1}
		want := make([]float32, s.m*s.n)
		if err := sgemm(active, s.m, s.n, s.k, A, B, want, s.n, false, Options{}, 1); err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 4)
		for g := range 4 {
			go func() {
				got := make([]float32, s.m*s.n)
				if err := sgemm(active, s.m, s.n, s.k, A, B, got, s.n, false, Options{A: &ap}, 1+g%2); err != nil {
					errs <- err
					return
				}
				for j := range got {
					if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
						errs <- fmt.Errorf("shape %d, caller %d: C[%d] = %v, want %v", i, g, j, got[j], want[j])
						return
					}
				}
				errs <- nil
			}()
		}
		for range 4 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
}
