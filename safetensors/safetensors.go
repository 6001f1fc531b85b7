// Package safetensors reads and writes safetensors files, the weight format
// of Hugging Face checkpoints. Its reader decodes and checks a file's header
// with one set of rules for every reader in the module (llm's weight loader
// and plan's checkpoint reader): the header length, the JSON, each tensor's
// dtype, shape and byte range, and the byte ranges' layout; it never reads
// tensor data. WriteContext writes a whole file atomically.
//
// The format (https://huggingface.co/docs/safetensors/index#format): an
// 8-byte little-endian header length N, N bytes of JSON mapping each tensor
// name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative
// to the byte after the header) plus an optional "__metadata__" map of
// strings, then the data. The rules are the reference implementation's
// (huggingface/safetensors, read_metadata and Metadata::validate), so a
// file it reads is read here and one it refuses is refused:
//
//   - N is at most MaxHeaderBytes and fits the file;
//   - the JSON is an object; "__metadata__", when present, maps strings to
//     strings; every other entry has a known dtype, a shape of
//     non-negative dimensions and two data offsets;
//   - a tensor's bytes are its element count times its dtype's size, with
//     no arithmetic overflow;
//   - sorted by offset, the tensors tile the data section exactly: the
//     first begins at 0, each begins where the one before ends (no overlap,
//     no hole) and the last ends at the end of the file.
//
// Which dtypes a reader can use is its own policy, not the parser's: Parse
// accepts every byte-sized dtype of the format (DTypes), and a reader
// refuses the tensors it needs in a dtype it cannot convert (llm's weight
// loader reads F32, F16 and BF16; plan counts every dtype).
package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"

	"github.com/tensorbridge/tensorbridge/errs"
)

// MaxHeaderBytes bounds the JSON header: the reference implementation's
// MAX_HEADER_SIZE (100,000,000 bytes). Every figure is also checked
// against the file's real size before anything is allocated from it.
const MaxHeaderBytes = 100_000_000

// DType is a safetensors element type, as the header spells it.
type DType string

// The byte-sized dtypes of the format (Dtype in the reference's
// safetensors/src/tensor.rs). The sub-byte ones (F4, F6_E2M3, F6_E3M2)
// and F8_E8M0 are not read: a header using them is refused as unknown.
const (
	BOOL   DType = "BOOL"
	U8     DType = "U8"
	I8     DType = "I8"
	F8E5M2 DType = "F8_E5M2"
	F8E4M3 DType = "F8_E4M3"
	I16    DType = "I16"
	U16    DType = "U16"
	F16    DType = "F16"
	BF16   DType = "BF16"
	I32    DType = "I32"
	U32    DType = "U32"
	F32    DType = "F32"
	I64    DType = "I64"
	U64    DType = "U64"
	F64    DType = "F64"
)

var dtypeSizes = map[DType]int{
	BOOL: 1, U8: 1, I8: 1, F8E5M2: 1, F8E4M3: 1, I16: 2, U16: 2, F16: 2, BF16: 2,
	I32: 4, U32: 4, F32: 4, I64: 8, U64: 8, F64: 8,
}

// Size is the bytes per element, or 0 for a dtype this package does not
// know.
func (d DType) Size() int { return dtypeSizes[d] }

// DTypes lists every dtype Parse accepts, sorted.
func DTypes() []DType {
	out := make([]DType, 0, len(dtypeSizes))
	for d := range dtypeSizes {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Tensor is one tensor's entry in a header.
type Tensor struct {
	Name     string
	DType    DType
	Shape    []int64
	Elements int64 // the product of Shape (1 for a scalar)
	// Begin and End are absolute byte offsets into the file:
	// [Begin, End) holds the tensor's data.
	Begin, End int64
}

// Bytes is the size of the tensor's data.
func (t *Tensor) Bytes() int64 { return t.End - t.Begin }

// Header is a checked safetensors header.
type Header struct {
	Tensors  map[string]*Tensor
	Metadata map[string]string // "__metadata__"; nil when absent
	// DataStart is the file offset of the data section (8 + N).
	DataStart int64
}

// ErrMalformed is matched (errors.Is) by every *HeaderError.
var ErrMalformed = errors.New("malformed safetensors header")

// HeaderError says why a file is not a valid safetensors file. It
// matches ErrMalformed and errs.ErrInvalidInput.
type HeaderError struct {
	File   string
	Tensor string // the tensor at fault; "" for the file as a whole
	// Problem says what is wrong, with the expected against the found.
	Problem string
}

func (e *HeaderError) Error() string {
	if e.Tensor == "" {
		return fmt.Sprintf("%s: %v: %s", e.File, ErrMalformed, e.Problem)
	}
	return fmt.Sprintf("%s: %v: tensor %q: %s", e.File, ErrMalformed, e.Tensor, e.Problem)
}

// Is makes a HeaderError match ErrMalformed and errs.ErrInvalidInput.
func (e *HeaderError) Is(target error) bool {
	return target == ErrMalformed || target == errs.ErrInvalidInput
}

func malformed(file, tensor, format string, a ...any) error {
	return &HeaderError{File: file, Tensor: tensor, Problem: fmt.Sprintf(format, a...)}
}

// Read opens path and decodes its header, reading only the header's
// bytes (at most 8 + MaxHeaderBytes), never the tensors.
func Read(path string) (*Header, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var n [8]byte
	if _, err := io.ReadFull(f, n[:]); err != nil {
		return nil, malformed(path, "", "%d bytes, shorter than the 8-byte header length", st.Size())
	}
	hl, err := headerLength(path, n[:], st.Size())
	if err != nil {
		return nil, err
	}
	head := make([]byte, 8+hl)
	copy(head, n[:])
	if _, err := io.ReadFull(f, head[8:]); err != nil {
		return nil, fmt.Errorf("%s: reading the %d-byte safetensors header: %w", path, hl, err)
	}
	return Parse(path, head, st.Size())
}

// headerLength reads N from the first 8 bytes and checks it against the
// limit and the file's size.
func headerLength(file string, first []byte, fileSize int64) (int64, error) {
	n := binary.LittleEndian.Uint64(first)
	if n > MaxHeaderBytes {
		return 0, malformed(file, "", "header length %d is over the %d-byte limit (not a safetensors file?)", n, MaxHeaderBytes)
	}
	if fileSize < 8 || n > uint64(fileSize-8) {
		return 0, malformed(file, "", "header length %d, but the file has only %d bytes after the length (truncated?)", n, max(fileSize-8, 0))
	}
	return int64(n), nil
}

// Parse decodes and checks the header of a file of fileSize bytes whose
// first bytes are head: at least the 8-byte length and the N bytes of JSON
// (a memory-mapped file can be given whole). file names the file in
// errors. Every error is a *HeaderError.
func Parse(file string, head []byte, fileSize int64) (*Header, error) {
	if fileSize < 8 || len(head) < 8 {
		return nil, malformed(file, "", "%d bytes, shorter than the 8-byte header length", fileSize)
	}
	n, err := headerLength(file, head[:8], fileSize)
	if err != nil {
		return nil, err
	}
	if int64(len(head)) < 8+n {
		return nil, malformed(file, "", "header of %d bytes, only %d given", n, len(head)-8)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(head[8:8+n], &raw); err != nil {
		return nil, malformed(file, "", "the header is not a JSON object: %v", err)
	}
	h := &Header{Tensors: make(map[string]*Tensor, len(raw)), DataStart: 8 + n}
	dataLen := fileSize - h.DataStart
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &h.Metadata); err != nil {
				return nil, malformed(file, "", "__metadata__ must map strings to strings: %v", err)
			}
			continue
		}
		t, err := parseTensor(file, name, msg, dataLen)
		if err != nil {
			return nil, err
		}
		t.Begin += h.DataStart
		t.End += h.DataStart
		h.Tensors[name] = t
	}
	if err := checkLayout(file, h, dataLen); err != nil {
		return nil, err
	}
	return h, nil
}

// parseTensor decodes one entry, with offsets relative to the data
// section of dataLen bytes.
func parseTensor(file, name string, msg json.RawMessage, dataLen int64) (*Tensor, error) {
	var e struct {
		DType       *string  `json:"dtype"`
		Shape       *[]int64 `json:"shape"`
		DataOffsets []int64  `json:"data_offsets"`
	}
	if err := json.Unmarshal(msg, &e); err != nil {
		return nil, malformed(file, name, "want {\"dtype\", \"shape\", \"data_offsets\"}: %v", err)
	}
	if e.DType == nil || e.Shape == nil {
		return nil, malformed(file, name, "want \"dtype\" and \"shape\", got %s", msg)
	}
	dt := DType(*e.DType)
	if dt.Size() == 0 {
		return nil, malformed(file, name, "dtype %q unknown (known: %v)", *e.DType, DTypes())
	}
	if len(e.DataOffsets) != 2 {
		return nil, malformed(file, name, "data_offsets has %d entries, want 2", len(e.DataOffsets))
	}
	b, en := e.DataOffsets[0], e.DataOffsets[1]
	if b < 0 || en < b || en > dataLen {
		return nil, malformed(file, name, "data_offsets [%d, %d] outside the %d data bytes (truncated file?)", b, en, dataLen)
	}
	elems, err := elements(*e.Shape, dataLen)
	if err != nil {
		return nil, malformed(file, name, "shape %v: %v", *e.Shape, err)
	}
	if want := elems * int64(dt.Size()); want != en-b {
		return nil, malformed(file, name, "%s%v is %d bytes, data_offsets [%d, %d] span %d", dt, *e.Shape, want, b, en, en-b)
	}
	return &Tensor{Name: name, DType: dt, Shape: *e.Shape, Elements: elems, Begin: b, End: en}, nil
}

// elements is the product of shape, refused when a dimension is negative
// or the product exceeds limit (then it cannot fit the data: this also
// keeps every later product free of overflow).
func elements(shape []int64, limit int64) (int64, error) {
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("dimension %d is negative", d)
		}
		if d == 0 {
			return 0, nil // an empty tensor, whatever the other dimensions
		}
	}
	n := int64(1)
	for _, d := range shape {
		if n > limit/d || n*d > math.MaxInt64/8 {
			return 0, fmt.Errorf("more elements than the %d data bytes hold", limit)
		}
		n *= d
	}
	return n, nil
}

// checkLayout checks that the tensors, sorted by offset, tile the data
// section exactly: no overlap, no hole, nothing after the last.
func checkLayout(file string, h *Header, dataLen int64) error {
	ts := make([]*Tensor, 0, len(h.Tensors))
	for _, t := range h.Tensors {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool {
		if ts[i].Begin != ts[j].Begin {
			return ts[i].Begin < ts[j].Begin
		}
		if ts[i].End != ts[j].End {
			return ts[i].End < ts[j].End
		}
		return ts[i].Name < ts[j].Name
	})
	at := h.DataStart
	for i, t := range ts {
		switch {
		case t.Begin < at:
			return malformed(file, t.Name, "data_offsets [%d, %d] overlap tensor %q, which ends at %d", t.Begin-h.DataStart, t.End-h.DataStart, ts[i-1].Name, at-h.DataStart)
		case t.Begin > at:
			return malformed(file, t.Name, "data_offsets begin at %d, leaving a hole after data offset %d (the tensors must tile the data section)", t.Begin-h.DataStart, at-h.DataStart)
		}
		at = t.End
	}
	if at != h.DataStart+dataLen {
		return malformed(file, "", "the tensors end at data offset %d, but the data section has %d bytes (truncated, or trailing bytes)", at-h.DataStart, dataLen)
	}
	return nil
}
