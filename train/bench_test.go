package train

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/npy"
)

// BenchmarkNext: batches of 256 MNIST-sized samples (784 float32 + an
// int64 label) from a memory-mapped data set of 8192 samples, in order
// and shuffled. SetBytes is the batch's bytes.
func BenchmarkNext(b *testing.B) {
	const n, width, batch = 8192, 784, 256
	dir := b.TempDir()
	x := make([]float32, n*width)
	y := make([]int64, n)
	for i := range y {
		y[i] = int64(i % 10)
	}
	ctx := context.Background()
	if err := npy.WriteFile(ctx, filepath.Join(dir, "x.npy"), &npy.Array{Shape: []int{n, width}, Data: x}, nil); err != nil {
		b.Fatal(err)
	}
	if err := npy.WriteFile(ctx, filepath.Join(dir, "y.npy"), &npy.Array{Shape: []int{n}, Data: y}, nil); err != nil {
		b.Fatal(err)
	}
	d, err := OpenData(dir, []string{"x", "y"})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	for _, shuffle := range []bool{false, true} {
		name := map[bool]string{false: "ordered", true: "shuffled"}[shuffle]
		b.Run(name, func(b *testing.B) {
			b.SetBytes(batch * (width*4 + 8))
			p := d.Start(shuffle, 1)
			for b.Loop() {
				var err error
				if _, p, err = d.Next(p, batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCheckpoint writes (with fsync) and reads back a checkpoint of
// 3 x 16 MiB float32 tensors (weights and two Adam moments).
func BenchmarkCheckpoint(b *testing.B) {
	raw := make([]byte, 16<<20)
	c := &Checkpoint{Step: 1, Tensors: map[string]*ir.Tensor{}}
	for _, name := range []string{"w", "m/w", "v/w"} {
		c.Tensors[name] = mustTensor(b, ir.Float32, []int{len(raw) / 4}, raw)
	}
	dir := b.TempDir()
	b.Run("write", func(b *testing.B) {
		b.SetBytes(3 * int64(len(raw)))
		for b.Loop() {
			if _, err := WriteCheckpoint(context.Background(), dir, c, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	path, _, _ := LatestCheckpoint(dir)
	b.Run("read", func(b *testing.B) {
		b.SetBytes(3 * int64(len(raw)))
		for b.Loop() {
			if _, err := ReadCheckpoint(path); err != nil {
				b.Fatal(err)
			}
		}
	})
}
