package train

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"strings"

	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/npy"
)

// npyLayout is where a .npy file keeps its samples: the element type, the
// dimensions of one sample (the file's shape without its first axis), and
// the byte range of the data. Training reads samples straight out of a
// memory-mapped file, so only layouts whose samples are contiguous are
// accepted: C order (or one dimension) and a fixed-width numeric dtype.
type npyLayout struct {
	DType     ir.DType
	Samples   int   // first axis
	Dims      []int // per-sample dimensions
	BigEndian bool
	Descr     string
	Shape     []int
	// DataOffset is the first data byte; SampleBytes the bytes of one sample.
	DataOffset  int64
	SampleBytes int64
}

// npyDTypes maps the NumPy kind and byte size of a descr to an ir dtype.
// 'V2' is bfloat16 as ml_dtypes saves it (see package npy's comment).
var npyDTypes = map[string]ir.DType{
	"b1": ir.Bool, "i1": ir.Int8, "i2": ir.Int16, "i4": ir.Int32, "i8": ir.Int64,
	"u1": ir.Uint8, "u2": ir.Uint16, "u4": ir.Uint32, "u8": ir.Uint64,
	"f2": ir.Float16, "f4": ir.Float32, "f8": ir.Float64, "V2": ir.BFloat16,
	"c8": ir.Complex64, "c16": ir.Complex128,
}

// countingReader counts the bytes read through it, which is how the header
// reader learns where the data starts.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// readNpyLayout parses the header of a .npy file of size bytes read from r
// (positioned at the file's first byte) and checks that the data the header
// promises is exactly what the file holds. It allocates at most the header
// (bounded by npy.MaxHeaderLen and by size); nothing proportional to the
// shape. Errors wrap errs.ErrInvalidInput and, for a malformed file,
// npy.ErrFormat.
func readNpyLayout(r io.Reader, size int64) (*npyLayout, error) {
	r = io.LimitReader(r, size)
	pre, err := checkHeaderLen(r, size)
	if err != nil {
		return nil, err
	}
	cr := &countingReader{r: io.MultiReader(bytes.NewReader(pre), r)}
	h, err := npy.ReadHeader(cr)
	if err != nil {
		return nil, asInput(err)
	}
	l := &npyLayout{Descr: h.Descr, Shape: h.Shape, DataOffset: cr.n}
	d := h.Descr
	switch {
	case strings.HasPrefix(d, ">"):
		l.BigEndian = true
		d = d[1:]
	case strings.HasPrefix(d, "<"), strings.HasPrefix(d, "|"):
		d = d[1:]
	}
	dt, ok := npyDTypes[d]
	if !ok {
		return nil, invalidData("dtype %q is not a fixed-width number type (want bool, int8-64, uint8-64, float16/32/64, "+
			"bfloat16 saved by ml_dtypes as '<V2', complex64/128)", h.Descr)
	}
	if dt.Size() == 1 {
		l.BigEndian = false
	}
	l.DType = dt
	if len(h.Shape) == 0 {
		return nil, invalidData("shape () is a scalar: the first axis must be the sample axis")
	}
	if h.FortranOrder && len(h.Shape) > 1 {
		return nil, invalidData("shape %v is stored in Fortran order, so a sample is not contiguous in the file "+
			"(save it with np.ascontiguousarray)", h.Shape)
	}
	l.Samples, l.Dims = h.Shape[0], append([]int{}, h.Shape[1:]...)
	// ReadHeader bounds the element count to 2^53; the bytes then fit an
	// int64 for every element size here (at most 16).
	per := int64(dt.Size())
	for _, x := range l.Dims {
		per *= int64(x)
	}
	l.SampleBytes = per
	elems := int64(1)
	for _, x := range h.Shape {
		elems *= int64(x)
	}
	if want := l.DataOffset + elems*int64(dt.Size()); want != size {
		return nil, invalidData("shape %v of %s needs %d data bytes after the %d-byte header: the file has %d (truncated or trailing bytes)",
			h.Shape, h.Descr, elems*int64(dt.Size()), l.DataOffset, size-l.DataOffset)
	}
	return l, nil
}

// checkHeaderLen reads the preamble (magic, version, header length) and
// refuses a header length beyond the file's size before npy.ReadHeader
// allocates a buffer of that length. It returns the bytes it read.
func checkHeaderLen(r io.Reader, size int64) ([]byte, error) {
	pre := make([]byte, 12)
	n, _ := io.ReadFull(r, pre)
	pre = pre[:n]
	if n < 10 || string(pre[:6]) != npy.Magic {
		return pre, nil // ReadHeader names the problem
	}
	hlen, fixed := int64(binary.LittleEndian.Uint16(pre[8:10])), int64(10)
	if pre[6] >= 2 {
		if n < 12 {
			return pre, nil
		}
		hlen, fixed = int64(binary.LittleEndian.Uint32(pre[8:12])), 12
	}
	if hlen > size-fixed {
		return nil, invalidData("header length %d runs past the end of the %d-byte file", hlen, size)
	}
	return pre, nil
}

// invalidData returns an error wrapping errs.ErrInvalidInput and npy.ErrFormat.
func invalidData(format string, args ...any) error {
	return fmt.Errorf("%w", asInput(fmt.Errorf(format, args...), npy.ErrFormat))
}
