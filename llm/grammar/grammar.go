// Package grammar constrains generation to JSON that validates against a
// JSON schema: Compile turns a schema into a byte-level pushdown automaton,
// a Vocab holds the bytes of every token of a tokenizer, and a Matcher
// tracks one sequence, giving before each step the bitmask of the tokens
// that keep the output valid and advancing with the token sampled.
//
// # Language
//
// The automaton accepts a subset of the JSON texts that validate against the
// schema (https://json-schema.org/draft/2020-12/json-schema-validation),
// chosen so that every prefix it accepts can still be completed (no dead
// ends) and so that a random model cannot loop forever on filler:
//
//   - Object properties come in the order the schema's "properties" lists
//     them; an optional one may be skipped, a required one may not. Extra
//     keys (additionalProperties absent, true or a schema) come after the
//     declared ones, never repeat a declared name, and are written without
//     backslash escapes. Extra keys are not checked against each other.
//   - Whitespace: none before the value or after it; between tokens of an
//     object or array, a run of at most MaxWhitespace bytes of space, tab,
//     CR or LF after '{', '[', ',' and ':' and before '}', ']', ',' and ':'.
//   - Strings: any Unicode scalar value as strict UTF-8 except control
//     characters, which need escapes; the escapes \" \\ \/ \b \f \n \r \t
//     and \uXXXX except surrogates (one character each for minLength and
//     maxLength, which count code points as the specification says).
//   - Integers: at most MaxIntegerDigits digits; numbers: at most
//     MaxNumberIntDigits digits before the point and MaxFractionDigits after
//     it; no exponent; bounds are checked exactly.
//   - Values of unconstrained type ("true" schemas, extra keys, json_object)
//     nest at most MaxAnyDepth levels of objects and arrays.
//   - enum and const values are written as in the schema, compacted.
//   - $ref points inside the schema (RFC 6901 pointers such as
//     "#/$defs/Node", or "#"); recursion is allowed, parts of the schema
//     with no finite value are never entered, and objects and arrays stop
//     opening at a parse depth of 128 frames (a schema whose every value
//     needs deeper nesting can then leave the mask empty).
package grammar

import (
	"bytes"
	"sync"
)

// Limits of the schemas Compile accepts and of the JSON it lets through.
const (
	MaxSchemaBytes     = 1 << 20 // larger schemas are refused
	MaxSchemaDepth     = 64      // subschemas nested deeper are refused
	MaxWhitespace      = 12      // longest whitespace run between JSON tokens
	MaxIntegerDigits   = 15      // exact in float64, so every reader agrees
	MaxNumberIntDigits = 12
	MaxFractionDigits  = 6
	MaxAnyDepth        = 6       // object/array nesting inside an unconstrained value
	MaxCount           = 1 << 16 // largest minLength/minItems accepted
	maxStack           = 160     // frames of one parse stack
	maxContainers      = 128     // stack depth from which no object or array opens (recursive $ref)
	maxAlternatives    = 16      // parse stacks kept at once (anyOf)
)

type kind uint8

const (
	kRoot kind = iota
	kObject
	kArray
	kString
	kNumber
	kEnum
	kUnion
)

// prop is one declared property of an object node.
type prop struct {
	name     string
	node     int32
	required bool
}

// trie is a byte trie over a finite set of strings; term is the index of
// the string ending at a node (-1 none).
type trie struct {
	nodes []trieNode
}

type trieNode struct {
	edges []trieEdge
	term  int32
	below []int32 // indices of the strings in this subtree
}

type trieEdge struct {
	b    byte
	next int32
}

func newTrie() *trie { return &trie{nodes: []trieNode{{term: -1}}} }

func (t *trie) add(s []byte, idx int32) {
	n := int32(0)
	t.nodes[0].below = append(t.nodes[0].below, idx)
	for _, b := range s {
		next := t.child(n, b)
		if next < 0 {
			next = int32(len(t.nodes))
			t.nodes = append(t.nodes, trieNode{term: -1})
			t.nodes[n].edges = append(t.nodes[n].edges, trieEdge{b, next})
		}
		n = next
		t.nodes[n].below = append(t.nodes[n].below, idx)
	}
	if t.nodes[n].term < 0 {
		t.nodes[n].term = idx
	}
}

func (t *trie) child(n int32, b byte) int32 {
	for _, e := range t.nodes[n].edges {
		if e.b == b {
			return e.next
		}
	}
	return -1
}

// node is one compiled subschema.
type node struct {
	kind kind
	// object
	props    []prop
	firstReq []int32 // firstReq[i]: index of the first required property >= i, len(props) if none
	extra    int32   // node of additional property values, -1 when not allowed
	keys     *trie   // declared names (term: property index, or -2 for a forbidden name)
	// array
	item               int32
	minItems, maxItems int32 // maxItems -1: unbounded
	// string
	minLen, maxLen int32 // maxLen -1: unbounded
	// number
	num numSpec
	// enum
	values *trie
	// union and root
	alts  []int32
	first [256]bool // bytes a value of this node can start with
	pick  []int8    // union: alternative starting with each byte (-1 none), when they are disjoint
}

// Grammar is a compiled schema. It is immutable and safe for concurrent use
// by many Matchers; it caches masks per Vocab.
type Grammar struct {
	nodes []node
	mu    sync.Mutex
	cache map[*Vocab]*maskCache
}

func (g *Grammar) add(n node) int32 {
	g.nodes = append(g.nodes, n)
	return int32(len(g.nodes) - 1)
}

// Accepts reports whether text is a complete JSON text of the grammar's
// language (the language documented in the package comment).
func (g *Grammar) Accepts(text []byte) bool {
	var a, b state
	a.reset()
	a.push1([]frame{{node: 0}})
	for _, c := range text {
		g.stepSet(&b, &a, c)
		a, b = b, a
		if a.empty() {
			return false
		}
	}
	return g.canStop(&a)
}

// compactBytes serializes v compactly (enum values).
func compactBytes(v any) []byte {
	var buf bytes.Buffer
	encodeCompact(&buf, v)
	return buf.Bytes()
}
