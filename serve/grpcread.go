package serve

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/tensorbridge/tensorbridge/serve/inferencepb"
)

// recvChunk is how much of an n-byte message is read at a time: a
// sixteenth of it, between 256 KiB and 16 MiB. Each chunk is one window
// grant to the client and one step of the guard's pace; its frames are
// copied out and freed before the next.
func recvChunk(n int64) int64 {
	return min(max(n/16, 256<<10), 16<<20, max(n, 1))
}

// readMessage reads one request message from grpc-go's transport stream:
// the 5-byte prefix (compression flag, length), then, once the length
// and one chunk of frames are reserved in res, the message chunk by
// chunk into one buffer. A compressed message, one over MaxMessageBytes
// and one the budget has no room for are refused before any of it is
// read. io.EOF means the client sent no (further) message.
func (s *Server) readMessage(ctx context.Context, tr transportReader, res *reservation) ([]byte, error) {
	var prefix [5]byte
	if err := tr.ReadMessageHeader(prefix[:]); err != nil {
		if err == io.EOF {
			return nil, io.EOF
		}
		return nil, recvErr(ctx, err, 0, -1)
	}
	if prefix[0] != 0 {
		enc := "(unnamed)"
		if rc, ok := tr.(interface{ RecvCompress() string }); ok && rc.RecvCompress() != "" {
			enc = rc.RecvCompress()
		}
		return nil, grpcErr(&UnsupportedMediaError{Encoding: enc, Header: "grpc-encoding"})
	}
	n := int64(binary.BigEndian.Uint32(prefix[1:]))
	if limit := int64(s.opts.MaxMessageBytes); n > limit {
		s.met.grpcRecvRefused.WithLabelValues("too_large").Inc()
		return nil, grpcErr(&TooLargeError{Limit: limit, Got: n})
	}
	chunk := recvChunk(n)
	if err := res.grow(n + chunk); err != nil {
		s.met.grpcRecvRefused.WithLabelValues("over_budget").Inc()
		return nil, grpcErr(err)
	}
	g, _ := ctx.Value(recvGuardKey{}).(*recvGuard)
	buf := make([]byte, n)
	for got := int64(0); got < n; {
		k := min(chunk, n-got)
		if !g.pace(got+k, n) {
			return nil, recvErr(ctx, context.Canceled, got, n)
		}
		bs, err := tr.Read(int(k))
		if err != nil {
			return nil, recvErr(ctx, err, got, n)
		}
		got += int64(bs.CopyTo(buf[got:]))
		bs.Free()
	}
	res.release(chunk) // the frames are freed
	return buf, nil
}

// recvErr is the status of a message read that failed after got of its n
// bytes (n < 0: in its prefix): DeadlineExceeded when the guard cut it
// off, InvalidArgument when the client ended the stream early, else what
// the transport said.
func recvErr(ctx context.Context, err error, got, n int64) error {
	if errors.Is(context.Cause(ctx), errRecvTimeout) {
		return grpcstatus.Error(codes.DeadlineExceeded, errRecvTimeout.Error())
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		if n < 0 {
			return grpcErr(badRequest("the stream ended inside a request message's 5-byte prefix"))
		}
		return grpcErr(badRequest("the stream ended after %d of the request message's %d bytes", got, n))
	}
	if st, ok := grpcstatus.FromError(err); ok {
		return st.Err()
	}
	return grpcstatus.FromContextError(err).Err()
}

// rawContentsField is ModelInferRequest's raw_input_contents.
var rawContentsField = (&pb.ModelInferRequest{}).ProtoReflect().Descriptor().Fields().ByName("raw_input_contents").Number()

// decodeRequest unmarshals b into m. An inference request's
// raw_input_contents stay in b (sliced, not copied: the tensors are used
// in place); its other fields, and any other message, are unmarshaled
// into memory reserved in res first. b's share of res is given back when
// nothing refers to b any more.
func decodeRequest(b []byte, m any, res *reservation) error {
	msg, ok := m.(proto.Message)
	if !ok {
		return grpcstatus.Errorf(codes.Internal, "cannot decode a request into %T", m)
	}
	_, infer := m.(*pb.ModelInferRequest)
	rest, raw, err := splitRaw(b, infer)
	if err != nil {
		return grpcErr(badRequest("malformed request message: %v", err))
	}
	copied := int64(0) // rest, when it is a copy of b's other fields
	if raw != nil {
		copied = int64(len(rest))
	}
	if err := res.grow(int64(len(rest)) + copied); err != nil {
		return grpcErr(err)
	}
	if err := proto.Unmarshal(rest, msg); err != nil {
		return grpcErr(badRequest("malformed request message: %v", err))
	}
	if raw == nil {
		res.release(int64(len(b)))
		return nil
	}
	m.(*pb.ModelInferRequest).RawInputContents = raw
	res.release(copied)
	return nil
}

// splitRaw separates, when infer, an inference request's
// raw_input_contents from its other fields: the contents as slices of b,
// the other fields copied into rest. Without raw contents (or when not
// infer) rest is b itself and raw nil.
func splitRaw(b []byte, infer bool) (rest []byte, raw [][]byte, err error) {
	if !infer {
		return b, nil, nil
	}
	rawBytes, count := 0, 0
	for in := b; len(in) > 0; {
		f, err := nextField(in)
		if err != nil {
			return nil, nil, err
		}
		if f.isRaw() {
			rawBytes, count = rawBytes+f.len(), count+1
		}
		in = in[f.len():]
	}
	if count == 0 {
		return b, nil, nil
	}
	raw, rest = make([][]byte, 0, count), make([]byte, 0, len(b)-rawBytes)
	for in := b; len(in) > 0; {
		f, _ := nextField(in) // checked above
		if f.isRaw() {
			v, _ := protowire.ConsumeBytes(in[f.tag:])
			raw = append(raw, v[:len(v):len(v)])
		} else {
			rest = append(rest, in[:f.len()]...)
		}
		in = in[f.len():]
	}
	return rest, raw, nil
}

// wireField is one field of a protobuf message on the wire.
type wireField struct {
	num      protowire.Number
	typ      protowire.Type
	tag, val int // the lengths of its tag and of its value
}

func (f wireField) len() int { return f.tag + f.val }

func (f wireField) isRaw() bool { return f.num == rawContentsField && f.typ == protowire.BytesType }

// nextField reads the field at the start of in.
func nextField(in []byte) (wireField, error) {
	num, typ, n := protowire.ConsumeTag(in)
	if n < 0 {
		return wireField{}, protowire.ParseError(n)
	}
	m := protowire.ConsumeFieldValue(num, typ, in[n:])
	if m < 0 {
		return wireField{}, fmt.Errorf("field %d: %w", num, protowire.ParseError(m))
	}
	return wireField{num, typ, n, m}, nil
}

// recvWhole receives a message through grpc-go's own RecvMsg, for a
// transport stream that cannot be read in pieces (see the top of
// grpcrecv.go): the largest message a stream may carry is reserved three
// times over (grpc-go's buffers, their contiguous copy, the decoded
// message) before it is read, then trimmed to the decoded size.
func (s *Server) recvWhole(_ context.Context, ss grpc.ServerStream, res *reservation, m any) error {
	s.wholeOnce.Do(func() {
		s.log.Warn("gRPC messages are received through grpc-go's RecvMsg, reserving 3x --max-request-bytes each in the in-flight budget while they arrive: this grpc-go's transport stream cannot be read in pieces")
	})
	whole := 3 * int64(s.opts.MaxMessageBytes)
	if err := res.grow(whole); err != nil {
		s.met.grpcRecvRefused.WithLabelValues("over_budget").Inc()
		return grpcErr(err)
	}
	err := ss.RecvMsg(m)
	size := 0
	if msg, ok := m.(proto.Message); ok && err == nil {
		size = proto.Size(msg)
	}
	res.release(whole - int64(size))
	return err
}
