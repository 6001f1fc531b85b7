package cache

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"
)

func validEntry(tb testing.TB, payload []byte) []byte {
	tb.Helper()
	k := testKey("fuzz")
	h := &entryHeader{Digest: k.Digest(), Key: k.info(programSum(k.Program)), CompileTime: time.Second, Created: time.Unix(1700000000, 0).UTC()}
	head, err := encodePrefix(h, payload)
	if err != nil {
		tb.Fatal(err)
	}
	return append(head, payload...)
}

// TestEntryLayout checks the documented byte layout field by field, reading
// it with encoding/binary rather than with the parser.
func TestEntryLayout(t *testing.T) {
	payload := []byte("payload bytes")
	b := validEntry(t, payload)
	hl := binary.LittleEndian.Uint32(b[12:16])
	checks := []struct {
		name      string
		got, want any
	}{
		{"magic", string(b[0:8]), "TBCACHE\x00"},
		{"version", binary.LittleEndian.Uint32(b[8:12]), uint32(2)},
		{"payload length", binary.LittleEndian.Uint64(b[16:24]), uint64(len(payload))},
		{"payload crc32c", binary.LittleEndian.Uint32(b[24:28]), crc32.Checksum(payload, crc32.MakeTable(crc32.Castagnoli))},
		{"reserved zero", [28]byte(b[28:56]), [28]byte{}},
		{"header sha256", [32]byte(b[56:88]), sha256.Sum256(append(append([]byte(nil), b[:56]...), b[88:88+hl]...))},
		{"file length", len(b), 88 + int(hl) + len(payload)},
		{"payload at end", string(b[88+hl:]), string(payload)},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	// The payload checksum is CRC-32C: its published check value, the CRC
	// of "123456789", is 0xE3069283 (RFC 3720, appendix B.4).
	if got := payloadSum([]byte("123456789")); got != 0xE3069283 {
		t.Errorf("payloadSum(\"123456789\") = %08x, want e3069283 (CRC-32C)", got)
	}
	h, p, why := parseEntry(b)
	if why != "" || !bytes.Equal(p, payload) || h.CompileTime != time.Second || h.Key.Name != "fuzz" {
		t.Errorf("parseEntry = %+v, %q, %q", h, p, why)
	}
}

// FuzzParseEntry feeds arbitrary bytes to the entry parser: it must never
// panic, and whatever it accepts must satisfy the format's invariants.
func FuzzParseEntry(f *testing.F) {
	good := validEntry(f, []byte("exe"))
	f.Add(good)
	f.Add(validEntry(f, nil))
	f.Add(good[:prefixLen])
	f.Add(good[:len(good)-1])
	f.Add([]byte{})
	f.Add([]byte("TBCACHE\x00"))
	bad := bytes.Clone(good)
	binary.LittleEndian.PutUint64(bad[16:], ^uint64(0))
	f.Add(bad)
	f.Fuzz(func(t *testing.T, b []byte) {
		h, payload, why := parseEntry(b)
		if why != "" {
			if payload != nil {
				t.Fatalf("rejected entry (%s) returned a payload", why)
			}
			return
		}
		hl := int(binary.LittleEndian.Uint32(b[12:]))
		if len(b) != prefixLen+hl+len(payload) || uint64(len(payload)) != binary.LittleEndian.Uint64(b[16:]) {
			t.Fatalf("accepted entry with inconsistent lengths")
		}
		if crc32.Checksum(payload, crc32.MakeTable(crc32.Castagnoli)) != binary.LittleEndian.Uint32(b[24:28]) {
			t.Fatalf("accepted entry with a wrong payload checksum")
		}
		if len(h.Digest) != 64 || h.CompileTime < 0 {
			t.Fatalf("accepted header %+v", h)
		}
	})
}
