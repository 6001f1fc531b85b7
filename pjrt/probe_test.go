package pjrt

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"errors"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tensorbridge/tensorbridge/driver"
	"github.com/tensorbridge/tensorbridge/errs"
)

// elfHeader builds the 64 bytes of an ELF header by hand, following the
// System V ABI's layout (e_ident[16], e_type@16, e_machine@18,
// e_version@20, e_entry@24, e_phoff@32, e_shoff@40, e_flags@48,
// e_ehsize@52, e_phentsize@54, e_phnum@56, e_shentsize@58, e_shnum@60,
// e_shstrndx@62), little-endian, 64-bit.
func elfHeader(typ elf.Type, machine elf.Machine, phnum, shnum uint16, shoff uint64) []byte {
	h := make([]byte, 64)
	copy(h, "\x7fELF")
	h[4], h[5], h[6] = 2, 1, 1 // ELFCLASS64, ELFDATA2LSB, EV_CURRENT
	le := binary.LittleEndian
	le.PutUint16(h[16:], uint16(typ))
	le.PutUint16(h[18:], uint16(machine))
	le.PutUint32(h[20:], 1)
	le.PutUint64(h[32:], 64) // program headers right after this header
	le.PutUint64(h[40:], shoff)
	le.PutUint16(h[52:], 64)
	le.PutUint16(h[54:], 56)
	le.PutUint16(h[56:], phnum)
	le.PutUint16(h[58:], 64)
	le.PutUint16(h[60:], shnum)
	return h
}

// elf32Header is the 52-byte header of a 32-bit little-endian ELF file.
func elf32Header(typ elf.Type, machine elf.Machine) []byte {
	h := make([]byte, 52)
	copy(h, "\x7fELF")
	h[4], h[5], h[6] = 1, 1, 1
	le := binary.LittleEndian
	le.PutUint16(h[16:], uint16(typ))
	le.PutUint16(h[18:], uint16(machine))
	le.PutUint32(h[20:], 1)
	le.PutUint32(h[28:], 52) // e_phoff
	le.PutUint16(h[40:], 52) // e_ehsize
	le.PutUint16(h[42:], 32) // e_phentsize
	le.PutUint16(h[44:], 1)  // e_phnum
	return h
}

func TestCheckELFHeader(t *testing.T) {
	dynX86 := elfHeader(elf.ET_DYN, elf.EM_X86_64, 1, 0, 0)
	tests := []struct {
		name   string
		hdr    []byte
		size   int64 // 0: len(hdr)
		goarch string
		kind   ProbeFailure
		want   string
	}{
		{"valid x86-64 shared library", dynX86, 4096, "amd64", "", ""},
		{"empty", nil, 0, "amd64", ProbeNotSharedLibrary, "empty file (0 bytes)"},
		{"text", []byte("hello world, not a library"), 0, "amd64", ProbeNotSharedLibrary, "not an ELF file: it starts with 68 65 6c 6c 6f 20 77 6f"},
		{"wheel", []byte("PK\x03\x04\x14\x00\x00\x00"), 0, "amd64", ProbeNotSharedLibrary, "zip archive"},
		{"html error page", []byte("<!DOCTYPE html><html><body>404"), 0, "amd64", ProbeNotSharedLibrary, "HTML"},
		{"linker script", []byte("/* GNU ld script\n   Use the shared library */\nGROUP ( /lib/libm.so.6 )"), 0, "amd64", ProbeNotSharedLibrary, "linker script"},
		{"git lfs pointer", []byte("version https://git-lfs.github.com/spec/v1\noid sha256:"), 0, "amd64", ProbeNotSharedLibrary, "Git LFS"},
		{"short", []byte("\x7fELF\x02\x01"), 0, "amd64", ProbeNotSharedLibrary, "truncated: 6 bytes"},
		{"aarch64 on amd64", elfHeader(elf.ET_DYN, elf.EM_AARCH64, 1, 0, 0), 4096, "amd64", ProbeWrongArchitecture,
			"aarch64 64-bit plugin on linux/amd64 (ELF machine EM_AARCH64, ELFCLASS64); this process can only load x86-64 64-bit shared libraries"},
		{"x86-64 on arm64", dynX86, 4096, "arm64", ProbeWrongArchitecture, "x86-64 64-bit plugin on linux/arm64"},
		{"32-bit x86 on amd64", elf32Header(elf.ET_DYN, elf.EM_386), 4096, "amd64", ProbeWrongArchitecture, "x86 (i386) 32-bit plugin on linux/amd64"},
		{"executable", elfHeader(elf.ET_EXEC, elf.EM_X86_64, 1, 0, 0), 4096, "amd64", ProbeNotSharedLibrary, "ET_EXEC"},
		{"object file", elfHeader(elf.ET_REL, elf.EM_X86_64, 0, 0, 0), 4096, "amd64", ProbeNotSharedLibrary, "ET_REL"},
		{"no program headers", elfHeader(elf.ET_DYN, elf.EM_X86_64, 0, 0, 0), 4096, "amd64", ProbeNotSharedLibrary, "no program headers"},
		// 30 section headers of 64 bytes at 1,000,000 end at 1,001,920.
		{"truncated download", elfHeader(elf.ET_DYN, elf.EM_X86_64, 1, 30, 1000000), 500000, "amd64", ProbeNotSharedLibrary,
			"section header table at bytes 1000000-1001920 but the file has 500000 bytes"},
		{"section table exactly at the end", elfHeader(elf.ET_DYN, elf.EM_X86_64, 1, 30, 1000000), 1001920, "amd64", "", ""},
		{"unknown goarch skips the machine check", elfHeader(elf.ET_DYN, elf.EM_SPARCV9, 1, 0, 0), 4096, "wasm", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			size := tc.size
			if size == 0 {
				size = int64(len(tc.hdr))
			}
			kind, detail, fix := checkELFHeader(tc.hdr, size, "linux", tc.goarch)
			if kind != tc.kind {
				t.Fatalf("kind %q (%s), want %q", kind, detail, tc.kind)
			}
			if !strings.Contains(detail, tc.want) {
				t.Errorf("detail %q does not contain %q", detail, tc.want)
			}
			if kind != "" && fix == "" {
				t.Errorf("no fix for %s", kind)
			}
		})
	}
}

func FuzzCheckELFHeader(f *testing.F) {
	f.Add(elfHeader(elf.ET_DYN, elf.EM_X86_64, 1, 30, 1000), int64(5000))
	f.Add(elf32Header(elf.ET_DYN, elf.EM_ARM), int64(100))
	f.Add([]byte("PK\x03\x04"), int64(4))
	f.Add([]byte{}, int64(0))
	f.Fuzz(func(t *testing.T, hdr []byte, size int64) {
		if len(hdr) > 64 {
			hdr = hdr[:64]
		}
		if size < int64(len(hdr)) {
			size = int64(len(hdr))
		}
		kind, detail, _ := checkELFHeader(hdr, size, "linux", "amd64")
		if kind == "" {
			if len(hdr) < 52 || string(hdr[:4]) != "\x7fELF" {
				t.Fatalf("accepted a header of %d bytes: % x", len(hdr), hdr)
			}
			bo := binary.ByteOrder(binary.LittleEndian)
			if hdr[5] == 2 {
				bo = binary.BigEndian
			}
			if elf.Type(bo.Uint16(hdr[16:])) != elf.ET_DYN || elf.Machine(bo.Uint16(hdr[18:])) != elf.EM_X86_64 {
				t.Fatalf("accepted type/machine of % x", hdr[16:20])
			}
		} else if detail == "" {
			t.Fatalf("kind %s without detail", kind)
		}
	})
}

// Messages as glibc's dynamic loader (elf/dl-load.c, dl-version.c,
// dl-lookup.c) writes them.
func TestClassifyDlopen(t *testing.T) {
	p := "/opt/plugins/pjrt_c_api_cuda_plugin.so"
	tests := []struct {
		msg  string
		kind ProbeFailure
		want string
	}{
		{"libcudart.so.13: cannot open shared object file: No such file or directory", ProbeMissingDependency, "needs libcudart.so.13"},
		{p + ": cannot open shared object file: No such file or directory", ProbeNotFound, p},
		{"/lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found (required by " + p + ")", ProbeMissingDependency, "too old"},
		{p + ": undefined symbol: cudnnCreate", ProbeMissingDependency, "cudnnCreate"},
		{p + ": wrong ELF class: ELFCLASS32", ProbeWrongArchitecture, "ELFCLASS32"},
		{p + ": file too short", ProbeNotSharedLibrary, "file too short"},
		{p + ": invalid ELF header", ProbeNotSharedLibrary, "invalid ELF header"},
		{p + ": cannot enable executable stack as shared object requires: Invalid argument", ProbeLoadFailed, "executable stack"},
	}
	for _, tc := range tests {
		kind, detail, _ := classifyDlopen(p, tc.msg)
		if kind != tc.kind || !strings.Contains(detail, tc.want) {
			t.Errorf("%q: %s %q, want %s containing %q", tc.msg, kind, detail, tc.kind, tc.want)
		}
	}
}

// The protocol survives whatever the plugin prints on stdout, in any
// chunking.
func TestProbeOutput(t *testing.T) {
	stream := "plugin says hi\n" + probeMarker + " stage start\nnoise " + probeMarker + " stage fake\n" +
		probeMarker + " stage load\n" + strings.Repeat("x", 3000) + "\n" + probeMarker + ` result {"loaded":true}` + "\ntrailing"
	for _, chunk := range []int{1, 7, 4096} {
		var o probeOutput
		for s := stream; len(s) > 0; {
			n := min(chunk, len(s))
			_, _ = o.Write([]byte(s[:n]))
			s = s[n:]
		}
		o.flush()
		if strings.Join(o.stages, ",") != "start,load" || string(o.result) != `{"loaded":true}` {
			t.Errorf("chunk %d: stages %v result %q", chunk, o.stages, o.result)
		}
	}
}

func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// otherArch is a machine that is not this one's.
func otherArch() (elf.Machine, string) {
	if runtime.GOARCH == "arm64" {
		return elf.EM_X86_64, "x86-64 64-bit plugin on linux/arm64"
	}
	return elf.EM_AARCH64, "aarch64 64-bit plugin on " + runtime.GOOS + "/" + runtime.GOARCH
}

// Files the ELF check rejects never reach a child process.
func TestProbePluginPreflight(t *testing.T) {
	if !elfOS() {
		t.Skip("not an ELF system")
	}
	dir := t.TempDir()
	junk := make([]byte, 4096)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range junk {
		junk[i] = byte(r.UintN(256))
	}
	junk[0] = 0 // not \x7f: random bytes that cannot start like ELF
	m, wantArch := otherArch()
	wrong := append(elfHeader(elf.ET_DYN, m, 1, 0, 0), make([]byte, 4096)...)
	tests := []struct {
		name string
		path string
		kind ProbeFailure
		want string
	}{
		{"garbage", writeFile(t, dir, "pjrt_c_api_junk_plugin.so", junk), ProbeNotSharedLibrary, "not an ELF file"},
		{"empty", writeFile(t, dir, "pjrt_c_api_empty_plugin.so", nil), ProbeNotSharedLibrary, "empty file"},
		{"wrong architecture", writeFile(t, dir, "pjrt_c_api_arm_plugin.so", wrong), ProbeWrongArchitecture, wantArch},
		{"missing", filepath.Join(dir, "nope.so"), ProbeNotFound, "no such file"},
		{"directory", dir, ProbeNotSharedLibrary, "not a regular file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := ProbePlugin(context.Background(), tc.path, ProbeOptions{})
			if !errors.Is(err, tc.kind) {
				t.Fatalf("err %v, want kind %s", err, tc.kind)
			}
			var pe *ProbeError
			if !errors.As(err, &pe) || !strings.Contains(pe.Detail, tc.want) || pe.Stage != "preflight" {
				t.Fatalf("error %#v, want preflight detail containing %q", pe, tc.want)
			}
			if res == nil || res.PID != 0 || res.OK() {
				t.Errorf("result %+v: want a failed result and no child", res)
			}
		})
	}
}

// findLibm returns the C math library for this machine: a real shared
// library that is not a PJRT plugin.
func findLibm(t *testing.T) string {
	t.Helper()
	want, ok := goarchELF[runtime.GOARCH]
	if !ok || runtime.GOOS != "linux" {
		t.Skip("no libm candidate list for " + runtime.GOOS + "/" + runtime.GOARCH)
	}
	var cands []string
	for _, pat := range []string{"/lib/*-linux-gnu*/libm.so.6", "/usr/lib/*-linux-gnu*/libm.so.6", "/lib64/libm.so.6",
		"/usr/lib64/libm.so.6", "/lib/libm.so.6", "/usr/lib/libm.so.6", "/lib/libc.musl-*.so.1"} {
		m, _ := filepath.Glob(pat)
		cands = append(cands, m...)
	}
	if out, err := exec.Command("ldconfig", "-p").Output(); err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "libm.so.6 ") {
				if _, p, ok := strings.Cut(l, "=> "); ok {
					cands = append(cands, strings.TrimSpace(p))
				}
			}
		}
	}
	for _, c := range cands {
		f, err := elf.Open(c)
		if err != nil {
			continue
		}
		ok := f.Machine == want.machine && f.Class == want.class && f.Type == elf.ET_DYN
		_ = f.Close()
		if ok {
			return c
		}
	}
	t.Skipf("no libm.so.6 for %s among %v", runtime.GOARCH, cands)
	return ""
}

func TestProbePluginNotAPlugin(t *testing.T) {
	libm := findLibm(t)
	res, err := ProbePlugin(context.Background(), libm, ProbeOptions{})
	if !errors.Is(err, ProbeMissingSymbol) {
		t.Fatalf("%s: err %v, want %s", libm, err, ProbeMissingSymbol)
	}
	if res.PID == 0 || res.Stage != "load" || !strings.Contains(res.Failure.Detail, "GetPjrtApi") {
		t.Errorf("result %+v failure %+v", res, res.Failure)
	}
	// Concurrent probes of one file and options share one child.
	opts := ProbeOptions{Env: []string{"TB_PROBE_TEST_KEY=concurrent"}}
	pids := make(chan int, 4)
	for range 4 {
		go func() {
			r, _ := ProbePlugin(context.Background(), libm, opts)
			pids <- r.PID
		}()
	}
	first := <-pids
	for range 3 {
		if p := <-pids; p != first || p == 0 {
			t.Errorf("concurrent probes ran children %d and %d", first, p)
		}
	}
}

// soSpec describes a tiny shared library written by hand (soFile).
type soSpec struct {
	needed string // a DT_NEEDED library name, "" for none
	code   []byte // GetPjrtApi's machine code, nil for no such symbol
	api    []byte // data placed at apiAddr, which the code may return
}

// Addresses in the hand-made library: one read+execute segment at 0 (file
// offset 0) and one read+write segment at dataAddr (file offset dataAddr).
const (
	codeAddr = 0x400
	dataAddr = 0x1000
	apiAddr  = dataAddr + 0x100
)

// soFile writes an ELF64 little-endian shared object for this machine by
// hand, following the System V gABI: program headers PT_LOAD (text),
// PT_LOAD (data), PT_DYNAMIC, PT_GNU_STACK; a dynamic section with
// DT_NEEDED, DT_HASH, DT_STRTAB, DT_SYMTAB, DT_STRSZ, DT_SYMENT; a SysV hash
// table of one bucket; and GetPjrtApi as its only symbol. No sections or
// relocations: the dynamic loader needs neither.
func soFile(t *testing.T, dir, name string, s soSpec) string {
	t.Helper()
	machine := goarchELF[runtime.GOARCH].machine
	le := binary.LittleEndian
	text := make([]byte, dataAddr)
	data := make([]byte, 0x200)
	copy(text, elfHeader(elf.ET_DYN, machine, 4, 0, 0))
	// Program headers at 64, 56 bytes each.
	ph := func(i int, typ elf.ProgType, flags elf.ProgFlag, off, filesz, memsz, align uint64) {
		b := text[64+56*i:]
		le.PutUint32(b[0:], uint32(typ))
		le.PutUint32(b[4:], uint32(flags))
		le.PutUint64(b[8:], off)
		le.PutUint64(b[16:], off) // vaddr = offset
		le.PutUint64(b[24:], off)
		le.PutUint64(b[32:], filesz)
		le.PutUint64(b[40:], memsz)
		le.PutUint64(b[48:], align)
	}
	const dynOff = dataAddr // the dynamic section starts the data segment
	ph(0, elf.PT_LOAD, elf.PF_R|elf.PF_X, 0, dataAddr, dataAddr, 0x1000)
	ph(1, elf.PT_LOAD, elf.PF_R|elf.PF_W, dataAddr, uint64(len(data)), uint64(len(data)), 0x1000)
	ph(2, elf.PT_DYNAMIC, elf.PF_R|elf.PF_W, dynOff, 7*16, 7*16, 8)
	ph(3, elf.PT_GNU_STACK, elf.PF_R|elf.PF_W, 0, 0, 0, 16)
	// String table at 0x200: "\0GetPjrtApi\0<needed>\0".
	const strtab, symtab, hash = 0x200, 0x280, 0x2c0
	strs := "\x00GetPjrtApi\x00" + s.needed + "\x00"
	copy(text[strtab:], strs)
	// Symbols at 0x280: the null symbol, then GetPjrtApi (if any code).
	nsym := 1
	if s.code != nil {
		sym := text[symtab+24:]
		le.PutUint32(sym[0:], 1)                              // st_name
		sym[4] = byte(elf.STB_GLOBAL)<<4 | byte(elf.STT_FUNC) // st_info
		le.PutUint16(sym[6:], 1)                              // st_shndx: defined (not SHN_UNDEF)
		le.PutUint64(sym[8:], codeAddr)                       // st_value
		le.PutUint64(sym[16:], uint64(len(s.code)))           // st_size
		copy(text[codeAddr:], s.code)
		nsym = 2
	}
	// SysV hash at 0x2c0: nbucket 1, nchain nsym, bucket[0] = last symbol.
	le.PutUint32(text[hash:], 1)
	le.PutUint32(text[hash+4:], uint32(nsym))
	le.PutUint32(text[hash+8:], uint32(nsym-1))
	// Dynamic section.
	dyn := func(i int, tag elf.DynTag, v uint64) {
		le.PutUint64(data[16*i:], uint64(tag))
		le.PutUint64(data[16*i+8:], v)
	}
	i := 0
	if s.needed != "" {
		dyn(i, elf.DT_NEEDED, uint64(len("\x00GetPjrtApi\x00")))
		i++
	}
	for _, e := range []struct {
		tag elf.DynTag
		v   uint64
	}{{elf.DT_HASH, hash}, {elf.DT_STRTAB, strtab}, {elf.DT_SYMTAB, symtab}, {elf.DT_STRSZ, uint64(len(strs))}, {elf.DT_SYMENT, 24}} {
		dyn(i, e.tag, e.v)
		i++
	}
	copy(data[apiAddr-dataAddr:], s.api)
	return writeFile(t, dir, name, append(text, data...))
}

// x86-64 machine code for GetPjrtApi variants.
func amd64ReturnAPI() []byte {
	// lea rax, [rip + rel32]; ret. rel32 counts from the next instruction.
	rel := uint32(apiAddr - (codeAddr + 7))
	return []byte{0x48, 0x8d, 0x05, byte(rel), byte(rel >> 8), byte(rel >> 16), byte(rel >> 24), 0xc3}
}

var (
	amd64Crash = []byte{0x31, 0xc0, 0xc7, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc3}       // xor eax,eax; mov dword [rax],0; ret
	amd64Hang  = []byte{0xb8, 0x22, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xeb, 0xf7, 0xc3} // loop: mov eax,34 (pause); syscall; jmp loop
	amd64Ret   = []byte{0xc3}
)

// pjrtAPI lays out the start of a PJRT_Api (pjrt_c_api.h): struct_size,
// extension_start, PJRT_Api_Version{struct_size 24, extension_start,
// major, minor}, then fns function pointers, each set to ptr.
func pjrtAPI(structSize uint64, major, minor int32, fns int, ptr uint64) []byte {
	b := make([]byte, 40+8*fns)
	le := binary.LittleEndian
	le.PutUint64(b[0:], structSize)
	le.PutUint64(b[16:], 24)
	le.PutUint32(b[32:], uint32(major))
	le.PutUint32(b[36:], uint32(minor))
	for i := 0; i < fns; i++ {
		le.PutUint64(b[40+8*i:], ptr)
	}
	return b
}

// Hand-made libraries exercise each failure a real plugin can have, in a
// child: this test process must survive all of them.
func TestProbePluginHandMade(t *testing.T) {
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		t.Skip("hand-made ELF libraries are written for linux/amd64 and linux/arm64")
	}
	dir := t.TempDir()
	type tc struct {
		name    string
		spec    soSpec
		timeout time.Duration
		kind    ProbeFailure
		want    string
	}
	tests := []tc{
		{"missing dependency", soSpec{needed: "libtensorbridge-no-such-lib.so.7"}, 0, ProbeMissingDependency,
			"needs libtensorbridge-no-such-lib.so.7, which the dynamic loader cannot find"},
		{"loads but no GetPjrtApi", soSpec{}, 0, ProbeMissingSymbol, "exports no GetPjrtApi"},
	}
	if runtime.GOARCH == "amd64" {
		// The PJRT_Api the code returns lies at apiAddr; its function
		// pointers point at a bare ret (only their non-nil-ness is read).
		retAt := uint64(codeAddr + 0x40)
		withRet := func(code []byte) []byte {
			c := make([]byte, 0x41)
			copy(c, code)
			c[0x40] = amd64Ret[0]
			return c
		}
		tests = append(tests,
			tc{"PJRT API major 1", soSpec{code: amd64ReturnAPI(), api: pjrtAPI(40+8*3, 1, 0, 3, 0)}, 0, ProbeAPIVersion,
				"plugin implements PJRT C API 1.0; this binding speaks major version 0 only"},
			tc{"PJRT_Api struct too small", soSpec{code: amd64ReturnAPI(), api: pjrtAPI(16, 0, 83, 0, 0)}, 0, ProbeAPIVersion,
				"struct_size 16 is outside"},
			tc{"table without client functions", soSpec{code: withRet(amd64ReturnAPI()), api: pjrtAPI(40+8*3, 0, 1, 3, retAt)}, 0, ProbeAPIVersion,
				"lacks PJRT_Client_Create"},
			tc{"segfault in GetPjrtApi", soSpec{code: amd64Crash}, 0, ProbeCrashed, "while loading the plugin"},
			tc{"GetPjrtApi never returns", soSpec{code: amd64Hang}, 2 * time.Second, ProbeTimedOut, "the probe process was killed"},
		)
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := soFile(t, dir, "pjrt_c_api_hand"+string(rune('a'+i))+"_plugin.so", tc.spec)
			res, err := ProbePlugin(context.Background(), p, ProbeOptions{Timeout: tc.timeout})
			if !errors.Is(err, tc.kind) {
				t.Fatalf("err %v, want kind %s\nstderr:\n%s", err, tc.kind, res.Stderr)
			}
			if !strings.Contains(res.Failure.Detail, tc.want) {
				t.Errorf("detail %q, want it to contain %q", res.Failure.Detail, tc.want)
			}
			if tc.kind == ProbeCrashed && !strings.Contains(res.Stderr, "SIGSEGV") {
				t.Errorf("crash report lacks the signal:\n%s", res.Stderr)
			}
			if res.PID > 0 && tc.kind == ProbeTimedOut {
				if err := syscall.Kill(res.PID, 0); !errors.Is(err, syscall.ESRCH) {
					t.Errorf("probe child %d still exists after the timeout (kill 0: %v)", res.PID, err)
				}
			}
		})
	}
}

// The parent's handling of a child that hangs, dies, exits mutely or
// answers garbage, simulated by the test-only fault variable.
func TestProbeChildFaults(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("uses linux process checks")
	}
	lib := findLibm(t) // any file the ELF check passes; the faults happen before loading
	tests := []struct {
		fault   string
		timeout time.Duration
		kind    ProbeFailure
		want    string
	}{
		{"sleep", 2 * time.Second, ProbeTimedOut, "no answer within 2s"},
		{"kill", 0, ProbeCrashed, "was killed by signal 9"},
		{"silent", 0, ProbeNotRun, "exited without running the probe"},
		{"garbage", 0, ProbeNotRun, "invalid JSON"},
	}
	for _, tc := range tests {
		t.Run(tc.fault, func(t *testing.T) {
			res, err := ProbePlugin(context.Background(), lib, ProbeOptions{Timeout: tc.timeout, Env: []string{envProbeTestFault + "=" + tc.fault}})
			if !errors.Is(err, tc.kind) {
				t.Fatalf("err %v, want kind %s", err, tc.kind)
			}
			if !strings.Contains(res.Failure.Detail, tc.want) {
				t.Errorf("detail %q, want it to contain %q", res.Failure.Detail, tc.want)
			}
			if res.PID == 0 {
				t.Fatal("no child pid recorded")
			}
			if err := syscall.Kill(res.PID, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("probe child %d still exists (kill 0: %v)", res.PID, err)
			}
		})
	}
	// A cancelled caller gets its context's error, not a cached failure.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ProbePlugin(ctx, lib, ProbeOptions{Env: []string{envProbeTestFault + "=sleep"}}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

func installedPlugin(t *testing.T, k Kind) string {
	t.Helper()
	d := &Driver{Kind: k}
	f, err := d.FindPlugin()
	if err != nil {
		testreq.Skipf(t, "%s plugin not installed: %v", k.Name, err)
	}
	return f.Path
}

// The real XLA CPU plugin, against docs/pjrt-findings.md: PJRT C API major
// 0, minor 81 or later for the wheels examined, xla_version=2, and a
// client of 4 "cpu" devices by default.
func TestProbePluginCPU(t *testing.T) {
	path := installedPlugin(t, kind("xla-cpu"))
	res, err := ProbePlugin(context.Background(), path, ProbeOptions{})
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, res.Stderr)
	}
	if !res.Loaded || res.APIMajor != 0 || res.APIMinor < 81 || res.Attributes["xla_version"] != "2" || res.Client || res.Stage != "done" {
		t.Errorf("load-only probe: %+v", res)
	}
	again, err := ProbePlugin(context.Background(), path, ProbeOptions{})
	if err != nil || again.PID != res.PID {
		t.Errorf("second probe ran a new child (pid %d, first %d) or failed: %v", again.PID, res.PID, err)
	}
	res, err = ProbePlugin(context.Background(), path, ProbeOptions{CreateClient: true})
	if err != nil {
		t.Fatalf("client probe: %v\n%s", err, res.Stderr)
	}
	if !res.Client || res.Platform != "cpu" || len(res.Devices) != 4 {
		t.Fatalf("client probe: platform %q, devices %+v", res.Platform, res.Devices)
	}
	for i, d := range res.Devices {
		if d.Kind != "cpu" || d.ID != i {
			t.Errorf("device %d: %+v", i, d)
		}
	}
}

// libtpu loads off a TPU VM when the probe sets TPU_SKIP_MDS_QUERY=1
// (docs/pjrt-findings.md: API 0.117; without the variable it retries the
// metadata server for minutes).
func TestProbePluginTPU(t *testing.T) {
	path := installedPlugin(t, kind("tpu"))
	if tpuNodesPresent() {
		t.Skip("a TPU is attached: the load-only probe is covered by the CPU test")
	}
	res, err := ProbePlugin(context.Background(), path, ProbeOptions{Name: "tpu", Timeout: time.Minute})
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, res.Stderr)
	}
	if res.APIMajor != 0 || res.APIMinor < 100 || !strings.Contains(strings.Join(res.Extensions, " "), "TpuTopology") {
		t.Errorf("libtpu: API %s extensions %v", res.APIVersion(), res.Extensions)
	}
}

// Open refuses a broken plugin with an UnavailableError naming the file and
// the finding, and this process lives on.
func TestOpenProbesPlugin(t *testing.T) {
	if !elfOS() {
		t.Skip("not an ELF system")
	}
	dir := t.TempDir()
	p := writeFile(t, dir, "pjrt_c_api_cpu_plugin.so", []byte("<html>404 Not Found</html>"))
	_, err := fakeDriver(kind("xla-cpu"), dir).Open(context.Background(), &driver.Options{})
	var ue *errs.UnavailableError
	if !errors.As(err, &ue) || !errors.Is(err, ProbeNotSharedLibrary) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "HTML") {
		t.Fatalf("Open: %T %v", err, err)
	}
	if runtime.GOOS == "linux" && runtime.GOARCH == "amd64" {
		crash := soFile(t, t.TempDir(), "pjrt_c_api_cpu_plugin.so", soSpec{code: amd64Crash})
		_, err := fakeDriver(kind("xla-cpu"), filepath.Dir(crash)).Open(context.Background(), &driver.Options{})
		if !errors.As(err, &ue) || !errors.Is(err, ProbeCrashed) {
			t.Fatalf("Open of a crashing plugin: %T %v", err, err)
		}
	}
}

func TestProbeResultJSONRoundTrip(t *testing.T) {
	// The child's answer crosses a process boundary as JSON: a failure and
	// its fields must survive it.
	in := &ProbeResult{Path: "/p.so", Loaded: true, APIMajor: 0, APIMinor: 115, Attributes: map[string]string{"xla_version": "2"},
		Failure: &ProbeError{Path: "/p.so", Kind: ProbeClientFailed, Stage: "client", Detail: "TPU initialization failed: No jellyfish device found.", Code: "NOT_FOUND"}}
	var out probeOutput
	var b bytes.Buffer
	b.WriteString(probeMarker + " result ")
	enc, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	b.Write(enc)
	b.WriteString("\n")
	_, _ = out.Write(b.Bytes())
	var got ProbeResult
	if err := json.Unmarshal(out.result, &got); err != nil {
		t.Fatal(err)
	}
	if got.Failure == nil || got.Failure.Kind != ProbeClientFailed || got.Failure.Code != "NOT_FOUND" || got.APIVersion() != "0.115" {
		t.Fatalf("round trip: %+v %+v", got, got.Failure)
	}
	cause := failureCause(got.Failure)
	if cause == nil || !strings.Contains(cause.Error(), "NOT_FOUND") {
		t.Errorf("rebuilt cause %v", cause)
	}
}
