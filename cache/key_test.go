package cache

import (
	"reflect"
	"testing"
)

// fullKey sets every field, so the known-answer test covers the whole
// encoding.
func fullKey() Key {
	return Key{
		Name:           "axpy",
		ProgramFormat:  "stablehlo",
		Program:        []byte("module @axpy { func.func public @main() }"),
		WeightsDigest:  "sha256:abc/2",
		InputSpecs:     []string{"f32[3]", "f32[3]"},
		CompileOptions: "opt=1",
		Backend:        "pjrt",
		Plugin:         "tpu",
		PluginVersion:  "0.0.1",
		DeviceKind:     "TPU v5 lite",
		Topology:       "2x2x1",
		Extra:          map[string]string{"b": "2", "a": "1"},
	}
}

// TestDigestKnownAnswer pins the encoding documented on Key.Digest. The
// expected values were computed by a separate Python implementation of that
// documentation (hashlib.sha256 over the hand-built byte string), not by
// this package: a change here breaks every existing disk cache.
func TestDigestKnownAnswer(t *testing.T) {
	tests := []struct {
		name string
		key  Key
		want string
	}{
		{"all fields", fullKey(), "4b1c2bfdbfb0e64f2f0ad6b5e8d31c97b8c33471353063da1961e25665387688"},
		{"zero key", Key{}, "49cacc45e98155e3c8937f619ca6271cbbdc13fe0e396bd47e66ce9617022afc"},
	}
	for _, tt := range tests {
		if got := tt.key.Digest(); got != tt.want {
			t.Errorf("%s: Digest() = %s, want %s", tt.name, got, tt.want)
		}
	}
}

// mutate returns k with field i changed in a way specific to the field.
func mutate(t *testing.T, k Key, i int) Key {
	v := reflect.ValueOf(&k).Elem()
	f := v.Field(i)
	name := v.Type().Field(i).Name
	switch f.Kind() {
	case reflect.String:
		f.SetString(f.String() + "+" + name)
	case reflect.Slice:
		switch f.Type().Elem().Kind() {
		case reflect.Uint8:
			f.SetBytes(append(append([]byte(nil), f.Bytes()...), 'x'))
		case reflect.String:
			s := append([]string(nil), f.Interface().([]string)...)
			f.Set(reflect.ValueOf(append(s, "i8[1]")))
		default:
			t.Fatalf("field %s: no mutation for %s; extend mutate and Digest", name, f.Type())
		}
	case reflect.Map:
		m := map[string]string{}
		for k, v := range f.Interface().(map[string]string) {
			m[k] = v
		}
		m["new"] = "1"
		f.Set(reflect.ValueOf(m))
	default:
		t.Fatalf("field %s: no mutation for %s; extend mutate and Digest", name, f.Type())
	}
	return k
}

// TestDigestEveryField changes one field at a time, found by reflection so a
// field added later without entering the digest fails here.
func TestDigestEveryField(t *testing.T) {
	for _, base := range []Key{fullKey(), {}} {
		seen := map[string]string{base.Digest(): "base"}
		n := reflect.TypeOf(base).NumField()
		for i := 0; i < n; i++ {
			name := reflect.TypeOf(base).Field(i).Name
			d := mutate(t, base, i).Digest()
			if prev, dup := seen[d]; dup {
				t.Errorf("changing %s gives the same digest as %s", name, prev)
			}
			seen[d] = name
		}
	}
}

// TestDigestNoConcatenationCollision checks pairs whose fields concatenate
// to the same text.
func TestDigestNoConcatenationCollision(t *testing.T) {
	tests := []struct {
		name string
		a, b Key
	}{
		{"adjacent strings", Key{Backend: "ab", Plugin: "c"}, Key{Backend: "a", Plugin: "bc"}},
		{"input boundary", Key{InputSpecs: []string{"f32[1]f32[2]"}}, Key{InputSpecs: []string{"f32[1]", "f32[2]"}}},
		{"input split", Key{InputSpecs: []string{"ab", "c"}}, Key{InputSpecs: []string{"a", "bc"}}},
		{"empty input vs none", Key{InputSpecs: []string{""}}, Key{}},
		{"extra key/value boundary", Key{Extra: map[string]string{"ab": "c"}}, Key{Extra: map[string]string{"a": "bc"}}},
		{"extra vs topology", Key{Extra: map[string]string{"t": ""}}, Key{Topology: "t"}},
		{"name vs format", Key{Name: "x"}, Key{ProgramFormat: "x"}},
		{"program vs options", Key{Program: []byte("x")}, Key{CompileOptions: "x"}},
		{"input order", Key{InputSpecs: []string{"f32[1]", "i32[1]"}}, Key{InputSpecs: []string{"i32[1]", "f32[1]"}}},
	}
	for _, tt := range tests {
		if tt.a.Digest() == tt.b.Digest() {
			t.Errorf("%s: %+v and %+v have the same digest", tt.name, tt.a, tt.b)
		}
	}
}

// TestDigestEquivalent lists keys that are documented to be the same.
func TestDigestEquivalent(t *testing.T) {
	tests := []struct {
		name string
		a, b Key
	}{
		{"nil and empty program", Key{Program: nil}, Key{Program: []byte{}}},
		{"nil and empty inputs", Key{InputSpecs: nil}, Key{InputSpecs: []string{}}},
		{"nil and empty extra", Key{Extra: nil}, Key{Extra: map[string]string{}}},
		{"extra built in another order", Key{Extra: map[string]string{"a": "1", "b": "2", "c": "3"}},
			Key{Extra: map[string]string{"c": "3", "b": "2", "a": "1"}}},
	}
	for _, tt := range tests {
		if tt.a.Digest() != tt.b.Digest() {
			t.Errorf("%s: digests differ", tt.name)
		}
	}
}

func TestInputSpec(t *testing.T) {
	tests := []struct {
		dtype string
		dims  []int
		want  string
	}{
		{"f32", []int{8, 784}, "f32[8,784]"},
		{"bf16", nil, "bf16[]"},
		{"i64", []int{-1, 3}, "i64[-1,3]"},
		{"u8", []int{0}, "u8[0]"},
	}
	for _, tt := range tests {
		if got := InputSpec(tt.dtype, tt.dims...); got != tt.want {
			t.Errorf("InputSpec(%q, %v) = %q, want %q", tt.dtype, tt.dims, got, tt.want)
		}
	}
}

// TestWeightsHasher pins the weights encoding (expected value from the same
// Python script as the key digest) and checks that each part matters.
func TestWeightsHasher(t *testing.T) {
	w24 := make([]byte, 24)
	for i := range w24 {
		w24[i] = byte(i)
	}
	one := []byte{0, 0, 0x80, 0x3f} // float32 1.0, little-endian
	h := NewWeightsHasher()
	h.Add("w", "f32", []int{2, 3}, w24)
	h.Add("b", "f32", []int{-1}, one)
	if got, want := h.Sum(), "sha256:e6f3c89c0889316111f29376cd857eb433c62519385703b9cfa393f1bad6de86/2"; got != want {
		t.Errorf("Sum() = %s, want %s", got, want)
	}

	type tensor struct {
		name, dtype string
		dims        []int
		data        []byte
	}
	sum := func(ts ...tensor) string {
		h := NewWeightsHasher()
		for _, x := range ts {
			h.Add(x.name, x.dtype, x.dims, x.data)
		}
		return h.Sum()
	}
	base := tensor{"w", "f32", []int{2, 2}, []byte("0123456789abcdef")}
	variants := map[string]string{
		"base":       sum(base),
		"name":       sum(tensor{"v", "f32", base.dims, base.data}),
		"dtype":      sum(tensor{"w", "i32", base.dims, base.data}),
		"dims":       sum(tensor{"w", "f32", []int{4, 1}, base.data}),
		"rank":       sum(tensor{"w", "f32", []int{4}, base.data}),
		"value":      sum(tensor{"w", "f32", base.dims, []byte("0123456789abcdeF")}),
		"split":      sum(tensor{"w", "f32", base.dims, []byte("01234567")}, tensor{"w", "f32", base.dims, []byte("89abcdef")}),
		"empty":      sum(),
		"name/dtype": sum(tensor{"wf", "32", base.dims, base.data}),
	}
	seen := map[string]string{}
	for name, d := range variants {
		if prev, dup := seen[d]; dup {
			t.Errorf("weights variants %q and %q have the same digest", name, prev)
		}
		seen[d] = name
	}
}
