package onnx

// SequenceMap (opset 17, https://onnx.ai/onnx/operators/onnx__SequenceMap.html)
// applies its body graph to each element of input_sequence; additional
// inputs that are sequences (of the same length) contribute their element
// at the same position, tensors are passed whole. Each body output becomes
// an output sequence. The sequences are fixed when the graph is built, so
// the body is built once per element.

func init() {
	register("SequenceMap", 17, convSequenceMap)
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("SequenceMap")
}

func convSequenceMap(c *opCtx) error {
	body := c.attr("body")
	if body == nil || body.G == nil {
		c.fail("missing body")
	}
	n := len(c.seqIn(0))
	for k := 1; k < c.numInputs(); k++ {
		if v := c.input(k); v.seq != nil && len(v.seq) != n {
			c.fail("input %d is a sequence of %d elements, input_sequence has %d", k, len(v.seq), n)
		}
	}
	results := make([][]*value, c.numOutputs())
	for j := 0; j < n; j++ {
		in := make([]*value, c.numInputs())
		for k := range in {
			v := c.input(k)
			if v.seq != nil {
				v = v.seq[j]
			}
			in[k] = v
		}
		outs, err := c.b.buildSubgraph(body.G, in)
		if err != nil {
			return err
		}
		if len(outs) != c.numOutputs() {
			c.fail("body gives %d outputs, the node has %d", len(outs), c.numOutputs())
		}
		for k, o := range outs {
			if o.seq != nil || o.none {
				c.fail("body output %d is not a tensor", k)
			}
			results[k] = append(results[k], o)
		}
	}
	for k := range results {
		c.setSeq(k, results[k])
	}
	return nil
}
