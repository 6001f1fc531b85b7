package main

import (
	"fmt"
	"io"
	"runtime"

	"github.com/tensorbridge/tensorbridge"
)

// cpuHint is the note printed when "auto" ended on the embedded cpu
// backend while XLA's CPU compiler is one command away (its plugin is not
// installed, and a wheel is pinned for this machine): the command, and
// the gain measured on the 2-core development machine.
const cpuHint = "note: auto chose the embedded pure-Go cpu backend, which is slow on large models " +
	"(a ResNet-18 image: 8.9 s; a small BERT-like encoder: 356 ms on 2 cores). " +
	"`tensorbridge plugins install xla-cpu` installs XLA's CPU compiler (one download, checked by sha256), " +
	"which runs the same ResNet-18 image in about 35 ms; auto then picks it.\n"

// printCPUHint writes cpuHint to w when it applies to sel.
func printCPUHint(w io.Writer, sel tensorbridge.Selection) {
	if wantCPUHint(sel, runtime.GOOS, runtime.GOARCH) {
		fmt.Fprint(w, cpuHint)
	}
}

// wantCPUHint: auto was asked for, cpu chosen, xla-cpu registered but not
// available, and a plugin wheel pinned for this OS and architecture.
func wantCPUHint(sel tensorbridge.Selection, goos, goarch string) bool {
	if sel.Requested != tensorbridge.Auto || sel.Chosen != "cpu" || goos != "linux" {
		return false
	}
	arch, ok := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[goarch]
	if !ok {
		return false
	}
	if _, err := pinFor("xla-cpu", arch); err != nil {
		return false
	}
	for _, c := range sel.Candidates {
		if c.Name == "xla-cpu" {
			return c.Registered && !c.Available
		}
	}
	return false
}
