package safetensors

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"unicode/utf8"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/precision"
)

// NamedTensor is one tensor for Write: its name, the dtype written, its
// shape, and its values in exactly one of Data and Float32.
type NamedTensor struct {
	Name  string
	DType DType
	Shape []int64
	// Data is the tensor's bytes as the file holds them: little-endian
	// elements of DType, row-major, element count × DType.Size() bytes.
	Data []byte
	// Float32 holds the values when they are float32 on the host; they are
	// written as F32, or converted while writing to BF16 or F16 (round to
	// nearest, ties to even: package precision), so no second copy of the
	// tensor is made.
	Float32 []float32
}

// Float32Tensor is a float32 tensor, written as F32.
func Float32Tensor(name string, shape []int64, v []float32) NamedTensor {
	return NamedTensor{Name: name, DType: F32, Shape: shape, Float32: v}
}

// writeChunk bounds the bytes converted from Float32 at a time.
const writeChunk = 1 << 16

// Write writes tensors, in the order given, and metadata (the header's
// "__metadata__", omitted when nil) as a safetensors file at path:
// WriteContext without a deadline.
func Write(path string, tensors []NamedTensor, metadata map[string]string) error {
	return WriteContext(context.Background(), path, tensors, metadata)
}

// WriteContext writes a safetensors file (the format of the package
// comment, https://github.com/huggingface/safetensors#format): the 8-byte
// little-endian header length N, the JSON header padded with spaces so
// that N is a multiple of 8 (the data section then starts 8-byte aligned,
// as the reference writer arranges), then each tensor's bytes back to
// back in the order given. Every tensor is checked first (a known dtype,
// non-negative dimensions, its data the size its shape says, a unique
// name that is not "__metadata__", a header within MaxHeaderBytes): a bad
// one is an *errs.InputError naming it, and nothing is written.
//
// The file appears whole or not at all: it is written to a temporary file
// in path's directory, synced, and renamed over path; on any error or
// when ctx is cancelled the temporary file is removed.
func WriteContext(ctx context.Context, path string, tensors []NamedTensor, metadata map[string]string) error {
	head, err := encodeHeader(tensors, metadata)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = writeBody(ctx, f, head, tensors)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	syncDir(dir)
	return nil
}

// syncDir makes a rename durable where the system allows syncing a
// directory; where it does not, the file is still whole.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// writeBody writes the length, the header and every tensor's data.
func writeBody(ctx context.Context, f *os.File, head []byte, tensors []NamedTensor) error {
	w := bufio.NewWriterSize(f, 1<<20)
	if _, err := w.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(head)))); err != nil {
		return err
	}
	if _, err := w.Write(head); err != nil {
		return err
	}
	for i := range tensors {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := writeData(ctx, w, &tensors[i]); err != nil {
			return err
		}
	}
	return w.Flush()
}

// writeData writes one tensor's bytes, converting Float32 a chunk at a
// time.
func writeData(ctx context.Context, w *bufio.Writer, t *NamedTensor) error {
	if t.Float32 == nil {
		_, err := w.Write(t.Data)
		return err
	}
	size := t.DType.Size()
	buf := make([]byte, 0, writeChunk*size)
	for at := 0; at < len(t.Float32); at += writeChunk {
		if err := ctx.Err(); err != nil {
			return err
		}
		buf = buf[:0]
		for _, v := range t.Float32[at:min(at+writeChunk, len(t.Float32))] {
			switch t.DType {
			case F32:
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
			case BF16:
				buf = binary.LittleEndian.AppendUint16(buf, precision.BFloat16(v))
			case F16:
				buf = binary.LittleEndian.AppendUint16(buf, precision.Float16(v))
			}
		}
		if _, err := w.Write(buf); err != nil {
			return err
		}
	}
	return nil
}

// encodeHeader checks every tensor and returns the padded JSON header,
// entries in the tensors' order after "__metadata__".
func encodeHeader(tensors []NamedTensor, metadata map[string]string) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for k, v := range metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, &errs.InputError{Name: "__metadata__", Problem: "value", Expected: "valid UTF-8 keys and values", Got: strconv.Quote(k) + ": " + strconv.Quote(v)}
		}
	}
	if metadata != nil {
		b.WriteString(`"__metadata__":`)
		b.Write(jsonBytes(metadata))
	}
	seen := make(map[string]bool, len(tensors))
	var offset int64
	for i := range tensors {
		t := &tensors[i]
		n, err := checkTensor(t, seen)
		if err != nil {
			return nil, err
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.Write(jsonBytes(t.Name))
		b.WriteString(`:{"dtype":`)
		b.Write(jsonBytes(string(t.DType)))
		b.WriteString(`,"shape":[`)
		for j, d := range t.Shape {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatInt(d, 10))
		}
		fmt.Fprintf(&b, `],"data_offsets":[%d,%d]}`, offset, offset+n)
		offset += n
		if b.Len() > MaxHeaderBytes {
			return nil, &errs.InputError{Name: t.Name, Problem: "count", Expected: fmt.Sprintf("a header of at most %d bytes", MaxHeaderBytes), Got: fmt.Sprintf("more at tensor %d of %d", i+1, len(tensors))}
		}
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	if b.Len() > MaxHeaderBytes {
		return nil, &errs.InputError{Name: "header", Problem: "count", Expected: fmt.Sprintf("at most %d bytes", MaxHeaderBytes), Got: fmt.Sprint(b.Len())}
	}
	return b.Bytes(), nil
}

// checkTensor checks one tensor and returns its data's size in bytes.
func checkTensor(t *NamedTensor, seen map[string]bool) (int64, error) {
	bad := func(problem, expected, got string) error {
		return &errs.InputError{Name: t.Name, Problem: problem, Expected: expected, Got: got}
	}
	switch {
	case !utf8.ValidString(t.Name):
		return 0, bad("name", "valid UTF-8 (JSON text)", strconv.Quote(t.Name))
	case t.Name == "__metadata__":
		return 0, bad("name", "a tensor name other than __metadata__ (the header's metadata key)", t.Name)
	case seen[t.Name]:
		return 0, bad("name", "each tensor name once", "a second tensor named "+strconv.Quote(t.Name))
	case t.DType.Size() == 0:
		return 0, bad("dtype", fmt.Sprintf("one of %v", DTypes()), strconv.Quote(string(t.DType)))
	case t.Float32 != nil && t.Data != nil:
		return 0, bad("value", "exactly one of Data and Float32", "both")
	case t.Float32 != nil && t.DType != F32 && t.DType != BF16 && t.DType != F16:
		return 0, bad("dtype", "F32, BF16 or F16 for Float32 values", string(t.DType))
	}
	seen[t.Name] = true
	elems, err := elements(t.Shape, math.MaxInt64/8)
	if err != nil {
		return 0, bad("shape", "non-negative dimensions whose product fits in int64", fmt.Sprintf("%v: %v", t.Shape, err))
	}
	have := int64(len(t.Data))
	if t.Float32 != nil {
		have = int64(len(t.Float32))
		if have != elems {
			return 0, bad("shape", fmt.Sprintf("%d float32 values for shape %v", elems, t.Shape), fmt.Sprint(have))
		}
	} else if want := elems * int64(t.DType.Size()); have != want {
		return 0, bad("shape", fmt.Sprintf("%d bytes for %s%v", want, t.DType, t.Shape), fmt.Sprintf("%d bytes", have))
	}
	return elems * int64(t.DType.Size()), nil
}

// jsonBytes encodes a string or a string map as JSON without escaping
// <, > and & (the header is not HTML).
func jsonBytes(v any) []byte {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	e.Encode(v) // a string or map[string]string always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
