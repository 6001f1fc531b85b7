package conformance

import (
	"context"
	"errors"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/gomlx/gomlx/backends/simplego"
)

// TestConformance runs the ONNX backend test data when present and
// enforces a pass-rate floor, so a regression in the importer shows up as
// a failing test. TENSORBRIDGE_ONNX_MATCH restricts the cases (a regexp);
// TENSORBRIDGE_ONNX_VERBOSE=1 logs every failing case.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("conformance suite skipped in -short mode")
	}
	dir := DefaultDir()
	if _, err := FindSuites(dir); errors.Is(err, ErrNoTestData) {
		t.Skipf("no ONNX test data (%v); run scripts/fetch-onnx-testdata.sh", err)
	}
	engine, err := simplego.New(os.Getenv("TENSORBRIDGE_SIMPLEGO_CONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Finalize()
	opts := &Options{Timeout: 2 * time.Minute}
	if m := os.Getenv("TENSORBRIDGE_ONNX_MATCH"); m != "" {
		opts.Match = regexp.MustCompile(m)
	}
	verbose := os.Getenv("TENSORBRIDGE_ONNX_VERBOSE") == "1"
	res, err := Run(context.Background(), dir, engine, opts)
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
	if opts.Match == nil {
		const floor = 0.80
		if rate := res.PassRate(); rate < floor {
			t.Errorf("pass rate %.1f%% is below the floor %.1f%%", 100*rate, 100*floor)
		}
	}
}
