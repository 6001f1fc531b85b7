package main

import (
	"encoding/json"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// inspect prints what it could read of a model, but a model that cannot be
// loaded (missing, truncated, not ONNX, an unsupported op, a broken graph)
// is a failure: exit code 1 and a message naming the file and the problem.
func TestInspectExitCode(t *testing.T) {
	mlp, err := os.ReadFile(refModels + "mlp.onnx")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	truncated := filepath.Join(dir, "truncated.onnx")
	if err := os.WriteFile(truncated, mlp[:len(mlp)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage.onnx")
	if err := os.WriteFile(garbage, []byte("this is not a protobuf\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	x := typedInfo("x", onnxpb.Float, 1, 4)
	y := typedInfo("y", onnxpb.Float, 1, 4)
	unsupported := writeModel(t, "unsupported.onnx",
		[]onnxpb.Node{node("Relu", []string{"x"}, []string{"r"}), node("NoSuchOpAnywhere", []string{"r"}, []string{"y"})},
		nil, []onnxpb.ValueInfo{x}, []onnxpb.ValueInfo{y})
	dangling := writeModel(t, "dangling.onnx",
		[]onnxpb.Node{node("Relu", []string{"undefined_value"}, []string{"y"})},
		nil, []onnxpb.ValueInfo{x}, []onnxpb.ValueInfo{y})

	cases := []struct {
		name    string
		model   string
		code    int
		stderr  []string // each in stderr
		stdout  []string // each in stdout (what could be inspected)
		jsonOut bool     // --json still prints a report
	}{
		{"loads", refModels + "mlp.onnx", 0, nil, []string{"unsupported none", "Gemm 3"}, true},
		{"missing file", filepath.Join(dir, "no-such.onnx"), 1, []string{"no-such.onnx", "no such file"}, nil, false},
		{"truncated", truncated, 1, []string{truncated, "truncated"}, nil, false},
		{"not onnx", garbage, 1, []string{garbage, "not an ONNX model"}, nil, false},
		{"unsupported op", unsupported, 1, []string{unsupported + " cannot be loaded", "NoSuchOpAnywhere"},
			[]string{"unsupported ", "NoSuchOpAnywhere", "Relu 1"}, true},
		{"dangling input", dangling, 1, []string{dangling + " cannot be loaded", "undefined_value"},
			[]string{"load error", "Relu 1"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := run(t, "inspect", c.model)
			if code != c.code {
				t.Errorf("exit %d, want %d; stdout %q, stderr %q", code, c.code, stdout, stderr)
			}
			for _, w := range c.stderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q lacks %q", stderr, w)
				}
			}
			for _, w := range c.stdout {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout %q lacks %q", stdout, w)
				}
			}
			if !c.jsonOut {
				return
			}
			code, stdout, _ = run(t, "inspect", "--json", c.model)
			if code != c.code {
				t.Errorf("--json: exit %d, want %d", code, c.code)
			}
			var got inspection
			if err := json.Unmarshal([]byte(stdout), &got); err != nil {
				t.Fatalf("--json: %v\n%s", err, stdout)
			}
			if failed := len(got.Unsupported) > 0 || got.LoadError != ""; failed != (c.code != 0) {
				t.Errorf("--json: unsupported %v, load error %q, but exit %d", got.Unsupported, got.LoadError, code)
			}
		})
	}
}

// conformance that runs no case (a --match that selects nothing, a
// directory without test data) fails instead of printing empty totals.
func TestConformanceRunsSomething(t *testing.T) {
	code, _, stderr := run(t, "conformance", "--data", "1.12", t.TempDir(), "--backend", "cpu")
	if code != 1 || !strings.Contains(stderr, "no ONNX backend test data") {
		t.Errorf("empty directory: exit %d, %q", code, stderr)
	}
	code, stdout, stderr := run(t, "conformance", "--backend", "cpu", "--match", "zzz_no_such_case_zzz")
	if strings.Contains(stderr, "no ONNX backend test data") {
		testreq.Skipf(t, "%s", "no ONNX test data on this machine (scripts/setup.sh fetches it)")
	}
	if code != 1 || !strings.Contains(stderr, `--match "zzz_no_such_case_zzz" selects none`) {
		t.Errorf("--match selecting nothing: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
