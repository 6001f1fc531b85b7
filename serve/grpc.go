package serve

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/internal/oip"
	"github.com/tensorbridge/tensorbridge/ir"
	pb "github.com/tensorbridge/tensorbridge/serve/inferencepb"
)

// grpcService implements inference.GRPCInferenceService on the Server.
type grpcService struct {
	pb.UnimplementedGRPCInferenceServiceServer
	s *Server
}

func grpcErr(err error) error {
	_, code := status(err)
	return grpcstatus.Error(code, err.Error())
}

func (g *grpcService) ServerLive(context.Context, *pb.ServerLiveRequest) (*pb.ServerLiveResponse, error) {
	return &pb.ServerLiveResponse{Live: true}, nil
}

func (g *grpcService) ServerReady(context.Context, *pb.ServerReadyRequest) (*pb.ServerReadyResponse, error) {
	return &pb.ServerReadyResponse{Ready: g.s.Ready()}, nil
}

func (g *grpcService) ModelReady(_ context.Context, r *pb.ModelReadyRequest) (*pb.ModelReadyResponse, error) {
	m, err := g.s.lookup(r.GetName(), r.GetVersion())
	if err != nil {
		return nil, grpcErr(err)
	}
	return &pb.ModelReadyResponse{Ready: m.ready.Load() && !g.s.draining.Load()}, nil
}

func (g *grpcService) ServerMetadata(context.Context, *pb.ServerMetadataRequest) (*pb.ServerMetadataResponse, error) {
	return &pb.ServerMetadataResponse{Name: g.s.opts.Name, Version: g.s.opts.Version, Extensions: Extensions}, nil
}

func (g *grpcService) ModelMetadata(_ context.Context, r *pb.ModelMetadataRequest) (*pb.ModelMetadataResponse, error) {
	m, err := g.s.lookup(r.GetName(), r.GetVersion())
	if err != nil {
		return nil, grpcErr(err)
	}
	md := m.metadata()
	out := &pb.ModelMetadataResponse{Name: md.Name, Versions: md.Versions, Platform: md.Platform}
	for _, t := range md.Inputs {
		out.Inputs = append(out.Inputs, &pb.ModelMetadataResponse_TensorMetadata{Name: t.Name, Datatype: t.Datatype, Shape: t.Shape})
	}
	for _, t := range md.Outputs {
		out.Outputs = append(out.Outputs, &pb.ModelMetadataResponse_TensorMetadata{Name: t.Name, Datatype: t.Datatype, Shape: t.Shape})
	}
	return out, nil
}

// ModelInfer runs a request whose inputs are in raw_input_contents or in
// each input's typed contents; outputs always return in
// raw_output_contents (what tritonclient reads). On NewGRPCServer's server
// the message was reserved in the in-flight byte budget before it was read
// (budgetStream); elsewhere it is reserved now. The tensors decoded from
// typed contents are reserved too.
func (g *grpcService) ModelInfer(ctx context.Context, r *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	start := time.Now()
	s := g.s
	m, err := s.lookup(r.GetModelName(), r.GetModelVersion())
	if err != nil {
		s.met.unknownModel.Inc()
		return nil, grpcErr(err)
	}
	res, own := rpcReservation(ctx, s.budget)
	if own {
		defer res.done()
	}
	req, err := func() (*InferRequest, error) {
		if own {
			if err := res.grow(int64(proto.Size(r))); err != nil {
				return nil, err
			}
		}
		req, decoded, err := decodeGRPCInfer(r, specsOf(m))
		if err != nil {
			return nil, err
		}
		return req, res.grow(decoded)
	}()
	if err != nil {
		m.met.requests.WithLabelValues(outcome(err)).Inc()
		m.met.duration.Observe(time.Since(start).Seconds())
		return nil, grpcErr(err)
	}
	resp, err := s.inferModel(ctx, m, req, start)
	if err != nil {
		return nil, grpcErr(err)
	}
	out := &pb.ModelInferResponse{ModelName: resp.ModelName, ModelVersion: ModelVersion, Id: resp.ID}
	for _, t := range resp.Outputs {
		out.Outputs = append(out.Outputs, &pb.ModelInferResponse_InferOutputTensor{
			Name: t.Name, Datatype: Datatype(t.DType), Shape: shapeInt64s(t.Shape)})
		out.RawOutputContents = append(out.RawOutputContents, t.Data)
	}
	return out, nil
}

// decodeGRPCInfer converts a gRPC request for the model whose inputs specs
// describes, checking each declared input against specs and its element
// count against the raw bytes or typed values sent before converting
// anything. decoded is the bytes allocated for typed contents (raw
// contents are used in place).
func decodeGRPCInfer(r *pb.ModelInferRequest, specs *inputSpecs) (*InferRequest, int64, error) {
	req := &InferRequest{ID: r.GetId()}
	if p, ok := r.GetParameters()[oip.ParamTimeout]; ok {
		us := p.GetInt64Param()
		if us == 0 && p.GetUint64Param() <= math.MaxInt64 {
			us = int64(p.GetUint64Param())
		}
		if us > 0 {
			req.Timeout = time.Duration(us) * time.Microsecond
		}
	}
	for _, o := range r.GetOutputs() {
		if _, ok := o.GetParameters()[oip.ParamClassification]; ok {
			return nil, 0, &errs.InputError{Name: o.GetName(), Problem: "value",
				Expected: "no classification parameter (the classification extension is not supported)", Got: "classification"}
		}
		req.Outputs = append(req.Outputs, o.GetName())
	}
	raw := r.GetRawInputContents()
	if len(raw) > 0 && len(raw) != len(r.GetInputs()) {
		return nil, 0, badRequest("raw_input_contents has %d entries for %d inputs", len(raw), len(r.GetInputs()))
	}
	if len(r.GetInputs()) == 0 {
		return nil, 0, badRequest("the request has no inputs")
	}
	var decoded int64
	for i, in := range r.GetInputs() {
		dt, shape, n, err := specs.check(in.GetName(), in.GetDatatype(), in.GetShape())
		if err != nil {
			return nil, 0, err
		}
		t := Tensor{Name: in.GetName(), DType: dt, Shape: shape}
		switch {
		case len(raw) > 0:
			if in.GetContents() != nil {
				return nil, 0, &errs.InputError{Name: in.GetName(), Problem: "value", Expected: "raw_input_contents or contents, not both", Got: "both"}
			}
			if want := int64(n) * int64(dt.Size()); int64(len(raw[i])) != want {
				return nil, 0, &errs.InputError{Name: in.GetName(), Problem: "value",
					Expected: fmt.Sprintf("%d bytes (%d %s elements for shape %v)", want, n, in.GetDatatype(), in.GetShape()),
					Got:      fmt.Sprintf("%d bytes", len(raw[i]))}
			}
			t.Data = raw[i]
		case in.GetContents() != nil:
			t.Data, err = fromContents(in.GetContents(), dt, n)
			if err != nil {
				return nil, 0, dataError(in.GetName(), in.GetDatatype(), shape, n, err)
			}
			decoded += int64(cap(t.Data))
		default:
			return nil, 0, &errs.InputError{Name: in.GetName(), Problem: "value", Expected: "raw_input_contents or contents", Got: "neither"}
		}
		req.Inputs = append(req.Inputs, t)
	}
	return req, decoded, nil
}

// fromContents converts typed contents to element bytes. The count of
// values sent is checked against n (an *oip.CountError) before the output
// is allocated, so its size follows what the message carries, not the
// declared shape.
func fromContents(c *pb.InferTensorContents, dt ir.DType, n int) ([]byte, error) {
	le := binary.LittleEndian
	var out []byte
	count := func(got int) error {
		if got != n {
			return &oip.CountError{Want: n, Got: got, Where: "typed contents"}
		}
		out = make([]byte, 0, n*dt.Size())
		return nil
	}
	switch dt {
	case ir.Bool:
		v := c.GetBoolContents()
		if err := count(len(v)); err != nil {
			return nil, err
		}
		for _, x := range v {
			b := byte(0)
			if x {
				b = 1
			}
			out = append(out, b)
		}
	case ir.Int8, ir.Int16, ir.Int32:
		v := c.GetIntContents()
		if err := count(len(v)); err != nil {
			return nil, err
		}
		for _, x := range v {
			switch dt {
			case ir.Int8:
				if x < math.MinInt8 || x > math.MaxInt8 {
					return nil, fmt.Errorf("%d does not fit INT8", x)
				}
				out = append(out, byte(int8(x)))
			case ir.Int16:
				if x < math.MinInt16 || x > math.MaxInt16 {
					return nil, fmt.Errorf("%d does not fit INT16", x)
				}
				out = le.AppendUint16(out, uint16(int16(x)))
			default:
				out = le.AppendUint32(out, uint32(x))
			}
		}
	case ir.Int64:
		v := c.GetInt64Contents()
		if err := count(len(v)); err != nil {
			return nil, err
		}
		for _, x := range v {
			out = le.AppendUint64(out, uint64(x))
		}
	case ir.Uint8, ir.Uint16, ir.Uint32:
		v := c.GetUintContents()
		if err := count(len(v)); err != nil {
			return nil, err
		}
		for _, x := range v {
			switch dt {
			case ir.Uint8:
				if x > math.MaxUint8 {
					return nil, fmt.Errorf("%d does not fit UINT8", x)
				}
				out = append(out, byte(x))
			case ir.Uint16:
				if x > math.MaxUint16 {
					return nil, fmt.Errorf("%d does not fit UINT16", x)
				}
				out = le.AppendUint16(out, uint16(x))
			default:
				out = le.AppendUint32(out, x)
			}
		}
	case ir.Uint64:
		v := c.GetUint64Contents()
		if err := count(len(v)); err != nil {
			return nil, err
		}
		for _, x := range v {
			out = le.AppendUint64(out, x)
		}
	case ir.Float32:
		v := c.GetFp32Contents()
		if err := count(len(v)); err != nil {
			return nil, err
		}
		for _, x := range v {
			out = le.AppendUint32(out, math.Float32bits(x))
		}
	case ir.Float64:
		v := c.GetFp64Contents()
		if err := count(len(v)); err != nil {
			return nil, err
		}
		for _, x := range v {
			out = le.AppendUint64(out, math.Float64bits(x))
		}
	default:
		return nil, fmt.Errorf("%s has no typed contents field: send it in raw_input_contents", Datatype(dt))
	}
	return out, nil
}

// dataError is the error of input name whose data did not decode as the n
// elements of datatype that shape holds: what was expected against what
// came, in elements and bytes when the count differs (*oip.CountError),
// else the decoder's complaint.
func dataError(name, datatype string, shape []int, n int, err error) error {
	size, _ := oip.ElemSize(datatype)
	want := fmt.Sprintf("%d %s elements (%d bytes) for shape %v", n, datatype, n*size, shape)
	got := err.Error()
	var ce *oip.CountError
	if errors.As(err, &ce) {
		got = fmt.Sprintf("%d elements in %s", ce.Got, ce.Where)
		if ce.Bytes > 0 {
			got = fmt.Sprintf("%d elements in %d bytes of %s", ce.Got, ce.Bytes, ce.Where)
		}
	}
	return &errs.InputError{Name: name, Problem: "value", Expected: want, Got: got}
}
