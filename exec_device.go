package tensorbridge

import (
	"context"
	"fmt"

	"github.com/tensorbridge/tensorbridge/ir"
)

// RunOnDevice executes on device dev and returns every output as a tensor
// that stays on the device, owned by the caller (FinalizeAll frees it):
// state carried from one run to the next (a KV cache, a training step's
// weights and optimizer state) never crosses to the host. Inputs on the
// device are lent, host inputs are copied for the run; inputs the program
// was compiled to donate (CompileDonating) are consumed instead, their
// memory reused for the outputs that replace them. Inputs are checked as in
// RunOn.
func (e *Executable) RunOnDevice(ctx context.Context, dev int, inputs ...*ir.Tensor) (outs []*ir.Tensor, err error) {
	finish, err := e.startRun(ctx, dev, inputs)
	if err != nil {
		return nil, err
	}
	defer finish()
	defer recoverRunning(&err, e.b.Name(), e.name)
	bufs, release, err := e.placeInputs(dev, inputs)
	defer release()
	if err != nil {
		return nil, err
	}
	all, err := ir.RunOnDevice(e.g, dev, bufs, e.donated)
	if err != nil {
		return nil, classify(err, e.b.Name(), fmt.Sprintf("running %q", e.name))
	}
	outs = make([]*ir.Tensor, len(e.outPos))
	used := make([]bool, len(all))
	for i, j := range e.outPos {
		if used[j] { // the same node returned twice: each caller-owned output gets its own copy
			c, err := hostCopy(all[j])
			if err != nil {
				freeAll(all)
				freeAll(outs)
				return nil, err
			}
			outs[i] = c
			continue
		}
		outs[i] = all[j]
		used[j] = true
	}
	for j, t := range all {
		if !used[j] {
			_ = t.FinalizeAll()
		}
	}
	return outs, nil
}
