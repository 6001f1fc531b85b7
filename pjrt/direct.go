package pjrt

// The direct run path (driver.DirectRunner): a single-device program run
// from host bytes to host bytes with the binding's calls only. GoMLX's
// Graph.RunWithBuffers wraps every input and output in its own tensor and
// buffer types and reads each output's element type, dimensions and device
// back from the plugin; here the shapes are the program's, known since it
// was lowered, the inputs are uploaded straight from the caller's bytes and
// the outputs downloaded straight into the caller's slices.

import (
	"context"
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tensorbridge/tensorbridge/driver"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/internal/capi"
	"github.com/tensorbridge/tensorbridge/ir"
)

var _ driver.DirectRunner = (*Backend)(nil)

// Direct returns the executable g was compiled to on this backend, or nil
// when g was not compiled by this backend's engine or its program spans
// several devices (those run through GoMLX).
func (b *Backend) Direct(g *ir.Graph) driver.DirectExecutable {
	x, ok := ir.Compiled(g).(*Executable)
	if !ok || x == nil || x.eng != b.eng || x.prog.NumDevices() != 1 {
		return nil
	}
	return x
}

// directInfo is what RunDirect needs of the program's signature, in the
// binding's terms, computed once per executable.
type directInfo struct {
	paramTypes []capi.ElementType
	paramDims  [][]int64
	paramBytes []int
	outBytes   []int
	err        error // a parameter of a dtype PJRT has no element type for
}

func (x *Executable) directInfo() *directInfo {
	x.directOnce.Do(func() {
		p := x.prog
		d := &directInfo{
			paramTypes: make([]capi.ElementType, len(p.ParamShapes)),
			paramDims:  make([][]int64, len(p.ParamShapes)),
			paramBytes: make([]int, len(p.ParamShapes)),
			outBytes:   make([]int, len(p.OutputShapes)),
		}
		for i, s := range p.ParamShapes {
			et, ok := elementTypes[s.DType]
			if !ok && d.err == nil {
				d.err = &errs.UnsupportedError{Backend: x.eng.name, What: "dtype", Name: s.DType.String(), Detail: "PJRT buffers of this dtype are not supported"}
			}
			d.paramTypes[i] = et
			d.paramDims[i] = make([]int64, s.Rank())
			for k, n := range s.Dimensions {
				d.paramDims[i][k] = int64(n)
			}
			d.paramBytes[i] = s.Size() * s.DType.Size()
		}
		for j, s := range p.OutputShapes {
			d.outBytes[j] = s.Size() * s.DType.Size()
		}
		x.direct = d
	})
	return x.direct
}

// OutputShapes returns the shapes of the program's outputs.
func (x *Executable) OutputShapes() []shapes.Shape { return x.Outputs() }

// RunDirect implements driver.DirectExecutable for single-device programs.
// A cancellable ctx runs the plugin calls on one goroutine of their own, so
// that ctx can abandon the wait; the abandoned run still frees its buffers
// when it ends.
func (x *Executable) RunDirect(ctx context.Context, dev int, in []driver.DirectArg, out [][]byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if ctx.Done() == nil {
		return x.runDirect(dev, in, out)
	}
	done := make(chan error, 1)
	go func() { done <- x.runDirect(dev, in, out) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		select {
		case err := <-done: // finished meanwhile
			return err
		default:
		}
		return fmt.Errorf("pjrt: running %q: abandoned the wait (the run continues and its buffers are freed when it ends): %w", x.prog.Name, ctx.Err())
	}
}

// runDirect is RunDirect on the calling goroutine. The binding's calls get
// a context that cannot be cancelled, so none of them starts a goroutine of
// its own.
func (x *Executable) runDirect(dev int, in []driver.DirectArg, out [][]byte) error {
	const op = "execute"
	ctx := context.Background()
	e := x.eng
	if err := e.check(op); err != nil {
		return err
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.le == nil {
		return x.closedError(op)
	}
	prog := x.prog
	if prog.NumDevices() != 1 {
		return &errs.Error{Kind: errs.InvalidArgument, Backend: e.name, Op: op,
			Err: fmt.Errorf("program %q runs on %d devices; the direct path takes single-device programs", prog.Name, prog.NumDevices())}
	}
	info := x.directInfo()
	if info.err != nil {
		return info.err
	}
	if len(in) != len(info.paramTypes) {
		return &errs.InputError{Name: prog.Name, Problem: "count",
			Expected: fmt.Sprintf("%d parameters", len(info.paramTypes)), Got: fmt.Sprint(len(in))}
	}
	if len(out) != len(info.outBytes) {
		return &errs.Error{Kind: errs.InvalidArgument, Backend: e.name, Op: op,
			Err: fmt.Errorf("program %q has %d outputs, %d destinations were given", prog.Name, len(info.outBytes), len(out))}
	}
	for j, o := range out {
		if o != nil && len(o) != info.outBytes[j] {
			return &errs.Error{Kind: errs.InvalidArgument, Backend: e.name, Op: op,
				Err: fmt.Errorf("output #%d (%s) needs %d bytes, its destination has %d", j, prog.OutputShapes[j], info.outBytes[j], len(o))}
		}
	}
	target := backends.DeviceNum(dev)
	if !prog.Portable() {
		target = x.targets[0]
	}
	d, err := e.device(target)
	if err != nil {
		return err
	}

	// The arguments: lent buffers, or host bytes uploaded into buffers this
	// run owns (temps, freed on every path).
	var argStore, tempStore [8]*capi.Buffer
	args, temps := argStore[:0], tempStore[:0]
	defer func() {
		for _, t := range temps {
			_ = t.Destroy()
		}
	}()
	for i, a := range in {
		want := prog.ParamShapes[i]
		if a.Buffer != nil {
			b, err := e.buffer(op, a.Buffer)
			if err != nil {
				return fmt.Errorf("input #%d (%s): %w", i, prog.ParamNames[i], err)
			}
			if !b.shape.Equal(want) {
				problem := "shape"
				if b.shape.DType != want.DType {
					problem = "dtype"
				}
				return &errs.InputError{Name: fmt.Sprintf("#%d (%s)", i, prog.ParamNames[i]), Problem: problem, Expected: want.String(), Got: b.shape.String()}
			}
			pb := b.buf
			if b.dev != target {
				cp, err := pb.CopyToDevice(ctx, d)
				if err != nil {
					return wrap(e.name, op, e.deviceName(target), fmt.Sprintf("moving input #%d from device %d", i, b.dev), err)
				}
				temps = append(temps, cp)
				pb = cp
			}
			args = append(args, pb)
			continue
		}
		if len(a.Host) != info.paramBytes[i] {
			return &errs.InputError{Name: fmt.Sprintf("#%d (%s)", i, prog.ParamNames[i]), Problem: "value",
				Expected: fmt.Sprintf("%d bytes for %s", info.paramBytes[i], want), Got: fmt.Sprintf("%d bytes", len(a.Host))}
		}
		// ImmutableOnlyDuringCall: the plugin copies the bytes before the
		// call returns (BufferFromHost waits for the copy either way).
		pb, err := e.client.BufferFromHost(ctx, d, info.paramTypes[i], info.paramDims[i], a.Host, capi.ImmutableOnlyDuringCall)
		if err != nil {
			return wrap(e.name, op, e.deviceName(target), fmt.Sprintf("placing input #%d, a %s array (%s)", i, want, errs.Bytes(uint64(len(a.Host)))), err)
		}
		temps = append(temps, pb)
		args = append(args, pb)
	}

	// A direct run donates nothing: its lent buffers stay the caller's.
	opts := capi.ExecuteOptions{NonDonatable: nonDonatable(prog, nil)}
	if prog.Portable() {
		opts.Device = d
	}
	lists := [1][]*capi.Buffer{args}
	res, err := x.le.Execute(ctx, lists[:], &opts)
	if err != nil {
		return wrap(e.name, op, e.deviceName(target), fmt.Sprintf("running %q", prog.Name), err)
	}
	outs := res[0]
	defer func() {
		for _, pb := range outs {
			_ = pb.Destroy()
		}
	}()
	if len(outs) != len(out) {
		return &errs.Error{Kind: errs.Internal, Backend: e.name, Op: op,
			Err: fmt.Errorf("program %q: the plugin returned %d outputs, the program has %d", prog.Name, len(outs), len(out))}
	}
	for j, pb := range outs {
		if out[j] == nil {
			continue
		}
		if err := pb.ToHost(ctx, out[j]); err != nil {
			return wrap(e.name, op, e.deviceName(target), fmt.Sprintf("copying output #%d (%s) to the host", j, prog.OutputShapes[j]), err)
		}
	}
	return nil
}
