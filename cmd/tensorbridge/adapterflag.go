package main

import (
	"fmt"
	"strings"

	"github.com/tensorbridge/tensorbridge/llm"
	"github.com/tensorbridge/tensorbridge/serve"
)

// adapterFlags collects repeated --adapter NAME=PATH flags: LoRA adapters
// (PEFT's files) served beside a checkpoint directory.
type adapterFlags []llm.AdapterSource

func (a *adapterFlags) String() string {
	var s []string
	for _, x := range *a {
		s = append(s, x.Name+"="+x.Dir)
	}
	return strings.Join(s, ",")
}

func (a *adapterFlags) Set(v string) error {
	name, dir, ok := strings.Cut(v, "=")
	if !ok || name == "" || dir == "" {
		return fmt.Errorf("want NAME=PATH (a PEFT adapter directory), got %q", v)
	}
	*a = append(*a, llm.AdapterSource{Name: name, Dir: dir})
	return nil
}

// countCheckpointDirs counts the checkpoint directories among serve's paths.
func countCheckpointDirs(paths []string) int {
	n := 0
	for _, p := range paths {
		if serve.IsCheckpointDir(p) {
			n++
		}
	}
	return n
}
