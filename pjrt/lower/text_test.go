package lower

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// hloTypeNames are the StableHLO element type spellings of the StableHLO
// specification ("Types" section), written out independently of go-xla.
var hloTypeNames = map[dtypes.DType]string{
	dtypes.Bool: "i1", dtypes.Int8: "i8", dtypes.Int16: "i16", dtypes.Int32: "i32", dtypes.Int64: "i64",
	dtypes.Uint8: "ui8", dtypes.Uint16: "ui16", dtypes.Uint32: "ui32", dtypes.Uint64: "ui64",
	dtypes.Float16: "f16", dtypes.BFloat16: "bf16", dtypes.Float32: "f32", dtypes.Float64: "f64",
	dtypes.Complex64: "complex<f32>", dtypes.Complex128: "complex<f64>",
}

// tensorType spells a shape as a StableHLO tensor type, e.g. tensor<2x3xf32>.
func tensorType(s shapes.Shape) string {
	var sb strings.Builder
	sb.WriteString("tensor<")
	for _, d := range s.Dimensions {
		fmt.Fprintf(&sb, "%dx", d)
	}
	sb.WriteString(hloTypeNames[s.DType])
	sb.WriteString(">")
	return sb.String()
}

// stmt is one operation of a StableHLO text: its name and the operand and
// result types of its trailing signature.
type stmt struct {
	op       string
	operands []string
	results  []string
	attrs    string // the text between the operand list and the signature
}

var opStart = regexp.MustCompile(`"((?:stablehlo|chlo)\.[a-z_]+)"\(`)

// parseStatements scans StableHLO text in go-xla's generic form and returns
// every operation with its signature. It tracks bracket depth so the
// signatures of ops nested in regions (reduce bodies) are not mistaken for
// the enclosing op's.
func parseStatements(text string) ([]stmt, error) {
	var out []stmt
	for _, m := range opStart.FindAllStringSubmatchIndex(text, -1) {
		s := stmt{op: text[m[2]:m[3]]}
		i := m[1] // just after "("
		// Skip the operand list.
		for i < len(text) && text[i] != ')' {
			i++
		}
		i++
		start := i
		depth := 0
		sig := -1
		for ; i < len(text); i++ {
			if strings.HasPrefix(text[i:], "->") {
				if depth == 0 {
					return nil, fmt.Errorf("op %s at %d: arrow before signature", s.op, m[0])
				}
				i++
				continue
			}
			c := text[i]
			switch c {
			case '(', '{', '[', '<':
				depth++
			case ')', '}', ']', '>':
				depth--
			}
			if depth == 0 && strings.HasPrefix(text[i:], " : (") {
				sig = i
				break
			}
		}
		if sig < 0 {
			return nil, fmt.Errorf("op %s at %d: no signature", s.op, m[0])
		}
		s.attrs = text[start:sig]
		rest := text[sig+len(" : ("):]
		end := matching(rest)
		s.operands = splitTypes(rest[:end])
		rest = strings.TrimPrefix(rest[end+1:], " -> ")
		if strings.HasPrefix(rest, "(") {
			e := matching(rest[1:])
			s.results = splitTypes(rest[1 : e+1])
		} else {
			line, _, _ := strings.Cut(rest, "\n")
			s.results = []string{strings.TrimSpace(line)}
		}
		out = append(out, s)
	}
	return out, nil
}

// matching returns the index of the ")" closing an already opened "(".
func matching(s string) int {
	depth := 1
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(', '<':
			depth++
		case ')', '>':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return len(s)
}

func splitTypes(s string) []string {
	var out []string
	depth, last := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '<', '(':
			depth++
		case '>', ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[last:i]))
				last = i + 1
			}
		}
	}
	if t := strings.TrimSpace(s[last:]); t != "" {
		out = append(out, t)
	}
	return out
}

// findOp returns the statements named op.
func findOp(stmts []stmt, op string) []stmt {
	var out []stmt
	for _, s := range stmts {
		if s.op == op {
			out = append(out, s)
		}
	}
	return out
}

func TestParseStatements(t *testing.T) {
	// Hand-written in the generic form of the StableHLO spec's examples.
	text := `module @m {
  func.func @main(%x: tensor<2x3xf32>) -> tensor<2xf32> {
    %0 = "stablehlo.constant"() { value = dense<0.0> : tensor<f32> } : () -> tensor<f32>
    %2 = "stablehlo.reduce"(%x, %0) ({
      ^reductionFn(%arg0: tensor<f32>, %arg1: tensor<f32>) :
          %1 = "stablehlo.add"(%arg0, %arg1) : (tensor<f32>, tensor<f32>) -> tensor<f32>
          "stablehlo.return"(%1) : (tensor<f32>) -> ()
    }) { dimensions = array<i64: 1> } : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
    %3, %4 = "stablehlo.batch_norm_training"(%x) {
      conv = #stablehlo.conv<[b, f]x[o, i]->[b, f]>
    } : (tensor<2x3xf32>) -> (tensor<2xf32>, tensor<3xf32>)
    "stablehlo.return"(%2) : (tensor<2xf32>) -> ()
  }
}`
	stmts, err := parseStatements(text)
	if err != nil {
		t.Fatal(err)
	}
	want := []stmt{
		{op: "stablehlo.constant", operands: nil, results: []string{"tensor<f32>"}},
		{op: "stablehlo.reduce", operands: []string{"tensor<2x3xf32>", "tensor<f32>"}, results: []string{"tensor<2xf32>"}},
		{op: "stablehlo.add", operands: []string{"tensor<f32>", "tensor<f32>"}, results: []string{"tensor<f32>"}},
		{op: "stablehlo.return", operands: []string{"tensor<f32>"}, results: nil},
		{op: "stablehlo.batch_norm_training", operands: []string{"tensor<2x3xf32>"}, results: []string{"tensor<2xf32>", "tensor<3xf32>"}},
		{op: "stablehlo.return", operands: []string{"tensor<2xf32>"}, results: nil},
	}
	if len(stmts) != len(want) {
		t.Fatalf("got %d statements %+v, want %d", len(stmts), stmts, len(want))
	}
	for i, w := range want {
		g := stmts[i]
		if g.op != w.op || fmt.Sprint(g.operands) != fmt.Sprint(w.operands) || fmt.Sprint(g.results) != fmt.Sprint(w.results) {
			t.Errorf("statement %d: got %s %v -> %v, want %s %v -> %v", i, g.op, g.operands, g.results, w.op, w.operands, w.results)
		}
	}
}
