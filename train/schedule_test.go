package train

import (
	"math"
	"testing"
)

// Factor against values worked out by hand from transformers' lr_lambda
// formulas (src/transformers/optimization.py), with W warm-up updates and
// T total updates:
//
//	warm-up, u < W:  u / max(1, W)
//	constant:        1
//	linear:          max(0, (T - u) / max(1, T - W))
//	cosine:          p = (u - W) / max(1, T - W); max(0, 0.5 (1 + cos(pi p)))
func TestScheduleFactor(t *testing.T) {
	w2t10 := func(k ScheduleKind) Schedule { return Schedule{Kind: k, WarmupSteps: 2, TotalSteps: 10} }
	for _, c := range []struct {
		s    Schedule
		u    int
		want float64
	}{
		// Warm-up is shared: u / W.
		{w2t10(Constant), 0, 0}, {w2t10(Constant), 1, 0.5}, {w2t10(Constant), 2, 1}, {w2t10(Constant), 50, 1},
		{w2t10(Linear), 0, 0}, {w2t10(Linear), 1, 0.5}, {w2t10(Cosine), 1, 0.5},
		// linear: (10-u)/8.
		{w2t10(Linear), 2, 1}, {w2t10(Linear), 3, 0.875}, {w2t10(Linear), 6, 0.5}, {w2t10(Linear), 9, 0.125},
		{w2t10(Linear), 10, 0}, {w2t10(Linear), 12, 0},
		// cosine: p = (u-2)/8; 0.5(1+cos(pi p)).
		{w2t10(Cosine), 2, 1},
		{w2t10(Cosine), 4, 0.5 + math.Sqrt2/4}, // p = 1/4: 0.5(1 + sqrt(2)/2)
		{w2t10(Cosine), 6, 0.5},                // p = 1/2: cos = 0
		{w2t10(Cosine), 8, 0.5 - math.Sqrt2/4}, // p = 3/4
		{w2t10(Cosine), 10, 0},                 // p = 1: cos = -1
		{w2t10(Cosine), 14, 0.5},               // p = 3/2: transformers does not clamp p, the curve rises again
		// No warm-up: W = 0 gives max(1, W) = 1 in the denominators.
		{Schedule{}, 0, 1}, {Schedule{Kind: Constant}, 7, 1},
		{Schedule{Kind: Linear, TotalSteps: 4}, 0, 1}, {Schedule{Kind: Linear, TotalSteps: 4}, 1, 0.75},
		{Schedule{Kind: Cosine, TotalSteps: 3}, 1, 0.75}, // 0.5(1+cos(pi/3)) = 0.75
		// Warm-up longer than the schedule: T - W < 1 gives max(1, T-W) = 1.
		{Schedule{Kind: Linear, WarmupSteps: 5, TotalSteps: 3}, 4, 0.8}, {Schedule{Kind: Linear, WarmupSteps: 5, TotalSteps: 3}, 5, 0},
	} {
		got := c.s.Factor(c.u)
		if math.Abs(got-c.want) > 1e-15 {
			t.Errorf("%+v Factor(%d) = %v, want %v", c.s, c.u, got, c.want)
		}
	}
}
