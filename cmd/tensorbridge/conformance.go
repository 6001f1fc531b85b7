package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/onnx/conformance"
)

func init() {
	register(command{name: "conformance", summary: "run the ONNX backend test suites (1.12 and 1.23.2) and print pass/fail/error per suite", run: runConformance})
}

func runConformance(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("conformance", stderr, "[DIR] [--data all|1.12|1.23.2] [--backend B] [--match REGEXP] [--reasons N] [--verbose] [--json]")
	backend := fs.String("backend", "", "backend name or auto (default: $TENSORBRIDGE_BACKEND, else auto)")
	data := fs.String("data", "all", "test data set: all, 1.12 (Debian's libonnx-testdata) or 1.23.2 (generated from the onnx wheel)")
	match := fs.String("match", "", "run only cases whose name matches this regexp")
	reasons := fs.Int("reasons", 40, "how many failure reasons to list")
	verbose := fs.Bool("verbose", false, "list every failing case")
	timeout := fs.Duration("timeout", 2*time.Minute, "per-case timeout")
	asJSON := fs.Bool("json", false, "print JSON")
	var sf settingsFlags
	addSettingsFlags(fs, &sf)
	if err := parse(fs, reorder(fs, args)); err != nil {
		return err
	}
	settings, err := sf.settings()
	if err != nil {
		return err
	}
	if settings.CacheDir == "" {
		// Two thousand one-off test models would crowd real entries out of
		// the user's compile cache; --cache-dir asks for one.
		settings.CacheDir = "off"
	}
	var sets []conformance.Dataset
	if *data == "all" {
		sets = conformance.Datasets
	} else {
		d, ok := conformance.LookupDataset(*data)
		if !ok {
			return usageErr("--data %q: want all, 1.12 or 1.23.2", *data)
		}
		sets = []conformance.Dataset{d}
	}
	dirs := make([]string, len(sets))
	for i, d := range sets {
		dirs[i] = d.Dir()
	}
	if fs.NArg() > 1 {
		return usageErr("want at most one DIR, got %d", fs.NArg())
	}
	if fs.NArg() == 1 {
		if len(sets) != 1 {
			return usageErr("a DIR needs --data 1.12 or --data 1.23.2 to say which data it holds")
		}
		dirs[0] = fs.Arg(0)
	}
	opts := &conformance.Options{Timeout: *timeout}
	if *match != "" {
		re, err := regexp.Compile(*match)
		if err != nil {
			return usageErr("--match: %v", err)
		}
		opts.Match = re
	}
	b, err := tensorbridge.Open(ctx, *backend, tensorbridge.WithSettings(settings), sf.clusterOption())
	if err != nil {
		return err
	}
	defer b.Close()
	if sf.printConfig {
		fmt.Fprintf(stderr, "backend %s\n%s", b.Name(), b.Settings())
	}
	var results []map[string]any
	var missing []string
	ran := 0
	for i, d := range sets {
		start := time.Now()
		res, err := conformance.Run(ctx, dirs[i], b, opts)
		if errors.Is(err, conformance.ErrNoTestData) && len(sets) > 1 {
			// With both data sets asked for, one that is not installed is
			// said, not fatal.
			missing = append(missing, fmt.Sprintf("%s: %v (run %s)", d.Name, err, d.Fetch))
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", d.Name, err)
		}
		secs := time.Since(start).Seconds()
		ran += res.Total.Total
		if res.Total.Total == 0 && *match == "" {
			return fmt.Errorf("%s: no test case found in %s", d.Name, res.Dir)
		}
		if *asJSON {
			results = append(results, map[string]any{"data": d.Name, "dir": res.Dir, "suites": res.Suites,
				"total": res.Total, "reasons": res.Reasons, "seconds": secs})
			continue
		}
		fmt.Fprintf(stdout, "ONNX backend tests %s in %s on backend %s (%.0fs)\n", d.Name, res.Dir, b.Name(), secs)
		fmt.Fprint(stdout, res.Summary(*reasons))
		if *verbose {
			for _, c := range res.Cases {
				if c.Status != conformance.Pass {
					fmt.Fprintf(stdout, "%s/%s: %s: %s\n", c.Suite, c.Name, c.Status, c.Detail)
				}
			}
		}
		fmt.Fprintln(stdout)
	}
	// A run that ran nothing is not a pass: say so in the exit code.
	if ran == 0 && *match != "" {
		return fmt.Errorf("--match %q selects none of the test cases", *match)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(map[string]any{"backend": b.Name(), "results": results, "missing": missing}); err != nil {
			return err
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(stderr, "not run:\n  %s\n", strings.Join(missing, "\n  "))
		if len(missing) == len(sets) {
			return fmt.Errorf("%w: no test data set is installed", conformance.ErrNoTestData)
		}
	}
	return nil
}
