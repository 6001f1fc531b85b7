package train

import (
	"regexp"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/onnx"
)

// TrainableNames lists the initializers a training run trains: every
// floating-point initializer that freeze (a Go regexp on the initializer
// name; "" freezes nothing) does not match, in initializer order, and
// counts the frozen ones and their elements. It is the one rule the
// Trainer and plan --train share.
func TrainableNames(m *onnx.Model, freeze string) (names []string, frozen int, frozenElems int64, err error) {
	var re *regexp.Regexp
	if freeze != "" {
		if re, err = regexp.Compile(freeze); err != nil {
			return nil, 0, 0, &errs.InputError{Name: "--freeze", Problem: "value", Expected: "a Go regexp", Got: err.Error()}
		}
	}
	for _, p := range m.Initializers() {
		if !p.Shape.DType.IsFloat() {
			continue
		}
		if re != nil && re.MatchString(p.Name) {
			frozen++
			frozenElems += int64(p.Shape.Size())
			continue
		}
		names = append(names, p.Name)
	}
	return names, frozen, frozenElems, nil
}
