package onnx

import (
	"go/ast"
	"go/parser"
	"go/token"
	"sort"
	"strconv"
	"testing"
)

// padsafeOpNames returns the op names (registered op types) written as
// string literals in padsafe.go's dispatch, (*padRun).rule and
// (*padRun).node: a switch on the op type, a comparison with it, a table
// keyed by it. There must be none: every op's rule, and what node's
// guards need to know of it, is registered beside its converter.
func padsafeOpNames(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "padsafe.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	found := 0
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv == nil || fn.Name.Name != "rule" && fn.Name.Name != "node" {
			continue
		}
		found++
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			if l, ok := n.(*ast.BasicLit); ok && l.Kind == token.STRING {
				if s, err := strconv.Unquote(l.Value); err == nil && registry[s] != nil {
					names = append(names, s)
				}
			}
			return true
		})
	}
	if found != 2 {
		t.Fatalf("found %d of (*padRun).rule and (*padRun).node in padsafe.go", found)
	}
	return names
}

// Every op the importer converts has a decided padding rule, registered
// beside its converter in the op's ops_*.go init: registerPadRule (how the
// padded dimension passes through it) or registerPadNotAnalysed (a node
// that touches the padded dimension keeps it exact). A new op cannot be
// added without deciding; deciding one twice panics at program start; a
// decision for an op the importer does not register is stale. padsafe.go's
// rule and node hold no op's rule themselves (no switch on the op type,
// no table of ops).
//
// Faults injected: deleting the registration registerPadRule("Gemm",
// padGemm) from ops_math.go fails this test with `ops without a padding
// rule: ["Gemm"]`; deleting "Tile" from registerPadNotAnalysed in
// ops_shape.go fails it naming "Tile"; a `switch op { case "Relu": ... }`
// put back in rule fails it naming "Relu"; node's former table
// map[string]int{"Reshape": 1, ...} put back fails it naming "Reshape".
func TestPadRulesDecided(t *testing.T) {
	var undecided, stale []string
	for op := range registry {
		if padRules[op] == nil {
			undecided = append(undecided, op)
		}
	}
	for op := range padRules {
		if registry[op] == nil {
			stale = append(stale, op)
		}
	}
	sort.Strings(undecided)
	sort.Strings(stale)
	if len(undecided) > 0 {
		t.Errorf("ops without a padding rule: %q (register one beside the converter with registerPadRule, or registerPadNotAnalysed)", undecided)
	}
	if len(stale) > 0 {
		t.Errorf("padding decisions for ops the importer does not register: %q", stale)
	}
	if names := padsafeOpNames(t); len(names) > 0 {
		t.Errorf("padsafe.go's rule or node decides ops itself: %q (register their rules beside their converters)", names)
	}
}
