package pjrt

import (
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
)

// poolRef computes a max or sum window reduction of an NCHW-style operand
// over its trailing axes by the definition (the window 1 on axes 0 and 1),
// with the reduction's identity as padding.
func poolRef(x []float32, xd []int, max bool, win, strides []int, pads [][2]int) ([]float32, []int) {
	rank := len(xd)
	od := make([]int, rank)
	for a := range rank {
		od[a] = (xd[a]+pads[a][0]+pads[a][1]-win[a])/strides[a] + 1
	}
	size := 1
	for _, d := range od {
		size *= d
	}
	out := make([]float32, size)
	idx := make([]int, rank)
	for o := range out {
		r := o
		for a := rank - 1; a >= 0; a-- {
			idx[a] = r % od[a]
			r /= od[a]
		}
		acc := float32(0)
		if max {
			acc = float32(math.Inf(-1))
		}
		w := make([]int, rank)
		var walk func(a int)
		walk = func(a int) {
			if a == rank {
				flat, ok := 0, true
				for b := range rank {
					p := idx[b]*strides[b] + w[b] - pads[b][0]
					if p < 0 || p >= xd[b] {
						ok = false
						break
					}
					flat = flat*xd[b] + p
				}
				if !ok {
					return
				}
				if max {
					acc = float32(math.Max(float64(acc), float64(x[flat])))
				} else {
					acc += x[flat]
				}
				return
			}
			for w[a] = 0; w[a] < win[a]; w[a]++ {
				walk(a + 1)
			}
		}
		walk(0)
		out[o] = acc
	}
	return out, od
}

// TestPoolChannelsLast checks that the xla-cpu engine writes channels-first
// poolings channels-last (transposes around the reduce_window) and that the
// results are the definition's, exactly (small integers: every float32 sum
// is exact in any order).
func TestPoolChannelsLast(t *testing.T) {
	eng := cpuEngine(t)
	for _, tc := range []struct {
		name      string
		xd        []int
		max       bool
		win, str  []int
		pads      [][2]int
		rewritten bool
	}{
		{"max 3x3 stride 2 pad 1 (ResNet)", []int{2, 3, 7, 8}, true, []int{1, 1, 3, 3}, []int{1, 1, 2, 2}, [][2]int{{}, {}, {1, 1}, {1, 1}}, true},
		{"sum 2x2 stride 2", []int{1, 4, 6, 6}, false, []int{1, 1, 2, 2}, []int{1, 1, 2, 2}, [][2]int{{}, {}, {}, {}}, true},
		{"max 1x3 (window 1 on a spatial axis)", []int{1, 2, 4, 6}, true, []int{1, 1, 1, 3}, []int{1, 1, 1, 1}, [][2]int{{}, {}, {}, {0, 2}}, true},
		{"1-D max", []int{2, 3, 9}, true, []int{1, 1, 3}, []int{1, 1, 2}, [][2]int{{}, {}, {1, 0}}, true},
		{"window over channels stays as is", []int{1, 4, 5, 5}, true, []int{1, 2, 2, 2}, []int{1, 1, 1, 1}, [][2]int{{}, {}, {}, {}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			size := 1
			for _, d := range tc.xd {
				size *= d
			}
			x := make([]float32, size)
			for i := range x {
				x[i] = float32((i*7+3)%11 - 5)
			}
			rt := backends.ReduceOpSum
			if tc.max {
				rt = backends.ReduceOpMax
			}
			exe := compileOn(t, eng, "pool", one(func(b *Builder, p []backends.Op) (backends.Op, error) {
				return b.ReduceWindow(p[0], rt, tc.win, tc.str, nil, nil, tc.pads)
			}), mat(x, tc.xd...))
			defer exe.Finalize()
			if got := strings.Count(string(exe.Program().Text), "stablehlo.transpose") == 2; got != tc.rewritten {
				t.Errorf("program transposes around the window: %v, want %v", got, tc.rewritten)
			}
			bufs := upload(t, eng, 0, mat(x, tc.xd...))
			res, err := exe.Execute(bufs, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range bufs {
				_ = eng.BufferFinalize(b)
			}
			got := download(t, eng, res)[0]
			want, wd := poolRef(x, tc.xd, tc.max, tc.win, tc.str, tc.pads)
			if !equalInts(got.shape.Dimensions, wd) {
				t.Fatalf("shape %v, want %v", got.shape.Dimensions, wd)
			}
			if err := sameValues(got.flat, want, 0); err != nil {
				t.Error(err)
			}
		})
	}
}
