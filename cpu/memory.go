package cpu

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/tensorbridge/tensorbridge/driver"
	"github.com/tensorbridge/tensorbridge/errs"
)

func sortStrings(s []string) { sort.Strings(s) }

// processMemory reads resident memory from /proc/self/status and the limit
// from the cgroup (v2 memory.max, v1 memory.limit_in_bytes), else MemTotal.
func processMemory() (driver.MemoryStats, error) {
	st := driver.MemoryStats{Source: "/proc/self/status"}
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return st, &errs.Error{Kind: errs.Unavailable, Backend: Name, Op: "memory stats", Err: err}
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch k {
		case "VmRSS":
			st.BytesInUse = parseKB(v)
		case "VmHWM":
			st.PeakBytesInUse = parseKB(v)
		}
	}
	limit, src := memoryLimit()
	st.BytesLimit = limit
	st.Source += ", " + src
	return st, nil
}

func parseKB(v string) uint64 {
	fields := strings.Fields(v)
	if len(fields) == 0 {
		return 0
	}
	n, _ := strconv.ParseUint(fields[0], 10, 64)
	return n * 1024
}

// memoryLimit returns the smaller of the cgroup limit and physical memory.
func memoryLimit() (uint64, string) {
	total, src := uint64(0), ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && k == "MemTotal" {
				total, src = parseKB(v), "/proc/meminfo"
			}
		}
	}
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			continue
		}
		if n, err := strconv.ParseUint(s, 10, 64); err == nil && n > 0 && (total == 0 || n < total) {
			total, src = n, "cgroup "+p
		}
	}
	if src == "" {
		src = "no limit found"
	}
	return total, fmt.Sprint(src)
}
