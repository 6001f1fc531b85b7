package vec

// kernel identifies one implementation of the element-wise functions.
type kernel int

const (
	kernGo     kernel = iota // portable Go, every GOARCH
	kernAVX2                 // amd64 AVX2
	kernAVX512               // amd64 AVX-512 F/BW
)

// active is the fastest kernel this machine supports, chosen once at start.
var active = bestKernel()

// String is the name KernelName reports.
func (k kernel) String() string {
	switch k {
	case kernAVX2:
		return "avx2"
	case kernAVX512:
		return "avx512"
	}
	return "go"
}

// bestKernel picks the last, fastest, of the kernels available.
func bestKernel() kernel {
	ks := availableKernels()
	return ks[len(ks)-1]
}

// availableKernels lists the kernels this machine can run, slowest first;
// the Go kernel is always there. Tests run every function on each.
func availableKernels() []kernel {
	return append([]kernel{kernGo}, archKernels()...)
}

// binOp is a two-operand operation: arithmetic, min/max or a comparison
// giving 1 or 0. opSubR and opDivR (s - a, s / a) exist only with a scalar
// operand.
type binOp int

const (
	opAdd binOp = iota
	opSub
	opMul
	opDiv
	opMax
	opMin
	opEQ // the comparisons in CmpOp order
	opNE
	opLT
	opLE
	opGT
	opGE
	opSubR
	opDivR
)

// cmpBinOp maps a CmpOp to its binOp; it panics on an unknown CmpOp.
func cmpBinOp(op CmpOp) binOp {
	if op < CmpEQ || op > CmpGE {
		panic("vec: invalid CmpOp " + op.String())
	}
	return opEQ + binOp(op)
}

// unOp is a one-operand operation.
type unOp int

const (
	opNeg unOp = iota
	opAbs
	opSqrt
	opNonZero
)

// b2f is 1 for true, 0 for false.
func b2f(b bool) float32 {
	if b {
		return 1
	}
	return 0
}

// binary runs op on d, a[:len(d)], b[:len(d)] with kernel k.
func binary(k kernel, op binOp, d, a, b []float32) {
	if len(d) == 0 {
		return
	}
	a, b = a[:len(d)], b[:len(d)]
	if !binaryArch(k, op, d, a, b) {
		binaryGo(op, d, a, b)
	}
}

// scalar runs op on d, a[:len(d)] and the scalar s with kernel k.
func scalar(k kernel, op binOp, d, a []float32, s float32) {
	if len(d) == 0 {
		return
	}
	a = a[:len(d)]
	if !scalarArch(k, op, d, a, s) {
		scalarGo(op, d, a, s)
	}
}

// unary runs op on d, a[:len(d)] with kernel k.
func unary(k kernel, op unOp, d, a []float32) {
	if len(d) == 0 {
		return
	}
	a = a[:len(d)]
	if !unaryArch(k, op, d, a) {
		unaryGo(op, d, a)
	}
}

func selectK(k kernel, d, c, a, b []float32) {
	if len(d) == 0 {
		return
	}
	c, a, b = c[:len(d)], a[:len(d)], b[:len(d)]
	if !selectArch(k, d, c, a, b) {
		selectGo(d, c, a, b)
	}
}

func fill(k kernel, d []float32, v float32) {
	if len(d) == 0 {
		return
	}
	if !fillArch(k, d, v) {
		for i := range d {
			d[i] = v
		}
	}
}

// gather is Go on every kernel: stride 0 and 1 are a fill and a copy, and
// other strides read one element per cache line or so, where the gather
// instructions gain little over scalar loads.
func gather(d, src []float32, stride int) {
	if len(d) == 0 {
		return
	}
	switch {
	case stride < 0:
		panic("vec: negative Gather stride")
	case stride == 0:
		fill(active, d, src[0])
	case stride == 1:
		copy(d, src[:len(d)])
	default:
		src = src[:(len(d)-1)*stride+1]
		j := 0
		for i := range d {
			d[i] = src[j]
			j += stride
		}
	}
}

func boolToF32(k kernel, d []float32, b []bool) {
	b = b[:len(d)]
	n := boolToF32Arch(k, d, b)
	for i := n; i < len(d); i++ {
		d[i] = b2f(b[i])
	}
}

func f32ToBool(k kernel, d []bool, a []float32) {
	a = a[:len(d)]
	n := f32ToBoolArch(k, d, a)
	for i := n; i < len(d); i++ {
		d[i] = a[i] != 0
	}
}

// maxReduce runs the SIMD lane-wise max when it can: for NaN-free input
// max is associative and commutative (max(-0, +0) = +0 either way), so the
// lanes may be combined in any order and then with init. If a holds a NaN
// the Go loop runs instead, so that the NaN returned is the one Go's loop
// returns (builtin max returns its second operand's NaN first).
func maxReduce(k kernel, a []float32, init float32) float32 {
	if len(a) == 0 {
		return init
	}
	if init != init {
		// Go's max of a NaN and a number is a NaN whose payload has
		// the number's bits ORed in (see minMax in gen_asm.go), so the
		// NaN returned depends on every element in order.
	} else if m, nan, ok := maxReduceArch(k, a); ok && !nan {
		return max(init, m)
	}
	acc := init
	for _, v := range a {
		acc = max(acc, v)
	}
	return acc
}

// The Go kernel: the plain loops.

func binaryGo(op binOp, d, a, b []float32) {
	a, b = a[:len(d)], b[:len(d)]
	switch op {
	case opAdd:
		for i := range d {
			d[i] = a[i] + b[i]
		}
	case opSub:
		for i := range d {
			d[i] = a[i] - b[i]
		}
	case opMul:
		for i := range d {
			d[i] = a[i] * b[i]
		}
	case opDiv:
		for i := range d {
			d[i] = a[i] / b[i]
		}
	case opMax:
		for i := range d {
			d[i] = max(a[i], b[i])
		}
	case opMin:
		for i := range d {
			d[i] = min(a[i], b[i])
		}
	case opEQ:
		for i := range d {
			d[i] = b2f(a[i] == b[i])
		}
	case opNE:
		for i := range d {
			d[i] = b2f(a[i] != b[i])
		}
	case opLT:
		for i := range d {
			d[i] = b2f(a[i] < b[i])
		}
	case opLE:
		for i := range d {
			d[i] = b2f(a[i] <= b[i])
		}
	case opGT:
		for i := range d {
			d[i] = b2f(a[i] > b[i])
		}
	case opGE:
		for i := range d {
			d[i] = b2f(a[i] >= b[i])
		}
	default:
		panic("vec: bad binary op")
	}
}

func scalarGo(op binOp, d, a []float32, s float32) {
	a = a[:len(d)]
	switch op {
	case opAdd:
		for i := range d {
			d[i] = a[i] + s
		}
	case opSub:
		for i := range d {
			d[i] = a[i] - s
		}
	case opSubR:
		for i := range d {
			d[i] = s - a[i]
		}
	case opMul:
		for i := range d {
			d[i] = a[i] * s
		}
	case opDiv:
		for i := range d {
			d[i] = a[i] / s
		}
	case opDivR:
		for i := range d {
			d[i] = s / a[i]
		}
	case opMax:
		for i := range d {
			d[i] = max(a[i], s)
		}
	case opMin:
		for i := range d {
			d[i] = min(a[i], s)
		}
	case opEQ:
		for i := range d {
			d[i] = b2f(a[i] == s)
		}
	case opNE:
		for i := range d {
			d[i] = b2f(a[i] != s)
		}
	case opLT:
		for i := range d {
			d[i] = b2f(a[i] < s)
		}
	case opLE:
		for i := range d {
			d[i] = b2f(a[i] <= s)
		}
	case opGT:
		for i := range d {
			d[i] = b2f(a[i] > s)
		}
	case opGE:
		for i := range d {
			d[i] = b2f(a[i] >= s)
		}
	default:
		panic("vec: bad scalar op")
	}
}

func unaryGo(op unOp, d, a []float32) {
	a = a[:len(d)]
	switch op {
	case opNeg:
		for i := range d {
			d[i] = -a[i]
		}
	case opAbs:
		for i, v := range a {
			if v < 0 {
				v = -v
			}
			d[i] = v
		}
	case opSqrt:
		for i := range d {
			d[i] = sqrt32(a[i])
		}
	case opNonZero:
		for i := range d {
			d[i] = b2f(a[i] != 0)
		}
	default:
		panic("vec: bad unary op")
	}
}

func selectGo(d, c, a, b []float32) {
	c, a, b = c[:len(d)], a[:len(d)], b[:len(d)]
	for i := range d {
		if c[i] != 0 {
			d[i] = a[i]
		} else {
			d[i] = b[i]
		}
	}
}
