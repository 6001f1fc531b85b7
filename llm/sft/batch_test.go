package sft

import (
	"errors"
	"slices"
	"testing"

	"github.com/tensorbridge/tensorbridge/errs"
)

// TestMakeBatch checks batches worked out by hand: which rows a step takes
// (wrapping), the padding, and the labels (position t holds token t+1 when
// that token is a target; padding, the last token and non-targets -1).
func TestMakeBatch(t *testing.T) {
	const P = 7 // pad id
	ex := []Example{
		{IDs: []int{10, 11, 12}, Targets: []bool{true, true, true}},
		{IDs: []int{20, 21}, Targets: []bool{false, true}},
		{IDs: []int{30, 31, 32, 33}, Targets: []bool{false, false, true, true}},
	}
	cases := []struct {
		name            string
		step, b, padTo  int
		tokens, labels  []int32
		width, nTargets int
	}{
		{"step 1", 1, 2, 0,
			[]int32{10, 11, 12, 20, 21, P},
			[]int32{11, 12, -1, 21, -1, -1}, 3, 3},
		{"step 2 wraps to row 0", 2, 2, 0,
			[]int32{30, 31, 32, 33, 10, 11, 12, P},
			[]int32{-1, 32, 33, -1, 11, 12, -1, -1}, 4, 4},
		{"step 3", 3, 2, 0,
			[]int32{20, 21, P, P, 30, 31, 32, 33},
			[]int32{21, -1, -1, -1, -1, 32, 33, -1}, 4, 3},
		{"padded to padTo", 1, 2, 5,
			[]int32{10, 11, 12, P, P, 20, 21, P, P, P},
			[]int32{11, 12, -1, -1, -1, 21, -1, -1, -1, -1}, 5, 3},
		{"padTo below the longest row", 1, 1, 2,
			[]int32{10, 11, 12},
			[]int32{11, 12, -1}, 3, 2},
		{"batch larger than the file", 1, 4, 0,
			[]int32{10, 11, 12, P, 20, 21, P, P, 30, 31, 32, 33, 10, 11, 12, P},
			[]int32{11, 12, -1, -1, 21, -1, -1, -1, -1, 32, 33, -1, 11, 12, -1, -1}, 4, 7},
		// (2^62 - 1)·2 mod 3 = 0: step 2^62 starts at row 0.
		{"huge step", 1 << 62, 2, 0,
			[]int32{10, 11, 12, 20, 21, P},
			[]int32{11, 12, -1, 21, -1, -1}, 3, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := MakeBatch(ex, c.step, c.b, c.padTo, P)
			if err != nil {
				t.Fatal(err)
			}
			if got.B != c.b || got.T != c.width || got.Targets != c.nTargets {
				t.Errorf("B, T, Targets = %d, %d, %d; want %d, %d, %d", got.B, got.T, got.Targets, c.b, c.width, c.nTargets)
			}
			if !slices.Equal(got.Tokens, c.tokens) {
				t.Errorf("tokens\n got %v\nwant %v", got.Tokens, c.tokens)
			}
			if !slices.Equal(got.Labels, c.labels) {
				t.Errorf("labels\n got %v\nwant %v", got.Labels, c.labels)
			}
		})
	}
}

// TestMakeBatchArguments: arguments that define no batch are errors, not
// panics.
func TestMakeBatchArguments(t *testing.T) {
	ok := []Example{{IDs: []int{1, 2}, Targets: []bool{false, true}}}
	cases := []struct {
		name    string
		ex      []Example
		step, b int
	}{
		{"no examples", nil, 1, 1},
		{"step 0", ok, 0, 1},
		{"batch 0", ok, 1, 0},
		{"negative batch", ok, 1, -3},
		{"flags and ids differ", []Example{{IDs: []int{1, 2}, Targets: []bool{true}}}, 1, 1},
	}
	for _, c := range cases {
		if _, err := MakeBatch(c.ex, c.step, c.b, 0, 0); !errors.Is(err, errs.ErrInvalidInput) {
			t.Errorf("%s: %v, want errs.ErrInvalidInput", c.name, err)
		}
	}
}
