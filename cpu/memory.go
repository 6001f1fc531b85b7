package cpu

import (
	"bufio"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/tensorbridge/tensorbridge/driver"
	"github.com/tensorbridge/tensorbridge/errs"
)

func sortStrings(s []string) { sort.Strings(s) }

// processMemory reads this process's resident and peak memory from
// /proc/self/status; the limit is the host device's memory, which the CPU
// probe sets to the cgroup limit where one applies.
func processMemory(limit uint64, limitSource string) (driver.MemoryStats, error) {
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
	st.BytesLimit = limit
	if limitSource != "" {
		st.Source += ", limit from " + limitSource
	}
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

// ResidentBytes is this process's resident memory (VmRSS).
func ResidentBytes() (uint64, error) {
	st, err := processMemory(0, "")
	return st.BytesInUse, err
}
