package main

import "github.com/tensorbridge/tensorbridge/onnx"

// readModelAhead starts reading and decoding the ONNX file at path and
// returns a function that waits for the result. Commands call it before
// opening the backend: reading the model and loading a PJRT plugin do not
// depend on each other, and a start to first inference would otherwise be
// their sum (Backend.LoadONNX then prepares the parsed model).
func readModelAhead(path string) func() (*onnx.Model, error) {
	type parsed struct {
		m   *onnx.Model
		err error
	}
	c := make(chan parsed, 1)
	go func() {
		m, err := onnx.Load(path)
		c <- parsed{m, err}
	}()
	var p *parsed
	return func() (*onnx.Model, error) {
		if p == nil {
			r := <-c
			p = &r
		}
		return p.m, p.err
	}
}
