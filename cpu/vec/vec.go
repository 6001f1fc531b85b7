// Package vec holds the float32 element-wise inner loops of cpu/engine's
// fused element-wise interpreter, in assembly where the CPU allows, with
// the very bits of plain Go.
//
// Each call processes one tile of len(d) elements (callers guarantee every
// input is at least that long; a shorter one panics) and gives the very
// bits of the plain Go expression named in its comment: IEEE single
// precision, each operation rounded once, no FMA contraction, NaNs as Go's
// operators and builtin min/max give them.
//
// d may be the same slice as an input (in-place), but must not overlap an
// input otherwise. No function allocates.
//
// The kernels, chosen once at start-up from the CPU's features: AVX-512F
// (ZMM, masked tail), AVX2 (YMM, VMASKMOVPS tail), and portable Go on every
// other GOARCH or with the purego build tag.
//
//go:generate go run gen_asm.go
package vec

// CmpOp is a comparison for Compare, with Go's IEEE semantics: every
// comparison with a NaN is false except CmpNE.
type CmpOp int

// The comparisons.
const (
	CmpEQ CmpOp = iota // ==
	CmpNE              // !=
	CmpLT              // <
	CmpLE              // <=
	CmpGT              // >
	CmpGE              // >=
)

// String returns the Go operator.
func (op CmpOp) String() string {
	switch op {
	case CmpEQ:
		return "=="
	case CmpNE:
		return "!="
	case CmpLT:
		return "<"
	case CmpLE:
		return "<="
	case CmpGT:
		return ">"
	case CmpGE:
		return ">="
	}
	return "CmpOp(?)"
}

// Add sets d[i] = a[i] + b[i].
func Add(d, a, b []float32) { binary(active, opAdd, d, a, b) }

// Sub sets d[i] = a[i] - b[i].
func Sub(d, a, b []float32) { binary(active, opSub, d, a, b) }

// Mul sets d[i] = a[i] * b[i].
func Mul(d, a, b []float32) { binary(active, opMul, d, a, b) }

// Div sets d[i] = a[i] / b[i].
func Div(d, a, b []float32) { binary(active, opDiv, d, a, b) }

// Max sets d[i] = max(a[i], b[i]), Go's builtin: NaN if either is NaN
// (with the very bits Go's amd64 code gives), max(-0, +0) = +0.
func Max(d, a, b []float32) { binary(active, opMax, d, a, b) }

// Min sets d[i] = min(a[i], b[i]), Go's builtin: NaN if either is NaN
// (with the very bits Go's amd64 code gives), min(-0, +0) = -0.
func Min(d, a, b []float32) { binary(active, opMin, d, a, b) }

// Compare sets d[i] = 1 if a[i] op b[i], else 0.
func Compare(op CmpOp, d, a, b []float32) { binary(active, cmpBinOp(op), d, a, b) }

// Neg sets d[i] = -a[i]: the sign bit flipped (-0 → +0; a NaN stays NaN
// with its sign flipped, as in Go).
func Neg(d, a []float32) { unary(active, opNeg, d, a) }

// Abs sets d[i] = -a[i] if a[i] < 0, else a[i]. Unlike math.Abs, -0 and a
// negative NaN are kept as they are.
func Abs(d, a []float32) { unary(active, opAbs, d, a) }

// Sqrt sets d[i] = float32(math.Sqrt(float64(a[i]))), which is the
// correctly rounded float32 square root.
func Sqrt(d, a []float32) { unary(active, opSqrt, d, a) }

// NonZero sets d[i] = 1 if a[i] != 0 (NaN included), else 0.
func NonZero(d, a []float32) { unary(active, opNonZero, d, a) }

// Select sets d[i] = a[i] if c[i] != 0 (NaN included), else b[i].
func Select(d, c, a, b []float32) { selectK(active, d, c, a, b) }

// Fill sets d[i] = v.
func Fill(d []float32, v float32) { fill(active, d, v) }

// Gather sets d[i] = src[i*stride]; stride 0 broadcasts src[0]. It panics
// if len(d) > 0 and src is shorter than (len(d)-1)*stride+1.
func Gather(d, src []float32, stride int) { gather(d, src, stride) }

// BoolToF32 sets d[i] = 1 if b[i], else 0. len(b) ≥ len(d).
func BoolToF32(d []float32, b []bool) { boolToF32(active, d, b) }

// F32ToBool sets d[i] = a[i] != 0 (true for NaN). len(a) ≥ len(d).
func F32ToBool(d []bool, a []float32) { f32ToBool(active, d, a) }

// MaxReduce returns acc after acc = max(acc, a[i]) for each a[i] in order,
// from acc = init, with the builtin max.
func MaxReduce(a []float32, init float32) float32 { return maxReduce(active, a, init) }
