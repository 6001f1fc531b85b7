package serve

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// errRecvTimeout is the cause of a gRPC stream's context when its request
// message was not received within the read timeout.
var errRecvTimeout = errors.New("request message not received within the read timeout")

// recvGuard bounds the receiving of one RPC's request message. grpc-go
// reads a unary request before any interceptor or handler runs and has no
// timeout of its own on it (only the client's optional grpc-timeout): a
// client that sends the headers and then trickles the message, or nothing,
// would hold the stream, its goroutine and its buffered bytes for as long
// as it likes. The guard's timer cancels the stream's context when the
// read timeout passes; grpc-go's receive then fails and the stream is
// reset. The interceptors stop the timer once the message is in, so that
// the run itself is bounded by the model's timeout as before.
type recvGuard struct {
	timer *time.Timer
}

type recvGuardKey struct{}

// grpcRecvTap is the gRPC server's InTapHandle: it runs when a stream's
// headers arrive, before its message is read, and starts the guard of
// that stream. It must not block (it runs on the connection's reader).
func (s *Server) grpcRecvTap(ctx context.Context, _ *tap.Info) (context.Context, error) {
	d := s.opts.Limits.ReadTimeout
	if d <= 0 {
		return ctx, nil
	}
	ctx, cancel := context.WithCancelCause(ctx)
	g := &recvGuard{timer: time.AfterFunc(d, func() {
		s.met.grpcRecvTimeouts.Inc()
		cancel(errRecvTimeout)
	})}
	// The stream's context ends when the stream does; then the timer has
	// nothing left to guard and is released at once.
	context.AfterFunc(ctx, func() { g.timer.Stop() })
	return context.WithValue(ctx, recvGuardKey{}, g), nil
}

// received stops ctx's guard now that the request message is in. It
// reports an error when the guard fired first (the stream's context is
// then cancelled and the request is not run).
func received(ctx context.Context) error {
	g, ok := ctx.Value(recvGuardKey{}).(*recvGuard)
	if !ok || g.timer.Stop() {
		return nil
	}
	if errors.Is(context.Cause(ctx), errRecvTimeout) {
		return grpcstatus.Error(codes.DeadlineExceeded, errRecvTimeout.Error())
	}
	return nil // the stream ended otherwise; the handler sees its context
}

// grpcRecvUnary runs after grpc-go has received and decoded the unary
// request: the guard has done its work.
func grpcRecvUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := received(ctx); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

// grpcRecvStream bounds a streaming RPC's first request message (the
// health service's Watch has one) by the guard; later messages of a
// client-streaming RPC are not bounded (none of the served services has
// one), since the wait before a message cannot be told from a slow one.
func grpcRecvStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, &recvGuardStream{ServerStream: ss})
}

type recvGuardStream struct {
	grpc.ServerStream
	first bool // the first RecvMsg has returned
}

func (r *recvGuardStream) RecvMsg(m any) error {
	err := r.ServerStream.RecvMsg(m)
	if !r.first {
		r.first = true
		if gerr := received(r.Context()); gerr != nil {
			return gerr
		}
	}
	return err
}
