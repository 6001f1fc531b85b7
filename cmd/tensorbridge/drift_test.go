package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge"
)

// TestPlanPriceRefused: a negative, NaN or infinite --price is a usage
// error (exit 2) naming the flag; before, `plan --price -5` exited 0 and
// priced the plan at -5 USD per chip-hour.
func TestPlanPriceRefused(t *testing.T) {
	for _, price := range []string{"-5", "NaN", "+Inf"} {
		code, _, stderr := run(t, "plan", "--generate", "tiny", "--slice", "v5e-8", "--price", price)
		if code != 2 || !strings.Contains(stderr, "--price") {
			t.Errorf("plan --price %s: exit %d, stderr %q; want exit 2 naming --price", price, code, stderr)
		}
	}
}

// TestBenchMixedPrecision: bench takes --mixed-precision as run, warmup
// and serve do (a true/false value), and keeps --mixed as an alias.
func TestBenchMixedPrecision(t *testing.T) {
	cases := []struct {
		args    []string
		mixed   bool
		wantErr bool
	}{
		{[]string{"m.onnx"}, true, false},
		{[]string{"m.onnx", "--mixed-precision", "false"}, false, false},
		{[]string{"m.onnx", "--mixed-precision=false"}, false, false},
		{[]string{"m.onnx", "--mixed-precision", "true"}, true, false},
		{[]string{"m.onnx", "--mixed=false"}, false, false},
		{[]string{"m.onnx", "--mixed-precision", "maybe"}, false, true},
	}
	for _, tc := range cases {
		var errb bytes.Buffer
		c, err := parseBench(tc.args, &errb)
		if tc.wantErr {
			if err == nil {
				t.Errorf("%v: accepted", tc.args)
			}
			continue
		}
		if err != nil || c.mixed != tc.mixed {
			t.Errorf("%v: mixed %v, err %v (%s); want %v", tc.args, c != nil && c.mixed, err, errb.String(), tc.mixed)
		}
	}
}

// TestDoctorClusterMesh: doctor --cluster describes the mesh as it is
// today (chosen per run with --mesh), not as future work.
func TestDoctorClusterMesh(t *testing.T) {
	views, errs := doctorCluster(t, 1, -1, "20s")
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	if m := views[0].Mesh; strings.Contains(m, "issue") || !strings.Contains(m, "--mesh") {
		t.Errorf("mesh line %q: want how to choose a mesh (--mesh), no issue reference", m)
	}
}

// TestCPUHint: the note about xla-cpu appears exactly when auto ended on
// cpu, xla-cpu's plugin is missing and a wheel is pinned for the machine.
func TestCPUHint(t *testing.T) {
	sel := func(req, chosen string, xlaAvailable bool) tensorbridge.Selection {
		return tensorbridge.Selection{Requested: req, Chosen: chosen, Candidates: []tensorbridge.Candidate{
			{Name: "xla-cpu", Registered: true, Available: xlaAvailable},
			{Name: "cpu", Registered: true, Available: true, Chosen: chosen == "cpu"}}}
	}
	cases := []struct {
		name         string
		sel          tensorbridge.Selection
		goos, goarch string
		want         bool
	}{
		{"auto on cpu, plugin missing", sel("auto", "cpu", false), "linux", "amd64", true},
		{"auto on cpu, plugin there but failed", sel("auto", "cpu", true), "linux", "amd64", false},
		{"cpu asked for", sel("cpu", "cpu", false), "linux", "amd64", false},
		{"auto on xla-cpu", sel("auto", "xla-cpu", true), "linux", "amd64", false},
		{"no wheel for arm64", sel("auto", "cpu", false), "linux", "arm64", false},
		{"not linux", sel("auto", "cpu", false), "darwin", "amd64", false},
	}
	for _, tc := range cases {
		if got := wantCPUHint(tc.sel, tc.goos, tc.goarch); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if !strings.Contains(cpuHint, "tensorbridge plugins install xla-cpu") || !strings.Contains(cpuHint, "35 ms") {
		t.Errorf("hint %q lacks the command or the gain", cpuHint)
	}
}

// readmeCommand matches a tensorbridge command line in the docs: run
// through go run, a built binary, or by name.
var readmeCommand = regexp.MustCompile(`(?:go run \./cmd/tensorbridge|\S*/tensorbridge|^tensorbridge|[\s` + "`" + `(]tensorbridge) ([a-z0-9-]+)(.*)`)

// commandsWithSub have a sub-command as their first argument.
var commandsWithSub = map[string]bool{"cache": true, "plugins": true, "k8s": true}

// TestDocsInlineFlags (TestREADMEFlags before the README was split into
// docs/): every flag the README or a page of docs/ gives a tensorbridge
// command (in code blocks and inline code) is one that command's --help
// lists, so that the docs cannot drift from the CLI (the README said
// `bench --mixed-precision` while bench only took --mixed). Code blocks
// are checked more strictly by TestDocsCommands (docs_test.go).
func TestDocsInlineFlags(t *testing.T) {
	helps := map[string]map[string]bool{}
	checked := 0
	for _, file := range docFiles(t) {
		checked += checkInlineFlags(t, file, readDoc(t, file), helps)
	}
	t.Logf("checked %d flags of %d commands", checked, len(helps))
	if checked < 30 {
		t.Errorf("checked only %d flags: the docs parser is broken", checked)
	}
}

// checkInlineFlags checks the flags of the tensorbridge commands of one
// Markdown file and returns how many it checked.
func checkInlineFlags(t *testing.T, file, raw string, helps map[string]map[string]bool) int {
	t.Helper()
	lines := strings.Split(raw, "\n")
	checked := 0
	for lineNo := 0; lineNo < len(lines); lineNo++ {
		start, line := lineNo, lines[lineNo]
		for strings.HasSuffix(line, "\\") && lineNo+1 < len(lines) { // shell line continuations
			lineNo++
			line = strings.TrimSuffix(line, "\\") + " " + lines[lineNo]
		}
		for _, frag := range readmeFragments(line) {
			m := readmeCommand.FindStringSubmatch(frag)
			if m == nil {
				continue
			}
			cmd := []string{m[1]}
			rest := strings.Fields(m[2])
			if commandsWithSub[m[1]] && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
				sub, _, _ := strings.Cut(strings.Trim(rest[0], "[]"), `\|`)
				sub, _, _ = strings.Cut(sub, "|")
				cmd, rest = append(cmd, sub), rest[1:]
			}
			key := strings.Join(cmd, " ")
			if _, ok := helps[key]; !ok {
				helps[key] = helpFlags(t, cmd)
			}
			for _, tok := range rest {
				if tok == "--" || tok == "|" || tok == ">" || strings.HasPrefix(tok, "2>") || tok == "&" || tok == "#" {
					break // the rest belongs to another command or the shell
				}
				tok = strings.TrimLeft(tok, "[(")
				if !strings.HasPrefix(tok, "-") || tok == "-" {
					continue
				}
				name, _, _ := strings.Cut(strings.TrimLeft(tok, "-"), "=")
				name = strings.TrimRight(name, "]),.`")
				if name == "" || name == "h" || name == "help" {
					continue
				}
				checked++
				if !helps[key][name] {
					t.Errorf("%s:%d: `tensorbridge %s` has no flag --%s (in %q)", file, start+1, key, name, strings.TrimSpace(frag))
				}
			}
		}
	}
	return checked
}

// readmeFragments returns the parts of a README line that may hold a
// command: each inline code span, or the whole line outside them.
func readmeFragments(line string) []string {
	if !strings.Contains(line, "`") {
		return []string{line}
	}
	parts := strings.Split(line, "`")
	var out []string
	for k := 1; k < len(parts); k += 2 {
		out = append(out, parts[k])
	}
	return out
}

// helpFlags returns the flags `tensorbridge CMD... -h` lists: the flag
// defaults section, and the synopsis for commands that only print one.
func helpFlags(t *testing.T, cmd []string) map[string]bool {
	t.Helper()
	_, stdout, stderr := run(t, append(append([]string{}, cmd...), "-h")...)
	out := stdout + stderr
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+-([a-z0-9-]+)`).FindAllStringSubmatch(out, -1) {
		flags[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`--([a-z0-9-]+)`).FindAllStringSubmatch(out, -1) {
		flags[m[1]] = true
	}
	if len(flags) == 0 && !strings.Contains(out, "Usage") && !strings.Contains(out, "usage") {
		t.Fatalf("tensorbridge %s -h printed no usage: %q", strings.Join(cmd, " "), out)
	}
	return flags
}
