package client

import (
	"context"
	"fmt"
	"math"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/tensorbridge/tensorbridge/internal/oip"
	pb "github.com/tensorbridge/tensorbridge/serve/inferencepb"
)

// GRPC talks to a server's inference.GRPCInferenceService.
type GRPC struct {
	conn *grpc.ClientConn
	c    pb.GRPCInferenceServiceClient
}

// DialGRPC connects to addr ("host:port"). Without options it uses an
// insecure (plaintext) connection, a send limit of 2 GiB (as tritonclient
// has) and a receive limit of DefaultMaxResponseBytes. Options given
// replace these (add grpc.WithTransportCredentials and, for a server with
// a token, BearerToken).
func DialGRPC(addr string, opts ...grpc.DialOption) (*GRPC, error) {
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(DefaultMaxResponseBytes), grpc.MaxCallSendMsgSize(math.MaxInt32))}
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	return &GRPC{conn: conn, c: pb.NewGRPCInferenceServiceClient(conn)}, nil
}

// Close closes the connection.
func (c *GRPC) Close() error { return c.conn.Close() }

func grpcError(err error) error {
	if st, ok := grpcstatus.FromError(err); ok {
		return &Error{Code: st.Code(), Message: st.Message()}
	}
	return err
}

// Live says whether the server answers.
func (c *GRPC) Live(ctx context.Context) (bool, error) {
	r, err := c.c.ServerLive(ctx, &pb.ServerLiveRequest{})
	if err != nil {
		return false, grpcError(err)
	}
	return r.GetLive(), nil
}

// Ready says whether the server takes inference requests.
func (c *GRPC) Ready(ctx context.Context) (bool, error) {
	r, err := c.c.ServerReady(ctx, &pb.ServerReadyRequest{})
	if err != nil {
		return false, grpcError(err)
	}
	return r.GetReady(), nil
}

// ModelReady says whether one model takes inference requests.
func (c *GRPC) ModelReady(ctx context.Context, model string) (bool, error) {
	r, err := c.c.ModelReady(ctx, &pb.ModelReadyRequest{Name: model})
	if err != nil {
		return false, grpcError(err)
	}
	return r.GetReady(), nil
}

// ServerMetadata returns the server's name, version and extensions.
func (c *GRPC) ServerMetadata(ctx context.Context) (*ServerMetadata, error) {
	r, err := c.c.ServerMetadata(ctx, &pb.ServerMetadataRequest{})
	if err != nil {
		return nil, grpcError(err)
	}
	return &ServerMetadata{Name: r.GetName(), Version: r.GetVersion(), Extensions: r.GetExtensions()}, nil
}

// ModelMetadata describes a model.
func (c *GRPC) ModelMetadata(ctx context.Context, model string) (*ModelMetadata, error) {
	r, err := c.c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: model})
	if err != nil {
		return nil, grpcError(err)
	}
	md := &ModelMetadata{Name: r.GetName(), Versions: r.GetVersions(), Platform: r.GetPlatform()}
	for _, t := range r.GetInputs() {
		md.Inputs = append(md.Inputs, oip.TensorMetadata{Name: t.GetName(), Datatype: t.GetDatatype(), Shape: t.GetShape()})
	}
	for _, t := range r.GetOutputs() {
		md.Outputs = append(md.Outputs, oip.TensorMetadata{Name: t.GetName(), Datatype: t.GetDatatype(), Shape: t.GetShape()})
	}
	return md, nil
}

// Infer runs one request with raw_input_contents.
func (c *GRPC) Infer(ctx context.Context, model string, req *InferRequest) (*InferResponse, error) {
	r := &pb.ModelInferRequest{ModelName: model, Id: req.ID}
	if req.Timeout > 0 {
		r.Parameters = map[string]*pb.InferParameter{oip.ParamTimeout: {
			ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: req.Timeout.Microseconds()}}}
	}
	for _, t := range req.Inputs {
		r.Inputs = append(r.Inputs, &pb.ModelInferRequest_InferInputTensor{Name: t.Name, Datatype: t.Datatype, Shape: t.Shape})
		r.RawInputContents = append(r.RawInputContents, t.Data)
	}
	for _, o := range req.Outputs {
		r.Outputs = append(r.Outputs, &pb.ModelInferRequest_InferRequestedOutputTensor{Name: o})
	}
	resp, err := c.c.ModelInfer(ctx, r)
	if err != nil {
		return nil, grpcError(err)
	}
	raw := resp.GetRawOutputContents()
	if len(raw) != len(resp.GetOutputs()) {
		return nil, fmt.Errorf("response has %d raw_output_contents for %d outputs", len(raw), len(resp.GetOutputs()))
	}
	out := &InferResponse{ModelName: resp.GetModelName(), ID: resp.GetId()}
	for i, o := range resp.GetOutputs() {
		if err := checkRaw(o.GetName(), o.GetDatatype(), o.GetShape(), len(raw[i])); err != nil {
			return nil, err
		}
		out.Outputs = append(out.Outputs, Tensor{Name: o.GetName(), Datatype: o.GetDatatype(), Shape: o.GetShape(), Data: raw[i]})
	}
	return out, nil
}

// checkRaw checks that an output's raw bytes are exactly what its shape
// and datatype take.
func checkRaw(name, datatype string, shape []int64, got int) error {
	n, err := oip.Elements(shape)
	if err != nil {
		return fmt.Errorf("output %q: %w", name, err)
	}
	elem, ok := oip.ElemSize(datatype)
	if !ok {
		return fmt.Errorf("output %q: datatype %q is not one the client decodes", oip.Clip(name), oip.Clip(datatype))
	}
	if want := int64(n) * int64(elem); int64(got) != want {
		return fmt.Errorf("output %q: %d raw bytes, but shape %v of %s takes %d", name, got, shape, datatype, want)
	}
	return nil
}

// BearerToken sends "authorization: Bearer token" with every call (for a
// server started with --auth-token-file). The token travels in the clear
// over a plaintext connection: requireTLS refuses to send it on one.
func BearerToken(token string, requireTLS bool) grpc.DialOption {
	return grpc.WithPerRPCCredentials(bearer{token: token, tls: requireTLS})
}

type bearer struct {
	token string
	tls   bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.tls }
