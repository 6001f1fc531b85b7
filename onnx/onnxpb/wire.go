package onnxpb

import (
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// MaxDepth is the deepest message nesting the decoder accepts (the same
// default as the reference protobuf implementations). ONNX nests messages
// for subgraphs (If/Loop/Scan bodies) and nested types; real models stay far
// below this.
const MaxDepth = 100

// decoder walks one input buffer. top is the whole input so that byte
// offsets of sub-slices can be reported (a sub-slice b of top starts at
// cap(top)-cap(b), since slicing never changes the end of the backing array).
type decoder struct {
	top   []byte
	depth int
}

func (d *decoder) off(b []byte) int { return cap(d.top) - cap(b) }

func (d *decoder) errAt(b []byte, sentinel error, format string, args ...any) error {
	return &DecodeError{Offset: d.off(b), Msg: fmt.Sprintf(format, args...), Err: sentinel}
}

// field is one decoded tag and value. For varint and fixed wire types the
// value is in u; for length-delimited ones it is in b (aliasing the input).
type field struct {
	num protowire.Number
	typ protowire.Type
	u   uint64
	b   []byte
	at  []byte // the input from the field's tag on, for error offsets
	d   *decoder
}

// next reads one field from b. It returns the field, the number of bytes it
// took, and an error naming the defect. num is filled in as soon as the tag
// has been read so that errors about the value can name the field.
func (d *decoder) next(b []byte) (field, int, error) {
	f := field{at: b, d: d}
	v, n := protowire.ConsumeVarint(b)
	if n < 0 {
		return f, 0, d.errAt(b, ErrMalformed, "truncated or overlong field tag")
	}
	num, typ := protowire.DecodeTag(v)
	if num < protowire.MinValidNumber || num > protowire.MaxValidNumber {
		return f, 0, d.errAt(b, ErrMalformed, "invalid field number %d", int64(num))
	}
	f.num, f.typ = num, typ
	rest := b[n:]
	switch typ {
	case protowire.VarintType:
		u, m := protowire.ConsumeVarint(rest)
		if m < 0 {
			return f, 0, d.errAt(b, ErrMalformed, "truncated or overlong varint field")
		}
		f.u, n = u, n+m
	case protowire.Fixed32Type:
		u, m := protowire.ConsumeFixed32(rest)
		if m < 0 {
			return f, 0, d.errAt(b, ErrMalformed, "truncated fixed32 field")
		}
		f.u, n = uint64(u), n+m
	case protowire.Fixed64Type:
		u, m := protowire.ConsumeFixed64(rest)
		if m < 0 {
			return f, 0, d.errAt(b, ErrMalformed, "truncated fixed64 field")
		}
		f.u, n = u, n+m
	case protowire.BytesType:
		l, m := protowire.ConsumeVarint(rest)
		if m < 0 {
			return f, 0, d.errAt(b, ErrMalformed, "truncated length-delimited field (bad length prefix)")
		}
		if l > uint64(len(rest)-m) {
			return f, 0, d.errAt(b, ErrMalformed,
				"truncated length-delimited field: length %d runs past the end of the enclosing message (%d bytes left)",
				l, len(rest)-m)
		}
		f.b = rest[m : m+int(l)]
		n += m + int(l)
	case protowire.StartGroupType:
		m := protowire.ConsumeFieldValue(num, typ, rest)
		if m < 0 {
			return f, 0, d.errAt(b, ErrMalformed, "malformed group: %v", protowire.ParseError(m))
		}
		n += m
	case protowire.EndGroupType:
		return f, 0, d.errAt(b, ErrMalformed, "unexpected end-group marker")
	default:
		return f, 0, d.errAt(b, ErrMalformed, "invalid wire type %d", int(typ))
	}
	return f, n, nil
}

// message decodes the fields of one message body. name maps a field number
// to the path element used in errors (called before handle, so a repeated
// field's index is the one being decoded); handle stores a field's value.
// Unknown fields are skipped by handle's default case.
func (d *decoder) message(b []byte, name func(protowire.Number) string, handle func(*field) error) error {
	for len(b) > 0 {
		f, n, err := d.next(b)
		if err != nil {
			if f.num != 0 {
				return prefix(err, fieldName(name, f.num))
			}
			return err
		}
		if err := handle(&f); err != nil {
			return prefix(err, fieldName(name, f.num))
		}
		b = b[n:]
	}
	return nil
}

func fieldName(name func(protowire.Number) string, num protowire.Number) string {
	if s := name(num); s != "" {
		return s
	}
	return fmt.Sprintf("field %d", int64(num))
}

// sub decodes a nested message held in a length-delimited field.
func (f *field) sub(decode func(b []byte) error) error {
	if f.typ != protowire.BytesType {
		return f.wrongType("message")
	}
	d := f.d
	if d.depth >= MaxDepth {
		return d.errAt(f.at, ErrTooDeep, "messages nested more than %d deep", MaxDepth)
	}
	d.depth++
	err := decode(f.b)
	d.depth--
	return err
}

var wireNames = map[protowire.Type]string{
	protowire.VarintType:     "varint",
	protowire.Fixed32Type:    "fixed32",
	protowire.Fixed64Type:    "fixed64",
	protowire.BytesType:      "length-delimited",
	protowire.StartGroupType: "group",
}

func (f *field) wrongType(want string) error {
	return f.d.errAt(f.at, ErrMalformed, "wrong wire type %s for a %s field", wireNames[f.typ], want)
}

func (f *field) varint(want string) (uint64, error) {
	if f.typ != protowire.VarintType {
		return 0, f.wrongType(want)
	}
	return f.u, nil
}

func (f *field) int64() (int64, error) {
	u, err := f.varint("int64")
	return int64(u), err
}

// int32 decodes an int32 or enum field; negative values are sign-extended
// to ten bytes on the wire, so truncation recovers them.
func (f *field) int32() (int32, error) {
	u, err := f.varint("int32")
	return int32(u), err
}

func (f *field) float32() (float32, error) {
	if f.typ != protowire.Fixed32Type {
		return 0, f.wrongType("float")
	}
	return math.Float32frombits(uint32(f.u)), nil
}

func (f *field) bytes() ([]byte, error) {
	if f.typ != protowire.BytesType {
		return nil, f.wrongType("bytes")
	}
	return f.b, nil
}

func (f *field) str() (string, error) {
	if f.typ != protowire.BytesType {
		return "", f.wrongType("string")
	}
	return string(f.b), nil
}

// packedVarints calls add for each varint of a repeated varint field, in
// either the packed (one length-delimited run) or unpacked form.
func (f *field) packedVarints(grow func(n int), add func(uint64)) error {
	switch f.typ {
	case protowire.VarintType:
		add(f.u)
		return nil
	case protowire.BytesType:
		n := 0
		for _, c := range f.b {
			if c < 0x80 {
				n++
			}
		}
		grow(n)
		for b := f.b; len(b) > 0; {
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return f.d.errAt(b, ErrMalformed, "truncated or overlong varint in packed repeated field")
			}
			add(v)
			b = b[m:]
		}
		return nil
	}
	return f.wrongType("repeated varint")
}

func (f *field) appendInt64s(dst []int64) ([]int64, error) {
	err := f.packedVarints(func(n int) { dst = growSlice(dst, n) }, func(v uint64) { dst = append(dst, int64(v)) })
	return dst, err
}

func (f *field) appendInt32s(dst []int32) ([]int32, error) {
	err := f.packedVarints(func(n int) { dst = growSlice(dst, n) }, func(v uint64) { dst = append(dst, int32(v)) })
	return dst, err
}

func (f *field) appendUint64s(dst []uint64) ([]uint64, error) {
	err := f.packedVarints(func(n int) { dst = growSlice(dst, n) }, func(v uint64) { dst = append(dst, v) })
	return dst, err
}

func (f *field) appendFloat32s(dst []float32) ([]float32, error) {
	switch f.typ {
	case protowire.Fixed32Type:
		return append(dst, math.Float32frombits(uint32(f.u))), nil
	case protowire.BytesType:
		if len(f.b)%4 != 0 {
			return dst, f.d.errAt(f.at, ErrMalformed, "packed float field has %d bytes, not a multiple of 4", len(f.b))
		}
		dst = growSlice(dst, len(f.b)/4)
		for b := f.b; len(b) >= 4; b = b[4:] {
			dst = append(dst, math.Float32frombits(uint32(b[0])|uint32(b[1])<<8|uint32(b[2])<<16|uint32(b[3])<<24))
		}
		return dst, nil
	}
	return dst, f.wrongType("repeated float")
}

func (f *field) appendFloat64s(dst []float64) ([]float64, error) {
	switch f.typ {
	case protowire.Fixed64Type:
		return append(dst, math.Float64frombits(f.u)), nil
	case protowire.BytesType:
		if len(f.b)%8 != 0 {
			return dst, f.d.errAt(f.at, ErrMalformed, "packed double field has %d bytes, not a multiple of 8", len(f.b))
		}
		dst = growSlice(dst, len(f.b)/8)
		for b := f.b; len(b) >= 8; b = b[8:] {
			v, _ := protowire.ConsumeFixed64(b)
			dst = append(dst, math.Float64frombits(v))
		}
		return dst, nil
	}
	return dst, f.wrongType("repeated double")
}

func growSlice[T any](s []T, n int) []T {
	if cap(s)-len(s) >= n {
		return s
	}
	out := make([]T, len(s), len(s)+n)
	copy(out, s)
	return out
}
