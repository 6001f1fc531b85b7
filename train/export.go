package train

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"

	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
	"github.com/x448/float16"
	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of onnx.proto
// (https://github.com/onnx/onnx/blob/main/onnx/onnx.proto) that ExportONNX
// edits; everything else is copied byte for byte.
const (
	modelGraphField       = 7 // ModelProto.graph
	graphInitializerField = 5 // GraphProto.initializer
	tensorNameField       = 8 // TensorProto.name
	tensorRawDataField    = 9 // TensorProto.raw_data
)

// tensorDataFields are the TensorProto fields that hold a payload inline:
// float_data, int32_data, string_data, int64_data, raw_data, double_data,
// uint64_data.
var tensorDataFields = map[protowire.Number]bool{4: true, 5: true, 6: true, 7: true, 9: true, 10: true, 11: true}

// ExportONNX writes to dst a copy of the ONNX model src whose top-level
// graph initializers named in weights hold these values. Names, dtypes,
// dims and the graph stay as they are: a tensor whose dtype differs from
// its initializer's is converted (between float16, bfloat16, float32 and
// float64, rounding to nearest even; float32 master weights into a float16
// initializer, say). Every other byte of the model is kept: an updated
// inline initializer gets its payload as raw_data in place of the old
// payload field(s), the rest of its fields untouched.
//
// A model with external data keeps it: every external file the
// initializers reference is written beside dst under the same relative
// location, with the updated tensors' bytes at their recorded offsets.
// Writing over the source's own external files (dst in src's directory) is
// refused, as is an updated tensor in a file whose external_data carries a
// checksum. Every file is written atomically (temporary file, fsync,
// rename), the model last. An unknown name or a dims mismatch is an error
// naming it, wrapping errs.ErrInvalidInput.
func ExportONNX(src, dst string, weights map[string]*ir.Tensor) error {
	srcBytes, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("train: export: reading %w", err)
	}
	m, err := onnxpb.ReadModel(src)
	if err != nil {
		return fmt.Errorf("train: export: %w", asInput(err))
	}
	if m.Graph == nil {
		return invalid("export: %s has no graph", src)
	}
	payloads, err := exportPayloads(m.Graph, weights)
	if err != nil {
		return fmt.Errorf("train: export %s: %w", src, err)
	}
	ext, err := planExternal(m.Graph, payloads, filepath.Dir(src), filepath.Dir(dst))
	if err != nil {
		return fmt.Errorf("train: export %s to %s: %w", src, dst, err)
	}
	inline := map[string][]byte{}
	for name, p := range payloads {
		if !p.external {
			inline[name] = p.raw
		}
	}
	out, err := rewriteModel(srcBytes, inline)
	if err != nil {
		return fmt.Errorf("train: export: %s: %w", src, asInput(err))
	}
	for _, f := range ext {
		if err := f.write(); err != nil {
			return fmt.Errorf("train: export: %w", err)
		}
	}
	if err := writeAtomic(dst, func(w io.Writer) error { _, err := w.Write(out); return err }); err != nil {
		return fmt.Errorf("train: export: %w", err)
	}
	return nil
}

// payload is an initializer's new bytes, encoded for its ONNX data type.
type payload struct {
	raw      []byte
	external bool
	tensor   *onnxpb.Tensor
}

// exportPayloads checks every weight against its initializer (name, dims,
// dtype) and encodes its new bytes.
func exportPayloads(g *onnxpb.Graph, weights map[string]*ir.Tensor) (map[string]payload, error) {
	inits := map[string]*onnxpb.Tensor{}
	for i := range g.Initializer {
		inits[g.Initializer[i].Name] = &g.Initializer[i]
	}
	names := make([]string, 0, len(weights))
	for name := range weights {
		names = append(names, name)
	}
	sort.Strings(names)
	out := map[string]payload{}
	for _, name := range names {
		init, ok := inits[name]
		if !ok {
			return nil, invalid("weight %q is not an initializer of the model's graph", name)
		}
		raw, err := encodeAs(init, weights[name])
		if err != nil {
			return nil, fmt.Errorf("initializer %q: %w", name, err)
		}
		out[name] = payload{raw: raw, external: init.IsExternal(), tensor: init}
	}
	return out, nil
}

// encodeAs returns t's values as the little-endian raw bytes of init's
// data type, checking dims and converting between floating-point types.
func encodeAs(init *onnxpb.Tensor, t *ir.Tensor) ([]byte, error) {
	if t == nil {
		return nil, invalid("nil tensor")
	}
	dims := t.Shape().Dimensions
	if len(dims) != len(init.Dims) {
		return nil, invalid("dims %v, the initializer has %v", dims, init.Dims)
	}
	for i := range dims {
		if int64(dims[i]) != init.Dims[i] {
			return nil, invalid("dims %v, the initializer has %v", dims, init.Dims)
		}
	}
	want, ok := init.DataType.IRDType()
	if !ok || (onnxBits(want) != init.DataType.Bits()) {
		return nil, invalid("data type %s cannot be exported (only types with an exact ir counterpart)", init.DataType)
	}
	raw, err := ir.TensorBytes(t)
	if err != nil {
		return nil, err
	}
	if t.DType() == want {
		return raw, nil
	}
	return convertFloats(raw, t.DType(), want)
}

// onnxBits is the width of an ir dtype in the ONNX sense (bool is 8 bits).
func onnxBits(d ir.DType) int { return 8 * d.Size() }

// convertFloats converts little-endian raw elements of dtype from into
// dtype to, both floating point, rounding to nearest even.
func convertFloats(raw []byte, from, to ir.DType) ([]byte, error) {
	get, ok := floatReaders[from]
	put, ok2 := floatWriters[to]
	if !ok || !ok2 {
		return nil, invalid("dtype %s cannot be converted to the initializer's %s (conversions are between float16, bfloat16, float32 and float64)", from, to)
	}
	n := len(raw) / from.Size()
	out := make([]byte, n*to.Size())
	for i := 0; i < n; i++ {
		put(out[i*to.Size():], get(raw[i*from.Size():]))
	}
	return out, nil
}

var floatReaders = map[ir.DType]func([]byte) float64{
	ir.Float16: func(b []byte) float64 { return float64(float16.Frombits(binary.LittleEndian.Uint16(b)).Float32()) },
	ir.BFloat16: func(b []byte) float64 {
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16))
	},
	ir.Float32: func(b []byte) float64 { return float64(math.Float32frombits(binary.LittleEndian.Uint32(b))) },
	ir.Float64: func(b []byte) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(b)) },
}

// floatWriters round to nearest even. float16 and bfloat16 round from the
// float32 nearest the value, which is exact for float32 sources (master
// weights); a float64 source may round twice.
var floatWriters = map[ir.DType]func([]byte, float64){
	ir.Float16: func(b []byte, v float64) {
		binary.LittleEndian.PutUint16(b, float16.Fromfloat32(float32(v)).Bits())
	},
	ir.BFloat16: func(b []byte, v float64) { binary.LittleEndian.PutUint16(b, bfloat16RNE(float32(v))) },
	ir.Float32:  func(b []byte, v float64) { binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v))) },
	ir.Float64:  func(b []byte, v float64) { binary.LittleEndian.PutUint64(b, math.Float64bits(v)) },
}

// bfloat16RNE rounds a float32 to bfloat16, nearest even, keeping NaNs
// NaN (quiet), as PyTorch's float32 -> bfloat16 conversion does.
func bfloat16RNE(f float32) uint16 {
	u := math.Float32bits(f)
	if f != f {
		return uint16(u>>16) | 0x40
	}
	u += 0x7FFF + (u>>16)&1
	return uint16(u >> 16)
}

// rewriteModel returns the model bytes with the payload of each initializer
// named in raws replaced by raw_data holding raws[name]. Every other field
// is copied as it is.
func rewriteModel(b []byte, raws map[string][]byte) ([]byte, error) {
	done := map[string]bool{}
	out, err := rewriteMessage(b, func(num protowire.Number, v []byte) ([]byte, bool, error) {
		if num != modelGraphField {
			return nil, false, nil
		}
		g, err := rewriteMessage(v, func(num protowire.Number, v []byte) ([]byte, bool, error) {
			if num != graphInitializerField {
				return nil, false, nil
			}
			name, err := tensorName(v)
			if err != nil {
				return nil, false, err
			}
			raw, ok := raws[name]
			if !ok {
				return nil, false, nil
			}
			done[name] = true
			t, err := replacePayload(v, raw)
			return t, true, err
		})
		return g, true, err
	})
	if err != nil {
		return nil, err
	}
	for name := range raws {
		if !done[name] {
			return nil, fmt.Errorf("initializer %q not found in the graph's bytes", name)
		}
	}
	return out, nil
}

// rewriteMessage copies the fields of message b, letting edit replace the
// value of a length-delimited field (edit returns the new value and true)
// or keep it (false).
func rewriteMessage(b []byte, edit func(num protowire.Number, v []byte) ([]byte, bool, error)) ([]byte, error) {
	out := make([]byte, 0, len(b))
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("malformed field tag: %w", protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return nil, fmt.Errorf("malformed field %d: %w", num, protowire.ParseError(m))
		}
		field := b[:n+m]
		b = b[n+m:]
		if typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(field[n:])
			nv, replace, err := edit(num, v)
			if err != nil {
				return nil, err
			}
			if replace {
				out = protowire.AppendTag(out, num, typ)
				out = protowire.AppendBytes(out, nv)
				continue
			}
		}
		out = append(out, field...)
	}
	return out, nil
}

// tensorName returns the name field of a TensorProto.
func tensorName(b []byte) (string, error) {
	name := ""
	_, err := rewriteMessage(b, func(num protowire.Number, v []byte) ([]byte, bool, error) {
		if num == tensorNameField {
			name = string(v)
		}
		return nil, false, nil
	})
	return name, err
}

// replacePayload returns the TensorProto b with its inline payload fields
// dropped and raw_data = raw written where the first of them stood (at the
// end when it had none).
func replacePayload(b, raw []byte) ([]byte, error) {
	out := make([]byte, 0, len(b)+len(raw))
	placed := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("malformed tensor field tag: %w", protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return nil, fmt.Errorf("malformed tensor field %d: %w", num, protowire.ParseError(m))
		}
		field := b[:n+m]
		b = b[n+m:]
		if tensorDataFields[num] {
			if !placed {
				out = protowire.AppendTag(out, tensorRawDataField, protowire.BytesType)
				out = protowire.AppendBytes(out, raw)
				placed = true
			}
			continue
		}
		out = append(out, field...)
	}
	if !placed {
		out = protowire.AppendTag(out, tensorRawDataField, protowire.BytesType)
		out = protowire.AppendBytes(out, raw)
	}
	return out, nil
}

// extFile is an external data file to write beside the exported model: a
// copy of src with patches applied.
type extFile struct {
	src, dst string
	patches  []extPatch
}

type extPatch struct {
	name   string
	offset int64
	raw    []byte
}

// planExternal lists the external data files the graph's initializers
// reference, and the updated tensors' patches in them, refusing a
// destination that is the source file itself.
func planExternal(g *onnxpb.Graph, payloads map[string]payload, srcDir, dstDir string) ([]*extFile, error) {
	files := map[string]*extFile{}
	var order []string
	for i := range g.Initializer {
		t := &g.Initializer[i]
		if !t.IsExternal() {
			continue
		}
		ref, err := t.External()
		if err != nil {
			return nil, asInput(err)
		}
		rel := filepath.FromSlash(ref.Location)
		if !filepath.IsLocal(rel) {
			return nil, invalid("initializer %q: external data location %q leaves the model directory", t.Name, ref.Location)
		}
		f, ok := files[rel]
		if !ok {
			f = &extFile{src: filepath.Join(srcDir, rel), dst: filepath.Join(dstDir, rel)}
			if err := checkNotSame(f.src, f.dst); err != nil {
				return nil, err
			}
			files[rel] = f
			order = append(order, rel)
		}
		p, ok := payloads[t.Name]
		if !ok {
			continue
		}
		if ref.Checksum != "" {
			return nil, invalid("initializer %q: its external data carries a checksum, which an updated file would no longer match", t.Name)
		}
		if ref.Length >= 0 && ref.Length != int64(len(p.raw)) {
			return nil, invalid("initializer %q: external data length %d, the new values have %d bytes", t.Name, ref.Length, len(p.raw))
		}
		f.patches = append(f.patches, extPatch{name: t.Name, offset: ref.Offset, raw: p.raw})
	}
	out := make([]*extFile, len(order))
	for i, rel := range order {
		out[i] = files[rel]
	}
	return out, nil
}

// checkNotSame refuses to write an external file over its source.
func checkNotSame(src, dst string) error {
	s, err := os.Stat(src)
	if err != nil {
		return asInput(fmt.Errorf("external data: %w", err))
	}
	if d, err := os.Stat(dst); err == nil && os.SameFile(s, d) {
		return invalid("external data file %s would be overwritten by the export: write the output model to another directory", src)
	}
	return nil
}

// write copies the source file to dst atomically with the patches applied.
func (f *extFile) write() error {
	in, err := os.Open(f.src)
	if err != nil {
		return fmt.Errorf("external data: %w", err)
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return fmt.Errorf("external data: %w", err)
	}
	for _, p := range f.patches {
		if p.offset < 0 || p.offset > st.Size()-int64(len(p.raw)) {
			return invalid("initializer %q: external data offset %d + %d bytes runs past the end of %s (%d bytes)",
				p.name, p.offset, len(p.raw), f.src, st.Size())
		}
	}
	if err := os.MkdirAll(filepath.Dir(f.dst), 0o755); err != nil {
		return fmt.Errorf("external data: %w", err)
	}
	return writeAtomicFile(f.dst, func(out *os.File) error {
		if _, err := io.Copy(out, in); err != nil {
			return err
		}
		for _, p := range f.patches {
			if _, err := out.WriteAt(p.raw, p.offset); err != nil {
				return err
			}
		}
		return nil
	})
}

// writeAtomic writes path through a temporary file in its directory:
// write, fsync, rename, fsync of the directory.
func writeAtomic(path string, write func(io.Writer) error) error {
	return writeAtomicFile(path, func(f *os.File) error { return write(f) })
}

func writeAtomicFile(path string, write func(*os.File) error) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	ok := false
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := write(tmp); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("writing %s: fsync: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	ok = true
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("writing %s: fsync of the directory: %w", path, err)
	}
	return nil
}
