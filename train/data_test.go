package train

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/npy"
)

// writeNpy writes data (a Go slice) of the given shape to DIR/NAME.npy.
func writeNpy(t *testing.T, dir, name string, shape []int, data any) {
	t.Helper()
	if err := npy.WriteFile(context.Background(), filepath.Join(dir, name+".npy"), &npy.Array{Shape: shape, Data: data}, nil); err != nil {
		t.Fatal(err)
	}
}

// sampleData writes a data set of n samples: x float32 [n,2] with sample i
// = (i, i+0.5), y int64 [n] = 100+i, z bfloat16 [n,1] = i (exact in
// bfloat16 for i < 256). Every value names its sample.
func sampleData(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	x := make([]float32, 2*n)
	y := make([]int64, n)
	z := make([]ir.BFloat16Value, n)
	for i := 0; i < n; i++ {
		x[2*i], x[2*i+1] = float32(i), float32(i)+0.5
		y[i] = int64(100 + i)
		z[i] = ir.BFloat16Value(bf16bits(float32(i)))
	}
	writeNpy(t, dir, "x", []int{n, 2}, x)
	writeNpy(t, dir, "y", []int{n}, y)
	writeNpy(t, dir, "z", []int{n, 1}, z)
	return dir
}

// bf16bits truncates a float32 to bfloat16 bits (exact for the small
// integers the tests use).
func bf16bits(f float32) uint16 {
	return uint16(math.Float32bits(f) >> 16)
}

// samplesOf recovers the sample indices of a batch from its x, y and z
// tensors, failing when the three disagree.
func samplesOf(t *testing.T, batch map[string]*ir.Tensor) []int {
	t.Helper()
	x := batch["x"].Value().([][]float32)
	y := batch["y"].Value().([]int64)
	z := batch["z"].Value().([][]ir.BFloat16Value)
	out := make([]int, len(y))
	for i := range y {
		s := int(y[i] - 100)
		if x[i][0] != float32(s) || x[i][1] != float32(s)+0.5 || uint16(z[i][0]) != bf16bits(float32(s)) {
			t.Fatalf("batch row %d mixes samples: x %v y %d z %v", i, x[i], y[i], z[i])
		}
		out[i] = s
	}
	return out
}

// Without shuffle, step i (from 1) takes samples (i-1)*b ... (i-1)*b+b-1
// modulo N, in order, wrapping across the end.
func TestDataOrderWithoutShuffle(t *testing.T) {
	dir := sampleData(t, 5)
	d, err := OpenData(dir, []string{"x", "y", "z"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Len() != 5 {
		t.Fatalf("Len %d, want 5", d.Len())
	}
	for _, c := range []struct {
		b    int
		want [][]int
	}{
		{3, [][]int{{0, 1, 2}, {3, 4, 0}, {1, 2, 3}, {4, 0, 1}, {2, 3, 4}}},
		{5, [][]int{{0, 1, 2, 3, 4}, {0, 1, 2, 3, 4}}},
		{7, [][]int{{0, 1, 2, 3, 4, 0, 1}, {2, 3, 4, 0, 1, 2, 3}}},
		{1, [][]int{{0}, {1}, {2}, {3}, {4}, {0}}},
	} {
		p := d.Start(false, 0)
		for step, want := range c.want {
			var batch map[string]*ir.Tensor
			batch, p, err = d.Next(p, c.b)
			if err != nil {
				t.Fatal(err)
			}
			if got := samplesOf(t, batch); !reflect.DeepEqual(got, want) {
				t.Errorf("batch %d step %d: samples %v, want %v", c.b, step+1, got, want)
			}
			// The formula of the issue, independently.
			for k := range want {
				if want[k] != (step*c.b+k)%5 {
					t.Fatalf("table error at batch %d step %d", c.b, step+1)
				}
			}
		}
		if wantEpoch := len(c.want) * c.b / 5; p.Epoch != wantEpoch {
			t.Errorf("batch %d: epoch %d after %d steps, want %d", c.b, p.Epoch, len(c.want), wantEpoch)
		}
	}
}

// The shuffle order is the documented generator: a Python transcription
// of Permutation's doc comment (SplitMix64, Fisher–Yates from the end,
// Lemire's bounded draw) gave these permutations.
func TestPermutationReference(t *testing.T) {
	for _, c := range []struct {
		n     int
		seed  int64
		epoch int
		want  []int
	}{
		{10, 42, 0, []int{5, 9, 6, 4, 1, 3, 0, 8, 2, 7}},
		{10, 42, 1, []int{4, 6, 8, 2, 3, 5, 0, 1, 7, 9}},
		{7, -3, 0, []int{0, 4, 5, 1, 2, 3, 6}},
	} {
		if got := Permutation(c.n, c.seed, c.epoch); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Permutation(%d, %d, %d) = %v, want %v", c.n, c.seed, c.epoch, got, c.want)
		}
	}
	// SplitMix64 from state 0: the first outputs of the reference
	// splitmix64.c (https://prng.di.unimi.it/splitmix64.c).
	r := splitMix64{}
	for i, want := range []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f} {
		if got := r.next(); got != want {
			t.Errorf("splitmix64 output %d = %#x, want %#x", i, got, want)
		}
	}
}

// A shuffled pass is a permutation per epoch, the same for the same seed,
// and a Position saved mid-way (through JSON, as a checkpoint stores it)
// continues exactly.
func TestDataShuffleResume(t *testing.T) {
	const n, b, steps = 10, 4, 9
	dir := sampleData(t, n)
	run := func(seed int64) ([][]int, []Position) {
		d, err := OpenData(dir, []string{"y", "x", "z"})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		var got [][]int
		var pos []Position
		p := d.Start(true, seed)
		for i := 0; i < steps; i++ {
			batch, next, err := d.Next(p, b)
			if err != nil {
				t.Fatal(err)
			}
			got, pos, p = append(got, samplesOf(t, batch)), append(pos, next), next
		}
		return got, pos
	}
	a, pos := run(42)
	again, _ := run(42)
	if !reflect.DeepEqual(a, again) {
		t.Fatalf("same seed, different order:\n%v\n%v", a, again)
	}
	other, _ := run(43)
	if reflect.DeepEqual(a, other) {
		t.Fatalf("seeds 42 and 43 draw the same order %v", a)
	}
	var flat []int
	for _, s := range a {
		flat = append(flat, s...)
	}
	var want []int
	for e := 0; e*n < steps*b; e++ {
		want = append(want, Permutation(n, 42, e)...)
	}
	if !reflect.DeepEqual(flat, want[:steps*b]) {
		t.Fatalf("shuffled samples %v, want the epoch permutations %v", flat, want[:steps*b])
	}
	// Resume from every saved position in a fresh Dataset.
	for k := 0; k < steps-1; k++ {
		js, err := json.Marshal(pos[k])
		if err != nil {
			t.Fatal(err)
		}
		var p Position
		if err := json.Unmarshal(js, &p); err != nil || p != pos[k] {
			t.Fatalf("position %+v does not survive JSON (%s): %+v %v", pos[k], js, p, err)
		}
		d, err := OpenData(dir, []string{"x", "y", "z"})
		if err != nil {
			t.Fatal(err)
		}
		for i := k + 1; i < steps; i++ {
			batch, next, err := d.Next(p, b)
			if err != nil {
				t.Fatal(err)
			}
			if got := samplesOf(t, batch); !reflect.DeepEqual(got, a[i]) {
				t.Errorf("resumed after step %d: step %d took %v, want %v", k+1, i+1, got, a[i])
			}
			p = next
		}
		d.Close()
	}
}

func TestOpenDataErrors(t *testing.T) {
	counts := t.TempDir()
	writeNpy(t, counts, "image", []int{4, 2}, make([]float32, 8))
	writeNpy(t, counts, "labels", []int{3}, make([]int64, 3))
	notNpy := t.TempDir()
	writeNpy(t, notNpy, "x", []int{2}, make([]float32, 2))
	os.WriteFile(filepath.Join(notNpy, "y.npy"), []byte("label,1\n"), 0o644)
	trunc := t.TempDir()
	writeNpy(t, trunc, "x", []int{4, 2}, make([]float32, 8))
	b, _ := os.ReadFile(filepath.Join(trunc, "x.npy"))
	os.WriteFile(filepath.Join(trunc, "x.npy"), b[:len(b)-3], 0o644)
	noSamples := t.TempDir()
	writeNpy(t, noSamples, "x", []int{0, 3}, []float32{})
	scalar := t.TempDir()
	writeNpy(t, scalar, "x", []int{}, []float32{1})
	str := t.TempDir()
	writeNpy(t, str, "x", []int{1}, []string{"a"})
	fortran := t.TempDir()
	copyFile(t, filepath.Join("..", "npy", "testdata", "f8_fortran_be.npy"), filepath.Join(fortran, "x.npy"))
	for _, c := range []struct {
		name, dir string
		names     []string
		want      []string // substrings of the message
	}{
		{"counts", counts, []string{"image", "labels"}, []string{"image.npy: 4", "labels.npy: 3", "different sample counts"}},
		{"empty dir", t.TempDir(), []string{"x"}, []string{"holds no .npy files"}},
		{"missing dir", filepath.Join(t.TempDir(), "nope"), []string{"x"}, []string{"data directory"}},
		{"missing file", counts, []string{"image", "tokens"}, []string{`"tokens"`, "tokens.npy does not exist"}},
		{"not npy", notNpy, []string{"x", "y"}, []string{"y.npy", "not a .npy file"}},
		{"truncated", trunc, []string{"x"}, []string{"x.npy", "needs 32 data bytes", "has 29"}},
		{"no samples", noSamples, []string{"x"}, []string{"hold no samples"}},
		{"scalar", scalar, []string{"x"}, []string{"scalar"}},
		{"strings", str, []string{"x"}, []string{`"<U1"`, "not a fixed-width number type"}},
		{"fortran", fortran, []string{"x"}, []string{"Fortran order"}},
		{"no names", counts, nil, []string{"no data names"}},
		{"path name", counts, []string{"../x"}, []string{"not a plain file name"}},
		{"twice", counts, []string{"image", "image"}, []string{"listed twice"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, err := OpenData(c.dir, c.names)
			if err == nil {
				d.Close()
				t.Fatal("no error")
			}
			if !errors.Is(err, errs.ErrInvalidInput) {
				t.Errorf("%v does not wrap ErrInvalidInput", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Files NumPy wrote (npy/testdata, values listed in npy/npy_test.go): each
// read as a one-file data set gives the values package npy reads, in
// little-endian tensors, for every dtype a data file may have.
func TestDataDTypes(t *testing.T) {
	for _, c := range []struct {
		file string
		dt   ir.DType
		dims []int // per sample
	}{
		{"f4_c.npy", ir.Float32, []int{3}},
		{"i1.npy", ir.Int8, nil},
		{"u1.npy", ir.Uint8, nil},
		{"i2_be.npy", ir.Int16, nil},
		{"u2.npy", ir.Uint16, nil},
		{"u4.npy", ir.Uint32, nil},
		{"u8_be.npy", ir.Uint64, nil},
		{"i8_v2.npy", ir.Int64, nil},
		{"b1.npy", ir.Bool, []int{2}},
		{"f2.npy", ir.Float16, nil},
		{"f4_v3.npy", ir.Float32, nil},
		{"c8.npy", ir.Complex64, nil},
		{"c16_be.npy", ir.Complex128, nil},
		{"bf16_ml_dtypes.npy", ir.BFloat16, []int{4}},
		{"bf16_ml_dtypes_be.npy", ir.BFloat16, []int{4}},
	} {
		t.Run(c.file, func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join("..", "npy", "testdata", c.file)
			copyFile(t, src, filepath.Join(dir, "v.npy"))
			d, err := OpenData(dir, []string{"v"})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			dt, dims, ok := d.Spec("v")
			if !ok || dt != c.dt || len(dims) != len(c.dims) || (len(dims) > 0 && !reflect.DeepEqual(dims, c.dims)) {
				t.Fatalf("Spec = %s %v %v, want %s %v", dt, dims, ok, c.dt, c.dims)
			}
			batch, _, err := d.Next(d.Start(false, 0), d.Len())
			if err != nil {
				t.Fatal(err)
			}
			a, err := npy.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := a.ToIR()
			if err != nil {
				t.Fatal(err)
			}
			got, _ := ir.TensorBytes(batch["v"])
			want, _ := ir.TensorBytes(ref)
			if batch["v"].DType() != ref.DType() || !reflect.DeepEqual(batch["v"].Shape().Dimensions, ref.Shape().Dimensions) || !bytes.Equal(got, want) {
				t.Errorf("read %s %x, package npy reads %s %x", batch["v"].Shape(), got, ref.Shape(), want)
			}
		})
	}
	if _, _, ok := (&Dataset{}).Spec("nope"); ok {
		t.Error("Spec of an unknown name is ok")
	}
}

// A Position outside the data set, a batch of 0, and a closed data set are
// errors, not panics.
func TestNextErrors(t *testing.T) {
	d, err := OpenData(sampleData(t, 3), []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		p Position
		b int
	}{{Position{Index: 3}, 1}, {Position{Index: -1}, 1}, {Position{Epoch: -1}, 1}, {Position{}, 0}, {Position{}, 1 << 50}} {
		if _, _, err := d.Next(c.p, c.b); !errors.Is(err, errs.ErrInvalidInput) {
			t.Errorf("Next(%+v, %d): %v, want ErrInvalidInput", c.p, c.b, err)
		}
	}
	d.Close()
	if _, _, err := d.Next(Position{}, 1); !errors.Is(err, errs.ErrClosed) {
		t.Errorf("Next after Close: %v, want ErrClosed", err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// Digest covers names, sizes, dtype/shape and content: changing any one
// changes it; the same data in another directory has the same digest.
func TestDataDigest(t *testing.T) {
	digest := func(dir string, names ...string) string {
		d, err := OpenData(dir, names)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		return d.Digest()
	}
	base := sampleData(t, 4)
	same := sampleData(t, 4)
	ref := digest(base, "x", "y")
	if !strings.HasPrefix(ref, "sha256:") || len(ref) != len("sha256:")+64 {
		t.Fatalf("digest %q", ref)
	}
	if got := digest(same, "y", "x"); got != ref {
		t.Errorf("same data, other directory and name order: %s != %s", got, ref)
	}
	content := sampleData(t, 4)
	writeNpy(t, content, "y", []int{4}, []int64{100, 101, 102, 104})
	dtype := sampleData(t, 4)
	writeNpy(t, dtype, "y", []int{4}, []int32{100, 101, 102, 103})
	shape := sampleData(t, 4)
	writeNpy(t, shape, "x", []int{4, 2, 1}, []float32{0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5})
	for name, got := range map[string]string{
		"content":    digest(content, "x", "y"),
		"dtype":      digest(dtype, "x", "y"),
		"shape":      digest(shape, "x", "y"),
		"names":      digest(base, "x", "z"),
		"more files": digest(base, "x", "y", "z"),
	} {
		if got == ref {
			t.Errorf("changing the %s leaves the digest %s", name, ref)
		}
	}
}

// Sampled hashing reads the edges and blocks it documents: a change at
// the start of the data is seen.
func TestHashSampled(t *testing.T) {
	data := make([]byte, 8<<20)
	h1, h2 := sha256.New(), sha256.New()
	hashSampled(h1, data)
	data[0] = 1
	hashSampled(h2, data)
	if bytes.Equal(h1.Sum(nil), h2.Sum(nil)) {
		t.Error("a changed first byte leaves the sampled hash")
	}
}

// FuzzReadNpyLayout: any bytes give a layout consistent with the file size
// or an error wrapping ErrInvalidInput, never a panic, and the reader
// allocates a bounded amount whatever shape the header claims.
func FuzzReadNpyLayout(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("..", "npy", "testdata", "*.npy"))
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(npy.Magic + "\x01\x00\x46\x00{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000, 1000), }"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		l, err := readNpyLayout(bytes.NewReader(b), int64(len(b)))
		runtime.ReadMemStats(&after)
		// The header (at most the file) plus its parse: a few times the
		// input and a constant, never the claimed data size.
		if grew := after.TotalAlloc - before.TotalAlloc; grew > uint64(64<<10+32*len(b)) {
			t.Fatalf("reading a %d-byte file allocated %d bytes", len(b), grew)
		}
		if err != nil {
			if !errors.Is(err, errs.ErrInvalidInput) {
				t.Fatalf("error %v does not wrap ErrInvalidInput", err)
			}
			return
		}
		if l.DataOffset+int64(l.Samples)*l.SampleBytes != int64(len(b)) || l.Samples < 0 {
			t.Fatalf("layout %+v does not match the %d-byte file", l, len(b))
		}
	})
}

// Next is safe for concurrent use, also against a concurrent Close (which
// waits for readers still copying out of the mapping). Run with -race.
func TestDataConcurrent(t *testing.T) {
	const n, b, steps = 17, 5, 20
	d, err := OpenData(sampleData(t, n), []string{"x", "y", "z"})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		seed int64
		got  []int
		err  error
	}
	done := make(chan result, 8)
	for g := 0; g < 8; g++ {
		go func(seed int64) {
			p := d.Start(true, seed)
			r := result{seed: seed}
			for i := 0; i < steps && r.err == nil; i++ {
				var batch map[string]*ir.Tensor
				batch, p, r.err = d.Next(p, b)
				if r.err == nil {
					y := batch["y"].Value().([]int64)
					for _, v := range y {
						r.got = append(r.got, int(v-100))
					}
				}
			}
			done <- r
		}(int64(g % 2))
	}
	for g := 0; g < 8; g++ {
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		var want []int
		for e := 0; len(want) < steps*b; e++ {
			want = append(want, Permutation(n, r.seed, e)...)
		}
		if !reflect.DeepEqual(r.got, want[:steps*b]) {
			t.Errorf("seed %d: drew %v, want %v", r.seed, r.got, want[:steps*b])
		}
	}
	d.Digest()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}
