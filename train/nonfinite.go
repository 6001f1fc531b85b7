package train

import (
	"errors"
	"fmt"
	"math"
)

// ErrNonFinite matches a *NonFiniteError with errors.Is.
var ErrNonFinite = errors.New("train: non-finite loss or gradient norm")

// NonFiniteError is a training step whose loss or global gradient norm
// was NaN or infinite. Its update was not applied (StepSpec.GuardNonFinite):
// the weights, the optimizer state and the update count are what they were
// before it, so the run can stop with its last good state intact or go on
// with the next batch.
type NonFiniteError struct {
	// Step is the update the step would have been, from 1.
	Step     int
	Loss     float64
	GradNorm float64
}

func (e *NonFiniteError) Error() string {
	what := "loss"
	if IsFinite(e.Loss) {
		what = "gradient norm"
	}
	return fmt.Sprintf("train: step %d: non-finite %s (loss %v, gradient norm %v): its update was not applied", e.Step, what, e.Loss, e.GradNorm)
}

// Is makes errors.Is(err, ErrNonFinite) hold.
func (e *NonFiniteError) Is(target error) bool { return target == ErrNonFinite }

// IsFinite reports whether v is neither NaN nor ±Inf.
func IsFinite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
