package grammar

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Supported lists the assertion keywords Compile implements; any other
// keyword except the annotations in annotations is refused with a
// *SchemaError matching errs.ErrUnsupported that names it.
var Supported = []string{
	"type", "properties", "required", "additionalProperties", "items",
	"minItems", "maxItems", "enum", "const", "anyOf", "minLength",
	"maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
	"$ref",
}

// annotations carry no assertion and are ignored
// (https://json-schema.org/draft/2020-12/json-schema-validation#section-9).
var annotations = []string{
	"title", "description", "default", "examples", "$schema", "$id",
	"$comment", "deprecated", "readOnly", "writeOnly", "$defs", "definitions",
}

func isAnnotation(k string) bool { return slices.Contains(annotations, k) }

type compiler struct {
	g    *Grammar
	any  map[int]int32    // unconstrained value node per nesting depth
	root any              // the schema document, for $ref
	refs map[string]int32 // node of each $ref target compiled
}

// Compile compiles a JSON schema, or {"type":"json_object"} for any JSON
// object, into a Grammar. The language accepted is described in the package
// comment. Errors are *SchemaError values (errs.ErrUnsupported for a
// keyword or form not implemented, errs.ErrInvalidInput for a malformed,
// unsatisfiable or oversized schema); Compile never panics on any input.
func Compile(schema []byte) (*Grammar, error) {
	if len(schema) > MaxSchemaBytes {
		return nil, invalid("", "", "schema is %d bytes, over the limit of %d", len(schema), MaxSchemaBytes)
	}
	v, err := parseJSON(schema)
	if err != nil {
		return nil, err
	}
	c := &compiler{g: &Grammar{}, any: map[int]int32{}, root: v, refs: map[string]int32{}}
	c.g.add(node{kind: kRoot})
	var root int32
	if o, ok := v.(*object); ok && len(o.keys) == 1 && o.vals["type"] == "json_object" {
		root = c.genericObject(0)
	} else if root, err = c.schema(v, "", 0); err != nil {
		return nil, err
	}
	c.g.nodes[0].alts = []int32{root}
	if err := c.prune(); err != nil {
		return nil, err
	}
	return c.g, nil
}

// prune finds the nodes that have a finite value (a least fixpoint: only
// recursive $refs can make one infinite) and cuts every way into the
// others, so that no accepted prefix is a dead end.
func (c *compiler) prune() error {
	g := c.g
	prod := make([]bool, len(g.nodes))
	for changed := true; changed; {
		changed = false
		for i := range g.nodes {
			if !prod[i] && productive(&g.nodes[i], prod) {
				prod[i], changed = true, true
			}
		}
	}
	if !prod[g.nodes[0].alts[0]] {
		return invalid("", "", "the schema admits no finite JSON value (a $ref recursion with no way out)")
	}
	for i := range g.nodes {
		n := &g.nodes[i]
		switch n.kind {
		case kUnion:
			n.alts = slices.DeleteFunc(n.alts, func(a int32) bool { return !prod[a] })
		case kArray:
			if n.item >= 0 && !prod[n.item] {
				n.maxItems = 0
			}
		case kObject:
			for j := range n.props {
				if !prod[n.props[j].node] {
					n.props[j].node = -1 // never chosen: see candidate
				}
			}
			if n.extra >= 0 && !prod[n.extra] {
				n.extra = -1
			}
		}
	}
	c.refreshFirst()
	return nil
}

func productive(n *node, prod []bool) bool {
	switch n.kind {
	case kString, kNumber, kEnum:
		return true
	case kArray:
		return n.minItems == 0 || n.item >= 0 && prod[n.item]
	case kObject:
		for _, p := range n.props {
			if p.required && !prod[p.node] {
				return false
			}
		}
		return true
	case kUnion:
		return slices.ContainsFunc(n.alts, func(a int32) bool { return prod[a] })
	}
	return false
}

// addNode appends n after computing the bytes it can start with; the
// alternatives of a union are always added before it.
func (c *compiler) addNode(n node) int32 {
	switch n.kind {
	case kObject:
		n.first['{'] = true
	case kArray:
		n.first['['] = true
	case kString:
		n.first['"'] = true
	case kNumber:
		n.first['-'] = true
		for b := '0'; b <= '9'; b++ {
			n.first[b] = true
		}
	case kEnum:
		for _, e := range n.values.nodes[0].edges {
			n.first[e.b] = true
		}
	case kUnion:
		c.unionFirst(&n)
	}
	return c.g.add(n)
}

// unionFirst sets the first bytes of a union from its alternatives, and
// the alternative each byte picks when no two alternatives share one.
func (c *compiler) unionFirst(n *node) {
	n.first = [256]bool{}
	n.pick = make([]int8, 256)
	for i := range n.pick {
		n.pick[i] = -1
	}
	for ai, a := range n.alts {
		for b, ok := range c.g.nodes[a].first {
			if !ok {
				continue
			}
			if n.first[b] && n.pick != nil {
				n.pick = nil // overlapping alternatives: fork
			} else if n.pick != nil {
				n.pick[b] = int8(ai)
			}
			n.first[b] = true
		}
	}
	if len(n.alts) > 127 {
		n.pick = nil
	}
}

// refreshFirst recomputes the unions' first bytes until nothing changes:
// a recursive $ref makes a union before the alternative it stands for.
func (c *compiler) refreshFirst() {
	for changed := true; changed; {
		changed = false
		for i := range c.g.nodes {
			n := &c.g.nodes[i]
			if n.kind != kUnion {
				continue
			}
			before := n.first
			c.unionFirst(n)
			changed = changed || before != n.first
		}
	}
}

func pointer(path, key string) string {
	return path + "/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(key)
}

// schema compiles one subschema.
func (c *compiler) schema(v any, path string, depth int) (int32, error) {
	if depth >= MaxSchemaDepth {
		return 0, invalid(path, "", "schema nested deeper than %d levels", MaxSchemaDepth)
	}
	switch t := v.(type) {
	case bool:
		if t {
			return c.anyNode(0), nil
		}
		return 0, invalid(path, "", "schema false accepts no value")
	case *object:
		for _, k := range t.keys {
			if !slices.Contains(Supported, k) && !isAnnotation(k) {
				return 0, unsupportedKw(path, k, "keyword not supported (supported: %s)", strings.Join(Supported, ", "))
			}
		}
		return c.objectSchema(t, path, depth)
	}
	return 0, invalid(path, "", "a schema must be an object or a boolean, got %s", jsonType(v))
}

func (c *compiler) objectSchema(o *object, path string, depth int) (int32, error) {
	if ref, ok := o.get("$ref"); ok {
		for _, k := range o.keys {
			if k != "$ref" && !isAnnotation(k) {
				return 0, unsupportedKw(path, "$ref", "$ref beside the keyword %q is not supported", k)
			}
		}
		return c.ref(ref, path, depth)
	}
	_, hasEnum := o.get("enum")
	_, hasConst := o.get("const")
	if hasEnum || hasConst {
		return c.enumNode(o, path, depth)
	}
	if alts, ok := o.get("anyOf"); ok {
		for _, k := range o.keys {
			if k != "anyOf" && !isAnnotation(k) {
				return 0, unsupportedKw(path, "anyOf", "anyOf beside the keyword %q is not supported", k)
			}
		}
		return c.anyOf(alts, path, depth)
	}
	types, err := schemaTypes(o, path)
	if err != nil {
		return 0, err
	}
	if len(types) == 0 {
		return c.anyNode(0), nil
	}
	var alts []int32
	for _, ty := range types {
		n, err := c.typed(o, ty, path, depth)
		if err != nil {
			return 0, err
		}
		alts = append(alts, n)
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return c.addNode(node{kind: kUnion, alts: alts}), nil
}

var jsonTypes = []string{"null", "boolean", "object", "array", "number", "integer", "string"}

// schemaTypes gives the types to generate: those of "type", else those
// implied by the keywords present, else none (any value).
func schemaTypes(o *object, path string) ([]string, error) {
	raw, ok := o.get("type")
	if !ok {
		var out []string
		for ty, kws := range map[string][]string{
			"object": {"properties", "required", "additionalProperties"},
			"array":  {"items", "minItems", "maxItems"},
			"string": {"minLength", "maxLength"},
			"number": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"},
		} {
			for _, k := range kws {
				if _, has := o.get(k); has {
					out = append(out, ty)
					break
				}
			}
		}
		slices.Sort(out)
		return out, nil
	}
	var list []any
	switch t := raw.(type) {
	case string:
		list = []any{t}
	case []any:
		list = t
	}
	if len(list) == 0 {
		return nil, invalid(path, "type", "expected a type name or a non-empty list of them, got %s", jsonType(raw))
	}
	var out []string
	for _, e := range list {
		s, _ := e.(string)
		if !slices.Contains(jsonTypes, s) {
			return nil, invalid(path, "type", "expected one of %s, got %s", strings.Join(jsonTypes, ", "), short(e))
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	if slices.Contains(out, "number") {
		out = slices.DeleteFunc(out, func(s string) bool { return s == "integer" }) // number includes integers
	}
	return out, nil
}

func (c *compiler) typed(o *object, ty, path string, depth int) (int32, error) {
	switch ty {
	case "object":
		return c.object(o, path, depth)
	case "array":
		return c.array(o, path, depth)
	case "string":
		return c.str(o, path)
	case "number", "integer":
		return c.number(o, ty == "integer", path)
	case "boolean":
		return c.literals("true", "false"), nil
	}
	return c.literals("null"), nil
}

func (c *compiler) literals(vals ...string) int32 {
	t := newTrie()
	for i, v := range vals {
		t.add([]byte(v), int32(i))
	}
	return c.addNode(node{kind: kEnum, values: t})
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	}
	return "an object"
}

func short(v any) string {
	b := compactBytes(v)
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}

func (c *compiler) anyOf(raw any, path string, depth int) (int32, error) {
	list, ok := raw.([]any)
	if !ok || len(list) == 0 {
		return 0, invalid(path, "anyOf", "expected a non-empty array of schemas, got %s", jsonType(raw))
	}
	var alts []int32
	for i, sub := range list {
		if b, ok := sub.(bool); ok && !b {
			continue // false: no value
		}
		n, err := c.schema(sub, fmt.Sprintf("%s/anyOf/%d", path, i), depth+1)
		if err != nil {
			return 0, err
		}
		alts = append(alts, n)
	}
	if len(alts) == 0 {
		return 0, invalid(path, "anyOf", "every alternative is false")
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return c.addNode(node{kind: kUnion, alts: alts}), nil
}

// ref compiles a local $ref ("#", "#/$defs/name", any JSON pointer into
// this document, RFC 6901). A target is compiled once; a reference met
// while compiling its own target (recursion) gets a one-alternative union
// filled in afterwards.
func (c *compiler) ref(raw any, path string, depth int) (int32, error) {
	s, ok := raw.(string)
	if !ok {
		return 0, invalid(path, "$ref", "expected a string, got %s", jsonType(raw))
	}
	if n, ok := c.refs[s]; ok {
		return n, nil
	}
	if !strings.HasPrefix(s, "#") {
		return 0, unsupportedKw(path, "$ref", "only references inside the schema (starting with #) are supported, got %q", s)
	}
	target, err := c.resolve(s[1:], path)
	if err != nil {
		return 0, err
	}
	slot := c.g.add(node{kind: kUnion})
	c.refs[s] = slot
	n, err := c.schema(target, s[1:], depth+1)
	if err != nil {
		return 0, err
	}
	c.g.nodes[slot].alts = []int32{n}
	c.unionFirst(&c.g.nodes[slot])
	return slot, nil
}

func (c *compiler) resolve(ptr, path string) (any, error) {
	v := c.root
	if ptr == "" {
		return v, nil
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, unsupportedKw(path, "$ref", "anchor references (#%s) are not supported", ptr)
	}
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		var next any
		found := false
		switch t := v.(type) {
		case *object:
			next, found = t.get(tok)
		case []any:
			var i int
			if _, err := fmt.Sscan(tok, &i); err == nil && i >= 0 && i < len(t) && fmt.Sprint(i) == tok {
				next, found = t[i], true
			}
		}
		if !found {
			return nil, invalid(path, "$ref", "#%s does not resolve in the schema", ptr)
		}
		v = next
	}
	return v, nil
}
