package tensorbridge

import (
	"context"
	"fmt"

	"github.com/tensorbridge/tensorbridge/config"
	"github.com/tensorbridge/tensorbridge/cpu"
	"github.com/tensorbridge/tensorbridge/discover"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/onnx"
)

// Budget is what a device may still take: the memory fraction of its limit,
// less what is in use now.
type Budget struct {
	Device    string  `json:"device"`
	Limit     uint64  `json:"limit_bytes"`
	Fraction  float64 `json:"fraction"`
	InUse     uint64  `json:"in_use_bytes"`
	Available uint64  `json:"available_bytes"`
	Source    string  `json:"source"`
}

// Budget returns device 0's memory budget. Figures come from the runtime
// (PJRT memory statistics, or this process and its cgroup on the cpu
// backend); a runtime that reports none (XLA's CPU plugin) runs from host
// memory, which is then what is used.
func (b *Backend) Budget(ctx context.Context) (Budget, error) {
	if len(b.devices) == 0 {
		return Budget{}, &errs.UnavailableError{Name: b.Name(), Reason: "no device"}
	}
	bud := Budget{Device: b.devices[0].ID, Fraction: b.settings.MemoryFraction}
	if bud.Fraction == 0 {
		bud.Fraction = config.DefaultMemoryFraction
	}
	ms, err := b.MemoryStats(ctx, 0)
	if err != nil || ms.BytesLimit == 0 {
		// Host memory: this process's resident size against the limit.
		host, _, herr := discover.CPU(ctx, discover.Options{})
		if herr != nil {
			return Budget{}, fmt.Errorf("no memory figures for %s: %v; host: %w", bud.Device, err, herr)
		}
		rss, _ := cpu.ResidentBytes()
		ms.BytesLimit, ms.BytesInUse = host.Memory.Total, rss
		ms.Source = "host memory (" + host.Memory.Source + "), the runtime reports none"
	}
	bud.Limit, bud.InUse, bud.Source = ms.BytesLimit, ms.BytesInUse, ms.Source
	allowed := uint64(float64(bud.Limit) * bud.Fraction)
	if allowed > bud.InUse {
		bud.Available = allowed - bud.InUse
	}
	return bud, nil
}

// checkFits refuses a model whose weights cannot fit the budget, before
// anything is compiled or allocated. The weights are counted at the
// precision they will be placed in.
func (b *Backend) checkFits(ctx context.Context, path string, m *onnx.Model, prec config.Precision, mixed bool) error {
	p := m.Parameters()
	need := uint64(p.Bytes)
	if prec == config.BFloat16 || prec == config.Float16 {
		if !mixed {
			need -= uint64(p.Float32Elements) * 2 // float32 weights stored as 16-bit
		}
	}
	bud, err := b.Budget(ctx)
	if err != nil {
		return nil // no figures to check against: say nothing rather than guess
	}
	if need > bud.Available {
		return &errs.OutOfMemoryError{Device: bud.Device, Needed: need, Available: bud.Available,
			Detail: fmt.Sprintf("weights of %s: %d parameters in %s; budget %.0f%% of %s less %s in use (%s)",
				path, p.Elements, prec, 100*bud.Fraction, errs.Bytes(bud.Limit), errs.Bytes(bud.InUse), bud.Source)}
	}
	return nil
}
