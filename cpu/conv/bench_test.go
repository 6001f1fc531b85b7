package conv

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchLayers are ResNet-50 / MobileNetV2 layers, NCHW, batch 1, OIHW kernels.
var benchLayers = []convCase{
	{name: "resnet-conv1-3x64-7x7s2-224", batch: 1, cin: 3, cout: 64, group: 1, in: []int{224, 224}, k: []int{7, 7}, strides: []int{2, 2}, padLo: []int{3, 3}, padHi: []int{3, 3}, inL: "cf", outL: "cf"},
	{name: "resnet-64x64-3x3-56", batch: 1, cin: 64, cout: 64, group: 1, in: []int{56, 56}, k: []int{3, 3}, padLo: []int{1, 1}, padHi: []int{1, 1}, inL: "cf", outL: "cf"},
	{name: "resnet-256x64-1x1-56", batch: 1, cin: 256, cout: 64, group: 1, in: []int{56, 56}, k: []int{1, 1}, inL: "cf", outL: "cf"},
	{name: "resnet-128x128-3x3s2-56", batch: 1, cin: 128, cout: 128, group: 1, in: []int{56, 56}, k: []int{3, 3}, strides: []int{2, 2}, padLo: []int{1, 1}, padHi: []int{1, 1}, inL: "cf", outL: "cf"},
	{name: "mobilenetv2-dw144-3x3-56", batch: 1, cin: 144, cout: 144, group: 144, in: []int{56, 56}, k: []int{3, 3}, padLo: []int{1, 1}, padHi: []int{1, 1}, inL: "cf", outL: "cf"},
}

// macs is the multiply-accumulate count of p.
func macs(p *ConvParams) float64 {
	return float64(p.Batch * p.OutChannels * prod(p.OutSpatial) * p.InChannels / p.Groups * prod(p.KernelSpatial))
}

// BenchmarkConv reports GFLOP/s (2·MACs per second) of Float32 on the
// layers in NCHW/OIHW and in NHWC/HWIO (GoMLX's default channels-last).
func BenchmarkConv(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, layout := range []string{"nchw", "nhwc"} {
		for _, c := range benchLayers {
			kl := "oi"
			if layout == "nhwc" {
				c.inL, c.outL, kl = "cl", "cl", "io"
			}
			benchConv(b, rng, layout+"/"+c.name, c, kl)
		}
	}
}

func benchConv(b *testing.B, rng *rand.Rand, name string, c convCase, kl string) {
	p, lens := c.params(kl)
	in, ker, out := randSlice(rng, lens[0]), randSlice(rng, lens[1]), make([]float32, lens[2])
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("%s/threads=%d", name, threads), func(b *testing.B) {
			for b.Loop() {
				if err := Float32(p, in, ker, out, threads); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(2*macs(p)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
