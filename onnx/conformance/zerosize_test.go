package conformance

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/tensorbridge/tensorbridge"
)

// zeroSizeFamilies are the cases of each data set that give an input a
// zero dimension (CastLike's empty target_type aside: TestCastLikeEmptyTarget
// covers those), counted per op family: the Reduce* ops given an empty
// axes input (reduce over every axis, or nothing with
// noop_with_empty_axes) or data of shape [2, 0, 4] (a reduction over an
// empty set: the op's identity), Reshape with allowzero, Split into
// zero-size parts, Tril and Triu of empty matrices, a sequence model's
// empty input. Counted by hand from the data: a family that vanishes from
// the data, or a new one, fails the test.
var zeroSizeFamilies = map[string]map[string]int{
	"onnx-1.12": {"reduce_sum": 5, "reshape": 1, "sequence_model": 1, "split": 1, "tril": 1, "triu": 1},
	"onnx-1.23.2": {"reduce_l1": 6, "reduce_l2": 6, "reduce_log_sum": 4, "reduce_log_sum_exp": 6, "reduce_max": 2,
		"reduce_mean": 2, "reduce_min": 1, "reduce_prod": 1, "reduce_sum": 6, "reduce_sum_square": 6,
		"reshape": 1, "sequence_model": 1, "split": 2, "tril": 1, "triu": 1},
}

var familyOf = regexp.MustCompile(`^test_(reduce_(?:l1|l2|log_sum_exp|log_sum|max|mean|min|prod|sum_square|sum)|castlike|reshape|split|tril|triu|sequence_model)`)

// TestZeroSizeFamilies: every case of the ONNX test data whose inputs
// have a zero dimension runs through Backend.LoadModel and Model.Run (the
// path `tensorbridge run` takes) and matches ONNX's reference outputs, on
// cpu and, when its plugin is installed, xla-cpu. Among them the 40 ONNX
// 1.23.2 cases (the 39 Reduce* cases and a sequence model's) and 6 of
// 1.12 that the empty-batch rule refused with "expected inputs with no
// zero dimension, or an empty input every output of which is empty" (an
// empty axes input read as an empty batch, reductions over an empty set),
// and the empty inputs whose outputs are empty. Fault injected: making
// runEmpty refuse every request with a non-empty output again (the rule
// before) fails those 46 cases on each backend with that InputError; the
// conformance runner, which passed them all along (it called RunStrings,
// which skipped the rule), did not see it.
func TestZeroSizeFamilies(t *testing.T) {
	for _, backend := range []string{"cpu", "xla-cpu"} {
		t.Run(backend, func(t *testing.T) {
			var b *tensorbridge.Backend
			if backend == "xla-cpu" {
				b = openXLACPU(t)
			} else {
				var err error
				if b, err = tensorbridge.Open(context.Background(), "cpu", tensorbridge.WithSettings(testSettings)); err != nil {
					t.Fatal(err)
				}
			}
			defer b.Close()
			for _, d := range Datasets {
				t.Run(d.Name, func(t *testing.T) { runZeroSizeCases(t, b, d) })
			}
		})
	}
}

// runZeroSizeCases runs data set d's zero-size cases on b and checks the
// count per family.
func runZeroSizeCases(t *testing.T, b *tensorbridge.Backend, d Dataset) {
	root, err := FindSuites(d.Dir())
	if errors.Is(err, ErrNoTestData) {
		skipUnlessRequired(t, "no ONNX %s test data (%v); run %s", d.Name, err, d.Fetch)
	}
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Timeout: 2 * time.Minute, RTol: 1e-3, ATol: 1e-5, BF16RTol: 0x1p-6}
	counts := map[string]int{}
	for _, suite := range DefaultSuites {
		entries, _ := os.ReadDir(filepath.Join(root, suite))
		for _, e := range entries {
			dir := filepath.Join(root, suite, e.Name())
			if !hasZeroSizeInput(t, dir) {
				continue
			}
			fam := "other: " + e.Name()
			if m := familyOf.FindStringSubmatch(e.Name()); m != nil {
				fam = m[1]
			}
			if fam == "castlike" {
				continue
			}
			counts[fam]++
			if cr := runCase(context.Background(), dir, b, &o); cr.Status != Pass {
				t.Errorf("%s/%s (%s): %s: %s", suite, e.Name(), fam, cr.Status, firstLine(cr.Detail))
			}
		}
	}
	want := zeroSizeFamilies[d.Name]
	for fam, n := range counts {
		if want[fam] != n {
			t.Errorf("family %s: %d cases with a zero-size input, want %d", fam, n, want[fam])
		}
	}
	for fam, n := range want {
		if _, ok := counts[fam]; !ok {
			t.Errorf("family %s: no case with a zero-size input, want %d", fam, n)
		}
	}
}

// hasZeroSizeInput says whether a case's first data set gives an input a
// zero dimension.
func hasZeroSizeInput(t *testing.T, dir string) bool {
	ins, _ := filepath.Glob(filepath.Join(dir, "test_data_set_0", "input_*.pb"))
	for _, p := range ins {
		x, err := readTensor(p)
		if err != nil {
			continue // STRING, sequences: none of them empty in this data
		}
		if slices.Contains(x.Shape().Dimensions, 0) {
			return true
		}
	}
	return false
}
