package precision_test

import (
	"fmt"
	"math"

	"github.com/tensorbridge/tensorbridge/precision"
)

// Rounding to bfloat16 and back. The bits and values are those PyTorch
// gives for torch.tensor(f).to(torch.bfloat16): 1.00390625 lies halfway
// between 1 and the next bfloat16 and goes to the even one (1), 1.01171875
// lies halfway too and goes up to the even 1.015625, and a float32 beyond
// the largest bfloat16 becomes infinity.
func ExampleBFloat16() {
	negZero := float32(math.Copysign(0, -1))
	for _, f := range []float32{1, 3.14159, negZero, 1.00390625, 1.01171875, 3.4e38} {
		h := precision.BFloat16(f)
		fmt.Printf("%v -> %#04x -> %v\n", f, h, precision.FromBFloat16(h))
	}
	// Output:
	// 1 -> 0x3f80 -> 1
	// 3.14159 -> 0x4049 -> 3.140625
	// -0 -> 0x8000 -> -0
	// 1.0039062 -> 0x3f80 -> 1
	// 1.0117188 -> 0x3f82 -> 1.015625
	// 3.4e+38 -> 0x7f80 -> +Inf
}
