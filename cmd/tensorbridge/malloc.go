package main

import (
	"os"
	"strings"
)

// The C allocator's settings for this process.
//
// XLA's CPU runtime allocates every execution's temporary buffers with
// malloc and frees them when it ends. With glibc's defaults a block larger
// than 32 MiB is always a fresh mapping, and so is a block of over 64 MiB
// taken by a thread other than the main one (its arena cannot hold it):
// each execution then pays the kernel for ~75 MB of zeroed pages on
// MobileNetV2 at batch 8 (19,000 page faults per run). glibc reads its
// tunables once, when the process starts, so tensorbridge re-executes
// itself once with
//
//	GLIBC_TUNABLES=glibc.malloc.hugetlb=1:glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1000000000000
//
// one arena for every thread, no mappings for large blocks, freed memory
// kept for the next execution, and transparent huge pages for what the heap
// grows by. Measured on xla-cpu, CPU time per run at batch 8: MobileNetV2
// 135 -> 96 ms (page faults per run 18,978 -> 24), ResNet-18 499 -> 460 ms,
// BERT-like encoder 101 -> 92 ms (BENCHMARKS.md). The process holds its
// peak C heap instead of returning it, which is what a server or a
// benchmark wants. It changes no result: it is an allocator policy.
//
// It is skipped when GLIBC_TUNABLES is already set (the user's settings
// win), when TENSORBRIDGE_MALLOC=system, and on systems without
// /proc/self/exe. Other C libraries ignore the variable.
//
// `serve` keeps glibc's defaults unless TENSORBRIDGE_MALLOC=tuned. Measured
// under load (BENCHMARKS.md, "Serving PyTorch's transformer exports under
// load": 32 clients, a BERT-like encoder, 4 replicas on xla-cpu, two
// servers of each kind): with the tunables, RSS after the first load spike
// was 1061-1109 MiB against 1196-1208 MiB, but that spike's p99 latency was
// 106-118 ms against 96-99 ms; later runs were equal (89-97 ms against
// 92-94 ms). A server is judged by its tail under a spike, so it keeps the
// defaults.

// mallocTunables is the GLIBC_TUNABLES value tensorbridge runs with.
const mallocTunables = "glibc.malloc.hugetlb=1:glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1000000000000"

// envMallocSet marks the re-executed process, so it never loops.
const envMallocSet = "TENSORBRIDGE_MALLOC_SET"

// mallocSetting says which allocator settings this process runs with, for
// reports.
func mallocSetting() string {
	switch {
	case os.Getenv(envMallocSet) == "1" && os.Getenv("GLIBC_TUNABLES") == mallocTunables:
		return "GLIBC_TUNABLES=" + mallocTunables + " (set by tensorbridge; TENSORBRIDGE_MALLOC=system keeps glibc's defaults)"
	case os.Getenv("GLIBC_TUNABLES") != "":
		return "GLIBC_TUNABLES=" + os.Getenv("GLIBC_TUNABLES") + " (from the environment)"
	default:
		return "the C library's defaults"
	}
}

// wantMallocReexec reports whether main should re-execute itself with
// mallocTunables, given the environment and the command line (args[1] is
// the command).
func wantMallocReexec(getenv func(string) string, args []string) bool {
	if getenv(envMallocSet) != "" || getenv("GLIBC_TUNABLES") != "" {
		return false
	}
	switch strings.ToLower(getenv("TENSORBRIDGE_MALLOC")) {
	case "system":
		return false
	case "tuned":
		return true
	}
	return len(args) < 2 || args[1] != "serve"
}

// foreignEnv is the environment for a program that is not tensorbridge
// (pip): the process's environment without what the re-execution added,
// so the allocator settings stay this program's own.
func foreignEnv() []string {
	env := os.Environ()
	if os.Getenv(envMallocSet) != "1" {
		return env
	}
	out := env[:0:0]
	for _, kv := range env {
		if strings.HasPrefix(kv, envMallocSet+"=") || kv == "GLIBC_TUNABLES="+mallocTunables {
			continue
		}
		out = append(out, kv)
	}
	return out
}
