package conformance

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// Golden lists: per data set and backend, the cases that pass, committed
// under testdata/golden, and the number of cases the data set holds. A case
// that passed and no longer does fails the test with its name; a case that
// newly passes is reported so the list can grow
// (TENSORBRIDGE_UPDATE_GOLDEN=1 rewrites the file from the run). A change in
// the number of cases (a different test-data package) fails too: the data
// is pinned, so the count is part of what the test checks.

// goldenPath is the list of dataset's passing cases on backend.
func goldenPath(dataset, backend string) string {
	return filepath.Join("testdata", "golden", dataset+"."+backend+".txt")
}

// golden is a parsed list.
type golden struct {
	cases int             // "# cases N"
	pass  map[string]bool // "suite/name"
}

func readGolden(path string) (*golden, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	g := &golden{cases: -1, pass: map[string]bool{}}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		switch {
		case s == "":
		case strings.HasPrefix(s, "# cases "):
			n, err := strconv.Atoi(strings.TrimPrefix(s, "# cases "))
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %q: want \"# cases N\"", path, line, s)
			}
			g.cases = n
		case strings.HasPrefix(s, "#"):
		default:
			g.pass[s] = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if g.cases < 0 {
		return nil, fmt.Errorf("%s: no \"# cases N\" line", path)
	}
	return g, nil
}

func writeGolden(path, dataset, backend string, res *Result) error {
	var names []string
	for _, c := range res.Cases {
		if c.Status == Pass {
			names = append(names, c.Suite+"/"+c.Name)
		}
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "# The %s cases that pass on %s (onnx/conformance/golden_test.go).\n", dataset, backend)
	fmt.Fprintf(&b, "# Regenerate with TENSORBRIDGE_UPDATE_GOLDEN=1 go test -run <the test> ./onnx/conformance/\n")
	fmt.Fprintf(&b, "# cases %d\n# passing %d\n", res.Total.Total, len(names))
	for _, n := range names {
		b.WriteString(n + "\n")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// checkGolden compares a full run with the committed list.
func checkGolden(t *testing.T, dataset, backend string, res *Result) {
	t.Helper()
	path := goldenPath(dataset, backend)
	if os.Getenv("TENSORBRIDGE_UPDATE_GOLDEN") == "1" {
		if err := writeGolden(path, dataset, backend, res); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
		return
	}
	g, err := readGolden(path)
	if err != nil {
		t.Fatalf("golden list: %v", err)
	}
	if res.Total.Total != g.cases {
		t.Errorf("%s has %d cases, the golden list %d: the pinned test data changed", dataset, res.Total.Total, g.cases)
	}
	status := map[string]CaseResult{}
	for _, c := range res.Cases {
		status[c.Suite+"/"+c.Name] = c
	}
	var lost, gained []string
	for name := range g.pass {
		if c, ok := status[name]; !ok {
			lost = append(lost, name+": not run")
		} else if c.Status != Pass {
			lost = append(lost, fmt.Sprintf("%s: %s: %s", name, c.Status, firstLine(c.Detail)))
		}
	}
	for name, c := range status {
		if c.Status == Pass && !g.pass[name] {
			gained = append(gained, name)
		}
	}
	sort.Strings(lost)
	sort.Strings(gained)
	for _, l := range lost {
		t.Errorf("passed before, not now: %s", l)
	}
	if len(gained) > 0 {
		t.Logf("%d cases pass that the golden list %s lacks (TENSORBRIDGE_UPDATE_GOLDEN=1 adds them):\n  %s",
			len(gained), path, strings.Join(gained, "\n  "))
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
