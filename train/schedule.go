package train

import "math"

// Factor returns the learning-rate multiplier of the optimizer update with
// 0-based index update: exactly the lr_lambda(update) of transformers'
// schedulers (src/transformers/optimization.py,
// https://github.com/huggingface/transformers/blob/main/src/transformers/optimization.py),
// where W is WarmupSteps and T TotalSteps:
//
//	warm-up (all kinds), update < W:  update / max(1, W)
//	constant (get_constant_schedule_with_warmup):  1
//	linear (get_linear_schedule_with_warmup):
//	    max(0, (T - update) / max(1, T - W))
//	cosine (get_cosine_schedule_with_warmup, num_cycles 0.5):
//	    p = (update - W) / max(1, T - W)
//	    max(0, 0.5 * (1 + cos(pi * 0.5 * 2 * p)))
//
// As with a PyTorch LambdaLR stepped after each optimizer.step(), the
// first update (index 0) uses Factor(0), which is 0 when W > 0. The empty
// kind is constant.
func (s Schedule) Factor(update int) float64 {
	step, w, t := float64(update), float64(s.WarmupSteps), float64(s.TotalSteps)
	if update < s.WarmupSteps {
		return step / math.Max(1, w)
	}
	switch s.Kind {
	case Linear:
		return math.Max(0, (t-step)/math.Max(1, t-w))
	case Cosine:
		const numCycles = 0.5
		progress := (step - w) / math.Max(1, t-w)
		return math.Max(0, 0.5*(1+math.Cos(math.Pi*numCycles*2*progress)))
	}
	return 1
}
