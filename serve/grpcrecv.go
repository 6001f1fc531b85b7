package serve

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// Receiving gRPC request messages within the in-flight byte budget.
//
// grpc-go reads a request message whole before any handler or interceptor
// runs (up to MaxRecvMsgSize, on up to 1,024 streams per connection), so
// concurrent large messages would sit in memory before the budget
// (Options.MaxInflightBytes) could refuse one. The server NewGRPCServer
// builds therefore reads each request message itself, from grpc-go's
// transport stream: its 5-byte prefix first, then, once the length the
// prefix declares is reserved in the budget, the message in chunks. grpc-go
// widens a stream's flow-control window only as its reader asks for bytes
// (Read(n) opens n), and the server's window is static at recvWindow, so
// before the reservation a stream holds at most recvWindow bytes; a message
// that does not fit is refused RESOURCE_EXHAUSTED then, as REST refuses a
// body chunk (limits.go). Unary methods are served through budgetedUnary,
// streaming ones through grpcRecvStream.
//
// A declared length must be earned: the read timeout bounds the whole
// message from its stream's headers, and each chunk is due by its share
// of that time (recvGuard.pace), so that a client declaring a large
// message and trickling it holds its reservation only briefly.
//
// Reading from the transport stream uses grpc-go methods that its
// grpc.ServerTransportStream does not declare (transportReader). Should a
// grpc-go release drop them, recvWhole takes over: correct, but it must
// reserve the largest message a stream may carry (3× MaxMessageBytes,
// for grpc-go's buffers, their contiguous copy and the decoded message)
// before each message, and it says so once in the log.

// recvWindow is the gRPC server's static per-stream flow-control window
// (grpc-go's minimum): what a stream can hold before its message is read.
const recvWindow = 64 << 10

// transportReader is what grpc-go's server transport stream (the value of
// grpc.ServerTransportStreamFromContext) offers for reading a message.
type transportReader interface {
	ReadMessageHeader(header []byte) error
	Read(n int) (mem.BufferSlice, error)
}

// errRecvTimeout is the cause of a gRPC stream's context when its request
// message was not received within the read timeout (or its pace).
var errRecvTimeout = errors.New("request message not received within the read timeout (or behind the pace it sets for a long message)")

// recvGuard bounds the receiving of one RPC's request message. grpc-go has
// no timeout of its own on it (only the client's optional grpc-timeout): a
// client that sends the headers and then trickles the message, or nothing,
// would hold the stream, its goroutine and its bytes for as long as it
// likes. The guard's timer cancels the stream's context when the read
// timeout passes (or, for a long message, its pace); the read then fails
// and the stream is reset. It stops once the first message is in, so that
// the run itself is bounded by the model's timeout as before.
type recvGuard struct {
	mu    sync.Mutex
	timer *time.Timer
	start time.Time
	limit time.Duration
	done  bool // the first message is in, or the guard has fired
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
	g := &recvGuard{start: time.Now(), limit: d}
	g.timer = time.AfterFunc(d, func() {
		s.met.grpcRecvTimeouts.Inc()
		cancel(errRecvTimeout)
	})
	// The stream's context ends when the stream does; then the timer has
	// nothing left to guard and is released at once.
	context.AfterFunc(ctx, func() { g.timer.Stop() })
	return context.WithValue(ctx, recvGuardKey{}, g), nil
}

// pace moves the guard's deadline to when got of a message's n bytes are
// due: an eighth of the read timeout from the stream's headers, plus the
// rest of it in proportion to got/n, so that the whole message is due at
// the read timeout as before. It reports false when the guard has fired.
func (g *recvGuard) pace(got, n int64) bool {
	if g == nil || n <= 0 {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return true
	}
	if !g.timer.Stop() {
		g.done = true
		return false
	}
	grace := g.limit / 8
	due := g.start.Add(grace + time.Duration(float64(g.limit-grace)*float64(got)/float64(n)))
	g.timer.Reset(time.Until(due))
	return true
}

// received stops ctx's guard now that the first request message is in.
// It reports an error when the guard fired first (the stream's context is
// then cancelled and the request is not run).
func received(ctx context.Context) error {
	g, ok := ctx.Value(recvGuardKey{}).(*recvGuard)
	if !ok {
		return nil
	}
	g.mu.Lock()
	first, stopped := !g.done, g.timer.Stop()
	g.done = true
	g.mu.Unlock()
	if !first || stopped {
		return nil
	}
	if errors.Is(context.Cause(ctx), errRecvTimeout) {
		return grpcstatus.Error(codes.DeadlineExceeded, errRecvTimeout.Error())
	}
	return nil // the stream ended otherwise; the handler sees its context
}

// grpcRecvUnary bounds a unary method of a service registered on the
// server by its owner (this server's own services go through
// budgetedUnary): grpc-go has received the request; the guard is done.
func grpcRecvUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := received(ctx); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

// grpcRecvStream reads a streaming method's request messages through the
// budget (the health service's Watch and List have one each), holding
// them in the RPC's reservation until it ends. Only the first message is
// bounded by the guard: the wait before a later message of a
// client-streaming call cannot be told from a slow one.
func (s *Server) grpcRecvStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	bs := s.newBudgetStream(ss)
	defer bs.res.done()
	return h(srv, bs)
}

type reservationKey struct{}

// budgetStream is a server stream whose RecvMsg reads through the budget
// into the RPC's reservation (in its context, for ModelInfer to add the
// decoded tensors to).
type budgetStream struct {
	grpc.ServerStream
	s     *Server
	ctx   context.Context
	res   *reservation
	first bool // the first RecvMsg has returned
}

func (s *Server) newBudgetStream(ss grpc.ServerStream) *budgetStream {
	res := &reservation{b: s.budget}
	return &budgetStream{ServerStream: ss, s: s, res: res, ctx: context.WithValue(ss.Context(), reservationKey{}, res)}
}

func (b *budgetStream) Context() context.Context { return b.ctx }

func (b *budgetStream) RecvMsg(m any) error {
	err := b.s.recvMsg(b.ctx, b.ServerStream, b.res, m)
	if !b.first {
		b.first = true
		if gerr := received(b.ctx); gerr != nil {
			return gerr
		}
	}
	return err
}

// budgetedUnary serves unary method md of service as grpc-go does (it runs
// every unary method as a stream), except that the token is checked before
// any of the request message is read, and the message is read through the
// budget (budgetStream) and held in it until the answer has been sent.
// Unary interceptors of the gRPC server do not run for it.
func (s *Server) budgetedUnary(service string, md grpc.MethodDesc) grpc.StreamDesc {
	full := "/" + service + "/" + md.MethodName
	h := md.Handler
	return grpc.StreamDesc{StreamName: md.MethodName, Handler: func(srv any, ss grpc.ServerStream) error {
		bs := s.newBudgetStream(ss)
		defer bs.res.done()
		if err := s.grpcAuth(bs.ctx, full); err != nil {
			return err
		}
		dec := func(v any) error {
			err := bs.RecvMsg(v)
			if errors.Is(err, io.EOF) {
				return grpcErr(badRequest("the call ended without a request message"))
			}
			return err
		}
		resp, err := h(srv, bs.ctx, dec, nil)
		if err != nil {
			return err
		}
		return ss.SendMsg(resp)
	}}
}

// budgeted is desc with every unary method served by budgetedUnary.
func (s *Server) budgeted(desc *grpc.ServiceDesc) *grpc.ServiceDesc {
	out := *desc
	out.Methods = nil
	out.Streams = slices.Clone(desc.Streams)
	for _, md := range desc.Methods {
		out.Streams = append(out.Streams, s.budgetedUnary(desc.ServiceName, md))
	}
	return &out
}

// rpcReservation is the reservation of ctx's RPC (budgetStream), or a new
// one the caller owns (and must end) when the RPC has none.
func rpcReservation(ctx context.Context, b *byteBudget) (res *reservation, own bool) {
	if r, ok := ctx.Value(reservationKey{}).(*reservation); ok {
		return r, false
	}
	return &reservation{b: b}, true
}

// recvMsg receives one request message into m, reserving its bytes in res
// before they are read (readMessage), or through recvWhole where grpc-go's
// transport stream cannot be read in pieces.
func (s *Server) recvMsg(ctx context.Context, ss grpc.ServerStream, res *reservation, m any) error {
	tr, ok := grpc.ServerTransportStreamFromContext(ctx).(transportReader)
	if !ok {
		return s.recvWhole(ctx, ss, res, m)
	}
	b, err := s.readMessage(ctx, tr, res)
	if err != nil {
		return err
	}
	return decodeRequest(b, m, res)
}
