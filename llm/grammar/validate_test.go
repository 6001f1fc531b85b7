package grammar_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"
	"unicode/utf8"
)

// validate checks instance against schema by the JSON Schema validation
// vocabulary (https://json-schema.org/draft/2020-12/json-schema-validation),
// written from the specification's text for the keywords the package
// supports, independently of the package's automaton. Both are decoded with
// UseNumber so numbers compare exactly.
//
// refRoot is the document "$ref" pointers (RFC 6901, local only) resolve in.
var refRoot any

func validate(inst, schema any, path string) error {
	if s, ok := schema.(map[string]any); ok && s["$ref"] != nil {
		return validate(inst, resolvePointer(s["$ref"].(string)), path)
	}
	switch s := schema.(type) {
	case bool:
		if !s {
			return fmt.Errorf("%s: schema false", path)
		}
		return nil
	case map[string]any:
		if s["type"] == "json_object" && len(s) == 1 {
			if _, ok := inst.(map[string]any); !ok {
				return fmt.Errorf("%s: not an object", path)
			}
			return nil
		}
		for _, check := range []func(any, map[string]any, string) error{
			vType, vEnum, vConst, vAnyOf, vString, vNumber, vArray, vObject,
		} {
			if err := check(inst, s, path); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("%s: bad schema %T", path, schema)
}

// typeOf names the JSON type of a decoded instance (section 6.1.1: integer
// is any number with a zero fractional part).
func typeOf(v any) []string {
	switch t := v.(type) {
	case nil:
		return []string{"null"}
	case bool:
		return []string{"boolean"}
	case string:
		return []string{"string"}
	case []any:
		return []string{"array"}
	case map[string]any:
		return []string{"object"}
	case json.Number:
		if rat(t).IsInt() {
			return []string{"number", "integer"}
		}
		return []string{"number"}
	}
	return nil
}

func rat(n json.Number) *big.Rat {
	r, ok := new(big.Rat).SetString(string(n))
	if !ok {
		panic("bad number " + string(n))
	}
	return r
}

func vType(inst any, s map[string]any, path string) error {
	t, ok := s["type"]
	if !ok {
		return nil
	}
	var want []any
	if str, ok := t.(string); ok {
		want = []any{str}
	} else {
		want = t.([]any)
	}
	for _, w := range want {
		for _, have := range typeOf(inst) {
			if w == have {
				return nil
			}
		}
	}
	return fmt.Errorf("%s: type %v, want %v", path, typeOf(inst), want)
}

// equal is JSON equality (section 4.2.2): same type, numbers equal
// mathematically, arrays element-wise, objects with the same keys and
// equal values.
func equal(a, b any) bool {
	switch x := a.(type) {
	case json.Number:
		y, ok := b.(json.Number)
		return ok && rat(x).Cmp(rat(y)) == 0
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !equal(v, w) {
				return false
			}
		}
		return true
	}
	return a == b
}

func vEnum(inst any, s map[string]any, path string) error {
	e, ok := s["enum"]
	if !ok {
		return nil
	}
	for _, v := range e.([]any) {
		if equal(inst, v) {
			return nil
		}
	}
	return fmt.Errorf("%s: %v not in enum", path, inst)
}

func vConst(inst any, s map[string]any, path string) error {
	if c, ok := s["const"]; ok && !equal(inst, c) {
		return fmt.Errorf("%s: %v is not the const", path, inst)
	}
	return nil
}

func vAnyOf(inst any, s map[string]any, path string) error {
	alts, ok := s["anyOf"]
	if !ok {
		return nil
	}
	for _, a := range alts.([]any) {
		if validate(inst, a, path) == nil {
			return nil
		}
	}
	return fmt.Errorf("%s: no anyOf alternative matches", path)
}

func num(s map[string]any, kw string) (*big.Rat, bool) {
	v, ok := s[kw]
	if !ok {
		return nil, false
	}
	return rat(v.(json.Number)), true
}

func count(s map[string]any, kw string) (int, bool) {
	r, ok := num(s, kw)
	if !ok {
		return 0, false
	}
	return int(r.Num().Int64()), true
}

// vString: minLength/maxLength count characters (code points), 6.3.
func vString(inst any, s map[string]any, path string) error {
	str, ok := inst.(string)
	if !ok {
		return nil
	}
	n := utf8.RuneCountInString(str)
	if lo, ok := count(s, "minLength"); ok && n < lo {
		return fmt.Errorf("%s: length %d < minLength %d", path, n, lo)
	}
	if hi, ok := count(s, "maxLength"); ok && n > hi {
		return fmt.Errorf("%s: length %d > maxLength %d", path, n, hi)
	}
	return nil
}

// vNumber: the four bounds of section 6.2.
func vNumber(inst any, s map[string]any, path string) error {
	n, ok := inst.(json.Number)
	if !ok {
		return nil
	}
	x := rat(n)
	for kw, bad := range map[string]func(int) bool{
		"minimum":          func(c int) bool { return c < 0 },
		"maximum":          func(c int) bool { return c > 0 },
		"exclusiveMinimum": func(c int) bool { return c <= 0 },
		"exclusiveMaximum": func(c int) bool { return c >= 0 },
	} {
		if b, ok := num(s, kw); ok && bad(x.Cmp(b)) {
			return fmt.Errorf("%s: %s violates %s %s", path, n, kw, b.RatString())
		}
	}
	return nil
}

// vArray: items (applies to every element, 10.3.1.2), minItems, maxItems.
func vArray(inst any, s map[string]any, path string) error {
	arr, ok := inst.([]any)
	if !ok {
		return nil
	}
	if lo, ok := count(s, "minItems"); ok && len(arr) < lo {
		return fmt.Errorf("%s: %d items < minItems %d", path, len(arr), lo)
	}
	if hi, ok := count(s, "maxItems"); ok && len(arr) > hi {
		return fmt.Errorf("%s: %d items > maxItems %d", path, len(arr), hi)
	}
	if it, ok := s["items"]; ok {
		for i, e := range arr {
			if err := validate(e, it, fmt.Sprintf("%s/%d", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// vObject: properties, required, additionalProperties (10.3.2).
func vObject(inst any, s map[string]any, path string) error {
	obj, ok := inst.(map[string]any)
	if !ok {
		return nil
	}
	props, _ := s["properties"].(map[string]any)
	if req, ok := s["required"]; ok {
		for _, r := range req.([]any) {
			if _, ok := obj[r.(string)]; !ok {
				return fmt.Errorf("%s: required %q missing", path, r)
			}
		}
	}
	for k, v := range obj {
		sub, declared := props[k]
		if !declared {
			sub, declared = s["additionalProperties"]
		}
		if !declared {
			continue
		}
		if err := validate(v, sub, path+"/"+k); err != nil {
			return err
		}
	}
	return nil
}

// duplicateKeys reports whether some object of doc repeats a key (RFC 8259
// section 4 says names SHOULD be unique).
func duplicateKeys(doc []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(doc))
	var seen []map[string]bool
	var inObj []bool
	expectKey := false
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				seen, inObj = append(seen, map[string]bool{}), append(inObj, true)
				expectKey = true
				continue
			case '[':
				seen, inObj = append(seen, nil), append(inObj, false)
			default:
				seen, inObj = seen[:len(seen)-1], inObj[:len(inObj)-1]
			}
		case string:
			if expectKey {
				if seen[len(seen)-1][t] {
					return true
				}
				seen[len(seen)-1][t] = true
				expectKey = false
				continue
			}
		}
		expectKey = len(inObj) > 0 && inObj[len(inObj)-1]
	}
}

func resolvePointer(ref string) any {
	v := refRoot
	if ref == "#" {
		return v
	}
	for _, tok := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		v = v.(map[string]any)[tok]
	}
	return v
}
