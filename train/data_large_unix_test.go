//go:build unix

package train

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/npy"
)

// A data set larger than this machine's RAM opens and serves batches from
// anywhere in it: a 64 GiB sparse .npy file (holes read as zeros) is
// mapped, not read, and its digest is the sampled kind.
func TestDataLargerThanRAM(t *testing.T) {
	if testing.Short() {
		t.Skip("pages in the sampled digest's 18 MiB of a sparse file: seconds")
	}
	const samples, width = 1 << 32, 4 // float32 [2^32, 4]: 64 GiB
	dir := t.TempDir()
	dict := fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", samples, width)
	pad := 64 - (10+len(dict)+1)%64
	header := npy.Magic + "\x01\x00" + string([]byte{byte(len(dict) + pad + 1), 0}) + dict + strings.Repeat(" ", pad) + "\n"
	if (len(header))%64 != 0 {
		t.Fatalf("header of %d bytes", len(header))
	}
	path := filepath.Join(dir, "x.npy")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(header)
	// The last sample holds 1, 2, 3, 4.
	f.WriteAt(f32le(1, 2, 3, 4), int64(len(header))+int64(samples-1)*width*4)
	if err := f.Close(); err != nil {
		t.Skipf("cannot write a sparse 64 GiB file here: %v", err)
	}
	d, err := OpenData(dir, []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Len() != samples {
		t.Fatalf("Len %d", d.Len())
	}
	batch, next, err := d.Next(Position{Index: samples - 1}, 2)
	if err != nil {
		t.Fatal(err)
	}
	got := batch["x"].Value().([][]float32)
	if fmt.Sprint(got) != "[[1 2 3 4] [0 0 0 0]]" || next != (Position{Epoch: 1, Index: 1}) {
		t.Errorf("last sample and the wrap to the first: %v, next %+v", got, next)
	}
	if dg := d.Digest(); !strings.HasPrefix(dg, "sha256-sampled:") {
		t.Errorf("digest %q of a 64 GiB data set is not sampled", dg)
	}
}

func f32le(v ...float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, f := range v {
		u := math.Float32bits(f)
		b = append(b, byte(u), byte(u>>8), byte(u>>16), byte(u>>24))
	}
	return b
}
