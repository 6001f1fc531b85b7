package lower

import "testing"

// Donate adds tf.aliasing_output to the arguments it is given, inside an
// existing attribute dictionary or as a new one, and nothing else.
func TestDonate(t *testing.T) {
	cases := []struct {
		in, want string
		donated  map[int]int
	}{
		{"func.func @main(%a: tensor<2x3xf32>, %b: tensor<f32>) -> (tensor<f32>) {\n",
			"func.func @main(%a: tensor<2x3xf32> {tf.aliasing_output = 1 : i32}, %b: tensor<f32>) -> (tensor<f32>) {\n",
			map[int]int{0: 1}},
		{`func.func @main(%a: tensor<4xf32> { sdy.sharding = #sdy.sharding<@mesh, [{"data"}]> }, %b: tensor<4xf32> { sdy.sharding = #sdy.sharding<@mesh, [{}, {}]> }) -> ()`,
			`func.func @main(%a: tensor<4xf32> { sdy.sharding = #sdy.sharding<@mesh, [{"data"}]> }, %b: tensor<4xf32> { tf.aliasing_output = 0 : i32, sdy.sharding = #sdy.sharding<@mesh, [{}, {}]> }) -> ()`,
			map[int]int{1: 0}},
	}
	for _, tc := range cases {
		got, err := Donate([]byte(tc.in), tc.donated)
		if err != nil || string(got) != tc.want {
			t.Errorf("Donate(%q) =\n%q, %v\nwant\n%q", tc.in, got, err, tc.want)
		}
	}
	if _, err := Donate([]byte("func.func @main(%a: tensor<f32>) -> ()"), map[int]int{3: 0}); err == nil {
		t.Error("donating a parameter main does not have: no error")
	}
}

// Program.CompileText applies Program.Donated (the option plan --train
// sets), and leaves the text alone without it.
func TestCompileTextDonates(t *testing.T) {
	text := "func.func @main(%a: tensor<2xf32>, %b: tensor<f32>) -> (tensor<f32>, tensor<2xf32>) {\n"
	p := &Program{Text: []byte(text)}
	if got, err := p.CompileText(); err != nil || string(got) != text {
		t.Fatalf("no donation: %q, %v", got, err)
	}
	p.Donated = map[int]int{0: 1}
	want := "func.func @main(%a: tensor<2xf32> {tf.aliasing_output = 1 : i32}, %b: tensor<f32>) -> (tensor<f32>, tensor<2xf32>) {\n"
	if got, err := p.CompileText(); err != nil || string(got) != want {
		t.Fatalf("donated: %q, %v; want %q", got, err, want)
	}
}
