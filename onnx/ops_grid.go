package onnx

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
)

// CenterCropPad (18) and AffineGrid (20)
// (https://onnx.ai/onnx/operators/onnx__CenterCropPad.html,
// https://onnx.ai/onnx/operators/onnx__AffineGrid.html).

func init() {
	register("CenterCropPad", 18, convCenterCropPad).needs(1)
	register("AffineGrid", 20, convAffineGrid).needs(1)
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("AffineGrid", "CenterCropPad")
}

// convCenterCropPad crops or zero-pads each listed axis to its target
// size, centred: an odd difference leaves the extra element at the end
// (crop start and pad before are floor(difference/2)).
func convCenterCropPad(c *opCtx) error {
	x := c.in(0)
	dims := x.Shape().Dimensions
	r := len(dims)
	shape := c.constInts(1)
	axes := make([]int, 0, r)
	if a := c.attrInts("axes", nil); a != nil {
		for _, v := range a {
			axes = append(axes, c.normAxis(v, r))
		}
	} else {
		for k := range r {
			axes = append(axes, k)
		}
	}
	if len(shape) != len(axes) {
		c.fail("shape has %d values for %d axes", len(shape), len(axes))
	}
	before, after := make([]int, r), make([]int, r)
	for k, a := range axes {
		want, have := int(shape[k]), dims[a]
		if want < 0 {
			c.fail("shape[%d] = %d: expected a non-negative size", k, want)
		}
		switch {
		case want < have:
			start := (have - want) / 2
			x = sliceAxis(x, a, start, start+want, 1)
		case want > have:
			before[a] = (want - have) / 2
			after[a] = want - have - before[a]
		}
	}
	x = padConstant(x, before, after, scalarOf(c.g, x.DType(), 0))
	c.set(0, x)
	return nil
}

// convAffineGrid computes theta · [x, y, (z,) 1] for the normalised grid
// of the output size (-1 to 1 through pixel corners with align_corners,
// pixel centres without), giving [N, (D,) H, W, 2 or 3].
func convAffineGrid(c *opCtx) error {
	theta := c.in(0)
	size := toInts(c.constInts(1))
	td := theta.Shape().Dimensions
	spatial := len(size) - 2
	if spatial != 2 && spatial != 3 {
		c.fail("size %v: expected [N, C, H, W] or [N, C, D, H, W]", size)
	}
	if len(td) != 3 || td[0] != size[0] || td[1] != spatial || td[2] != spatial+1 {
		c.fail("theta: expected shape [%d, %d, %d], got %v", size[0], spatial, spatial+1, td)
	}
	align := c.attrInt("align_corners", 0) != 0
	coord := func(n, i int) float64 {
		if align {
			if n == 1 {
				return -1
			}
			return -1 + 2*float64(i)/float64(n-1)
		}
		return -1 + (2*float64(i)+1)/float64(n)
	}
	sp := size[2:]
	p := numElems(sp)
	base := make([]float64, 0, p*(spatial+1))
	idx := make([]int, spatial)
	for range p {
		// Homogeneous point: x (last axis) first, then y, (z,) 1.
		for k := spatial - 1; k >= 0; k-- {
			base = append(base, coord(sp[k], idx[k]))
		}
		base = append(base, 1)
		for k := spatial - 1; k >= 0; k-- {
			if idx[k]++; idx[k] < sp[k] {
				break
			}
			idx[k] = 0
		}
	}
	dt := theta.DType()
	b := constNode(c.g, newHostFloats(ir.Float64, []int{p, spatial + 1}, base))
	t64 := graph.ConvertDType(theta, ir.Float64)
	grid := dotGeneral(t64, []int{2}, nil, b, []int{1}, nil) // [N, spatial, P]
	grid = graph.TransposeAllDims(grid, 0, 2, 1)
	out := append(append([]int{size[0]}, sp...), spatial)
	c.set(0, graph.ConvertDType(graph.Reshape(grid, out...), dt))
	return nil
}
