package conformance

import (
	"context"
	"errors"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/driver"
	_ "github.com/tensorbridge/tensorbridge/pjrt" // registers xla-cpu
)

// TestConformance runs the ONNX backend test data when present and checks
// the outcome case by case against a committed list of the cases that pass
// (golden_test.go), so a regression in the importer names the case. TENSORBRIDGE_ONNX_MATCH restricts the cases (a regexp);
// TENSORBRIDGE_ONNX_VERBOSE=1 logs every failing case.
func TestConformance(t *testing.T) {
	b, err := tensorbridge.Open(context.Background(), "cpu", tensorbridge.WithConfig(os.Getenv("TENSORBRIDGE_SIMPLEGO_CONFIG")),
		tensorbridge.WithSettings(testSettings))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	runConformance(t, b, Datasets[0], "cpu")
}

// TestConformanceONNX1232 runs the node tests generated from the onnx
// 1.23.2 wheel (scripts/fetch-onnx-node-tests.sh) on the cpu backend.
func TestConformanceONNX1232(t *testing.T) {
	b, err := tensorbridge.Open(context.Background(), "cpu", tensorbridge.WithConfig(os.Getenv("TENSORBRIDGE_SIMPLEGO_CONFIG")),
		tensorbridge.WithSettings(testSettings))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	runConformance(t, b, Datasets[1], "cpu")
}

// TestConformanceONNX1232XLACPU runs the onnx 1.23.2 node tests on xla-cpu.
func TestConformanceONNX1232XLACPU(t *testing.T) {
	b := openXLACPU(t)
	defer b.Close()
	runConformance(t, b, Datasets[1], "xla-cpu")
}

// TestConformanceXLACPU runs the suite on XLA's CPU compiler through the
// pjrt backend. CI installs the plugin (scripts/setup.sh); elsewhere the
// test is skipped when it is missing.
func TestConformanceXLACPU(t *testing.T) {
	b := openXLACPU(t)
	defer b.Close()
	runConformance(t, b, Datasets[0], "xla-cpu")
}

// openXLACPU opens xla-cpu, skipping when its plugin is not installed.
func openXLACPU(t *testing.T) *tensorbridge.Backend {
	t.Helper()
	d, ok := driver.Lookup("xla-cpu")
	if !ok {
		t.Fatal("the pjrt backend is not linked in")
	}
	if av := d.Probe(context.Background()); !av.Available {
		skipUnlessRequired(t, "xla-cpu unavailable: %s (run scripts/install-plugins.sh xla-cpu)", av.Reason)
	}
	b, err := tensorbridge.Open(context.Background(), "xla-cpu", tensorbridge.WithSettings(testSettings))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// testSettings are the defaults but for the disk compile cache: the suite's
// one-off models are not worth keeping across runs.
var testSettings = tensorbridge.Settings{CacheDir: "off"}

func runConformance(t *testing.T, b *tensorbridge.Backend, data Dataset, backend string) {
	if testing.Short() {
		t.Skip("conformance suite skipped in -short mode")
	}
	dir := data.Dir()
	if _, err := FindSuites(dir); errors.Is(err, ErrNoTestData) {
		skipUnlessRequired(t, "no ONNX %s test data (%v); run %s", data.Name, err, data.Fetch)
	}
	opts := &Options{Timeout: 2 * time.Minute}
	if m := os.Getenv("TENSORBRIDGE_ONNX_MATCH"); m != "" {
		opts.Match = regexp.MustCompile(m)
	}
	verbose := os.Getenv("TENSORBRIDGE_ONNX_VERBOSE") == "1"
	res, err := Run(context.Background(), dir, b, opts)
	if err != nil {
		t.Fatal(err)
	}
	if verbose {
		for _, c := range res.Cases {
			if c.Status != Pass {
				t.Logf("%s/%s: %s: %s", c.Suite, c.Name, c.Status, c.Detail)
			}
		}
	}
	t.Logf("\n%s", res.Summary(60))
	// A wrong value is never acceptable, whatever else passes: a case the
	// importer cannot run must fail with an error instead. Nor is a panic:
	// bad or unsupported input is an error value.
	for _, c := range res.Cases {
		if c.Status == Fail {
			t.Errorf("%s/%s: wrong value: %s", c.Suite, c.Name, c.Detail)
		}
		if c.Reason == "panic" {
			t.Errorf("%s/%s: panicked: %s", c.Suite, c.Name, firstLine(c.Detail))
		}
	}
	if opts.Match == nil {
		checkGolden(t, data.Name, backend, res)
	}
}

// skipUnlessRequired skips the test, or fails it when
// TENSORBRIDGE_REQUIRE_TESTDATA=1 (scripts/test.sh sets it after installing
// everything): in CI a missing data set or plugin must not turn into a green
// run with nothing tested.
func skipUnlessRequired(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("TENSORBRIDGE_REQUIRE_TESTDATA") == "1" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}
