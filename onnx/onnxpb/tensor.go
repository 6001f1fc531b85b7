package onnxpb

import (
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/tensorbridge/tensorbridge/ir"
)

// maxElements bounds a tensor's element count so that byte counts (up to 16
// bytes per element) cannot overflow int64.
const maxElements = 1 << 58

// describe names a tensor in error messages.
func (t *Tensor) describe() string {
	if t.Name != "" {
		return fmt.Sprintf("tensor %q (%s %v)", t.Name, t.DataType, t.Dims)
	}
	return fmt.Sprintf("tensor (%s %v)", t.DataType, t.Dims)
}

func (t *Tensor) errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("onnxpb: %s: %s: %w", t.describe(), fmt.Sprintf(format, args...), sentinel)
}

// NumElements returns the product of Dims (1 for a scalar). Negative
// dimensions and products over 2^58 are errors.
func (t *Tensor) NumElements() (int64, error) {
	n := uint64(1)
	for i, d := range t.Dims {
		if d < 0 {
			return 0, t.errorf(ErrInvalidTensor, "dims[%d] is negative (%d)", i, d)
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > maxElements {
			return 0, t.errorf(ErrTooLarge, "dims multiply to more than 2^58 elements")
		}
		n = lo
	}
	return int64(n), nil
}

// IsExternal reports whether the payload lives in an external file.
func (t *Tensor) IsExternal() bool { return t.DataLocation == LocationExternal }

// ExternalRef is a tensor's parsed external_data entries.
type ExternalRef struct {
	Location string // path relative to the model's directory, '/'-separated
	Offset   int64  // byte offset in the file
	Length   int64  // byte count, or -1 for "to the end of the file"
	Checksum string // SHA-1 of the whole file as 40 hex digits, or ""
}

// External parses the external_data key/value list. Keys other than
// location, offset, length and checksum are ignored, as in the reference
// implementation.
func (t *Tensor) External() (ExternalRef, error) {
	r := ExternalRef{Length: -1}
	if !t.IsExternal() {
		return r, t.errorf(ErrExternalData, "data_location is %s, not EXTERNAL", t.DataLocation)
	}
	for _, kv := range t.ExternalData {
		switch kv.Key {
		case "location":
			r.Location = kv.Value
		case "offset", "length":
			v, err := strconv.ParseInt(strings.TrimSpace(kv.Value), 10, 64)
			if err != nil || v < 0 {
				return r, t.errorf(ErrExternalData, "external_data %s %q is not a non-negative integer", kv.Key, kv.Value)
			}
			if kv.Key == "offset" {
				r.Offset = v
			} else {
				r.Length = v
			}
		case "checksum":
			r.Checksum = kv.Value
		}
	}
	if r.Location == "" {
		return r, t.errorf(ErrExternalData, "external_data has no location")
	}
	return r, nil
}

// readExternal returns the external payload bytes.
func (t *Tensor) readExternal() ([]byte, error) {
	r, err := t.External()
	if err != nil {
		return nil, err
	}
	rel := filepath.FromSlash(r.Location)
	if !filepath.IsLocal(rel) {
		return nil, t.errorf(ErrExternalData,
			"external data location %q is absolute or leaves the model directory", r.Location)
	}
	path := filepath.Join(t.BaseDir, rel)
	f, err := os.Open(path)
	if err != nil {
		return nil, t.errorf(ErrExternalData, "cannot open external data file %s: %v", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, t.errorf(ErrExternalData, "external data file %s: %v", path, err)
	}
	size := st.Size()
	if r.Offset > size {
		return nil, t.errorf(ErrExternalData, "external data offset %d is past the end of %s (%d bytes)",
			r.Offset, path, size)
	}
	length := r.Length
	if length < 0 {
		length = size - r.Offset
	}
	if length > size-r.Offset {
		return nil, t.errorf(ErrExternalData, "external data offset %d + length %d runs past the end of %s (%d bytes)",
			r.Offset, length, path, size)
	}
	if r.Checksum != "" {
		if err := verifySHA1(f, path, size, st.ModTime().UnixNano(), r.Checksum); err != nil {
			return nil, t.errorf(ErrExternalData, "%v", err)
		}
	}
	buf := make([]byte, length)
	if _, err := f.ReadAt(buf, r.Offset); err != nil && !(err == io.EOF && length == 0) {
		return nil, t.errorf(ErrExternalData, "reading %d bytes at offset %d of %s: %v", length, r.Offset, path, err)
	}
	return buf, nil
}

// checksums caches verified SHA-1 digests of external files, keyed by
// path, size and modification time, so a file shared by many tensors is
// hashed once.
var checksums sync.Map

func verifySHA1(f *os.File, path string, size, mtime int64, want string) error {
	want = strings.ToLower(strings.TrimSpace(want))
	if len(want) != 2*sha1.Size {
		return fmt.Errorf("external data checksum %q is not a 40-hex-digit SHA-1 digest", want)
	}
	if _, err := hex.DecodeString(want); err != nil {
		return fmt.Errorf("external data checksum %q is not a 40-hex-digit SHA-1 digest", want)
	}
	key := fmt.Sprintf("%s\x00%d\x00%d", path, size, mtime)
	got, ok := checksums.Load(key)
	if !ok {
		h := sha1.New()
		if _, err := io.Copy(h, io.NewSectionReader(f, 0, size)); err != nil {
			return fmt.Errorf("hashing %s: %v", path, err)
		}
		got = hex.EncodeToString(h.Sum(nil))
		checksums.Store(key, got)
	}
	if got != want {
		return fmt.Errorf("external data file %s has SHA-1 %s, external_data checksum says %s", path, got, want)
	}
	return nil
}

// rawBytes returns the payload as little-endian bytes when it is stored in
// raw_data or an external file; ok is false when a typed field holds it.
func (t *Tensor) rawBytes() (b []byte, ok bool, err error) {
	if t.IsExternal() {
		if t.RawData != nil {
			return nil, false, t.errorf(ErrInvalidTensor, "data_location is EXTERNAL but raw_data is also set")
		}
		b, err = t.readExternal()
		return b, true, err
	}
	if t.DataLocation != LocationDefault {
		return nil, false, t.errorf(ErrInvalidTensor, "unknown data_location %d", int32(t.DataLocation))
	}
	return t.RawData, t.RawData != nil, nil
}

// typedField names the typed payload field onnx.proto prescribes for a
// data type.
func typedField(dt DataType) string {
	switch dt {
	case Float, Complex64:
		return "float_data"
	case Int32, Int16, Int8, Uint16, Uint8, Bool, Float16, BFloat16,
		Float8E4M3FN, Float8E4M3FNUZ, Float8E5M2, Float8E5M2FNUZ, Float8E8M0,
		Int4, Uint4, Float4E2M1, Int2, Uint2:
		return "int32_data"
	case Int64:
		return "int64_data"
	case Double, Complex128:
		return "double_data"
	case Uint32, Uint64:
		return "uint64_data"
	case String:
		return "string_data"
	}
	return ""
}

// fieldLens lists the typed payload fields that are set.
func (t *Tensor) fieldLens() map[string]int {
	m := map[string]int{}
	for name, n := range map[string]int{
		"float_data": len(t.FloatData), "int32_data": len(t.Int32Data), "string_data": len(t.StringData),
		"int64_data": len(t.Int64Data), "double_data": len(t.DoubleData), "uint64_data": len(t.Uint64Data),
	} {
		if n > 0 {
			m[name] = n
		}
	}
	return m
}

// rawLen is the raw_data byte count for n elements of dt.
func rawLen(dt DataType, n int64) int64 { return (n*int64(dt.Bits()) + 7) / 8 }

// typedLen is the number of typed-field entries for n elements of dt.
func typedLen(dt DataType, n int64) int64 {
	switch dt.Bits() {
	case 4:
		return (n + 1) / 2
	case 2:
		return (n + 3) / 4
	}
	if dt == Complex64 || dt == Complex128 {
		return 2 * n
	}
	return n
}

// Values returns the tensor's elements, row-major, as a Go slice:
//
//	FLOAT []float32, DOUBLE []float64, INT8..INT64 []int8..[]int64,
//	UINT8..UINT64 []uint8..[]uint64, BOOL []bool,
//	FLOAT16 []ir.Float16Value, BFLOAT16 []ir.BFloat16Value,
//	COMPLEX64 []complex64, COMPLEX128 []complex128, STRING [][]byte,
//	INT4/INT2 []int8 and UINT4/UINT2 []uint8 (one element per entry, unpacked),
//	FLOAT8* / FLOAT4E2M1 / FLOAT8E8M0 []float32 (decoded exactly; NaN/Inf kept).
//
// The payload may come from raw_data (little-endian), the typed field ONNX
// prescribes for the type, or external data (read from BaseDir). The element
// count must match Dims exactly; errors say what was expected and found.
func (t *Tensor) Values() (any, error) {
	if t.Segment != nil {
		return nil, t.errorf(ErrUnsupported, "segmented tensors (segment %d..%d) are not supported",
			t.Segment.Begin, t.Segment.End)
	}
	if !t.DataType.Known() {
		return nil, t.errorf(ErrUnsupported, "unknown data_type %d", int32(t.DataType))
	}
	n, err := t.NumElements()
	if err != nil {
		return nil, err
	}
	raw, isRaw, err := t.rawBytes()
	if err != nil {
		return nil, err
	}
	set := t.fieldLens()
	if isRaw {
		if t.DataType == String {
			return nil, t.errorf(ErrInvalidTensor, "STRING tensors must use string_data, not raw_data")
		}
		for name := range set {
			return nil, t.errorf(ErrInvalidTensor, "both raw/external data and %s are set", name)
		}
		if want := rawLen(t.DataType, n); int64(len(raw)) != want {
			return nil, t.errorf(ErrInvalidTensor, "payload has %d bytes, want %d (%d elements of %d bits)",
				len(raw), want, n, t.DataType.Bits())
		}
		return fromRaw(t.DataType, raw, int(n)), nil
	}
	want := typedField(t.DataType)
	for name, l := range set {
		if name != want {
			return nil, t.errorf(ErrInvalidTensor, "payload is in %s (%d entries), but %s tensors use %s or raw_data",
				name, l, t.DataType, want)
		}
	}
	if got, wantLen := int64(set[want]), typedLen(t.DataType, n); got != wantLen {
		return nil, t.errorf(ErrInvalidTensor, "%s has %d entries, want %d for %d elements", want, got, wantLen, n)
	}
	return t.fromTyped(int(n))
}

// cloneSlice copies s into a new non-nil slice.
func cloneSlice[T any](s []T) []T {
	out := make([]T, len(s))
	copy(out, s)
	return out
}

func le16(b []byte, i int) uint16 { return binary.LittleEndian.Uint16(b[2*i:]) }
func le32(b []byte, i int) uint32 { return binary.LittleEndian.Uint32(b[4*i:]) }
func le64(b []byte, i int) uint64 { return binary.LittleEndian.Uint64(b[8*i:]) }

func mapN[T any](n int, f func(i int) T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

// fromRaw decodes n little-endian elements; len(b) was checked by the caller.
func fromRaw(dt DataType, b []byte, n int) any {
	switch dt {
	case Float:
		return mapN(n, func(i int) float32 { return math.Float32frombits(le32(b, i)) })
	case Double:
		return mapN(n, func(i int) float64 { return math.Float64frombits(le64(b, i)) })
	case Int8:
		return mapN(n, func(i int) int8 { return int8(b[i]) })
	case Uint8:
		return mapN(n, func(i int) uint8 { return b[i] })
	case Int16:
		return mapN(n, func(i int) int16 { return int16(le16(b, i)) })
	case Uint16:
		return mapN(n, func(i int) uint16 { return le16(b, i) })
	case Int32:
		return mapN(n, func(i int) int32 { return int32(le32(b, i)) })
	case Uint32:
		return mapN(n, func(i int) uint32 { return le32(b, i) })
	case Int64:
		return mapN(n, func(i int) int64 { return int64(le64(b, i)) })
	case Uint64:
		return mapN(n, func(i int) uint64 { return le64(b, i) })
	case Bool:
		return mapN(n, func(i int) bool { return b[i] != 0 })
	case Float16:
		return mapN(n, func(i int) ir.Float16Value { return ir.Float16Value(le16(b, i)) })
	case BFloat16:
		return mapN(n, func(i int) ir.BFloat16Value { return ir.BFloat16Value(le16(b, i)) })
	case Complex64:
		return mapN(n, func(i int) complex64 {
			return complex(math.Float32frombits(le32(b, 2*i)), math.Float32frombits(le32(b, 2*i+1)))
		})
	case Complex128:
		return mapN(n, func(i int) complex128 {
			return complex(math.Float64frombits(le64(b, 2*i)), math.Float64frombits(le64(b, 2*i+1)))
		})
	case Int4:
		return mapN(n, func(i int) int8 { return int4(nibble(b[i/2], i)) })
	case Uint4:
		return mapN(n, func(i int) uint8 { return nibble(b[i/2], i) })
	case Int2:
		return mapN(n, func(i int) int8 { return int2(crumb(b[i/4], i)) })
	case Uint2:
		return mapN(n, func(i int) uint8 { return crumb(b[i/4], i) })
	case Float4E2M1:
		return mapN(n, func(i int) float32 { return DecodeFloat4E2M1(nibble(b[i/2], i)) })
	}
	// The remaining types are the one-byte float formats.
	return mapN(n, func(i int) float32 { return decodeFloat8(dt, b[i]) })
}

// nibble returns element i of a 4-bit packed stream from its byte: even
// elements in the low 4 bits, odd ones in the high 4 bits (onnx.proto).
func nibble(b byte, i int) uint8 { return (b >> (4 * uint(i&1))) & 0xF }

// crumb returns element i of a 2-bit packed stream from its byte, elements
// filling the byte from the least significant bits up (onnx.proto).
func crumb(b byte, i int) uint8 { return (b >> (2 * uint(i&3))) & 0x3 }

func int4(v uint8) int8 { return int8(v<<4) >> 4 }
func int2(v uint8) int8 { return int8(v<<6) >> 6 }

func (t *Tensor) fromTyped(n int) (any, error) {
	dt := t.DataType
	switch dt {
	case Float:
		return cloneSlice(t.FloatData), nil
	case Double:
		return cloneSlice(t.DoubleData), nil
	case Int64:
		return cloneSlice(t.Int64Data), nil
	case Uint64:
		return cloneSlice(t.Uint64Data), nil
	case Int32:
		return cloneSlice(t.Int32Data), nil
	case Uint32:
		out := make([]uint32, n)
		for i, v := range t.Uint64Data {
			if v > math.MaxUint32 {
				return nil, t.errorf(ErrInvalidTensor, "uint64_data[%d] = %d is out of range for UINT32", i, v)
			}
			out[i] = uint32(v)
		}
		return out, nil
	case Complex64:
		return mapN(n, func(i int) complex64 { return complex(t.FloatData[2*i], t.FloatData[2*i+1]) }), nil
	case Complex128:
		return mapN(n, func(i int) complex128 { return complex(t.DoubleData[2*i], t.DoubleData[2*i+1]) }), nil
	case String:
		return cloneSlice(t.StringData), nil
	}
	// Everything else lives in int32_data, one value (or one packed byte
	// for sub-byte types) per entry; check the range, then reuse fromRaw on
	// the equivalent little-endian bytes.
	lo, hi := int32(0), int32(math.MaxUint8)
	width := 1
	switch dt {
	case Int8:
		lo, hi = math.MinInt8, math.MaxInt8
	case Int16:
		lo, hi, width = math.MinInt16, math.MaxInt16, 2
	case Uint16:
		hi, width = math.MaxUint16, 2
	case Float16, BFloat16:
		// Bit patterns; accept them sign-extended as well as zero-extended.
		lo, hi, width = math.MinInt16, math.MaxUint16, 2
	case Bool:
		hi = 1
	}
	b := make([]byte, len(t.Int32Data)*width)
	for i, v := range t.Int32Data {
		if v < lo || v > hi {
			return nil, t.errorf(ErrInvalidTensor, "int32_data[%d] = %d is out of range [%d, %d] for %s",
				i, v, lo, hi, dt)
		}
		if width == 2 {
			binary.LittleEndian.PutUint16(b[2*i:], uint16(v))
		} else {
			b[i] = byte(v)
		}
	}
	return fromRaw(dt, b, n), nil
}

// DecodeFloat8 converts one FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2,
// FLOAT8E5M2FNUZ or FLOAT8E8M0 byte to float32 (exact: every value of these
// formats is a float32). Other data types give NaN.
func DecodeFloat8(dt DataType, b uint8) float32 { return decodeFloat8(dt, b) }

// Encodings, from the ONNX specification (docs/Float8.md and onnx.proto):
// E4M3FN bias 7, no infinities, NaN is S.1111.111; E4M3FNUZ bias 8, NaN is
// 0x80 only, no negative zero; E5M2 bias 15, IEEE-like with Inf S.11111.00;
// E5M2FNUZ bias 16, NaN 0x80; E8M0 (OCP MX) is 2^(e-127), 0xFF NaN.
func decodeFloat8(dt DataType, b uint8) float32 {
	sign := float64(1)
	if b&0x80 != 0 {
		sign = -1
	}
	var exp, man, mbits, bias int
	switch dt {
	case Float8E4M3FN:
		if b&0x7F == 0x7F {
			return float32(math.NaN())
		}
		exp, man, mbits, bias = int(b>>3)&0xF, int(b&7), 3, 7
	case Float8E4M3FNUZ:
		if b == 0x80 {
			return float32(math.NaN())
		}
		exp, man, mbits, bias = int(b>>3)&0xF, int(b&7), 3, 8
	case Float8E5M2:
		if b&0x7C == 0x7C {
			if b&3 == 0 {
				return float32(math.Inf(int(sign)))
			}
			return float32(math.NaN())
		}
		exp, man, mbits, bias = int(b>>2)&0x1F, int(b&3), 2, 15
	case Float8E5M2FNUZ:
		if b == 0x80 {
			return float32(math.NaN())
		}
		exp, man, mbits, bias = int(b>>2)&0x1F, int(b&3), 2, 16
	case Float8E8M0:
		if b == 0xFF {
			return float32(math.NaN())
		}
		return float32(math.Ldexp(1, int(b)-127))
	default:
		return float32(math.NaN())
	}
	return float32(sign * minifloat(exp, man, mbits, bias))
}

// minifloat is the magnitude of a binary float with a biased exponent and
// an mbits-bit mantissa; exponent 0 is subnormal.
func minifloat(exp, man, mbits, bias int) float64 {
	if exp == 0 {
		return math.Ldexp(float64(man), 1-bias-mbits)
	}
	return math.Ldexp(float64(man|1<<mbits), exp-bias-mbits)
}

// DecodeFloat4E2M1 converts one FLOAT4E2M1 value (low 4 bits of v: sign,
// 2 exponent bits with bias 1, 1 mantissa bit; no Inf or NaN) to float32.
func DecodeFloat4E2M1(v uint8) float32 {
	m := minifloat(int(v>>1)&3, int(v&1), 1, 1)
	if v&8 != 0 {
		m = -m
	}
	return float32(m)
}

// IRDType returns the ir element type ToIR produces for dt: the same type
// where GoMLX has one, otherwise a wider type that holds every value
// exactly (INT4/INT2 -> Int8, UINT4/UINT2 -> Uint8, 8- and 4-bit floats ->
// Float32). ok is false for STRING, UNDEFINED and unknown types.
func (dt DataType) IRDType() (d ir.DType, ok bool) {
	switch dt {
	case Float:
		return ir.Float32, true
	case Double:
		return ir.Float64, true
	case Int8, Int4, Int2:
		return ir.Int8, true
	case Int16:
		return ir.Int16, true
	case Int32:
		return ir.Int32, true
	case Int64:
		return ir.Int64, true
	case Uint8, Uint4, Uint2:
		return ir.Uint8, true
	case Uint16:
		return ir.Uint16, true
	case Uint32:
		return ir.Uint32, true
	case Uint64:
		return ir.Uint64, true
	case Bool:
		return ir.Bool, true
	case Float16:
		return ir.Float16, true
	case BFloat16:
		return ir.BFloat16, true
	case Complex64:
		return ir.Complex64, true
	case Complex128:
		return ir.Complex128, true
	case Float8E4M3FN, Float8E4M3FNUZ, Float8E5M2, Float8E5M2FNUZ, Float8E8M0, Float4E2M1:
		return ir.Float32, true
	}
	return ir.InvalidDType, false
}

var littleEndianHost = func() bool {
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], 1)
	return b[0] == 1
}()

// ToIR converts the tensor to a host ir.Tensor with the element type given
// by DataType.IRDType (sub-byte and 8-bit float types are widened, see
// there). STRING tensors are refused with ErrUnsupported: GoMLX has no
// string element type.
func (t *Tensor) ToIR() (*ir.Tensor, error) {
	if t.converted != nil {
		return t.converted, nil
	}
	dt, ok := t.DataType.IRDType()
	if !ok {
		if t.DataType == String {
			return nil, t.errorf(ErrUnsupported, "STRING tensors cannot be converted to ir tensors")
		}
		return nil, t.errorf(ErrUnsupported, "data_type %s has no ir element type", t.DataType)
	}
	n, err := t.NumElements()
	if err != nil {
		return nil, err
	}
	dims := make([]int, len(t.Dims))
	for i, d := range t.Dims {
		dims[i] = int(d)
	}
	// Fast path: raw little-endian bytes of a type stored at full width are
	// copied straight into the tensor (one copy for large weights).
	direct := littleEndianHost && t.Segment == nil && t.DataType != Bool && t.DataType.Bits() >= 8 &&
		t.DataType.Bits() == 8*dtSize(dt) && len(t.fieldLens()) == 0 && (t.RawData != nil || t.IsExternal())
	if direct {
		raw, _, err := t.rawBytes()
		if err != nil {
			return nil, err
		}
		if want := rawLen(t.DataType, n); int64(len(raw)) != want {
			return nil, t.errorf(ErrInvalidTensor, "payload has %d bytes, want %d (%d elements of %d bits)",
				len(raw), want, n, t.DataType.Bits())
		}
		out, err := ir.NewHostTensor(dt, dims...)
		if err != nil {
			return nil, t.errorf(ErrInvalidTensor, "%v", err)
		}
		if n > 0 {
			if err := out.MutableBytes(func(dst []byte) { copy(dst, raw) }); err != nil {
				return nil, t.errorf(ErrInvalidTensor, "%v", err)
			}
		}
		return out, nil
	}
	vals, err := t.Values()
	if err != nil {
		return nil, err
	}
	var out *ir.Tensor
	switch v := vals.(type) {
	case []float32:
		out, err = ir.TensorFromFlat(v, dims...)
	case []float64:
		out, err = ir.TensorFromFlat(v, dims...)
	case []int8:
		out, err = ir.TensorFromFlat(v, dims...)
	case []int16:
		out, err = ir.TensorFromFlat(v, dims...)
	case []int32:
		out, err = ir.TensorFromFlat(v, dims...)
	case []int64:
		out, err = ir.TensorFromFlat(v, dims...)
	case []uint8:
		out, err = ir.TensorFromFlat(v, dims...)
	case []uint16:
		out, err = ir.TensorFromFlat(v, dims...)
	case []uint32:
		out, err = ir.TensorFromFlat(v, dims...)
	case []uint64:
		out, err = ir.TensorFromFlat(v, dims...)
	case []bool:
		out, err = ir.TensorFromFlat(v, dims...)
	case []ir.Float16Value:
		out, err = ir.TensorFromFlat(v, dims...)
	case []ir.BFloat16Value:
		out, err = ir.TensorFromFlat(v, dims...)
	case []complex64:
		out, err = ir.TensorFromFlat(v, dims...)
	case []complex128:
		out, err = ir.TensorFromFlat(v, dims...)
	default:
		return nil, t.errorf(ErrUnsupported, "no ir conversion for %T", vals)
	}
	if err != nil {
		return nil, t.errorf(ErrInvalidTensor, "%v", err)
	}
	return out, nil
}

// dtSize is the byte width of an ir element type.
func dtSize(d ir.DType) int { return d.Size() }
