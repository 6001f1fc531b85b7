//go:build !linux

package discover

import (
	"context"
	"fmt"
	"runtime"
)

// SystemNVML loads libnvidia-ml on Linux. On this OS it always reports
// ErrNVMLNotFound: tensorbridge's NVML binding is Linux-only.
type SystemNVML struct {
	Libraries []string
}

// Snapshot implements NVML.
func (s SystemNVML) Snapshot(ctx context.Context) (*NVMLSnapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%w: the NVML binding supports linux only, not %s", ErrNVMLNotFound, runtime.GOOS)
}
