package lower

import (
	"bytes"
	"fmt"
)

// Donate marks parameters of the main function of a StableHLO module as
// donated to outputs (param position -> output index) with the
// tf.aliasing_output attribute, which XLA turns into the module's
// input/output aliasing: the compiler then reuses the weights' and
// optimizer state's buffers for their updates instead of allotting new
// ones, as a training loop that donates them gets. The arguments are
// found by scanning main's signature at bracket depth 0.
func Donate(text []byte, donated map[int]int) ([]byte, error) {
	start := bytes.Index(text, []byte("func.func @main("))
	if start < 0 {
		return nil, fmt.Errorf("lower: no main function in the step's text")
	}
	i := start + len("func.func @main(")
	type arg struct{ end int } // index just after the argument's text
	var args []arg
	depth := 0
	for ; i < len(text); i++ {
		switch c := text[i]; c {
		case '<', '{', '[', '(':
			depth++
		case '>', '}', ']':
			depth--
		case ')':
			if depth == 0 {
				args = append(args, arg{end: i})
				goto done
			}
			depth--
		case ',':
			if depth == 0 {
				args = append(args, arg{end: i})
			}
		}
	}
	return nil, fmt.Errorf("lower: main's signature does not end")
done:
	out := make([]byte, 0, len(text)+40*len(donated))
	prev := 0
	for k, a := range args {
		o, ok := donated[k]
		if !ok {
			continue
		}
		attr := fmt.Sprintf("tf.aliasing_output = %d : i32", o)
		seg := text[prev:a.end]
		trimmed := bytes.TrimRight(seg, " ")
		if bytes.HasSuffix(trimmed, []byte("}")) {
			// An attribute dictionary "{ sdy.sharding = ... }": add to it.
			open := bytes.LastIndex(trimmed, []byte(": tensor<"))
			brace := bytes.IndexByte(trimmed[max(0, open):], '{')
			if open < 0 || brace < 0 {
				return nil, fmt.Errorf("lower: cannot read argument %d of main", k)
			}
			at := open + brace + 1
			out = append(out, seg[:at]...)
			out = append(out, " "+attr+","...)
			out = append(out, seg[at:]...)
		} else {
			out = append(out, trimmed...)
			out = append(out, " {"+attr+"}"...)
		}
		prev = a.end
	}
	for k := range donated {
		if k >= len(args) {
			return nil, fmt.Errorf("lower: donated parameter %d of %d", k, len(args))
		}
	}
	return append(out, text[prev:]...), nil
}
