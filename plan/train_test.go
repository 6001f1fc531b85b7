package plan

import (
	"context"
	"testing"
)

func TestPlanTrainTiny(t *testing.T) {
	if !inChild(t) {
		return
	}
	m := generated(t, "tiny")
	for _, strat := range []string{"dp", "tp", "fsdp"} {
		r, err := RunTrain(context.Background(), m, Options{Slice: "v5e-4", Strategy: strat, Dims: map[string]int{"sequence": 16}}, TrainOptions{Batch: 4})
		if err != nil {
			t.Fatalf("%s: %v", strat, err)
		}
		b, _ := r.MarshalJSON()
		t.Logf("%s", b)
	}
}
