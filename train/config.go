// Package train holds what a training run is made of, apart from the model
// and the backend it runs on: the configuration that decides the result
// (loss, optimizer, schedule, freeze pattern, batch, mesh, precision), the
// data set read from .npy files, checkpoints, and the learning-rate
// schedules. The Trainer itself, which compiles and runs a training step
// through the same path as Model.Run, is tensorbridge.Trainer (trainer.go).
package train

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/tensorbridge/tensorbridge/errs"
)

// LossKind says where the loss comes from.
type LossKind string

const (
	// LossOutput: a scalar floating-point output of the model is the loss
	// (the graph computes it).
	LossOutput LossKind = "output"
	// LossCrossEntropy: mean cross entropy of logits (classes on the last
	// axis, any leading axes) against int64 class indices.
	LossCrossEntropy LossKind = "cross_entropy"
	// LossMSE: mean squared error over all elements.
	LossMSE LossKind = "mse"
)

// Loss is a parsed --loss SPEC: NAME, cross_entropy:OUTPUT:LABELS or
// mse:OUTPUT:TARGETS.
type Loss struct {
	Kind LossKind
	// Output is the model output the loss reads (the loss itself for
	// LossOutput, logits or predictions otherwise).
	Output string
	// Target is the data name of the labels (cross_entropy) or targets
	// (mse); empty for LossOutput.
	Target string
}

// String renders the loss as its SPEC.
func (l Loss) String() string {
	if l.Kind == LossOutput {
		return l.Output
	}
	return string(l.Kind) + ":" + l.Output + ":" + l.Target
}

// ParseLoss parses a --loss SPEC.
func ParseLoss(spec string) (Loss, error) {
	parts := strings.Split(spec, ":")
	switch {
	case spec == "":
		return Loss{}, invalid("--loss is empty: want an output name, cross_entropy:OUTPUT:LABELS or mse:OUTPUT:TARGETS")
	case len(parts) == 1:
		return Loss{Kind: LossOutput, Output: spec}, nil
	case len(parts) == 3 && (parts[0] == string(LossCrossEntropy) || parts[0] == string(LossMSE)):
		if parts[1] == "" || parts[2] == "" {
			return Loss{}, invalid("--loss %q: OUTPUT and %s must both be named", spec, map[string]string{"cross_entropy": "LABELS", "mse": "TARGETS"}[parts[0]])
		}
		return Loss{Kind: LossKind(parts[0]), Output: parts[1], Target: parts[2]}, nil
	}
	return Loss{}, invalid("--loss %q: want an output name, cross_entropy:OUTPUT:LABELS or mse:OUTPUT:TARGETS", spec)
}

// OptimizerKind names an optimizer; each follows its torch.optim namesake
// exactly (defaults, bias correction, where epsilon sits, how weight decay
// applies).
type OptimizerKind string

const (
	AdamW OptimizerKind = "adamw" // torch.optim.AdamW: decoupled weight decay
	Adam  OptimizerKind = "adam"  // torch.optim.Adam: L2 weight decay added to the gradient
	SGD   OptimizerKind = "sgd"   // torch.optim.SGD: momentum with dampening 0, no Nesterov
)

// Optimizer is an optimizer and its hyper-parameters.
type Optimizer struct {
	Kind        OptimizerKind
	LR          float64
	Beta1       float64
	Beta2       float64
	Eps         float64
	WeightDecay float64
	Momentum    float64
}

// DefaultOptimizer returns torch.optim's defaults for kind: lr 1e-3 for
// all three; betas (0.9, 0.999) and eps 1e-8 for Adam and AdamW; weight
// decay 1e-2 for AdamW, 0 for Adam and SGD; momentum 0 for SGD.
func DefaultOptimizer(kind OptimizerKind) (Optimizer, error) {
	o := Optimizer{Kind: kind, LR: 1e-3}
	switch kind {
	case AdamW:
		o.Beta1, o.Beta2, o.Eps, o.WeightDecay = 0.9, 0.999, 1e-8, 1e-2
	case Adam:
		o.Beta1, o.Beta2, o.Eps = 0.9, 0.999, 1e-8
	case SGD:
	default:
		return Optimizer{}, invalid("optimizer %q: want adamw, adam or sgd", kind)
	}
	return o, nil
}

// Validate checks the hyper-parameters' ranges (as torch.optim does).
func (o Optimizer) Validate() error {
	bad := func(name string, v float64, want string) error {
		return invalid("optimizer %s: %s %v: want %s", o.Kind, name, v, want)
	}
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case o.Kind != AdamW && o.Kind != Adam && o.Kind != SGD:
		return invalid("optimizer %q: want adamw, adam or sgd", o.Kind)
	case !finite(o.LR) || o.LR < 0:
		return bad("learning rate", o.LR, "a finite value >= 0")
	case !finite(o.WeightDecay) || o.WeightDecay < 0:
		return bad("weight decay", o.WeightDecay, "a finite value >= 0")
	}
	if o.Kind == SGD {
		if !finite(o.Momentum) || o.Momentum < 0 || o.Momentum >= 1 {
			return bad("momentum", o.Momentum, "0 <= momentum < 1")
		}
		return nil
	}
	switch {
	case !finite(o.Beta1) || o.Beta1 < 0 || o.Beta1 >= 1:
		return bad("beta1", o.Beta1, "0 <= beta1 < 1")
	case !finite(o.Beta2) || o.Beta2 < 0 || o.Beta2 >= 1:
		return bad("beta2", o.Beta2, "0 <= beta2 < 1")
	case !finite(o.Eps) || o.Eps < 0:
		return bad("eps", o.Eps, "a finite value >= 0")
	}
	return nil
}

// ScheduleKind names a learning-rate schedule, as transformers' schedulers
// define them (get_constant_schedule_with_warmup,
// get_cosine_schedule_with_warmup, get_linear_schedule_with_warmup).
type ScheduleKind string

const (
	Constant ScheduleKind = "constant"
	Cosine   ScheduleKind = "cosine"
	Linear   ScheduleKind = "linear"
)

// Schedule is a learning-rate schedule: a multiplier of Optimizer.LR per
// optimizer update.
type Schedule struct {
	Kind        ScheduleKind
	WarmupSteps int
	// TotalSteps is the number of updates cosine and linear decay over
	// (transformers' num_training_steps). The CLI sets it from
	// --lr-schedule-steps, by default --steps; unlike --steps it decides the
	// result, so it is part of the configuration digest.
	TotalSteps int
}

// Config is the training configuration that decides the result. Everything
// here is in Digest; what does not decide the result (the number of steps
// of this run, output paths, logging, checkpoint cadence) is not.
type Config struct {
	Loss      Loss
	Optimizer Optimizer
	Schedule  Schedule
	// Freeze is a Go regexp on initializer names: matching floating-point
	// initializers are not trained. Empty freezes nothing.
	Freeze string
	// Batch is the global batch of one micro-batch; GradAccum micro-batches
	// make one update (so one update sees Batch*GradAccum samples).
	Batch     int
	GradAccum int
	// Shuffle with ShuffleSeed draws the samples in a seeded random order,
	// a new permutation each epoch; without it step i (from 1) takes samples
	// (i-1)*Batch ... modulo the sample count, in order.
	Shuffle     bool
	ShuffleSeed int64
	// ClipGradNorm clips the global gradient norm as
	// torch.nn.utils.clip_grad_norm_ does; 0 is off.
	ClipGradNorm float64
	// Mesh ("data=D[,model=M]", empty for one device) and Strategy (dp, tp
	// or fsdp; empty means dp).
	Mesh     string
	Strategy string
	// Precision is "float32" (default) or "bfloat16": bfloat16 compute,
	// float32 master weights and optimizer state.
	Precision string
	// Data identifies the training data (DataDigest of the data set).
	Data string
}

// Validate checks the configuration, returning an error that wraps
// errs.ErrInvalidInput and names the offending setting.
func (c Config) Validate() error {
	if c.Loss.Kind == "" || c.Loss.Output == "" {
		return invalid("no loss: want --loss NAME, cross_entropy:OUTPUT:LABELS or mse:OUTPUT:TARGETS")
	}
	if err := c.Optimizer.Validate(); err != nil {
		return err
	}
	switch c.Schedule.Kind {
	case "", Constant, Cosine, Linear:
	default:
		return invalid("learning-rate schedule %q: want constant, cosine or linear", c.Schedule.Kind)
	}
	if c.Schedule.WarmupSteps < 0 {
		return invalid("warm-up steps %d: want >= 0", c.Schedule.WarmupSteps)
	}
	if (c.Schedule.Kind == Cosine || c.Schedule.Kind == Linear) && c.Schedule.TotalSteps <= 0 {
		return invalid("%s schedule: total steps %d: want > 0", c.Schedule.Kind, c.Schedule.TotalSteps)
	}
	if c.Freeze != "" {
		if _, err := regexp.Compile(c.Freeze); err != nil {
			return invalid("--freeze %q: %v", c.Freeze, err)
		}
	}
	if c.Batch <= 0 {
		return invalid("batch %d: want > 0", c.Batch)
	}
	if c.GradAccum < 0 {
		return invalid("gradient accumulation %d: want >= 1", c.GradAccum)
	}
	if math.IsNaN(c.ClipGradNorm) || c.ClipGradNorm < 0 {
		return invalid("gradient clipping norm %v: want >= 0 (0 is off)", c.ClipGradNorm)
	}
	switch c.Strategy {
	case "", "dp", "tp", "fsdp":
	default:
		return invalid("strategy %q: want dp, tp or fsdp", c.Strategy)
	}
	switch c.Precision {
	case "", "float32", "bfloat16":
	default:
		return invalid("precision %q: want float32 or bfloat16", c.Precision)
	}
	return nil
}

// Fields returns the configuration as sorted key=value pairs, with the
// defaults resolved: what Digest hashes and what Diff compares.
func (c Config) Fields() map[string]string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	o := c.Optimizer
	m := map[string]string{
		"loss":           c.Loss.String(),
		"optimizer":      string(o.Kind),
		"lr":             f(o.LR),
		"weight_decay":   f(o.WeightDecay),
		"lr_schedule":    string(orDefault(string(c.Schedule.Kind), string(Constant))),
		"warmup_steps":   strconv.Itoa(c.Schedule.WarmupSteps),
		"freeze":         c.Freeze,
		"batch":          strconv.Itoa(c.Batch),
		"grad_accum":     strconv.Itoa(max(1, c.GradAccum)),
		"shuffle":        "off",
		"clip_grad_norm": f(c.ClipGradNorm),
		"mesh":           c.Mesh,
		"strategy":       orDefault(c.Strategy, "dp"),
		"precision":      orDefault(c.Precision, "float32"),
		"data":           c.Data,
	}
	if c.Schedule.Kind == Cosine || c.Schedule.Kind == Linear {
		m["lr_schedule_steps"] = strconv.Itoa(c.Schedule.TotalSteps)
	}
	if c.Shuffle {
		m["shuffle"] = strconv.FormatInt(c.ShuffleSeed, 10)
	}
	if o.Kind == SGD {
		m["momentum"] = f(o.Momentum)
	} else {
		m["betas"] = f(o.Beta1) + "," + f(o.Beta2)
		m["eps"] = f(o.Eps)
	}
	return m
}

// Digest is the SHA-256 of Fields, hex: two configurations with the same
// digest train to the same result.
func (c Config) Digest() string {
	fields := c.Fields()
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%q\n", k, fields[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Diff lists, sorted, the settings that differ between two field sets
// (Config.Fields, or those a checkpoint recorded), as "name: a != b".
func Diff(a, b map[string]string) []string {
	var out []string
	seen := map[string]bool{}
	for k, v := range a {
		seen[k] = true
		if w, ok := b[k]; !ok || w != v {
			out = append(out, fmt.Sprintf("%s: %q != %q", k, v, b[k]))
		}
	}
	for k, w := range b {
		if !seen[k] {
			out = append(out, fmt.Sprintf("%s: %q != %q", k, "", w))
		}
	}
	sort.Strings(out)
	return out
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// invalid returns an error wrapping errs.ErrInvalidInput, its message on
// one line: "train: " and the formatted text.
func invalid(format string, args ...any) error {
	return fmt.Errorf("train: %w", asInput(fmt.Errorf(format, args...)))
}

// asInput marks err as bad input: errors.Is matches errs.ErrInvalidInput
// and each of also, errors.Is and errors.As reach err's own chain, and the
// message is err's alone. (errors.Join would prefix "invalid input" and a
// line break, and a CLI error must be one line.)
func asInput(err error, also ...error) error {
	return &inputError{err: err, kinds: append([]error{errs.ErrInvalidInput}, also...)}
}

// inputError is asInput's error.
type inputError struct {
	err   error
	kinds []error
}

func (e *inputError) Error() string { return e.err.Error() }

// Unwrap gives the sentinels, then err.
func (e *inputError) Unwrap() []error { return append(append([]error(nil), e.kinds...), e.err) }

// joinOneLine is errors.Join with the messages on one line, separated by
// "; ": nil when every error is nil.
func joinOneLine(list ...error) error {
	var j joinedError
	for _, err := range list {
		if err != nil {
			j = append(j, err)
		}
	}
	if len(j) == 0 {
		return nil
	}
	return j
}

// joinedError is joinOneLine's error.
type joinedError []error

func (j joinedError) Error() string {
	msgs := make([]string, len(j))
	for i, err := range j {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (j joinedError) Unwrap() []error { return j }
