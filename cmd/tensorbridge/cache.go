package main

import (
	"context"
	"errors"
	"io"

	"github.com/tensorbridge/tensorbridge/cache"
)

func init() {
	register(command{name: "cache", summary: "list, summarise or clear the on-disk compile cache (ls|stats|clear)", run: runCache})
}

func runCache(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	err := cache.Command(ctx, args, stdout, stderr)
	if errors.Is(err, cache.ErrUsage) {
		return &exitError{code: 2, err: err}
	}
	return err
}
