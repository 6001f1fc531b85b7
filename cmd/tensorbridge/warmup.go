package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tensorbridge/tensorbridge"
)

func init() {
	register(command{name: "warmup", summary: "precompile a model for a list of shapes (after bucketing), with progress", run: runWarmup})
}

func runWarmup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("warmup", stderr, "MODEL --dim NAME=SIZE,SIZE... [--dim ...] [--backend B] [settings flags]")
	var dims inputFlags
	fs.Var(&dims, "dim", "sizes of a symbolic dimension, e.g. batch=1,8,32 (repeat per dimension; every combination is compiled)")
	backend := fs.String("backend", "", "backend name or auto")
	var sf settingsFlags
	addSettingsFlags(fs, &sf)
	if err := parse(fs, reorder(fs, args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageErr("want exactly one MODEL argument, got %d", fs.NArg())
	}
	settings, err := sf.settings()
	if err != nil {
		return err
	}
	names, values := []string{}, map[string][]int{}
	for _, d := range dims {
		name, list, ok := strings.Cut(d, "=")
		if !ok || name == "" || list == "" {
			return usageErr("--dim %q: want NAME=SIZE,SIZE...", d)
		}
		if _, dup := values[name]; dup {
			return usageErr("--dim %s given twice", name)
		}
		for _, v := range strings.Split(list, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n <= 0 {
				return usageErr("--dim %s: %q is not a positive size", name, v)
			}
			values[name] = append(values[name], n)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	combos := []map[string]int{{}}
	for _, name := range names {
		var next []map[string]int
		for _, c := range combos {
			for _, v := range values[name] {
				m := map[string]int{name: v}
				for k, x := range c {
					m[k] = x
				}
				next = append(next, m)
			}
		}
		combos = next
	}
	b, err := tensorbridge.Open(ctx, *backend, tensorbridge.WithSettings(settings), sf.clusterOption())
	if err != nil {
		return err
	}
	defer b.Close()
	printCPUHint(stderr, b.Selection()) // cpuhint.go
	if sf.printConfig {
		fmt.Fprintf(stderr, "backend %s\n%s", b.Name(), b.Settings())
	}
	m, err := b.LoadModel(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	defer m.Close()
	fmt.Fprintf(stdout, "%s on %s: buckets %s\n", fs.Arg(0), b.Name(), m.Buckets())
	start := time.Now()
	n, err := m.Warmup(ctx, combos, func(done, total int, d map[string]int, took time.Duration, err error) {
		var parts []string
		for _, name := range names {
			parts = append(parts, fmt.Sprintf("%s=%d", name, d[name]))
		}
		status := fmt.Sprintf("%.2fs", took.Seconds())
		if err != nil {
			status = "failed: " + err.Error()
		}
		fmt.Fprintf(stdout, "[%d/%d] %s %s\n", done, total, strings.Join(parts, " "), status)
	})
	if err != nil {
		return err
	}
	cs := b.CacheStats()
	fmt.Fprintf(stdout, "prepared %d specialisation(s) for %d shape(s) in %.2fs", n, len(combos), time.Since(start).Seconds())
	if cs.Dir != "" {
		fmt.Fprintf(stdout, "; disk cache %s: %d loaded, %d compiled", cs.Dir, cs.Hits, cs.Misses)
	}
	fmt.Fprintln(stdout)
	return nil
}
