package lower

import (
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
)

func TestSPMDAllReduce(t *testing.T) {
	b := New("spmd", 4)
	if err := b.DistributedSPMD(2); err != nil {
		t.Fatal(err)
	}
	if err := b.DeviceAssignment(3, 1); err != nil {
		t.Fatal(err)
	}
	x, _ := b.Parameter("x", sh(f32, 3), nil)
	n, _ := b.Parameter("n", sh(i32), nil)
	y, _ := b.Parameter("y", sh(f32, 2), nil)
	outs, err := b.AllReduce([]op{x, n, y}, backends.ReduceOpSum, [][]int{{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"(Float32)[3]", "(Int32)", "(Float32)[2]"} {
		s, _ := b.OpShape(outs[i])
		if s.String() != want {
			t.Errorf("output %d: %s, want %s", i, s, want)
		}
	}
	prog, err := b.Finish(outs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if prog.Strategy != SPMD || prog.NumReplicas != 2 || prog.NumPartitions != 1 || prog.NumDevices() != 2 || prog.Portable() {
		t.Errorf("program: strategy %s, %d replicas × %d partitions, portable %v", prog.Strategy, prog.NumReplicas, prog.NumPartitions, prog.Portable())
	}
	if !slices.Equal(prog.DeviceAssignment, []int{3, 1}) {
		t.Errorf("DeviceAssignment = %v, want [3 1]", prog.DeviceAssignment)
	}
	text := string(prog.Text)
	if !strings.Contains(text, "stablehlo.num_replicas = 2") {
		t.Errorf("no num_replicas = 2 in:\n%s", text)
	}
	stmts, err := parseStatements(text)
	if err != nil {
		t.Fatal(err)
	}
	// One all_reduce per dtype: the two float32 operands together.
	ars := findOp(stmts, "stablehlo.all_reduce")
	if len(ars) != 2 {
		t.Fatalf("%d all_reduce ops, want 2 (one per dtype):\n%s", len(ars), text)
	}
	if got := strings.Join(ars[0].results, " "); got != "tensor<3xf32> tensor<2xf32>" {
		t.Errorf("first all_reduce gives %s", got)
	}
	if !strings.Contains(ars[0].attrs, "replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>") {
		t.Errorf("replica groups missing: %s", ars[0].attrs)
	}
}

func TestSPMDDefaults(t *testing.T) {
	b := New("spmd", 2)
	if err := b.DistributedSPMD(2); err != nil {
		t.Fatal(err)
	}
	x, _ := b.Parameter("x", sh(f32, 3), nil)
	outs, err := b.AllReduce([]op{x}, backends.ReduceOpMax, nil)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := b.Finish(outs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(prog.DeviceAssignment, []int{0, 1}) {
		t.Errorf("default assignment %v, want [0 1]", prog.DeviceAssignment)
	}
	if !strings.Contains(string(prog.Text), "dense<[[0, 1]]>") {
		t.Errorf("default replica group missing:\n%s", prog.Text)
	}
}

func TestDistributionErrors(t *testing.T) {
	b := New("d", 2)
	if err := b.DistributedSPMD(3); err == nil {
		t.Error("3 devices on a 2-device engine accepted")
	}
	if err := b.DistributedSPMD(2); err != nil {
		t.Fatal(err)
	}
	if err := b.DistributedSPMD(2); err == nil {
		t.Error("second strategy accepted")
	}
	for name, devs := range map[string][]backends.DeviceNum{"count": {0}, "range": {0, 2}, "duplicate": {1, 1}} {
		if err := b.DeviceAssignment(devs...); err == nil {
			t.Errorf("DeviceAssignment %s %v accepted", name, devs)
		}
	}
	x, _ := b.Parameter("x", sh(f32, 3), nil)
	if _, err := b.AllReduce([]op{x}, backends.ReduceOpSum, [][]int{{0, 5}}); err == nil {
		t.Error("replica 5 accepted")
	}
	if _, err := b.AllReduce([]op{x}, backends.ReduceOpSum, [][]int{{0, 1}, {1}}); err == nil {
		t.Error("groups of different sizes accepted")
	}
	if _, err := b.AllReduce([]op{x}, backends.ReduceOpUndefined, nil); err == nil {
		t.Error("undefined reduction accepted")
	}

	// Strategy after parameters.
	c := New("late", 2)
	_, _ = c.Parameter("x", sh(f32, 3), nil)
	if err := c.DistributedSPMD(2); err == nil {
		t.Error("DistributedSPMD after a parameter accepted")
	}

	// Sharding without auto-sharding.
	d := New("nosharding", 2)
	if _, err := d.Parameter("x", sh(f32, 4), &backends.ShardingSpec{Mesh: "m", Axes: [][]string{{"a"}}}); err == nil {
		t.Error("sharded parameter without a mesh accepted")
	}
}

func TestAutoSharding(t *testing.T) {
	b := New("sharded", 4)
	mesh := backends.Mesh{Name: "mesh", AxesSizes: []int{2, 2}, AxesNames: []string{"data", "model"}}
	if err := b.DistributedAutoSharding(mesh); err != nil {
		t.Fatal(err)
	}
	x, err := b.Parameter("x", sh(f32, 8, 16), &backends.ShardingSpec{Mesh: "mesh", Axes: [][]string{{"data"}, {}}})
	if err != nil {
		t.Fatal(err)
	}
	w, err := b.Parameter("w", sh(f32, 16, 4), &backends.ShardingSpec{Mesh: "mesh", Axes: [][]string{{}, {"model"}}})
	if err != nil {
		t.Fatal(err)
	}
	y, err := b.Dot(x, w)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.AllReduce([]op{y}, backends.ReduceOpSum, nil); err == nil {
		t.Error("explicit AllReduce under auto-sharding accepted")
	}
	if _, err := b.Parameter("z", sh(f32, 4), &backends.ShardingSpec{Mesh: "other"}); err == nil {
		t.Error("sharding on an unknown mesh accepted")
	}
	if _, err := b.Parameter("z", sh(f32, 4), &backends.ShardingSpec{Mesh: "mesh", Axes: [][]string{{"nope"}}}); err == nil {
		t.Error("sharding on an unknown mesh axis accepted")
	}
	prog, err := b.Finish([]op{y}, []*backends.ShardingSpec{{Mesh: "mesh", Axes: [][]string{{"data"}, {"model"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if prog.Strategy != AutoSharding || prog.NumReplicas != 1 || prog.NumPartitions != 4 {
		t.Errorf("program: %s, %d replicas × %d partitions", prog.Strategy, prog.NumReplicas, prog.NumPartitions)
	}
	if !slices.Equal(prog.DeviceAssignment, []int{0, 1, 2, 3}) {
		t.Errorf("DeviceAssignment = %v", prog.DeviceAssignment)
	}
	text := string(prog.Text)
	// Spellings from the Shardy dialect's documentation
	// (sharding_representation.md): sdy.mesh and #sdy.sharding.
	for _, want := range []string{
		`sdy.mesh @mesh = <["data"=2, "model"=2]>`,
		`%x: tensor<8x16xf32> { sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]> }`,
		`%w: tensor<16x4xf32> { sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]> }`,
		`tensor<8x4xf32> { sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {"model"}]> }`,
		"stablehlo.num_partitions = 4",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
}

func TestAutoShardingDeviceIDs(t *testing.T) {
	b := New("ids", 2)
	mesh := backends.Mesh{Name: "m", AxesSizes: []int{2}, AxesNames: []string{"x"}, LogicalDeviceAssignment: []int{1, 0}}
	if err := b.DistributedAutoSharding(mesh); err != nil {
		t.Fatal(err)
	}
	if err := b.DistributedAutoSharding(mesh); err == nil {
		t.Error("second strategy accepted")
	}
	x, _ := b.Parameter("x", sh(f32, 4), &backends.ShardingSpec{Mesh: "m", Axes: [][]string{{"x"}}})
	prog, err := b.Finish([]op{x}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(prog.Text), `sdy.mesh @m = <["x"=2], device_ids=[1, 0]>`) {
		t.Errorf("logical device ids missing:\n%s", prog.Text)
	}
	big := New("big", 2)
	if err := big.DistributedAutoSharding(backends.Mesh{Name: "m", AxesSizes: []int{4}, AxesNames: []string{"x"}}); err == nil {
		t.Error("4-device mesh on a 2-device engine accepted")
	}
	if err := New("bad", 2).DistributedAutoSharding(backends.Mesh{Name: "m", AxesSizes: []int{2}, AxesNames: []string{"x", "y"}}); err == nil {
		t.Error("mesh with mismatched axes accepted")
	}
}
