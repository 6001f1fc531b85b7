package grammar

import (
	"encoding/json"
	"math/big"
	"slices"
	"strings"
)

// count reads a non-negative integer keyword (minLength, maxItems, ...);
// present is false when the keyword is absent.
func count(o *object, kw, path string) (n int32, present bool, err error) {
	raw, ok := o.get(kw)
	if !ok {
		return 0, false, nil
	}
	num, isNum := raw.(json.Number)
	r, okRat := new(big.Rat).SetString(string(num))
	if !isNum || !okRat || !r.IsInt() || r.Sign() < 0 {
		return 0, false, invalid(path, kw, "expected a non-negative integer, got %s", short(raw))
	}
	if r.Num().Cmp(big.NewInt(1<<30)) > 0 {
		return 1 << 30, true, nil // unbounded in practice
	}
	return int32(r.Num().Int64()), true, nil
}

// bounds reads a min/max keyword pair with the limit on the minimum.
func bounds(o *object, minKw, maxKw, path string) (lo, hi int32, err error) {
	lo, _, err = count(o, minKw, path)
	if err != nil {
		return 0, 0, err
	}
	hi, hasMax, err := count(o, maxKw, path)
	if err != nil {
		return 0, 0, err
	}
	if !hasMax {
		hi = -1
	}
	if lo > MaxCount {
		return 0, 0, invalid(path, minKw, "%d is over the limit of %d", lo, MaxCount)
	}
	if hasMax && lo > hi {
		return 0, 0, invalid(path, minKw, "%s %d is greater than %s %d", minKw, lo, maxKw, hi)
	}
	return lo, hi, nil
}

func (c *compiler) str(o *object, path string) (int32, error) {
	lo, hi, err := bounds(o, "minLength", "maxLength", path)
	if err != nil {
		return 0, err
	}
	return c.addNode(node{kind: kString, minLen: lo, maxLen: hi}), nil
}

func (c *compiler) array(o *object, path string, depth int) (int32, error) {
	lo, hi, err := bounds(o, "minItems", "maxItems", path)
	if err != nil {
		return 0, err
	}
	item := int32(-1)
	switch it, ok := o.get("items"); {
	case !ok || it == true:
		item = c.anyNode(0)
	case it == false:
		if lo > 0 {
			return 0, invalid(path, "minItems", "%d items required but items is false", lo)
		}
		hi = 0
	default:
		if _, tuple := it.([]any); tuple {
			return 0, unsupportedKw(path, "items", "an array of schemas (tuple form) is not supported")
		}
		if item, err = c.schema(it, path+"/items", depth+1); err != nil {
			return 0, err
		}
	}
	return c.addNode(node{kind: kArray, item: item, minItems: lo, maxItems: hi}), nil
}

// number compiles numeric bounds exactly to the grid of writable values.
func (c *compiler) number(o *object, integer bool, path string) (int32, error) {
	s := numSpec{maxI: MaxNumberIntDigits, fMax: MaxFractionDigits, grid: pow10[MaxFractionDigits]}
	if integer {
		s = numSpec{maxI: MaxIntegerDigits, grid: 1}
	}
	s.lo, s.hi = -s.limit(), s.limit()
	for _, kw := range []string{"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"} {
		raw, ok := o.get(kw)
		if !ok {
			continue
		}
		num, isNum := raw.(json.Number)
		r, okRat := new(big.Rat).SetString(string(num))
		if !isNum || !okRat {
			return 0, invalid(path, kw, "expected a number, got %s", short(raw))
		}
		lower := strings.HasSuffix(kw, "inimum")
		v := gridBound(r, s.grid, lower, strings.HasPrefix(kw, "exclusive"), s.limit())
		if lower {
			s.lo = max(s.lo, v)
		} else {
			s.hi = min(s.hi, v)
		}
	}
	if s.lo > s.hi {
		what := "number"
		if integer {
			what = "integer"
		}
		return 0, invalid(path, "minimum", "no %s with at most %d digits satisfies the bounds (minimum above maximum)", what, s.maxI)
	}
	return c.addNode(node{kind: kNumber, num: s}), nil
}

// object compiles properties in schema order; required names missing from
// properties are appended as properties of the additionalProperties schema.
func (c *compiler) object(o *object, path string, depth int) (int32, error) {
	props, err := asObject(o, "properties", path)
	if err != nil {
		return 0, err
	}
	req, err := requiredSet(o, path)
	if err != nil {
		return 0, err
	}
	extra := int32(-1)
	switch a, ok := o.get("additionalProperties"); {
	case !ok || a == true:
		extra = c.anyNode(0)
	case a == false:
	default:
		if extra, err = c.schema(a, path+"/additionalProperties", depth+1); err != nil {
			return 0, err
		}
	}
	n := node{kind: kObject, extra: extra, keys: newTrie()}
	for _, name := range props.keys {
		p := pointer(path+"/properties", name)
		if strings.ContainsAny(name, "\"\\") || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 }) {
			return 0, unsupportedKw(p, "properties", "property name %q needs escapes in JSON; not supported", name)
		}
		if b, ok := props.vals[name].(bool); ok && !b {
			if slices.Contains(req, name) {
				return 0, invalid(p, "required", "property %q is required but its schema is false", name)
			}
			n.keys.add([]byte(name), -2)
			continue
		}
		sub, err := c.schema(props.vals[name], p, depth+1)
		if err != nil {
			return 0, err
		}
		n.props = append(n.props, prop{name: name, node: sub, required: slices.Contains(req, name)})
	}
	for _, name := range req {
		if _, declared := props.vals[name]; declared {
			continue
		}
		if extra < 0 {
			return 0, invalid(path, "required", "property %q is required but not in properties, and additionalProperties is false", name)
		}
		if strings.ContainsAny(name, "\"\\") || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 }) {
			return 0, unsupportedKw(path, "required", "property name %q needs escapes in JSON; not supported", name)
		}
		n.props = append(n.props, prop{name: name, node: extra, required: true})
	}
	for i, p := range n.props {
		n.keys.add([]byte(p.name), int32(i))
	}
	n.firstReq = make([]int32, len(n.props)+1)
	n.firstReq[len(n.props)] = int32(len(n.props))
	for i := len(n.props) - 1; i >= 0; i-- {
		n.firstReq[i] = n.firstReq[i+1]
		if n.props[i].required {
			n.firstReq[i] = int32(i)
		}
	}
	return c.addNode(n), nil
}

func asObject(o *object, kw, path string) (*object, error) {
	raw, ok := o.get(kw)
	if !ok {
		return &object{vals: map[string]any{}}, nil
	}
	p, ok := raw.(*object)
	if !ok {
		return nil, invalid(path, kw, "expected an object, got %s", jsonType(raw))
	}
	return p, nil
}

func requiredSet(o *object, path string) ([]string, error) {
	raw, ok := o.get("required")
	if !ok {
		return nil, nil
	}
	list, ok := raw.([]any)
	if !ok {
		return nil, invalid(path, "required", "expected an array of strings, got %s", jsonType(raw))
	}
	var out []string
	for _, e := range list {
		s, ok := e.(string)
		if !ok {
			return nil, invalid(path, "required", "expected an array of strings, got element %s", short(e))
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}

// enumNode compiles enum/const to a trie of their compact serializations,
// keeping only the values the rest of the schema accepts (checked with this
// package's own automaton, which accepts only valid instances).
func (c *compiler) enumNode(o *object, path string, depth int) (int32, error) {
	var vals []any
	if raw, ok := o.get("enum"); ok {
		list, ok := raw.([]any)
		if !ok || len(list) == 0 {
			return 0, invalid(path, "enum", "expected a non-empty array, got %s", short(raw))
		}
		vals = list
	}
	if cv, ok := o.get("const"); ok {
		cb := compactBytes(cv)
		if vals != nil && !slices.ContainsFunc(vals, func(v any) bool { return string(compactBytes(v)) == string(cb) }) {
			return 0, invalid(path, "const", "const %s is not among the enum values", short(cv))
		}
		vals = []any{cv}
	}
	rest := &object{vals: map[string]any{}}
	for _, k := range o.keys {
		if k != "enum" && k != "const" && !isAnnotation(k) {
			rest.keys = append(rest.keys, k)
			rest.vals[k] = o.vals[k]
		}
	}
	check := int32(-1)
	if len(rest.keys) > 0 {
		var err error
		if check, err = c.objectSchema(rest, path, depth); err != nil {
			return 0, err
		}
	}
	t := newTrie()
	for i, v := range vals {
		b := compactBytes(v)
		var x any
		if err := json.Unmarshal(b, &x); err != nil {
			return 0, invalid(path, "enum", "value %d (%s) does not decode: %v", i, short(v), err)
		}
		if check < 0 || c.accepts(check, b) {
			t.add(b, int32(i))
		}
	}
	if len(t.nodes[0].below) == 0 {
		return 0, invalid(path, "enum", "no enum or const value satisfies the rest of the schema")
	}
	return c.addNode(node{kind: kEnum, values: t}), nil
}

// accepts runs the automaton of node n alone over text.
func (c *compiler) accepts(n int32, text []byte) bool {
	saved := c.g.nodes[0].alts
	c.g.nodes[0].alts = []int32{n}
	c.refreshFirst()
	defer func() { c.g.nodes[0].alts = saved }()
	return c.g.Accepts(text)
}

// anyNode is an unconstrained JSON value whose objects and arrays nest at
// most MaxAnyDepth-d more levels.
func (c *compiler) anyNode(d int) int32 {
	if n, ok := c.any[d]; ok {
		return n
	}
	alts := []int32{
		c.addNode(node{kind: kString, maxLen: -1}),
		c.unboundedNumber(),
		c.literals("true", "false", "null"),
	}
	if d < MaxAnyDepth {
		alts = append(alts, c.genericObject(d))
		alts = append(alts, c.addNode(node{kind: kArray, item: c.anyNode(d + 1), maxItems: -1}))
	}
	n := c.addNode(node{kind: kUnion, alts: alts})
	c.any[d] = n
	return n
}

func (c *compiler) unboundedNumber() int32 {
	s := numSpec{maxI: MaxNumberIntDigits, fMax: MaxFractionDigits, grid: pow10[MaxFractionDigits]}
	s.lo, s.hi = -s.limit(), s.limit()
	return c.addNode(node{kind: kNumber, num: s})
}

// genericObject is an object of any keys whose values nest below depth d.
func (c *compiler) genericObject(d int) int32 {
	return c.addNode(node{kind: kObject, extra: c.anyNode(d + 1), keys: newTrie(), firstReq: []int32{0}})
}
