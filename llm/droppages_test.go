package llm

import (
	"path/filepath"
	"testing"

	"github.com/tensorbridge/tensorbridge/safetensors"
)

// TestReleaseKeepsBytes: a tensor whose file pages were dropped from the
// resident set (stTensor.release, after a load copied it out) still reads
// its values, faulted back in from the file; mapped tensors on either
// side of it, sharing its edge pages, are untouched. The drop's effect on
// resident memory is measured in BENCHMARKS.md (fine-tuning), not here.
func TestReleaseKeepsBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.safetensors")
	var ts []safetensors.NamedTensor
	want := map[string][]float32{}
	for i, n := range []int{1000, 300_000, 7} {
		v := make([]float32, n)
		for j := range v {
			v[j] = float32(i*1_000_000 + j)
		}
		name := string(rune('a' + i))
		want[name] = v
		ts = append(ts, safetensors.Float32Tensor(name, []int64{int64(n)}, v))
	}
	if err := safetensors.Write(path, ts, nil); err != nil {
		t.Fatal(err)
	}
	f, err := openSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.unmap() }()
	for _, name := range []string{"b", "a", "c"} {
		f.tensors[name].release()
		for n, v := range want {
			raw := f.tensors[n].bytes()
			for j, x := range v {
				if got := getFloat32(raw, j); got != x {
					t.Fatalf("after releasing %q: tensor %q element %d reads %v, want %v", name, n, j, got, x)
				}
			}
		}
	}
}
