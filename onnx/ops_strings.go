package onnx

// Host string ops (strings.go explains why strings stay on the host):
// StringNormalizer, StringSplit, StringConcat, RegexFullMatch, Equal on
// STRING. Semantics from the operator pages at
// https://onnx.ai/onnx/operators/ (onnx__StringNormalizer.html,
// onnx__StringSplit.html, onnx__StringConcat.html,
// onnx__RegexFullMatch.html, onnx__Equal.html).

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"

	"github.com/tensorbridge/tensorbridge/ir"
)

func init() {
	register("StringNormalizer", 10, hostOnly).withHost(hostStringNormalizer).needsAll()
	register("StringSplit", 20, hostOnly).withHost(hostStringSplit).needsAll()
	register("StringConcat", 20, hostOnly).withHost(hostStringConcat).needsAll()
	register("RegexFullMatch", 20, hostOnly).withHost(hostRegexFullMatch).needsAll()
	// Equal takes STRING (from version 19): compare strings on the host,
	// the registered evaluator does numbers.
	for _, d := range registry["Equal"] {
		if d.host != nil {
			numeric := d.host
			d.host = func(c *opCtx) error {
				if c.isHost(0) && c.hostIn(0).dt == String {
					return hostStringEqual(c)
				}
				return numeric(c)
			}
		}
	}
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("RegexFullMatch", "StringConcat", "StringNormalizer", "StringSplit")
}

// hostOnly is the graph converter of ops computed only on the host: it is
// reached only when an input is not known at build time, which needsAll
// prevents for user inputs; say so rather than build anything.
func hostOnly(c *opCtx) error {
	for k := range c.inputs {
		if c.has(k) && !c.isHost(k) {
			return &NotConstantError{Node: c.name, Op: c.node.OpType, Input: k, Name: c.inputs[k].name}
		}
	}
	return fmt.Errorf("op is computed on the host only")
}

func hostStringNormalizer(c *opCtx) error {
	x := c.strs(0)
	action := c.attrString("case_change_action", "NONE")
	sensitive := c.attrInt("is_case_sensitive", 0) != 0
	if loc := c.attrString("locale", ""); loc != "" && loc != "en_US" && loc != "C" && loc != "en_US.UTF-8" {
		return &UnsupportedDTypeError{Name: "locale " + quote(loc), Where: "StringNormalizer (Go's Unicode case mapping is locale-independent)"}
	}
	var conv func(string) string
	switch action {
	case "NONE":
		conv = func(s string) string { return s }
	case "LOWER":
		conv = strings.ToLower
	case "UPPER":
		conv = strings.ToUpper
	default:
		return fmt.Errorf("case_change_action %q: expected NONE, LOWER or UPPER", action)
	}
	stop := map[string]bool{}
	key := func(s string) string {
		if sensitive {
			return s
		}
		return strings.ToLower(s)
	}
	for _, w := range c.attrStrs("stopwords", nil) {
		stop[key(w)] = true
	}
	var rows int
	switch {
	case x.rank() == 1:
		rows = 1
	case x.rank() == 2 && x.dims[0] == 1:
		rows = 1
	default:
		return fmt.Errorf("input X: expected shape [C] or [1, C], got %v", x.dims)
	}
	_ = rows
	var out []string
	for _, s := range x.s {
		if stop[key(s)] {
			continue
		}
		out = append(out, conv(s))
	}
	if len(out) == 0 {
		// Every string was a stop word: the output holds one empty string.
		out = []string{""}
	}
	dims := []int{len(out)}
	if x.rank() == 2 {
		dims = []int{1, len(out)}
	}
	c.setHost(0, hostStrings(dims, out))
	return nil
}

// pySplit splits s as Python's str.split(sep, maxsplit) does: with sep ""
// on runs of whitespace, ignoring leading and trailing whitespace; maxsplit
// < 0 means no limit.
func pySplit(s, sep string, maxsplit int) []string {
	if sep != "" {
		if maxsplit < 0 {
			return strings.Split(s, sep)
		}
		return strings.SplitN(s, sep, maxsplit+1)
	}
	var out []string
	rest := strings.TrimLeftFunc(s, unicode.IsSpace)
	for rest != "" {
		if maxsplit >= 0 && len(out) == maxsplit {
			out = append(out, rest)
			break
		}
		end := strings.IndexFunc(rest, unicode.IsSpace)
		if end < 0 {
			out = append(out, rest)
			break
		}
		out = append(out, rest[:end])
		rest = strings.TrimLeftFunc(rest[end:], unicode.IsSpace)
	}
	return out
}

func hostStringSplit(c *opCtx) error {
	x := c.strs(0)
	sep := c.attrString("delimiter", "")
	maxsplit := -1
	if c.hasAttr("maxsplit") {
		maxsplit = int(c.attrInt("maxsplit", -1))
		if maxsplit < 0 {
			return fmt.Errorf("attribute maxsplit: expected a non-negative count, got %d", maxsplit)
		}
	}
	parts := make([][]string, len(x.s))
	width := 0
	counts := make([]int64, len(x.s))
	for k, s := range x.s {
		parts[k] = pySplit(s, sep, maxsplit)
		counts[k] = int64(len(parts[k]))
		width = max(width, len(parts[k]))
	}
	data := make([]string, len(x.s)*width)
	for k, p := range parts {
		copy(data[k*width:], p)
	}
	c.setHost(0, hostStrings(append(append([]int{}, x.dims...), width), data))
	c.setHost(1, newHostInts(ir.Int64, x.dims, counts))
	return nil
}

// stringPair broadcasts the two STRING inputs of a binary op to their
// common shape.
func stringPair(c *opCtx) (dims []int, a, b []string, err error) {
	x, y := c.strs(0), c.strs(1)
	if dims, err = broadcastDims(x.dims, y.dims); err != nil {
		return nil, nil, nil, err
	}
	xb, err := x.broadcastTo(dims)
	if err != nil {
		return nil, nil, nil, err
	}
	yb, err := y.broadcastTo(dims)
	if err != nil {
		return nil, nil, nil, err
	}
	return dims, xb.s, yb.s, nil
}

func hostStringConcat(c *opCtx) error {
	dims, a, b, err := stringPair(c)
	if err != nil {
		return err
	}
	out := make([]string, len(a))
	for k := range out {
		out[k] = a[k] + b[k]
	}
	c.setHost(0, hostStrings(dims, out))
	return nil
}

func hostRegexFullMatch(c *opCtx) error {
	x := c.strs(0)
	pat := c.attrString("pattern", "")
	// Go's regexp implements RE2 syntax, which ONNX specifies; anchoring the
	// whole pattern makes a match a full match.
	re, err := regexp.Compile(`^(?:` + pat + `)$`)
	if err != nil {
		return fmt.Errorf("attribute pattern %q: %w", pat, err)
	}
	out := make([]int64, len(x.s))
	for k, s := range x.s {
		if re.MatchString(s) {
			out[k] = 1
		}
	}
	c.setHost(0, newHostInts(ir.Bool, x.dims, out))
	return nil
}

func hostStringEqual(c *opCtx) error {
	dims, a, b, err := stringPair(c)
	if err != nil {
		return err
	}
	out := make([]int64, len(a))
	for k := range out {
		if a[k] == b[k] {
			out[k] = 1
		}
	}
	c.setHost(0, newHostInts(ir.Bool, dims, out))
	return nil
}
