package tensorbridge_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/train"
)

// Fine-tune an MLP exported from PyTorch with AdamW and cross entropy for
// 12 steps of 8 samples, then write the trained ONNX. PyTorch's losses for
// the same run (testdata/train/mlp_ce/adamw.json) are 1.4217 at the first
// step and 0.8656 at the last.
func ExampleModel_NewTrainer() {
	ctx := context.Background()
	b, err := tensorbridge.Open(ctx, "cpu")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	m, err := b.LoadModel(ctx, "testdata/train/mlp_ce/model.onnx")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close()
	data, err := train.OpenData("testdata/train/mlp_ce/data", []string{"x", "labels"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer data.Close()

	loss, _ := train.ParseLoss("cross_entropy:logits:labels")
	opt, _ := train.DefaultOptimizer(train.AdamW)
	opt.LR = 0.01
	tr, err := m.NewTrainer(ctx, train.Config{Loss: loss, Optimizer: opt, Batch: 8, Data: data.Digest()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	pos := data.Start(false, 0)
	for range 12 {
		batch, next, err := data.Next(pos, 8)
		if err != nil {
			fmt.Println(err)
			return
		}
		res, err := tr.Step(ctx, batch)
		if err != nil {
			fmt.Println(err)
			return
		}
		pos = next
		if res.Step == 1 || res.Step == 12 {
			fmt.Printf("step %d: loss %.4f\n", res.Step, res.Loss)
		}
	}
	out := filepath.Join(os.TempDir(), "mlp-trained.onnx")
	defer os.Remove(out)
	if err := tr.Export(ctx, out); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("trained", tr.Stats().TrainedElements, "parameters")
	// Output:
	// step 1: loss 1.4217
	// step 12: loss 0.8656
	// trained 1732 parameters
}
