package onnx

import (
	"go/ast"
	"go/parser"
	"go/token"
	"sort"
	"strconv"
	"testing"
)

// padSwitchOps returns the op types (*padRun).rule's switch in padsafe.go
// handles, read from the source.
func padSwitchOps(t *testing.T) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "padsafe.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string]bool{}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "rule" || fn.Recv == nil {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			sw, ok := n.(*ast.SwitchStmt)
			if !ok {
				return true
			}
			if id, ok := sw.Tag.(*ast.Ident); !ok || id.Name != "op" {
				return true
			}
			for _, st := range sw.Body.List {
				for _, e := range st.(*ast.CaseClause).List {
					if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						ops[s] = true
					}
				}
			}
			return false
		})
	}
	if len(ops) == 0 {
		t.Fatal("found no switch on op in (*padRun).rule")
	}
	return ops
}

// Every op the importer converts has a decided padding rule: one kept
// beside its converter (registerPadRule), a case of rule's switch, or a
// place in padNotAnalysed (refused as soon as it touches the padded
// dimension). A new op cannot be added without deciding, and no op is
// decided twice. Fault injected: registering a new op "PadRuleProbe" in an
// init function fails this test naming it.
func TestPadRulesDecided(t *testing.T) {
	sw := padSwitchOps(t)
	var undecided, twice, stale []string
	for op := range registry {
		n := 0
		for _, in := range []bool{padRules[op] != nil, sw[op], padNotAnalysed[op]} {
			if in {
				n++
			}
		}
		switch {
		case n == 0:
			undecided = append(undecided, op)
		case n > 1:
			twice = append(twice, op)
		}
	}
	for op := range padNotAnalysed {
		if registry[op] == nil {
			stale = append(stale, op)
		}
	}
	for op := range padRules {
		if registry[op] == nil {
			stale = append(stale, op)
		}
	}
	sort.Strings(undecided)
	sort.Strings(twice)
	sort.Strings(stale)
	if len(undecided) > 0 {
		t.Errorf("ops without a padding rule: %q (add one beside the converter with registerPadRule, or list the op in padNotAnalysed)", undecided)
	}
	if len(twice) > 0 {
		t.Errorf("ops with more than one padding decision: %q", twice)
	}
	if len(stale) > 0 {
		t.Errorf("padding decisions for ops the importer does not register: %q", stale)
	}
}
