package onnx

import (
	"go/ast"
	"go/parser"
	"go/token"
	"sort"
	"strconv"
	"testing"
)

// padsafeOpNames returns the op-type string literals that padsafe.go
// compares a node's op type against in (*padRun).rule: a switch on op or
// a comparison with op or n.OpType. There must be none: every op's rule
// lives beside its converter.
func padsafeOpNames(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "padsafe.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	isOp := func(e ast.Expr) bool {
		switch e := e.(type) {
		case *ast.Ident:
			return e.Name == "op"
		case *ast.SelectorExpr:
			return e.Sel.Name == "OpType"
		}
		return false
	}
	var names []string
	lit := func(e ast.Expr) {
		if l, ok := e.(*ast.BasicLit); ok && l.Kind == token.STRING {
			s, _ := strconv.Unquote(l.Value)
			names = append(names, s)
		}
	}
	found := false
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "rule" || fn.Recv == nil {
			continue
		}
		found = true
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SwitchStmt:
				if n.Tag != nil && isOp(n.Tag) {
					for _, st := range n.Body.List {
						for _, e := range st.(*ast.CaseClause).List {
							lit(e)
						}
					}
				}
			case *ast.BinaryExpr:
				if isOp(n.X) {
					lit(n.Y)
				}
				if isOp(n.Y) {
					lit(n.X)
				}
			}
			return true
		})
	}
	if !found {
		t.Fatal("found no (*padRun).rule in padsafe.go")
	}
	return names
}

// Every op the importer converts has a decided padding rule, registered
// beside its converter in the op's ops_*.go init: registerPadRule (how the
// padded dimension passes through it) or registerPadNotAnalysed (a node
// that touches the padded dimension keeps it exact). A new op cannot be
// added without deciding; deciding one twice panics at program start; a
// decision for an op the importer does not register is stale. padsafe.go's
// rule holds no op's rule itself (no switch on the op type).
//
// Faults injected: deleting the registration registerPadRule("Gemm",
// padGemm) from ops_math.go fails this test with `ops without a padding
// rule: ["Gemm"]`; deleting "Tile" from registerPadNotAnalysed in
// ops_shape.go fails it naming "Tile"; a `switch op { case "Relu": ... }`
// put back in rule fails it naming "Relu".
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
		t.Errorf("(*padRun).rule in padsafe.go decides ops itself: %q (register their rules beside their converters)", names)
	}
}
