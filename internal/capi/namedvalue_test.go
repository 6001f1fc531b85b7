package capi

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"testing"
	"unsafe"
)

func TestNamedValuesRoundTrip(t *testing.T) {
	in := []NamedValue{
		{"s", "hello"},
		{"empty", ""},
		{"i", int64(-7)},
		{"int", 42},
		{"i32", int32(-3)},
		{"list", []int64{1, -2, 1 << 40}},
		{"ints", []int{4, 5}},
		{"nolist", []int64{}},
		{"f", float32(0.75)},
		{"f64", 2.5},
		{"t", true},
		{"f", false},
	}
	want := []NamedValue{
		{"s", "hello"},
		{"empty", ""},
		{"i", int64(-7)},
		{"int", int64(42)},
		{"i32", int64(-3)},
		{"list", []int64{1, -2, 1 << 40}},
		{"ints", []int64{4, 5}},
		{"nolist", []int64{}},
		{"f", float32(0.75)},
		{"f64", float32(2.5)},
		{"t", true},
		{"f", false},
	}
	var pin runtime.Pinner
	defer pin.Unpin()
	arr, n, err := encodeNamedValues(&pin, "test", in)
	if err != nil {
		t.Fatal(err)
	}
	// Check the C view of one entry against the header's layout: the
	// int64 list is type 2 (PJRT_NamedValue_kInt64List) with value_size 3.
	c := unsafe.Slice((*cNamedValue)(arr), n)[5]
	if c.structSize != 56 || c.typ != 2 || c.valueSize != 3 || c.nameSize != 4 {
		t.Errorf("list entry: struct_size %d type %d value_size %d name_size %d; want 56 2 3 4", c.structSize, c.typ, c.valueSize, c.nameSize)
	}
	got := readNamedValues(arr, n)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n got %v\nwant %v", got, want)
	}
	if Lookup(got, "t") != true || Lookup(got, "missing") != nil {
		t.Error("Lookup")
	}
}

func TestNamedValuesRejectBadInput(t *testing.T) {
	var pin runtime.Pinner
	defer pin.Unpin()
	for _, vals := range [][]NamedValue{
		{{"", int64(1)}},
		{{"x", uint64(1)}},
		{{"x", nil}},
		{{"x", []string{"a"}}},
	} {
		if _, _, err := encodeNamedValues(&pin, "test", vals); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%v: %v; want INVALID_ARGUMENT", vals, err)
		}
	}
}

func TestErrorClassification(t *testing.T) {
	plugin := &Error{Code: CodeResourceExhausted, Func: "PJRT_Client_BufferFromHostBuffer", Message: "Out of memory allocating 1024 bytes"}
	wrapped := fmt.Errorf("upload: %w", plugin)
	cases := []struct {
		err      error
		is       error
		isNot    error
		wantCode Code
		text     string
	}{
		{wrapped, ErrResourceExhausted, ErrInvalidArgument, CodeResourceExhausted,
			"upload: pjrt: PJRT_Client_BufferFromHostBuffer: RESOURCE_EXHAUSTED: Out of memory allocating 1024 bytes"},
		{argError("op", "bad %d", 1), ErrInvalidArgument, ErrUnimplemented, CodeInvalidArgument, "pjrt: op: INVALID_ARGUMENT: bad 1"},
		{fmt.Errorf("x: %w", context.Canceled), context.Canceled, ErrCancelled, CodeCancelled, "x: context canceled"},
		{context.DeadlineExceeded, context.DeadlineExceeded, nil, CodeDeadlineExceeded, "context deadline exceeded"},
		{errors.New("other"), nil, ErrUnknown, CodeUnknown, "other"},
	}
	for _, tc := range cases {
		if tc.is != nil && !errors.Is(tc.err, tc.is) {
			t.Errorf("errors.Is(%v, %v) = false", tc.err, tc.is)
		}
		if tc.isNot != nil && errors.Is(tc.err, tc.isNot) {
			t.Errorf("errors.Is(%v, %v) = true", tc.err, tc.isNot)
		}
		if got := CodeOf(tc.err); got != tc.wantCode {
			t.Errorf("CodeOf(%v) = %v, want %v", tc.err, got, tc.wantCode)
		}
		if tc.err.Error() != tc.text {
			t.Errorf("text %q, want %q", tc.err.Error(), tc.text)
		}
	}
	if CodeOf(nil) != CodeOK {
		t.Error("CodeOf(nil)")
	}
	// A sentinel does not match an error with a message of the same code
	// the other way round.
	if errors.Is(ErrResourceExhausted, plugin) {
		t.Error("sentinel matched a specific error")
	}
	// Codes are the absl::StatusCode numbers (pjrt_c_api.h PJRT_Error_Code).
	for code, name := range map[Code]string{1: "CANCELLED", 3: "INVALID_ARGUMENT", 8: "RESOURCE_EXHAUSTED", 12: "UNIMPLEMENTED", 16: "UNAUTHENTICATED", 99: "CODE_99"} {
		if code.String() != name {
			t.Errorf("Code(%d) = %s, want %s", int(code), code, name)
		}
	}
	if ErrUnavailable.Error() != "pjrt: UNAVAILABLE" {
		t.Errorf("sentinel text %q", ErrUnavailable.Error())
	}
}

func TestElementTypeBits(t *testing.T) {
	// Widths from the PJRT_Buffer_Type comments of pjrt_c_api.h.
	for typ, bits := range map[ElementType]int{Pred: 8, S8: 8, U16: 16, F16: 16, BF16: 16, F32: 32, S64: 64, F64: 64, C64: 64, C128: 128, F8E4M3FN: 8, S4: 4, U2: 2, F4E2M1FN: 4, Token: 0, Invalid: 0} {
		if typ.Bits() != bits {
			t.Errorf("%v.Bits() = %d, want %d", typ, typ.Bits(), bits)
		}
	}
	if F4E2M1FN != 29 || BF16 != 13 || Token != 23 {
		t.Errorf("enum values drifted from the header: f4e2m1fn %d bf16 %d token %d", F4E2M1FN, BF16, Token)
	}
}
