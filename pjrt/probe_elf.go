package pjrt

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
)

// Preflight checks of a plugin file's ELF header (class, byte order,
// machine, OS ABI) before a probe loads it.

// elfOS reports whether shared libraries on this OS are ELF files.
func elfOS() bool {
	switch runtime.GOOS {
	case "darwin", "ios", "windows", "plan9", "js", "wasip1":
		return false
	}
	return true
}

// elfArch is what a GOARCH's shared libraries look like.
type elfArch struct {
	machine elf.Machine
	class   elf.Class
	order   elf.Data
}

var goarchELF = map[string]elfArch{
	"amd64":    {elf.EM_X86_64, elf.ELFCLASS64, elf.ELFDATA2LSB},
	"arm64":    {elf.EM_AARCH64, elf.ELFCLASS64, elf.ELFDATA2LSB},
	"386":      {elf.EM_386, elf.ELFCLASS32, elf.ELFDATA2LSB},
	"arm":      {elf.EM_ARM, elf.ELFCLASS32, elf.ELFDATA2LSB},
	"ppc64le":  {elf.EM_PPC64, elf.ELFCLASS64, elf.ELFDATA2LSB},
	"ppc64":    {elf.EM_PPC64, elf.ELFCLASS64, elf.ELFDATA2MSB},
	"s390x":    {elf.EM_S390, elf.ELFCLASS64, elf.ELFDATA2MSB},
	"riscv64":  {elf.EM_RISCV, elf.ELFCLASS64, elf.ELFDATA2LSB},
	"loong64":  {elf.EM_LOONGARCH, elf.ELFCLASS64, elf.ELFDATA2LSB},
	"mips64le": {elf.EM_MIPS, elf.ELFCLASS64, elf.ELFDATA2LSB},
	"mips64":   {elf.EM_MIPS, elf.ELFCLASS64, elf.ELFDATA2MSB},
}

// machineName names an ELF machine the way people say it.
func machineName(m elf.Machine) string {
	switch m {
	case elf.EM_X86_64:
		return "x86-64"
	case elf.EM_AARCH64:
		return "aarch64"
	case elf.EM_386:
		return "x86 (i386)"
	case elf.EM_ARM:
		return "32-bit arm"
	case elf.EM_PPC64:
		return "ppc64"
	case elf.EM_S390:
		return "s390x"
	case elf.EM_RISCV:
		return "riscv"
	case elf.EM_LOONGARCH:
		return "loongarch"
	case elf.EM_MIPS:
		return "mips"
	}
	return m.String()
}

func className(c elf.Class) string {
	switch c {
	case elf.ELFCLASS32:
		return "32-bit"
	case elf.ELFCLASS64:
		return "64-bit"
	}
	return c.String()
}

func orderName(d elf.Data) string {
	switch d {
	case elf.ELFDATA2LSB:
		return "little-endian"
	case elf.ELFDATA2MSB:
		return "big-endian"
	}
	return d.String()
}

// checkELFHeader checks the first bytes of a would-be plugin (up to 64) and
// its size against the shared libraries goos/goarch can load. It returns
// "" when nothing is wrong, else the failure kind, a precise detail and a
// fix. It reads the ELF identification, e_type and e_machine, and checks
// that the program and section header tables the header points to lie
// within the file (a truncated download fails that).
func checkELFHeader(hdr []byte, size int64, goos, goarch string) (kind ProbeFailure, detail, fix string) {
	const reinstall = "reinstall the plugin (tensorbridge plugins install NAME), or remove the file from the plugin directory"
	if size == 0 {
		return ProbeNotSharedLibrary, "empty file (0 bytes)", reinstall
	}
	if len(hdr) < 4 || string(hdr[:4]) != elf.ELFMAG {
		return ProbeNotSharedLibrary, sniff(hdr), reinstall
	}
	if len(hdr) < 20 {
		return ProbeNotSharedLibrary, fmt.Sprintf("truncated: %d bytes, shorter than an ELF header", size), reinstall
	}
	class, order := elf.Class(hdr[elf.EI_CLASS]), elf.Data(hdr[elf.EI_DATA])
	if class != elf.ELFCLASS32 && class != elf.ELFCLASS64 {
		return ProbeNotSharedLibrary, fmt.Sprintf("corrupt ELF header: class byte %d is neither 32- nor 64-bit", hdr[elf.EI_CLASS]), reinstall
	}
	var bo binary.ByteOrder
	switch order {
	case elf.ELFDATA2LSB:
		bo = binary.LittleEndian
	case elf.ELFDATA2MSB:
		bo = binary.BigEndian
	default:
		return ProbeNotSharedLibrary, fmt.Sprintf("corrupt ELF header: data encoding byte %d is neither little- nor big-endian", hdr[elf.EI_DATA]), reinstall
	}
	typ, machine := elf.Type(bo.Uint16(hdr[16:18])), elf.Machine(bo.Uint16(hdr[18:20]))
	if want, ok := goarchELF[goarch]; ok && (machine != want.machine || class != want.class || order != want.order) {
		got := fmt.Sprintf("%s %s", machineName(machine), className(class))
		need := fmt.Sprintf("%s %s", machineName(want.machine), className(want.class))
		if machine == want.machine && class == want.class {
			got += " " + orderName(order)
			need += " " + orderName(want.order)
		}
		return ProbeWrongArchitecture,
			fmt.Sprintf("%s plugin on %s/%s (ELF machine %v, %v); this process can only load %s shared libraries", got, goos, goarch, machine, class, need),
			fmt.Sprintf("install the plugin built for %s/%s (tensorbridge plugins install NAME downloads the wheel for this machine)", goos, goarch)
	}
	switch typ {
	case elf.ET_DYN:
	case elf.ET_EXEC:
		return ProbeNotSharedLibrary, "an executable (ELF type ET_EXEC), not a shared library", reinstall
	case elf.ET_REL:
		return ProbeNotSharedLibrary, "an object file (ELF type ET_REL), not a shared library: it must be linked with -shared first", reinstall
	case elf.ET_CORE:
		return ProbeNotSharedLibrary, "a core dump (ELF type ET_CORE), not a shared library", reinstall
	default:
		return ProbeNotSharedLibrary, fmt.Sprintf("ELF type %v, not a shared library (ET_DYN)", typ), reinstall
	}
	// The header table extents; a short file cannot hold them.
	var phoff, shoff uint64
	var phentsize, phnum, shentsize, shnum uint16
	hsize := 52
	if class == elf.ELFCLASS64 {
		hsize = 64
	}
	if len(hdr) < hsize {
		return ProbeNotSharedLibrary, fmt.Sprintf("truncated: %d bytes, shorter than a %s ELF header (%d bytes)", size, className(class), hsize), reinstall
	}
	if class == elf.ELFCLASS64 {
		phoff, shoff = bo.Uint64(hdr[32:40]), bo.Uint64(hdr[40:48])
		phentsize, phnum, shentsize, shnum = bo.Uint16(hdr[54:56]), bo.Uint16(hdr[56:58]), bo.Uint16(hdr[58:60]), bo.Uint16(hdr[60:62])
	} else {
		phoff, shoff = uint64(bo.Uint32(hdr[28:32])), uint64(bo.Uint32(hdr[32:36]))
		phentsize, phnum, shentsize, shnum = bo.Uint16(hdr[42:44]), bo.Uint16(hdr[44:46]), bo.Uint16(hdr[46:48]), bo.Uint16(hdr[48:50])
	}
	if phnum == 0 {
		return ProbeNotSharedLibrary, "corrupt ELF header: no program headers, so nothing to load", reinstall
	}
	for _, t := range []struct {
		what       string
		off        uint64
		ent, count uint16
	}{{"program header table", phoff, phentsize, phnum}, {"section header table", shoff, shentsize, shnum}} {
		if t.off == 0 || t.count == 0 {
			continue
		}
		end := t.off + uint64(t.ent)*uint64(t.count)
		if end < t.off || end > uint64(size) {
			return ProbeNotSharedLibrary,
				fmt.Sprintf("truncated: its ELF header places the %s at bytes %d-%d but the file has %d bytes (an interrupted download or copy?)", t.what, t.off, end, size),
				reinstall
		}
	}
	return "", "", ""
}

// sniff says what a file that is not ELF looks like, from its first bytes.
func sniff(b []byte) string {
	s := string(b)
	trimmed := strings.TrimLeft(s, " \t\r\n\ufeff")
	lower := strings.ToLower(trimmed)
	switch {
	case strings.HasPrefix(s, "PK\x03\x04"):
		return "a zip archive (a Python wheel?), not a shared library: the plugin is one member of it"
	case strings.HasPrefix(s, "\x1f\x8b"):
		return "a gzip-compressed file, not a shared library"
	case strings.HasPrefix(lower, "<!doctype html") || strings.HasPrefix(lower, "<html") || strings.HasPrefix(lower, "<?xml") || strings.HasPrefix(lower, "<"):
		return "an HTML or XML document (a failed download?), not a shared library"
	case strings.HasPrefix(s, "version https://git-lfs"):
		return "a Git LFS pointer, not the library itself (fetch it with git lfs pull)"
	case strings.HasPrefix(trimmed, "/* GNU ld script") || strings.HasPrefix(trimmed, "INPUT(") || strings.HasPrefix(trimmed, "GROUP ("):
		return "a GNU ld linker script, not a shared library (the real library is usually the .so.N file it names)"
	case strings.HasPrefix(s, "#!"):
		return "a script, not a shared library"
	case strings.HasPrefix(s, "\xcf\xfa\xed\xfe") || strings.HasPrefix(s, "\xce\xfa\xed\xfe") || strings.HasPrefix(s, "\xca\xfe\xba\xbe"):
		return "a macOS Mach-O file, not a Linux shared library"
	case strings.HasPrefix(s, "MZ"):
		return "a Windows PE file (DLL or EXE), not a Linux shared library"
	}
	n := min(len(b), 8)
	return fmt.Sprintf("not an ELF file: it starts with % x, not 7f 45 4c 46 (\"\\x7fELF\")", b[:n])
}
