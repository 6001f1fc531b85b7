package npy

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/tensorbridge/tensorbridge/ir"
)

// ReadFile reads a .npy file. The file must hold exactly one array; bytes
// after the array's data are an error (a truncated or concatenated file).
func ReadFile(path string) (*Array, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("npy: %w", err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	a, err := Read(br)
	if err != nil {
		return nil, fmt.Errorf("npy: %s: %w", path, err)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return nil, fmt.Errorf("npy: %s: %w: extra bytes after the array data", path, ErrFormat)
	}
	return a, nil
}

// Read reads one array from r, consuming exactly the header and the data.
func Read(r io.Reader) (*Array, error) {
	h, err := ReadHeader(r)
	if err != nil {
		return nil, err
	}
	dt, err := parseDescr(h.Descr)
	if err != nil {
		return nil, err
	}
	n, err := numElements(h.Shape)
	if err != nil {
		return nil, err
	}
	if dt.size > 0 && int64(n) > math.MaxInt64/int64(dt.size) {
		return nil, fmt.Errorf("%w: shape %v of %s elements has too many bytes", ErrFormat, h.Shape, h.Descr)
	}
	raw, err := readExact(r, int64(n)*int64(dt.size))
	if err != nil {
		return nil, fmt.Errorf("%w: data of %d %s elements (shape %v): %v", ErrFormat, n, h.Descr, h.Shape, err)
	}
	data, err := decode(dt, raw, n)
	if err != nil {
		return nil, err
	}
	if h.FortranOrder && len(h.Shape) > 1 {
		data = fortranToC(data, h.Shape)
	}
	return &Array{Shape: h.Shape, Data: data}, nil
}

// readExact reads n bytes into a buffer that starts at 64 KiB and doubles
// as data arrives, so a header that promises more data than the input
// holds allocates at most about twice what was actually read (plus 64
// KiB), never what the header claims.
func readExact(r io.Reader, n int64) ([]byte, error) {
	const first = 64 << 10
	buf := make([]byte, 0, min(n, first))
	for int64(len(buf)) < n {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, int(min(n-int64(len(buf)), int64(cap(buf)))))
		}
		end := int(min(int64(cap(buf)), n))
		k, err := io.ReadFull(r, buf[len(buf):end])
		buf = buf[:len(buf)+k]
		if err != nil {
			return nil, unexpected(err)
		}
	}
	return buf, nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// ReadHeader reads the magic string, version and header dictionary,
// leaving r at the first data byte.
func ReadHeader(r io.Reader) (*Header, error) {
	var pre [8]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return nil, fmt.Errorf("%w: not a .npy file (%d-byte preamble unreadable: %v)", ErrFormat, len(pre), unexpected(err))
	}
	if string(pre[:6]) != Magic {
		return nil, fmt.Errorf("%w: not a .npy file (magic %q, want %q)", ErrFormat, pre[:6], Magic)
	}
	h := &Header{Major: int(pre[6]), Minor: int(pre[7])}
	var hlen int
	switch {
	case h.Major == 1 && h.Minor == 0:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return nil, fmt.Errorf("%w: header length: %v", ErrFormat, unexpected(err))
		}
		hlen = int(binary.LittleEndian.Uint16(b[:]))
	case (h.Major == 2 || h.Major == 3) && h.Minor == 0:
		var b [4]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return nil, fmt.Errorf("%w: header length: %v", ErrFormat, unexpected(err))
		}
		l := binary.LittleEndian.Uint32(b[:])
		if l > MaxHeaderLen {
			return nil, fmt.Errorf("%w: header length %d exceeds %d bytes", ErrFormat, l, MaxHeaderLen)
		}
		hlen = int(l)
	default:
		return nil, fmt.Errorf("%w: format version %d.%d (this package reads 1.0, 2.0 and 3.0)",
			ErrUnsupported, h.Major, h.Minor)
	}
	buf, err := readExact(r, int64(hlen))
	if err != nil {
		return nil, fmt.Errorf("%w: header of %d bytes: %v", ErrFormat, hlen, err)
	}
	// Versions 1 and 2 use latin-1 (in practice ASCII), version 3 UTF-8.
	if h.Major == 3 && !utf8.Valid(buf) {
		return nil, fmt.Errorf("%w: version 3.0 header is not UTF-8", ErrFormat)
	}
	text := string(buf)
	if h.Major < 3 {
		text = latin1(buf)
	}
	if err := h.parseDict(text); err != nil {
		return nil, err
	}
	return h, nil
}

func latin1(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		sb.WriteRune(rune(c))
	}
	return sb.String()
}

// parseDict parses the header: a Python dict literal with exactly the keys
// 'descr', 'fortran_order' and 'shape', as NumPy requires.
func (h *Header) parseDict(text string) error {
	p := &pyParser{s: text}
	v, err := p.value(0)
	if err != nil {
		return fmt.Errorf("%w: header %q: %v", ErrFormat, strings.TrimSpace(text), err)
	}
	p.skipSpace()
	if p.i != len(p.s) {
		return fmt.Errorf("%w: header %q: trailing text after the dictionary", ErrFormat, strings.TrimSpace(text))
	}
	d, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("%w: header %q is not a dictionary", ErrFormat, strings.TrimSpace(text))
	}
	if len(d) != 3 {
		return fmt.Errorf("%w: header has keys %v, want exactly descr, fortran_order, shape", ErrFormat, keys(d))
	}
	switch descr := d["descr"].(type) {
	case string:
		h.Descr = descr
	case []any:
		return fmt.Errorf("%w: structured dtype %v", ErrUnsupported, descr)
	default:
		return fmt.Errorf("%w: header descr is %T, want a string", ErrFormat, d["descr"])
	}
	fo, ok := d["fortran_order"].(bool)
	if !ok {
		return fmt.Errorf("%w: header fortran_order is %v, want True or False", ErrFormat, d["fortran_order"])
	}
	h.FortranOrder = fo
	shape, ok := d["shape"].([]any)
	if !ok {
		return fmt.Errorf("%w: header shape is %v, want a tuple", ErrFormat, d["shape"])
	}
	h.Shape = make([]int, len(shape))
	for i, s := range shape {
		v, ok := s.(int64)
		if !ok || v < 0 {
			return fmt.Errorf("%w: header shape %v: dimension %d is not a non-negative integer", ErrFormat, shape, i)
		}
		h.Shape[i] = int(v)
	}
	_, err = numElements(h.Shape)
	return err
}

func keys(d map[string]any) []string {
	var out []string
	for k := range d {
		out = append(out, k)
	}
	return out
}

// pyParser parses the Python literal subset NumPy writes in headers:
// dicts, tuples, lists, strings, integers (with an optional Python 2 'L'),
// True, False and None.
type pyParser struct {
	s string
	i int
}

const maxPyDepth = 32

func (p *pyParser) skipSpace() {
	for p.i < len(p.s) && strings.ContainsRune(" \t\r\n", rune(p.s[p.i])) {
		p.i++
	}
}

func (p *pyParser) value(depth int) (any, error) {
	if depth > maxPyDepth {
		return nil, fmt.Errorf("nested too deep")
	}
	p.skipSpace()
	if p.i >= len(p.s) {
		return nil, fmt.Errorf("unexpected end")
	}
	switch c := p.s[p.i]; {
	case c == '{':
		p.i++
		d := map[string]any{}
		for {
			p.skipSpace()
			if p.i < len(p.s) && p.s[p.i] == '}' {
				p.i++
				return d, nil
			}
			k, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("dictionary key %v is not a string", k)
			}
			p.skipSpace()
			if p.i >= len(p.s) || p.s[p.i] != ':' {
				return nil, fmt.Errorf("missing ':' after key %q", ks)
			}
			p.i++
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			if _, dup := d[ks]; dup {
				return nil, fmt.Errorf("duplicate key %q", ks)
			}
			d[ks] = v
			if err := p.sep('}'); err != nil {
				return nil, err
			}
		}
	case c == '(' || c == '[':
		end := byte(')')
		if c == '[' {
			end = ']'
		}
		p.i++
		var items []any
		for {
			p.skipSpace()
			if p.i < len(p.s) && p.s[p.i] == end {
				p.i++
				if items == nil {
					items = []any{}
				}
				return items, nil
			}
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			items = append(items, v)
			if err := p.sep(end); err != nil {
				return nil, err
			}
		}
	case c == '\'' || c == '"':
		j := strings.IndexByte(p.s[p.i+1:], c)
		if j < 0 {
			return nil, fmt.Errorf("unterminated string")
		}
		s := p.s[p.i+1 : p.i+1+j]
		if strings.ContainsRune(s, '\\') {
			return nil, fmt.Errorf("escape sequences in strings are not supported")
		}
		p.i += j + 2
		return s, nil
	case c == '-' || (c >= '0' && c <= '9'):
		j := p.i + 1
		for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
			j++
		}
		v, err := strconv.ParseInt(p.s[p.i:j], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("integer %q: %v", p.s[p.i:j], err)
		}
		p.i = j
		if p.i < len(p.s) && (p.s[p.i] == 'L' || p.s[p.i] == 'l') {
			p.i++
		}
		return v, nil
	default:
		for word, v := range map[string]any{"True": true, "False": false, "None": nil} {
			if strings.HasPrefix(p.s[p.i:], word) {
				p.i += len(word)
				return v, nil
			}
		}
		return nil, fmt.Errorf("unexpected %q at offset %d", c, p.i)
	}
}

// sep consumes a ',' or peeks the closing bracket after a collection item.
func (p *pyParser) sep(end byte) error {
	p.skipSpace()
	if p.i >= len(p.s) {
		return fmt.Errorf("unexpected end, want ',' or %q", end)
	}
	switch p.s[p.i] {
	case ',':
		p.i++
		return nil
	case end:
		return nil
	}
	return fmt.Errorf("unexpected %q at offset %d, want ',' or %q", p.s[p.i], p.i, end)
}

// parseDescr parses a NumPy dtype string such as "<f4", "|b1" or "<U5".
func parseDescr(s string) (dtype, error) {
	if s == "|O" || s == "O" || s == "<O" || s == ">O" {
		return dtype{}, fmt.Errorf("%w: dtype %q is a NumPy object array, whose data is a Python pickle: this package "+
			"does not run pickles (np.load also refuses them unless allow_pickle=True); save strings as fixed-width "+
			"unicode instead (np.asarray(a, dtype=str) gives '<U<n>')", ErrUnsupported, s)
	}
	if len(s) < 2 {
		return dtype{}, fmt.Errorf("%w: dtype %q", ErrFormat, s)
	}
	var d dtype
	rest := s
	switch s[0] {
	case '<', '|':
		rest = s[1:]
	case '>':
		d.bigEndian = true
		rest = s[1:]
	case '=':
		return d, fmt.Errorf("%w: dtype %q uses native byte order '=', which does not say which order the file has",
			ErrUnsupported, s)
	}
	if len(rest) < 2 {
		return d, fmt.Errorf("%w: dtype %q", ErrFormat, s)
	}
	d.kind = rest[0]
	size, err := strconv.Atoi(rest[1:])
	if err != nil || size < 0 {
		return d, fmt.Errorf("%w: dtype %q (kind %q without a byte count)", ErrUnsupported, s, rest[0])
	}
	d.size = size
	ok := false
	switch d.kind {
	case 'b':
		ok = size == 1
	case 'i', 'u':
		ok = size == 1 || size == 2 || size == 4 || size == 8
	case 'f':
		ok = size == 2 || size == 4 || size == 8
	case 'c':
		ok = size == 8 || size == 16
	case 'U':
		// The count is in characters, each stored as one UTF-32 code unit.
		if size == 0 {
			// Elements of no bytes would let a tiny file claim 2^53 of them.
			return d, fmt.Errorf("%w: dtype %q is zero-width unicode (NumPy itself writes at least '<U1')", ErrUnsupported, s)
		}
		if size > maxUnicodeChars {
			return d, fmt.Errorf("%w: dtype %q: %d characters per string exceeds %d", ErrUnsupported, s, size, maxUnicodeChars)
		}
		d.size = 4 * size
		ok = true
	case 'V':
		// A plain void dtype has no byte order ('|V2'); ml_dtypes' types
		// carry one, and bfloat16 is its only two-byte type.
		if size == 2 && (s[0] == '<' || s[0] == '>') {
			return d, nil
		}
		return d, fmt.Errorf("%w: dtype %q is an opaque void type that does not record its element type (only "+
			"ml_dtypes' bfloat16, saved as '<V2', is read)", ErrUnsupported, s)
	}
	if !ok {
		return d, fmt.Errorf("%w: dtype %q (supported: bool, int8-64, uint8-64, float16/32/64, complex64/128, "+
			"bfloat16 as ml_dtypes saves it ('<V2'), fixed-width unicode ('<U<n>'))", ErrUnsupported, s)
	}
	if d.size == 1 && s[0] == '>' {
		d.bigEndian = false
	}
	return d, nil
}

// maxUnicodeChars bounds the width of a '<U<n>' dtype (16 MiB per string).
const maxUnicodeChars = 1 << 22

// decode converts n elements of file bytes to a Go slice.
func decode(d dtype, b []byte, n int) (any, error) {
	var bo binary.ByteOrder = binary.LittleEndian
	if d.bigEndian {
		bo = binary.BigEndian
	}
	u16 := func(i int) uint16 { return bo.Uint16(b[2*i:]) }
	u32 := func(i int) uint32 { return bo.Uint32(b[4*i:]) }
	u64 := func(i int) uint64 { return bo.Uint64(b[8*i:]) }
	switch d.kind {
	case 'b':
		out := make([]bool, n)
		for i := range out {
			switch b[i] {
			case 0:
			case 1:
				out[i] = true
			default:
				return nil, fmt.Errorf("%w: bool element %d has byte value %d, want 0 or 1", ErrFormat, i, b[i])
			}
		}
		return out, nil
	case 'i':
		switch d.size {
		case 1:
			return fill(n, func(i int) int8 { return int8(b[i]) }), nil
		case 2:
			return fill(n, func(i int) int16 { return int16(u16(i)) }), nil
		case 4:
			return fill(n, func(i int) int32 { return int32(u32(i)) }), nil
		default:
			return fill(n, func(i int) int64 { return int64(u64(i)) }), nil
		}
	case 'u':
		switch d.size {
		case 1:
			return fill(n, func(i int) uint8 { return b[i] }), nil
		case 2:
			return fill(n, u16), nil
		case 4:
			return fill(n, u32), nil
		default:
			return fill(n, u64), nil
		}
	case 'V': // bfloat16, see parseDescr
		return fill(n, func(i int) ir.BFloat16Value { return ir.BFloat16Value(u16(i)) }), nil
	case 'U':
		return decodeUnicode(b, n, d.size/4, bo)
	case 'f':
		switch d.size {
		case 2:
			return fill(n, func(i int) ir.Float16Value { return ir.Float16Value(u16(i)) }), nil
		case 4:
			return fill(n, func(i int) float32 { return math.Float32frombits(u32(i)) }), nil
		default:
			return fill(n, func(i int) float64 { return math.Float64frombits(u64(i)) }), nil
		}
	default: // 'c'
		if d.size == 8 {
			return fill(n, func(i int) complex64 {
				return complex(math.Float32frombits(u32(2*i)), math.Float32frombits(u32(2*i+1)))
			}), nil
		}
		return fill(n, func(i int) complex128 {
			return complex(math.Float64frombits(u64(2*i)), math.Float64frombits(u64(2*i+1)))
		}), nil
	}
}

func fill[T any](n int, f func(int) T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

// decodeUnicode decodes n fixed-width strings of chars UTF-32 code units
// each. NumPy pads short strings with zero code units, so trailing zeros
// are dropped (as NumPy drops them); a code unit that is not a Unicode
// scalar value is an error.
func decodeUnicode(b []byte, n, chars int, bo binary.ByteOrder) ([]string, error) {
	out := make([]string, n)
	var sb strings.Builder
	for i := range out {
		units := b[4*chars*i : 4*chars*(i+1)]
		end := chars
		for end > 0 && bo.Uint32(units[4*(end-1):]) == 0 {
			end--
		}
		sb.Reset()
		for k := range end {
			u := bo.Uint32(units[4*k:])
			if u > unicode.MaxRune || (u >= 0xD800 && u <= 0xDFFF) {
				return nil, fmt.Errorf("%w: string element %d: code unit %d is U+%04X, not a Unicode scalar value",
					ErrFormat, i, k, u)
			}
			sb.WriteRune(rune(u))
		}
		out[i] = sb.String()
	}
	return out, nil
}
