package grammar_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/llm/grammar"
)

func nested(depth int) string {
	s := `{"type":"string"}`
	for range depth {
		s = `{"type":"array","items":` + s + `}`
	}
	return s
}

// TestCompileRejects: each bad schema gives a *SchemaError of the expected
// class naming the keyword at fault.
func TestCompileRejects(t *testing.T) {
	big := `{"type":"object","description":"` + strings.Repeat("x", 10<<20) + `"}`
	for _, tc := range []struct {
		name, schema string
		want         error
		keyword      string
	}{
		{"unsupported keyword", `{"type":"string","pattern":"^a"}`, errs.ErrUnsupported, "pattern"},
		{"unsupported nested", `{"type":"object","properties":{"a":{"type":"string","format":"email"}}}`, errs.ErrUnsupported, "format"},
		{"oneOf", `{"oneOf":[{"type":"string"}]}`, errs.ErrUnsupported, "oneOf"},
		{"remote $ref", `{"$ref":"https://example.com/s.json"}`, errs.ErrUnsupported, "$ref"},
		{"anchor $ref", `{"$ref":"#node"}`, errs.ErrUnsupported, "$ref"},
		{"dangling $ref", `{"$ref":"#/$defs/b","$defs":{"a":{"type":"string"}}}`, errs.ErrInvalidInput, "$ref"},
		{"$ref with siblings", `{"$ref":"#/$defs/a","maxLength":2,"$defs":{"a":{"type":"string"}}}`, errs.ErrUnsupported, "$ref"},
		{"$ref to itself", `{"$ref":"#"}`, errs.ErrInvalidInput, ""},
		{"infinite $ref", `{"$ref":"#/$defs/Inf","$defs":{"Inf":{"type":"object","properties":{"x":{"$ref":"#/$defs/Inf"}},"required":["x"]}}}`, errs.ErrInvalidInput, ""},
		{"anyOf with siblings", `{"anyOf":[{"type":"string"}],"maxLength":3}`, errs.ErrUnsupported, "anyOf"},
		{"tuple items", `{"type":"array","items":[{"type":"string"}]}`, errs.ErrUnsupported, "items"},
		{"10 MB schema", big, errs.ErrInvalidInput, ""},
		{"100 deep", nested(100), errs.ErrInvalidInput, ""},
		{"raw nesting", strings.Repeat("[", 1000) + strings.Repeat("]", 1000), errs.ErrInvalidInput, ""},
		{"invalid type", `{"type":"text"}`, errs.ErrInvalidInput, "type"},
		{"empty type list", `{"type":[]}`, errs.ErrInvalidInput, "type"},
		{"type not a string", `{"type":3}`, errs.ErrInvalidInput, "type"},
		{"minimum > maximum", `{"type":"integer","minimum":5,"maximum":4}`, errs.ErrInvalidInput, "minimum"},
		{"exclusive empty", `{"type":"integer","exclusiveMinimum":4,"exclusiveMaximum":5}`, errs.ErrInvalidInput, "minimum"},
		{"below grid", `{"type":"number","exclusiveMinimum":0,"exclusiveMaximum":0.0000001}`, errs.ErrInvalidInput, "minimum"},
		{"minimum beyond digits", `{"type":"integer","minimum":1e20}`, errs.ErrInvalidInput, "minimum"},
		{"minLength > maxLength", `{"type":"string","minLength":5,"maxLength":4}`, errs.ErrInvalidInput, "minLength"},
		{"minItems > maxItems", `{"type":"array","minItems":3,"maxItems":2}`, errs.ErrInvalidInput, "minItems"},
		{"negative maxLength", `{"type":"string","maxLength":-1}`, errs.ErrInvalidInput, "maxLength"},
		{"fractional minItems", `{"type":"array","minItems":1.5}`, errs.ErrInvalidInput, "minItems"},
		{"huge minLength", `{"type":"string","minLength":100000000}`, errs.ErrInvalidInput, "minLength"},
		{"required not declared", `{"type":"object","properties":{"a":{"type":"string"}},"required":["b"],"additionalProperties":false}`, errs.ErrInvalidInput, "required"},
		{"required false", `{"type":"object","properties":{"a":false},"required":["a"]}`, errs.ErrInvalidInput, "required"},
		{"required not strings", `{"type":"object","required":[1]}`, errs.ErrInvalidInput, "required"},
		{"empty enum", `{"enum":[]}`, errs.ErrInvalidInput, "enum"},
		{"enum all filtered", `{"type":"string","enum":[1,2]}`, errs.ErrInvalidInput, "enum"},
		{"const not in enum", `{"enum":["a"],"const":"b"}`, errs.ErrInvalidInput, "const"},
		{"enum number overflow", `{"enum":[1e400]}`, errs.ErrInvalidInput, "enum"},
		{"minimum not a number", `{"type":"number","minimum":"3"}`, errs.ErrInvalidInput, "minimum"},
		{"properties not object", `{"type":"object","properties":[]}`, errs.ErrInvalidInput, "properties"},
		{"schema false", `false`, errs.ErrInvalidInput, ""},
		{"schema a number", `3`, errs.ErrInvalidInput, ""},
		{"anyOf empty", `{"anyOf":[]}`, errs.ErrInvalidInput, "anyOf"},
		{"anyOf all false", `{"anyOf":[false]}`, errs.ErrInvalidInput, "anyOf"},
		{"items false with minItems", `{"type":"array","items":false,"minItems":1}`, errs.ErrInvalidInput, "minItems"},
		{"not JSON", `{"type":`, errs.ErrInvalidInput, ""},
		{"two values", `{} {}`, errs.ErrInvalidInput, ""},
		{"duplicate key", `{"type":"string","type":"number"}`, errs.ErrInvalidInput, "type"},
		{"quote in name", `{"type":"object","properties":{"a\"b":{}}}`, errs.ErrUnsupported, "properties"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := grammar.Compile([]byte(tc.schema))
			if g != nil || !errors.Is(err, tc.want) {
				t.Fatalf("got grammar %t, error %v; want an error matching %v", g != nil, err, tc.want)
			}
			var se *grammar.SchemaError
			if !errors.As(err, &se) {
				t.Fatalf("%v is not a *SchemaError", err)
			}
			if se.Keyword != tc.keyword {
				t.Fatalf("keyword %q, want %q (%v)", se.Keyword, tc.keyword, err)
			}
		})
	}
}

// TestAccepts checks the language on hand-written documents, valid and
// invalid by the JSON Schema specification (and the package's documented
// restrictions: property order, whitespace bound, no exponent).
func TestAccepts(t *testing.T) {
	obj := `{"type":"object","properties":{"a":{"type":"integer","minimum":-3,"exclusiveMaximum":10},"b":{"type":"string","maxLength":2}},"required":["b"],"additionalProperties":false}`
	inf := `{"type":"object","properties":{"a":{"$ref":"#/$defs/Inf"},"b":{"type":"integer"},"c":{"$ref":"#/$defs/Inf"}},"additionalProperties":false,
		"$defs":{"Inf":{"type":"object","properties":{"x":{"$ref":"#/$defs/Inf"}},"required":["x"]}}}`
	tree := `{"type":"object","properties":{"n":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#"}}},"required":["n","kids"],"additionalProperties":false}`
	for _, tc := range []struct {
		schema, doc string
		want        bool
	}{
		{obj, `{"b":"xy"}`, true},
		{obj, `{"a":9,"b":""}`, true},
		{obj, `{"a":-3,"b":"é\n"}`, true},
		{obj, `{ "a" : -0 , "b" : "\u00e9" }`, true},
		{obj, `{"a":10,"b":""}`, false},          // exclusiveMaximum
		{obj, `{"a":-4,"b":""}`, false},          // minimum
		{obj, `{"a":1.0,"b":""}`, false},         // integers without a point
		{obj, `{"a":01,"b":""}`, false},          // leading zero
		{obj, `{"b":"xyz"}`, false},              // maxLength
		{obj, `{"a":1}`, false},                  // required
		{obj, `{"b":"x","a":1}`, false},          // schema order
		{obj, `{"b":"x","c":1}`, false},          // additionalProperties false
		{obj, `{"b":"x","b":"y"}`, false},        // repeated key
		{obj, `{"b":"\ud800"}`, false},           // lone surrogate escape
		{obj, "{\"b\":\"\x01\"}", false},         // raw control character
		{obj, "{\"b\":\"\xff\"}", false},         // invalid UTF-8
		{obj, "{\"b\":\"\xed\xa0\x80\"}", false}, // UTF-8 surrogate
		{obj, `{"b":"x"}` + " ", false},          // nothing after the value
		{obj, `{` + strings.Repeat(" ", grammar.MaxWhitespace) + `"b":""}`, true},
		{obj, `{` + strings.Repeat(" ", grammar.MaxWhitespace+1) + `"b":""}`, false},
		{`{"type":"number","minimum":0.25,"maximum":0.5}`, `0.25`, true},
		{`{"type":"number","minimum":0.25,"maximum":0.5}`, `0.2`, false},
		{`{"type":"number","minimum":0.25,"maximum":0.5}`, `0.5000001`, false},
		{`{"type":"number","exclusiveMinimum":0.25}`, `0.25`, false},
		{`{"type":"number","exclusiveMinimum":0.25}`, `0.250001`, true},
		{`{"type":"number"}`, `1e5`, false},
		{`{"type":"number"}`, `-12.5`, true},
		{`{"type":"integer"}`, `123456789012345`, true},
		{`{"type":"integer"}`, `1234567890123456`, false},
		{`{"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":2}`, `[true,false]`, true},
		{`{"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":2}`, `[]`, false},
		{`{"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":2}`, `[true,true,true]`, false},
		{`{"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":2}`, `[true,]`, false},
		{`{"enum":["a",1,[1,{"x":null}]]}`, `[1,{"x":null}]`, true},
		{`{"enum":["a",1,[1,{"x":null}]]}`, `"b"`, false},
		{`{"type":["string","null"]}`, `null`, true},
		{`{"type":["string","null"]}`, `0`, false},
		{`{"type":"json_object"}`, `{"k":[1,{"z":"w"}],"k":true}`, true},
		{`{"type":"json_object"}`, `[]`, false},
		{`{"anyOf":[{"type":"integer","maximum":1},{"type":"integer","minimum":100}]}`, `50`, false},
		{`{"anyOf":[{"type":"integer","maximum":1},{"type":"integer","minimum":100}]}`, `100`, true},
		{`{"type":"object","properties":{"a":{}},"additionalProperties":{"type":"null"}}`, `{"a":1,"q":null}`, true},
		{`{"type":"object","properties":{"a":{}},"additionalProperties":{"type":"null"}}`, `{"q":null,"a":1}`, false},
		{`{"type":"object","properties":{"a":{}},"additionalProperties":{"type":"null"}}`, `{"q":1}`, false},
		{inf, `{"b":1}`, true},
		{inf, `{"a":{"x":{}},"b":1}`, false}, // a has no finite value
		{inf, `{"c":{}}`, false},             // nor c: no extra key
		{tree, `{"n":1,"kids":[{"n":2,"kids":[]},{"n":3,"kids":[{"n":4,"kids":[]}]}]}`, true},
		{tree, `{"n":1,"kids":[{"n":2}]}`, false},
	} {
		g, err := grammar.Compile([]byte(tc.schema))
		if err != nil {
			t.Fatalf("%s: %v", tc.schema, err)
		}
		if got := g.Accepts([]byte(tc.doc)); got != tc.want {
			t.Errorf("%s on %q: accepted %v, want %v", tc.schema, tc.doc, got, tc.want)
		}
	}
}

// FuzzCompile: Compile never panics, returns a grammar or a *SchemaError,
// and a grammar's automaton runs on arbitrary bytes.
func FuzzCompile(f *testing.F) {
	for _, s := range walkSchemas {
		f.Add([]byte(s.schema), []byte(`{"a":1}`))
	}
	f.Add([]byte(nested(70)), []byte(`[[["x"]]]`))
	f.Add([]byte(`{"enum":[1,"a",null,{"b":[]}]}`), []byte(`"a"`))
	f.Add([]byte(`{"type":"number","minimum":-1e-3,"exclusiveMaximum":1e3}`), []byte(`-0.0005`))
	f.Fuzz(func(t *testing.T, schema, doc []byte) {
		g, err := grammar.Compile(schema)
		if err != nil {
			var se *grammar.SchemaError
			if !errors.As(err, &se) {
				t.Fatalf("error %v is not a *SchemaError", err)
			}
			if !errors.Is(err, errs.ErrInvalidInput) && !errors.Is(err, errs.ErrUnsupported) {
				t.Fatalf("error %v matches no sentinel", err)
			}
			return
		}
		g.Accepts(doc)
	})
}
