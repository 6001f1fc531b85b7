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

// mobileNetDW are MobileNetV2's depthwise layers (batch 1, NCHW, 3×3 pad 1):
// channels, input size and stride.
var mobileNetDW = []struct{ c, size, stride int }{
	{32, 112, 1}, {96, 112, 2}, {144, 56, 1}, {144, 56, 2},
	{192, 28, 1}, {384, 14, 1}, {576, 14, 1}, {960, 7, 1},
}

// BenchmarkDepthwise times Float32 on MobileNetV2's depthwise layers in
// NCHW/OIHW on 1 and 2 threads.
func BenchmarkDepthwise(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, l := range mobileNetDW {
		c := convCase{batch: 1, cin: l.c, cout: l.c, group: l.c, in: []int{l.size, l.size}, k: []int{3, 3},
			strides: []int{l.stride, l.stride}, padLo: []int{1, 1}, padHi: []int{1, 1}, inL: "cf", outL: "cf"}
		benchConv(b, rng, fmt.Sprintf("dw%d-%dx%d-s%d", l.c, l.size, l.size, l.stride), c, "oi")
	}
}

// BenchmarkDWPlaneKernel times one 3×3 channel plane (pad 1, w×w input) on
// each plane kernel, without the per-call set-up of Float32; ns/row is per
// output row.
func BenchmarkDWPlaneKernel(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, kern := range dwKernels() {
		for _, w := range []int{7, 14, 28, 56, 112} {
			for _, s := range []int{1, 2} {
				c, _ := newDWPlaneCase(rng, kern, 3, s, w, 1, 1, w, s, 1)
				out := make([]float32, c.d.outH*c.ldout)
				b.Run(fmt.Sprintf("%v/w%d/s%d", kern, w, s), func(b *testing.B) {
					for b.Loop() {
						c.d.planes(out, c.ldout, 0, c.in, 0, c.w, c.buf, 1)
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*c.d.outH), "ns/row")
				})
			}
		}
	}
}
