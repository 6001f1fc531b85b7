package lower

import (
	"testing"

	"github.com/gomlx/gomlx/backends"
)

// FuzzShapeOps feeds arbitrary axis arguments to the shape-manipulating
// ops: each must return an error or an op whose program finishes, never
// panic.
func FuzzShapeOps(f *testing.F) {
	f.Add(int8(2), int8(3), int8(1), int8(0), int8(2), int8(1), int8(0))
	f.Add(int8(-1), int8(4), int8(0), int8(5), int8(-3), int8(9), int8(2))
	f.Add(int8(0), int8(0), int8(0), int8(0), int8(0), int8(0), int8(0))
	f.Fuzz(func(t *testing.T, d0, d1, a, b0, b1, c, k int8) {
		dims := []int{int(d0), int(d1)}
		for _, d := range dims {
			if d < 0 || d > 16 {
				t.Skip()
			}
		}
		tries := []func(b *Builder, x op) (op, error){
			func(b *Builder, x op) (op, error) { return b.Reshape(x, int(a), int(b0)) },
			func(b *Builder, x op) (op, error) { return b.Transpose(x, int(a), int(b0)) },
			func(b *Builder, x op) (op, error) {
				return b.Slice(x, []int{int(a), int(b0)}, []int{int(b1), int(c)}, []int{int(k), 1})
			},
			func(b *Builder, x op) (op, error) {
				fill, _ := b.Constant([]float32{0})
				return b.Pad(x, fill, backends.PadAxis{Start: int(a), End: int(b0), Interior: int(b1)}, backends.PadAxis{Start: int(c)})
			},
			func(b *Builder, x op) (op, error) { return b.Reverse(x, int(a)) },
			func(b *Builder, x op) (op, error) { return b.ReduceSum(x, int(a), int(b0)) },
			func(b *Builder, x op) (op, error) { return b.ArgMinMax(x, int(a), i32, k%2 == 0) },
			func(b *Builder, x op) (op, error) {
				return b.ReduceWindow(x, backends.ReduceOpMax, []int{int(a), int(b0)}, []int{int(b1), int(c)}, nil, nil, [][2]int{{int(k), 0}, {0, int(k)}})
			},
			func(b *Builder, x op) (op, error) {
				return b.DotGeneral(x, []int{int(a)}, []int{int(b0)}, x, []int{int(b1)}, []int{int(c)})
			},
			func(b *Builder, x op) (op, error) {
				i, _ := b.Constant([]int32{int32(a), int32(b0)}, 2, 1)
				return b.Gather(x, i, int(k), []int{int(c)}, []int{int(b1)}, []int{0}, []int{1, int(d1)}, false)
			},
			func(b *Builder, x op) (op, error) {
				return b.BroadcastInDim(x, sh(f32, int(d0), int(d1), int(k)&3), []int{int(a), int(b0)})
			},
		}
		for i, try := range tries {
			b := New("fuzz", 1)
			x, err := b.Parameter("x", sh(f32, dims...), nil)
			if err != nil {
				t.Fatalf("parameter %v: %v", dims, err)
			}
			y, err := try(b, x)
			if err != nil {
				continue
			}
			if _, err := b.OpShape(y); err != nil {
				t.Errorf("op %d: OpShape: %v", i, err)
			}
			if _, err := b.Finish([]op{y}, nil); err != nil {
				t.Errorf("op %d: built an op but Finish failed: %v", i, err)
			}
		}
	})
}
