package onnx

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
)

// The Pad op (constant, reflect, edge and wrap modes) and its host
// evaluator; the padding analysis (running at bucket sizes) is padsafe.go.

// padArgs returns Pad's mode and per-axis amounts.
func padArgs(c *opCtx, rank int) (mode string, before, after []int) {
	mode = c.attrString("mode", "constant")
	var pads []int64
	if c.opset < 11 {
		pads = c.attrInts("pads", nil)
		if pads == nil {
			pads = c.attrInts("paddings", nil)
		}
	} else {
		pads = c.constInts(1)
	}
	axes := make([]int, rank)
	for k := range axes {
		axes[k] = k
	}
	if c.opset >= 18 && c.has(3) {
		axes = c.normAxes(c.constInts(3), rank)
	}
	if len(pads) != 2*len(axes) {
		c.fail("pads %v do not match %d axes", pads, len(axes))
	}
	before, after = make([]int, rank), make([]int, rank)
	for k, a := range axes {
		before[a] = int(pads[k])
		after[a] = int(pads[k+len(axes)])
	}
	return mode, before, after
}

func convPad(c *opCtx) error {
	x := c.in(0)
	mode, before, after := padArgs(c, x.Rank())
	switch mode {
	case "constant":
		var v *graph.Node
		if c.opset < 11 {
			v = scalarLike(x, c.attrFloat("value", 0))
		} else if c.has(2) {
			v = graph.Reshape(c.in(2))
		} else {
			v = scalarLike(x, 0)
		}
		c.set(0, padConstant(x, before, after, v))
	case "edge", "reflect", "wrap":
		for k := range before {
			if before[k] < 0 || after[k] < 0 {
				c.fail("negative pads are only supported in constant mode")
			}
		}
		c.set(0, padIndexed(x, before, after, mode))
	default:
		c.fail("unknown pad mode %q", mode)
	}
	return nil
}

func hostPad(c *opCtx) error {
	x := c.hostIn(0)
	mode, before, after := padArgs(c, x.rank())
	if mode != "constant" {
		// Edge, reflect and wrap only reorder elements.
		sel := make([][]int, x.rank())
		for a, n := range x.dims {
			for k := -before[a]; k < n+after[a]; k++ {
				sel[a] = append(sel[a], padSource(k, n, mode))
			}
		}
		h, err := hostSelect(x, sel)
		if err != nil {
			return err
		}
		c.setHost(0, h)
		return nil
	}
	value := 0.0
	if c.opset < 11 {
		value = c.attrFloat("value", 0)
	} else if c.has(2) {
		v, err := c.hostIn(2).scalarFloat()
		if err != nil {
			return err
		}
		value = v
	}
	// Gather from x extended with one trailing element holding value.
	if err := x.decode(); err != nil {
		return err
	}
	ext := &hostTensor{dt: x.dt, dims: []int{x.size() + 1}}
	if x.isFloat() {
		ext.f = append(append([]float64{}, x.f...), value)
	} else {
		ext.i = append(append([]int64{}, x.i...), int64(value))
	}
	dims := make([]int, x.rank())
	for a, n := range x.dims {
		dims[a] = n + before[a] + after[a]
		if dims[a] < 0 {
			return fmt.Errorf("pads remove more than axis %d holds", a)
		}
	}
	if err := checkHostSize(dims); err != nil {
		return err
	}
	st := strides(x.dims)
	idx := make([]int, numElems(dims))
	forEachIndex(dims, func(flat int, ix []int) {
		j := 0
		for a, i := range ix {
			src := i - before[a]
			if src < 0 || src >= x.dims[a] {
				j = -1
				break
			}
			j += src * st[a]
		}
		if j < 0 {
			j = x.size()
		}
		idx[flat] = j
	})
	h, err := ext.gatherFlat(dims, idx)
	if err != nil {
		return err
	}
	c.setHost(0, h)
	return nil
}
