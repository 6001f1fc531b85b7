package cluster

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// errRecvTimeout is the cause of a call's context when its request
// message did not come within Limits.ReadTimeout.
var errRecvTimeout = errors.New("cluster: request message not received within the read timeout")

// recvGuard bounds the receiving of one call's request message: grpc-go
// reads a unary request before any interceptor runs and has no timeout of
// its own on it, so a caller that sends the headers and then trickles the
// message (or nothing) would hold the call as long as it liked. The
// guard's timer, started when the call's headers arrive, cancels the
// call's context at the read timeout; grpc-go's read then fails and the
// stream is reset. The interceptors stop it once the message is in.
type recvGuard struct {
	timer *time.Timer
}

type recvGuardKey struct{}

// recvTap is the service's InTapHandle: it runs when a call's headers
// arrive, before its message is read, on the connection's reader (it must
// not block), and starts the call's guard.
func (s *Server) recvTap(ctx context.Context, _ *tap.Info) (context.Context, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	g := &recvGuard{timer: time.AfterFunc(s.limits.ReadTimeout, func() {
		s.recvTimeouts.Add(1)
		cancel(errRecvTimeout)
	})}
	context.AfterFunc(ctx, func() { g.timer.Stop() }) // the call ended
	return context.WithValue(ctx, recvGuardKey{}, g), nil
}

// received stops ctx's guard now that the request message is in; an
// error when the guard fired first.
func received(ctx context.Context) error {
	g, ok := ctx.Value(recvGuardKey{}).(*recvGuard)
	if !ok || g.timer.Stop() {
		return nil
	}
	if errors.Is(context.Cause(ctx), errRecvTimeout) {
		return status.Error(codes.DeadlineExceeded, errRecvTimeout.Error())
	}
	return nil
}

// recvUnary runs once grpc-go has received a unary call's request.
func recvUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := received(ctx); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

// recvStream bounds a stream's first message (a session's opening one);
// later ones (heartbeats) are bounded by the job's heartbeat timeout.
func recvStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, &guardedStream{ServerStream: ss})
}

type guardedStream struct {
	grpc.ServerStream
	first bool // the first RecvMsg has returned
}

func (g *guardedStream) RecvMsg(m any) error {
	err := g.ServerStream.RecvMsg(m)
	if !g.first {
		g.first = true
		if gerr := received(g.Context()); gerr != nil {
			return gerr
		}
	}
	return err
}
