package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
)

// object is a JSON object that keeps its keys in document order, so that
// properties are generated in the order the schema lists them.
type object struct {
	keys []string
	vals map[string]any
}

func (o *object) get(k string) (any, bool) {
	v, ok := o.vals[k]
	return v, ok
}

// maxRawDepth bounds the nesting of the schema document itself (the decoder
// recurses); the schema's own depth limit (MaxSchemaDepth) is checked while
// compiling.
const maxRawDepth = 512

// parseJSON decodes one JSON document into nil, bool, json.Number, string,
// []any and *object values. Duplicate keys are an error: JSON Schema
// documents must not have them and the meaning would be ambiguous.
func parseJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := parseValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, invalid("", "", "schema is not a single JSON value")
	}
	return v, nil
}

func parseValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxRawDepth {
		return nil, invalid("", "", "schema document nested deeper than %d", maxRawDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, invalid("", "", "schema is not valid JSON: %v", err)
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			var arr []any
			for dec.More() {
				v, err := parseValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, invalid("", "", "schema is not valid JSON: %v", err)
			}
			if arr == nil {
				arr = []any{}
			}
			return arr, nil
		}
		return parseObject(dec, depth)
	default:
		return t, nil
	}
}

func parseObject(dec *json.Decoder, depth int) (any, error) {
	o := &object{vals: map[string]any{}}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, invalid("", "", "schema is not valid JSON: %v", err)
		}
		k, _ := kt.(string)
		if _, dup := o.vals[k]; dup {
			return nil, invalid("", k, "duplicate key in a schema object")
		}
		v, err := parseValue(dec, depth+1)
		if err != nil {
			return nil, err
		}
		o.keys = append(o.keys, k)
		o.vals[k] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, invalid("", "", "schema is not valid JSON: %v", err)
	}
	return o, nil
}

// encodeCompact writes v as compact JSON, keeping key order and number text
// as written, and strings escaped as encoding/json escapes them except that
// <, > and & are kept literal.
func encodeCompact(buf *bytes.Buffer, v any) {
	switch t := v.(type) {
	case nil:
		buf.WriteString("null")
	case bool:
		buf.WriteString(strconv.FormatBool(t))
	case json.Number:
		buf.WriteString(t.String())
	case string:
		encodeString(buf, t)
	case []any:
		buf.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				buf.WriteByte(',')
			}
			encodeCompact(buf, e)
		}
		buf.WriteByte(']')
	case *object:
		buf.WriteByte('{')
		for i, k := range t.keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			encodeString(buf, k)
			buf.WriteByte(':')
			encodeCompact(buf, t.vals[k])
		}
		buf.WriteByte('}')
	}
}

func encodeString(buf *bytes.Buffer, s string) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a Go string always encodes
	buf.Write(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}
