package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/npy"
	"github.com/tensorbridge/tensorbridge/onnx"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

func init() {
	register(command{name: "run", summary: "run an ONNX model on inputs from .npy or TensorProto .pb files", run: runModel})
}

// inputFlags collects repeated --input NAME=FILE flags.
type inputFlags []string

func (f *inputFlags) String() string     { return strings.Join(*f, ",") }
func (f *inputFlags) Set(v string) error { *f = append(*f, v); return nil }

func runModel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("run", stderr, "MODEL --input NAME=FILE ... [--backend B] [--threads T] [--output-dir DIR] [--json]")
	var inputs inputFlags
	fs.Var(&inputs, "input", "an input as NAME=FILE, FILE a .npy or an ONNX TensorProto .pb (repeat per input)")
	backend := fs.String("backend", "", "backend name or auto (default: $TENSORBRIDGE_BACKEND, else auto)")
	outDir := fs.String("output-dir", "", "write each output as NAME.npy into this directory (bfloat16 as ml_dtypes saves it, '<V2'; STRING as fixed-width unicode, '<U<n>')")
	bf16f32 := fs.Bool("bfloat16-as-float32", false, "with --output-dir, write bfloat16 outputs as float32 (exact) for readers without ml_dtypes")
	asJSON := fs.Bool("json", false, "print the outputs' summary as JSON")
	threads := fs.Int("threads", 0, "confine the process to T CPUs (affinity, GOMAXPROCS and the XLA CPU plugin's PJRT_NPROC) before opening the backend; 0: all")
	var sf settingsFlags
	addSettingsFlags(fs, &sf)
	var mf meshFlags
	addMeshFlags(fs, &mf)
	if err := parse(fs, reorder(fs, args)); err != nil {
		return err
	}
	settings, err := sf.settings()
	if err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageErr("want exactly one MODEL argument, got %d", fs.NArg())
	}
	modelPath := fs.Arg(0)
	if *threads < 0 {
		return usageErr("--threads cannot be negative")
	}
	if *threads > 0 {
		if _, err := limitThreads(*threads); err != nil {
			return usageErr("%v", err)
		}
	}
	parsed := readModelAhead(modelPath) // read while the backend opens
	b, err := tensorbridge.Open(ctx, *backend, tensorbridge.WithSettings(settings), sf.clusterOption())
	if err != nil {
		return err
	}
	defer b.Close()
	printCPUHint(stderr, b.Selection()) // cpuhint.go
	if sf.printConfig {
		fmt.Fprintf(stderr, "backend %s\n%s", b.Name(), b.Settings())
	}
	mopts, err := mf.options(ctx, b, modelPath)
	if err != nil {
		return err
	}
	om, err := parsed()
	if err != nil {
		return err
	}
	m, err := b.LoadONNX(ctx, om, modelPath, mopts...)
	if err != nil {
		return err
	}
	defer m.Close()

	byName := map[string]tensorbridge.ValueSpec{}
	for _, s := range m.Inputs() {
		byName[s.Name] = s
	}
	in := map[string]*ir.Tensor{}
	strIn := map[string]*tensorbridge.StringTensor{}
	for _, kv := range inputs {
		name, file, ok := strings.Cut(kv, "=")
		if !ok || name == "" || file == "" {
			return usageErr("--input %q: want NAME=FILE", kv)
		}
		_, dup := in[name]
		if _, sdup := strIn[name]; dup || sdup {
			return usageErr("--input %s given twice", name)
		}
		spec, known := byName[name]
		if !known {
			return &errs.InputError{Name: name, Problem: "name", Expected: "one of " + specNames(m.Inputs()), Got: "unknown input " + quoteS(name)}
		}
		t, st, err := readTensorFile(file)
		if err != nil {
			return fmt.Errorf("--input %s: %w", name, err)
		}
		switch isStr := spec.DType == tensorbridge.StringDType; {
		case isStr && st == nil:
			return &errs.InputError{Name: name, Problem: "dtype", Expected: "STRING",
				Got: fmt.Sprintf("%s in %s", t.DType(), file)}
		case !isStr && st != nil:
			return &errs.InputError{Name: name, Problem: "dtype", Expected: spec.DType.String(),
				Got: "STRING in " + file}
		case isStr:
			strIn[name] = st
		default:
			in[name] = t
		}
	}
	for _, s := range m.Inputs() {
		_, ok := in[s.Name]
		if _, sok := strIn[s.Name]; !ok && !sok {
			return usageErr("missing --input %s=FILE (the model's inputs: %s)", s.Name, describeSpecs(m.Inputs()))
		}
	}
	// One call either way: RunStrings is Run plus the STRING values.
	var out map[string]*ir.Tensor
	var strOut map[string]*tensorbridge.StringTensor
	if hasStrings(m) {
		out, strOut, err = m.RunStrings(ctx, in, strIn)
	} else {
		out, err = m.Run(ctx, in)
	}
	if err != nil {
		return err
	}
	if *outDir != "" {
		if err := os.MkdirAll(*outDir, 0o755); err != nil {
			return err
		}
	}
	type outputSummary struct {
		Name  string       `json:"name"`
		DType string       `json:"dtype"`
		Shape []int        `json:"shape"`
		First []shownValue `json:"first"`
		// FirstStrings holds a STRING output's first values (First is then empty).
		FirstStrings []string `json:"first_strings,omitempty"`
		File         string   `json:"file,omitempty"`
		Finite       bool     `json:"all_finite"`
	}
	var summaries []outputSummary
	for _, spec := range m.Outputs() {
		if st, ok := strOut[spec.Name]; ok {
			s := outputSummary{Name: spec.Name, DType: "STRING", Shape: st.Dims, First: []shownValue{},
				FirstStrings: st.Data[:min(6, len(st.Data))], Finite: true}
			if *outDir != "" {
				s.File = filepath.Join(*outDir, safeFileName(spec.Name)+".npy")
				a := &npy.Array{Shape: st.Dims, Data: st.Data}
				if err := npy.WriteFile(ctx, s.File, a, nil); err != nil {
					return fmt.Errorf("output %s: %w", spec.Name, err)
				}
			}
			summaries = append(summaries, s)
			continue
		}
		t := out[spec.Name]
		s := outputSummary{Name: spec.Name, DType: t.DType().String(), Shape: t.Shape().Dimensions}
		var err error
		if s.First, s.Finite, err = firstValues(t, 6); err != nil {
			return fmt.Errorf("output %s: %w", spec.Name, err)
		}
		if *outDir != "" {
			s.File = filepath.Join(*outDir, safeFileName(spec.Name)+".npy")
			a, err := npy.FromIR(t)
			if err != nil {
				return fmt.Errorf("output %s: %w", spec.Name, err)
			}
			if err := npy.WriteFile(ctx, s.File, a, &npy.WriteOptions{BFloat16AsFloat32: *bf16f32}); err != nil {
				return fmt.Errorf("output %s: %w", spec.Name, err)
			}
		}
		summaries = append(summaries, s)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"backend": b.Name(), "model": modelPath, "outputs": summaries})
	}
	fmt.Fprintf(stdout, "%s on %s\n", modelPath, b.Name())
	for _, s := range summaries {
		first := fmtValues(s.First)
		if s.DType == "STRING" {
			first = fmtStrings(s.FirstStrings)
		}
		fmt.Fprintf(stdout, "  %s: %s%v  first values %s", s.Name, s.DType, s.Shape, first)
		if !s.Finite {
			fmt.Fprint(stdout, "  (contains NaN or Inf)")
		}
		if s.File != "" {
			fmt.Fprintf(stdout, "  -> %s", s.File)
		}
		fmt.Fprintln(stdout)
	}
	return nil
}

// reorder moves flags given after positional arguments in front of them,
// so "run MODEL --input x=f" parses as meant. It asks fs which flags are
// boolean (they take no separate value).
func reorder(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || len(a) == 1 {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		isBool := false
		if f := fs.Lookup(name); f != nil {
			if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
				isBool = true
			}
		}
		if !isBool && i+1 < len(args) {
			flags = append(flags, args[i+1])
			i++
		}
	}
	return append(flags, pos...)
}

// readTensorFile reads a .npy file or a serialized ONNX TensorProto: a
// numeric tensor, or a STRING one (a '<U<n>' .npy or a TensorProto with
// string_data).
func readTensorFile(path string) (*ir.Tensor, *tensorbridge.StringTensor, error) {
	if strings.EqualFold(filepath.Ext(path), ".npy") {
		a, err := npy.ReadFile(path)
		if err != nil {
			return nil, nil, err
		}
		if s, ok := a.Data.([]string); ok {
			st, err := onnx.NewStringTensor(s, a.Shape...)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", path, err)
			}
			return nil, st, nil
		}
		t, err := a.ToIR()
		return t, nil, err
	}
	tp, err := onnxpb.ReadTensor(path)
	if err != nil {
		return nil, nil, err
	}
	if tp.DataType == onnxpb.String {
		st, err := onnx.StringTensorFromProto(tp)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		return nil, st, nil
	}
	t, err := tp.ToIR()
	return t, nil, err
}

// hasStrings says whether m has a STRING input or output (Run refuses
// such models; RunStrings takes them).
func hasStrings(m *tensorbridge.Model) bool {
	for _, s := range append(m.Inputs(), m.Outputs()...) {
		if s.DType == tensorbridge.StringDType {
			return true
		}
	}
	return false
}

// fmtStrings shows STRING values Go-quoted, so empty strings, spaces and
// control characters are visible.
func fmtStrings(v []string) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = strconv.Quote(x)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// shownValue is one output value as the summary shows it: a real number,
// or a complex one (Imag set). NaN and infinities are kept: JSON has no
// literal for them, so they are written as the strings "NaN", "+Inf" and
// "-Inf".
type shownValue struct {
	Real, Imag float64
	Complex    bool
}

func (v shownValue) String() string {
	if v.Complex {
		return fmt.Sprintf("(%.6g%+.6gi)", v.Real, v.Imag)
	}
	return fmt.Sprintf("%.6g", v.Real)
}

func (v shownValue) MarshalJSON() ([]byte, error) {
	num := func(f float64) any {
		switch {
		case math.IsNaN(f):
			return "NaN"
		case math.IsInf(f, 1):
			return "+Inf"
		case math.IsInf(f, -1):
			return "-Inf"
		}
		return f
	}
	if v.Complex {
		return json.Marshal([2]any{num(v.Real), num(v.Imag)})
	}
	return json.Marshal(num(v.Real))
}

// firstValues returns the first n values of t for display, converted to
// float64 (float16 and bfloat16 included; complex values keep both parts),
// and whether every value of t is finite. A dtype it cannot read is an
// error, never an empty list.
func firstValues(t *ir.Tensor, n int) ([]shownValue, bool, error) {
	finite := true
	var out []shownValue
	var convErr error
	err := t.ConstFlatData(func(flat any) {
		vals, err := toShown(flat)
		if err != nil {
			convErr = err
			return
		}
		for i, v := range vals {
			if math.IsNaN(v.Real) || math.IsInf(v.Real, 0) || math.IsNaN(v.Imag) || math.IsInf(v.Imag, 0) {
				finite = false
			}
			if i < n {
				out = append(out, v)
			}
		}
	})
	if err == nil {
		err = convErr
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading %s values: %w", t.DType(), err)
	}
	return out, finite, nil
}

// toShown converts a flat slice of any element type a host tensor can hold
// (ir.Element) to display values.
func toShown(flat any) ([]shownValue, error) {
	switch f := flat.(type) {
	case []float32:
		return realValues(f), nil
	case []float64:
		return realValues(f), nil
	case []int:
		return realValues(f), nil
	case []int64:
		return realValues(f), nil
	case []int32:
		return realValues(f), nil
	case []int16:
		return realValues(f), nil
	case []int8:
		return realValues(f), nil
	case []uint8:
		return realValues(f), nil
	case []uint16:
		return realValues(f), nil
	case []uint32:
		return realValues(f), nil
	case []uint64:
		return realValues(f), nil
	case []bool:
		out := make([]shownValue, len(f))
		for i, v := range f {
			if v {
				out[i].Real = 1
			}
		}
		return out, nil
	case []ir.Float16Value:
		out := make([]shownValue, len(f))
		for i, v := range f {
			out[i].Real = float64(v.Float32())
		}
		return out, nil
	case []ir.BFloat16Value:
		out := make([]shownValue, len(f))
		for i, v := range f {
			out[i].Real = float64(v.Float32())
		}
		return out, nil
	case []complex64:
		out := make([]shownValue, len(f))
		for i, v := range f {
			out[i] = shownValue{Real: float64(real(v)), Imag: float64(imag(v)), Complex: true}
		}
		return out, nil
	case []complex128:
		out := make([]shownValue, len(f))
		for i, v := range f {
			out[i] = shownValue{Real: real(v), Imag: imag(v), Complex: true}
		}
		return out, nil
	}
	return nil, fmt.Errorf("no display conversion for element type %T", flat)
}

func realValues[T int | int8 | int16 | int32 | int64 | uint8 | uint16 | uint32 | uint64 | float32 | float64](s []T) []shownValue {
	out := make([]shownValue, len(s))
	for i, v := range s {
		out[i].Real = float64(v)
	}
	return out
}

func fmtValues(v []shownValue) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = x.String()
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func specNames(specs []tensorbridge.ValueSpec) string {
	var n []string
	for _, s := range specs {
		n = append(n, s.Name)
	}
	sort.Strings(n)
	return strings.Join(n, ", ")
}

func describeSpecs(specs []tensorbridge.ValueSpec) string {
	var n []string
	for _, s := range specs {
		n = append(n, s.String())
	}
	return strings.Join(n, ", ")
}

func quoteS(s string) string { return fmt.Sprintf("%q", s) }

// safeFileName keeps an output name usable as a file name.
func safeFileName(name string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == 0 || r == ':' {
			return '_'
		}
		return r
	}, name)
}
