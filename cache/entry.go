package cache

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"time"
)

// Entry file format, version 2. All integers are little-endian.
//
//	offset  size  field
//	0       8     magic "TBCACHE\x00"
//	8       4     format version (2)
//	12      4     header length H (at most maxHeader)
//	16      8     payload length P
//	24      4     CRC-32C (Castagnoli) of the payload
//	28      28    zero
//	56      32    SHA-256 of bytes 0..55 followed by the header
//	88      H     header: JSON of entryHeader
//	88+H    P     payload: the serialized executable
//
// The file is exactly 88+H+P bytes long. The header checksum covers the
// fixed fields too, so a flipped bit anywhere but the payload is caught
// before the JSON is parsed; the payload checksum catches the rest. A
// truncated or extended file fails the length check.
//
// The checksums guard against damage (a torn write, a bad disk), not
// against someone who can write the cache directory. Version 1 took a
// SHA-256 of the payload too: on a warm start that hash of a 44 MB
// executable cost ~40 ms of the process's ~650 ms, where CRC-32C, computed
// with the CPU's CRC instruction by hash/crc32, costs a few. A version-1
// entry fails the version check and is recompiled.
const (
	magic         = "TBCACHE\x00"
	formatVersion = 2
	prefixLen     = 88
	maxHeader     = 1 << 20
)

// entryHeader is the JSON header of an entry file.
type entryHeader struct {
	Digest      string        `json:"digest"`           // Key.Digest of the entry; must match the file name
	Key         KeyInfo       `json:"key"`              // what the key was, for listings
	CompileTime time.Duration `json:"compile_ns"`       // how long the compile took: what a hit saves
	Created     time.Time     `json:"created"`          // when the entry was written
	Writer      string        `json:"writer,omitempty"` // host and process that wrote it, for diagnosis
}

// ErrCorrupt matches every *CorruptError.
var ErrCorrupt = errors.New("corrupt compile cache entry")

// CorruptError says a disk entry failed validation: bad magic or version,
// wrong lengths, a checksum mismatch, unreadable header, or a header for
// another key. Such an entry is never returned; Disk removes it and the
// lookup is a miss.
type CorruptError struct {
	Path   string // the entry file
	Reason string // what failed, with expected and found values
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("compile cache entry %s is corrupt: %s", e.Path, e.Reason)
}

// Is matches ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// encodePrefix returns the fixed prefix and header of an entry whose payload
// is payload; the file is their concatenation followed by payload.
func encodePrefix(h *entryHeader, payload []byte) ([]byte, error) {
	hj, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encoding entry header: %w", err)
	}
	if len(hj) > maxHeader {
		return nil, fmt.Errorf("entry header is %d bytes, more than the %d allowed (key description too large)", len(hj), maxHeader)
	}
	buf := make([]byte, prefixLen, prefixLen+len(hj))
	copy(buf, magic)
	binary.LittleEndian.PutUint32(buf[8:], formatVersion)
	binary.LittleEndian.PutUint32(buf[12:], uint32(len(hj)))
	binary.LittleEndian.PutUint64(buf[16:], uint64(len(payload)))
	binary.LittleEndian.PutUint32(buf[24:], payloadSum(payload))
	hs := headerSum(buf[:56], hj)
	copy(buf[56:88], hs[:])
	return append(buf, hj...), nil
}

// castagnoli is the CRC-32C table (hardware-accelerated by hash/crc32).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// payloadSum is the payload checksum of format version 2.
func payloadSum(payload []byte) uint32 { return crc32.Checksum(payload, castagnoli) }

func headerSum(fixed, header []byte) [32]byte {
	h := sha256.New()
	h.Write(fixed)
	h.Write(header)
	var s [32]byte
	h.Sum(s[:0])
	return s
}

// prefix is the parsed fixed part of an entry.
type prefix struct {
	headerLen  int
	payloadLen uint64
	payloadSum uint32
	headerSum  [32]byte
}

// parsePrefix validates the fixed 88 bytes against the file's size.
func parsePrefix(b []byte, fileSize int64) (prefix, string) {
	var p prefix
	if len(b) < prefixLen {
		return p, fmt.Sprintf("file is %d bytes, shorter than the %d-byte prefix", len(b), prefixLen)
	}
	if string(b[:8]) != magic {
		return p, fmt.Sprintf("bad magic %q, want %q", b[:8], magic)
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != formatVersion {
		return p, fmt.Sprintf("format version %d, want %d", v, formatVersion)
	}
	hl := binary.LittleEndian.Uint32(b[12:])
	if hl > maxHeader {
		return p, fmt.Sprintf("header length %d exceeds the %d limit", hl, maxHeader)
	}
	p.headerLen = int(hl)
	p.payloadLen = binary.LittleEndian.Uint64(b[16:])
	p.payloadSum = binary.LittleEndian.Uint32(b[24:])
	for _, z := range b[28:56] {
		if z != 0 {
			return p, "reserved bytes 28..55 of the prefix are not zero"
		}
	}
	copy(p.headerSum[:], b[56:88])
	rest := uint64(fileSize) - prefixLen
	if fileSize < prefixLen || rest < uint64(p.headerLen) || rest-uint64(p.headerLen) != p.payloadLen {
		return p, fmt.Sprintf("file is %d bytes, want %d (prefix %d + header %d + payload %d)",
			fileSize, uint64(prefixLen)+uint64(p.headerLen)+p.payloadLen, prefixLen, p.headerLen, p.payloadLen)
	}
	return p, ""
}

// parseHeader checks the header checksum and decodes the header. fixed is
// the first 56 bytes of the file, hb the header bytes.
func parseHeader(p prefix, fixed, hb []byte) (entryHeader, string) {
	var h entryHeader
	if s := headerSum(fixed[:56], hb); s != p.headerSum {
		return h, fmt.Sprintf("header checksum %x, want %x", s[:8], p.headerSum[:8])
	}
	dec := json.NewDecoder(bytes.NewReader(hb))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return h, fmt.Sprintf("header is not valid JSON: %v", err)
	}
	if dec.More() {
		return h, "header has data after its JSON object"
	}
	if _, err := hex.DecodeString(h.Digest); err != nil || len(h.Digest) != 64 {
		return h, fmt.Sprintf("header digest %q is not 64 hexadecimal digits", h.Digest)
	}
	if h.CompileTime < 0 {
		return h, fmt.Sprintf("header compile time %d is negative", h.CompileTime)
	}
	return h, ""
}

// parseEntry validates a whole entry file and returns its header and
// payload (a sub-slice of b). The reason is empty when the entry is valid.
func parseEntry(b []byte) (entryHeader, []byte, string) {
	p, why := parsePrefix(b, int64(len(b)))
	if why != "" {
		return entryHeader{}, nil, why
	}
	hb := b[prefixLen : prefixLen+p.headerLen]
	h, why := parseHeader(p, b, hb)
	if why != "" {
		return h, nil, why
	}
	payload := b[prefixLen+p.headerLen:]
	if s := payloadSum(payload); s != p.payloadSum {
		return h, nil, fmt.Sprintf("payload checksum (CRC-32C) %08x, want %08x", s, p.payloadSum)
	}
	return h, payload, ""
}
