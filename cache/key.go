package cache

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Key names one compilation: everything that can change the executable a
// compiler produces. Two compilations share a cache entry only when every
// field is equal; every field, including Name, is part of Digest.
//
// A nil and an empty slice or map are the same key (no program bytes, no
// inputs, no extra settings).
type Key struct {
	// Name is the program's name. It is part of the key because compilers
	// embed it in the executable (it appears in profiles and runtime
	// errors), and `tensorbridge cache ls` shows it.
	Name string

	// ProgramFormat says how Program is encoded: "stablehlo" (MLIR text or
	// bytecode), "hlo-proto", or a backend's own format. The same bytes in
	// two formats are two programs.
	ProgramFormat string

	// Program is the exact program the backend compiles. Only its SHA-256
	// enters the digest, so a large program is hashed once per Digest call.
	Program []byte

	// WeightsDigest identifies the values of weights and other constants
	// that are folded into the compiled program but are not spelled out in
	// Program (see WeightsHasher). It is what keeps two models with the same
	// architecture and different weights from sharing an executable. Leave
	// it empty only when Program itself contains every constant.
	WeightsDigest string

	// InputSpecs is one entry per program input, in order: dtype and
	// dimensions, as written by InputSpec ("f32[8,784]").
	InputSpecs []string

	// CompileOptions is the backend's compile options in a canonical form:
	// the serialized CompileOptions proto for PJRT, plus any compiler flags
	// taken from the environment (XLA_FLAGS, LIBTPU_INIT_ARGS). Debug-only
	// settings that do not change the code should be left out.
	CompileOptions string

	// Backend is tensorbridge's backend name ("pjrt", "cpu").
	Backend string

	// Plugin is the runtime plugin's name ("tpu", "cuda"); empty for a
	// backend without plugins.
	Plugin string

	// PluginVersion is the plugin's platform version and compiler version
	// (for PJRT, the client's platform_version). A plugin upgrade must miss.
	PluginVersion string

	// DeviceKind is the device kind the code is generated for, as the
	// runtime reports it ("TPU v5 lite", "NVIDIA H100 80GB HBM3").
	DeviceKind string

	// Topology is the device topology or device assignment the executable
	// is built for ("2x2x1", "1 device", a topology fingerprint).
	Topology string

	// Extra holds any other setting that changes the result and has no
	// field above (a tensorbridge lowering version, a precision policy).
	// Entries are encoded in sorted key order.
	Extra map[string]string
}

// keyDomain starts every key encoding, so a key digest can never equal the
// digest of some other structure hashed the same way.
const keyDomain = "tensorbridge-cache-key/v1\x00"

// Field tags of the key encoding. They are part of the on-disk format:
// never renumber them; a new field takes a new tag.
const (
	tagName           = 1
	tagProgramFormat  = 2
	tagProgram        = 3 // the program's SHA-256, 32 bytes
	tagWeightsDigest  = 4
	tagInputSpecs     = 5
	tagCompileOptions = 6
	tagBackend        = 7
	tagPlugin         = 8
	tagPluginVersion  = 9
	tagDeviceKind     = 10
	tagTopology       = 11
	tagExtra          = 12
)

// Digest returns the key's identity: the lower-case hexadecimal SHA-256 of
// its canonical encoding. The encoding is the domain string
// "tensorbridge-cache-key/v1\x00", then for each field in tag order one tag
// byte followed by the field: a string or byte string as a uvarint length
// and its bytes (Program as its 32-byte SHA-256, length-prefixed), a list as
// a uvarint count and each string length-prefixed, a map as a uvarint count
// and each key and value length-prefixed in ascending key order. Every
// variable-length part carries its length, so no two different keys encode
// to the same bytes.
func (k Key) Digest() string {
	return hex.EncodeToString(k.digest(programSum(k.Program)))
}

func programSum(p []byte) [32]byte { return sha256.Sum256(p) }

func (k Key) digest(prog [32]byte) []byte {
	h := sha256.New()
	e := encoder{h: h}
	h.Write([]byte(keyDomain))
	e.tag(tagName)
	e.str(k.Name)
	e.tag(tagProgramFormat)
	e.str(k.ProgramFormat)
	e.tag(tagProgram)
	e.bytes(prog[:])
	e.tag(tagWeightsDigest)
	e.str(k.WeightsDigest)
	e.tag(tagInputSpecs)
	e.uvarint(uint64(len(k.InputSpecs)))
	for _, s := range k.InputSpecs {
		e.str(s)
	}
	e.tag(tagCompileOptions)
	e.str(k.CompileOptions)
	e.tag(tagBackend)
	e.str(k.Backend)
	e.tag(tagPlugin)
	e.str(k.Plugin)
	e.tag(tagPluginVersion)
	e.str(k.PluginVersion)
	e.tag(tagDeviceKind)
	e.str(k.DeviceKind)
	e.tag(tagTopology)
	e.str(k.Topology)
	e.tag(tagExtra)
	names := make([]string, 0, len(k.Extra))
	for n := range k.Extra {
		names = append(names, n)
	}
	sort.Strings(names)
	e.uvarint(uint64(len(names)))
	for _, n := range names {
		e.str(n)
		e.str(k.Extra[n])
	}
	return h.Sum(nil)
}

// encoder writes the length-prefixed encoding into a hash.
type encoder struct {
	h   hash.Hash
	buf [binary.MaxVarintLen64]byte
}

func (e *encoder) tag(t byte)       { e.h.Write([]byte{t}) }
func (e *encoder) uvarint(n uint64) { e.h.Write(e.buf[:binary.PutUvarint(e.buf[:], n)]) }
func (e *encoder) bytes(b []byte)   { e.uvarint(uint64(len(b))); e.h.Write(b) }
func (e *encoder) str(s string)     { e.uvarint(uint64(len(s))); e.h.Write([]byte(s)) }
func (e *encoder) varint(n int64)   { e.h.Write(e.buf[:binary.PutVarint(e.buf[:], n)]) }
func (e *encoder) strs(ss ...string) {
	for _, s := range ss {
		e.str(s)
	}
}

// KeyInfo is the readable description of a Key stored in each disk entry's
// header and shown by `tensorbridge cache ls`. It holds digests, not the
// program or weights.
type KeyInfo struct {
	Name           string            `json:"name,omitempty"`
	ProgramFormat  string            `json:"program_format,omitempty"`
	ProgramSHA256  string            `json:"program_sha256"`
	ProgramBytes   int               `json:"program_bytes"`
	WeightsDigest  string            `json:"weights_digest,omitempty"`
	InputSpecs     []string          `json:"inputs,omitempty"`
	CompileOptions string            `json:"compile_options,omitempty"` // as given when short UTF-8 text, else empty
	OptionsSHA256  string            `json:"compile_options_sha256"`
	Backend        string            `json:"backend,omitempty"`
	Plugin         string            `json:"plugin,omitempty"`
	PluginVersion  string            `json:"plugin_version,omitempty"`
	DeviceKind     string            `json:"device_kind,omitempty"`
	Topology       string            `json:"topology,omitempty"`
	Extra          map[string]string `json:"extra,omitempty"`
}

// maxShownOptions is the longest CompileOptions text copied into KeyInfo;
// longer or binary options are represented by their digest only.
const maxShownOptions = 1024

// info describes k for listings (a Disk entry's header); prog is
// programSum(k.Program).
func (k Key) info(prog [32]byte) KeyInfo {
	opt := sha256.Sum256([]byte(k.CompileOptions))
	ki := KeyInfo{
		Name:          k.Name,
		ProgramFormat: k.ProgramFormat,
		ProgramSHA256: hex.EncodeToString(prog[:]),
		ProgramBytes:  len(k.Program),
		WeightsDigest: k.WeightsDigest,
		InputSpecs:    append([]string(nil), k.InputSpecs...),
		OptionsSHA256: hex.EncodeToString(opt[:]),
		Backend:       k.Backend,
		Plugin:        k.Plugin,
		PluginVersion: k.PluginVersion,
		DeviceKind:    k.DeviceKind,
		Topology:      k.Topology,
	}
	if len(k.CompileOptions) <= maxShownOptions && utf8.ValidString(k.CompileOptions) {
		ki.CompileOptions = k.CompileOptions
	}
	if len(k.Extra) > 0 {
		ki.Extra = make(map[string]string, len(k.Extra))
		for n, v := range k.Extra {
			ki.Extra[n] = v
		}
	}
	return ki
}

// InputSpec formats one entry of Key.InputSpecs: the dtype name followed by
// the dimensions in brackets, "f32[8,784]"; a scalar is "f32[]". A negative
// dimension (a dynamic axis) is written as is.
func InputSpec(dtype string, dims ...int) string {
	var b strings.Builder
	b.WriteString(dtype)
	b.WriteByte('[')
	for i, d := range dims {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(d))
	}
	b.WriteByte(']')
	return b.String()
}

// WeightsHasher computes a Key.WeightsDigest from named tensors. Each tensor
// enters with its name, dtype, dimensions and raw bytes, all length-prefixed,
// so renaming, reshaping or retyping a tensor changes the digest as much as
// changing a value does. Add tensors in a fixed order (sorted by name, or the
// model's parameter order): the digest depends on it.
//
// The zero value is not usable; call NewWeightsHasher.
type WeightsHasher struct {
	e encoder
	n uint64
}

// weightsDomain starts every weights encoding.
const weightsDomain = "tensorbridge-cache-weights/v1\x00"

// NewWeightsHasher returns an empty hasher.
func NewWeightsHasher() *WeightsHasher {
	w := &WeightsHasher{e: encoder{h: sha256.New()}}
	w.e.h.Write([]byte(weightsDomain))
	return w
}

// Add hashes one tensor. data is its raw little-endian contents.
func (w *WeightsHasher) Add(name, dtype string, dims []int, data []byte) {
	w.n++
	w.e.strs(name, dtype)
	w.e.uvarint(uint64(len(dims)))
	for _, d := range dims {
		w.e.varint(int64(d))
	}
	w.e.bytes(data)
}

// Sum returns "sha256:" and the hexadecimal digest of the tensors added so
// far, followed by their count ("sha256:…/3"), so a listing shows how many
// tensors a digest covers. Sum does not reset the hasher.
func (w *WeightsHasher) Sum() string {
	return "sha256:" + hex.EncodeToString(w.e.h.Sum(nil)) + "/" + strconv.FormatUint(w.n, 10)
}
