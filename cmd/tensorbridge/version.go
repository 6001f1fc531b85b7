package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/tensorbridge/tensorbridge"
)

func init() {
	register(command{name: "version", summary: "print tensorbridge, Go and dependency versions", run: runVersion})
}

type versionInfo struct {
	Version  string            `json:"version"`
	Go       string            `json:"go"`
	Platform string            `json:"platform"`
	Backends []string          `json:"backends"`
	Deps     map[string]string `json:"dependencies"`
}

func runVersion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", stderr, "[--json]")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	v := versionInfo{Version: tensorbridge.Version, Go: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH, Backends: tensorbridge.Backends(), Deps: map[string]string{}}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/gomlx/gomlx", "github.com/gomlx/go-xla", "github.com/ebitengine/purego":
				v.Deps[d.Path] = d.Version
			}
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	fmt.Fprintf(stdout, "tensorbridge %s (%s, %s)\nbackends: %v\n", v.Version, v.Go, v.Platform, v.Backends)
	for _, p := range []string{"github.com/gomlx/gomlx", "github.com/gomlx/go-xla", "github.com/ebitengine/purego"} {
		if ver, ok := v.Deps[p]; ok {
			fmt.Fprintf(stdout, "%s %s\n", p, ver)
		}
	}
	return nil
}
