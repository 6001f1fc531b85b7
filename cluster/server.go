package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tensorbridge/tensorbridge/cluster/clusterpb"
)

// Server is the coordination service process 0 runs. It keeps the job's
// membership, barriers and key-value store, watches every process's
// session, and fails the whole job, naming the process at fault, the moment
// one is missing or lost: every blocked call of every process then returns
// that failure.
type Server struct {
	clusterpb.UnimplementedCoordinationServer

	n           int
	job         string
	timeout     time.Duration
	heartbeat   time.Duration
	incarnation uint64
	start       time.Time
	token       []byte
	security    *Security
	limits      Limits
	log         *slog.Logger
	// recvTimeouts counts calls cut off before their request message came
	// (recvguard.go).
	recvTimeouts atomic.Int64

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every state change
	procs    []*clusterpb.Process
	joined   int
	left     []bool
	session  []bool      // a session stream is open
	lastBeat []time.Time // last heartbeat (or join) per process
	secrets  []string    // session secret per joined process
	kvKeys   []int       // keys put, per process
	kvBytes  []int64     // key and value bytes put, per process
	barriers map[string][]bool
	passed   map[string]bool
	kv       map[string][]byte
	failure  *clusterpb.Failure
	failed   chan struct{}

	grpc     *grpc.Server
	lis      net.Listener
	conns    *connLimit // nil: no connection cap
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup // the monitor and Serve goroutines
}

// ServerOptions configure a Server.
type ServerOptions struct {
	// Processes is how many processes the job has (process 0 included).
	Processes int
	// Job is the job id processes must present.
	Job string
	// Timeout bounds joins, barriers and silences; Heartbeat is the
	// interval processes are told to use (default HeartbeatInterval(Timeout)).
	Timeout, Heartbeat time.Duration
	// Security authenticates the calls (see Security); nil authenticates
	// only the session secrets.
	Security *Security
	// Limits bound the key-value store and the waits clients ask for.
	Limits Limits
	// Logger receives the service's warnings (nil: slog.Default()).
	Logger *slog.Logger
}

// NewServer returns a coordination service for opts.Processes processes;
// Serve starts it.
func NewServer(opts ServerOptions) (*Server, error) {
	if opts.Processes < 1 {
		return nil, &ConfigError{Field: "process count", Value: strconv.Itoa(opts.Processes), Reason: "must be at least 1"}
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = HeartbeatInterval(opts.Timeout)
	}
	if err := opts.Security.check(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	n := opts.Processes
	s := &Server{
		n: n, job: opts.Job, timeout: opts.Timeout, heartbeat: opts.Heartbeat,
		security: opts.Security, limits: opts.Security.limits(opts.Limits).withDefaults(opts.Timeout), log: opts.Logger,
		incarnation: rand.Uint64() | 1,
		changed:     make(chan struct{}),
		procs:       make([]*clusterpb.Process, n),
		left:        make([]bool, n),
		session:     make([]bool, n),
		lastBeat:    make([]time.Time, n),
		secrets:     make([]string, n),
		kvKeys:      make([]int, n),
		kvBytes:     make([]int64, n),
		barriers:    map[string][]bool{},
		passed:      map[string]bool{},
		kv:          map[string][]byte{},
		failed:      make(chan struct{}),
		stop:        make(chan struct{}),
	}
	if opts.Security != nil {
		s.token = opts.Security.Token
	}
	return s, nil
}

// ListenAddress is where process 0 listens for a coordinator address:
// the address itself when its host is a loopback IP, else every interface
// on its port (the address's host name resolves to this machine from the
// others, not necessarily to one local interface).
func ListenAddress(coordinator string) (string, error) {
	host, port, err := net.SplitHostPort(coordinator)
	if err != nil {
		return "", &ConfigError{Field: "coordinator", Value: coordinator, Reason: err.Error()}
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() || host == "localhost" {
		return coordinator, nil
	}
	return net.JoinHostPort("", port), nil
}

// serveAddress is where process 0 listens: ListenAddress of the
// coordinator address, on the IP bind alone when bind is set (the pod's
// IP in the Kubernetes manifests, so that the service is not offered on
// every interface).
func serveAddress(coordinator, bind string) (string, error) {
	listen, err := ListenAddress(coordinator)
	if err != nil || bind == "" {
		return listen, err
	}
	_, port, _ := net.SplitHostPort(listen)
	return net.JoinHostPort(bind, port), nil
}

// Serve starts serving on lis in the background; Shutdown or Stop end it.
// Serving on an address other machines can reach with nothing that
// authenticates callers (no token, no mutual TLS) logs a warning;
// Connect refuses to do so unless Security.Insecure (checkExposure).
func (s *Server) Serve(lis net.Listener) {
	s.lis = lis
	s.start = time.Now()
	if exposed(lis.Addr().String()) && !s.security.authenticates() {
		s.log.Warn("cluster: the coordination service is serving without authentication on an address other machines can reach: anyone who reaches it can join the job or write its key-value store (--cluster-insecure); give every process --cluster-token-file instead",
			"addr", lis.Addr().String())
	}
	if n := s.limits.maxConnections(s.n); n > 0 {
		s.conns = newConnLimit(n)
		lis = s.conns.listener(lis)
	}
	s.grpc = grpc.NewServer(
		serverCreds(s.security),
		grpc.InTapHandle(s.recvTap),
		grpc.ChainUnaryInterceptor(recvUnary, s.authUnary),
		grpc.ChainStreamInterceptor(recvStream, s.authStream),
		// A put is the largest message: its key and value plus framing.
		grpc.MaxRecvMsgSize(s.limits.MaxValueBytes+s.limits.MaxKeyBytes+1024),
		grpc.ConnectionTimeout(min(s.timeout, 20*time.Second)),
		// Idle connections are closed and clients pinging too often cut
		// off, so that connections held open by nobody of the job cannot
		// keep the cap full (grpc-go's enforcement default is 5 minutes
		// between pings, and no idle limit).
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: s.limits.MinPingInterval, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: s.limits.IdleTimeout}),
	)
	clusterpb.RegisterCoordinationServer(s.grpc, s)
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		_ = s.grpc.Serve(lis) // returns when stopped
	}()
	go func() {
		defer s.wg.Done()
		s.monitor()
	}()
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.lis.Addr() }

// Failure returns the job's failure as a *WorkerError, or nil.
func (s *Server) Failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failure == nil {
		return nil
	}
	return failureError(s.failure)
}

// Shutdown waits until every joined process has left (or ctx ends, or the
// job failed), then stops serving. It returns ctx's error when it had to
// stop with processes still in.
func (s *Server) Shutdown(ctx context.Context) error {
	var err error
	for {
		s.mu.Lock()
		all := true
		for i := range s.n {
			if s.procs[i] != nil && !s.left[i] {
				all = false
			}
		}
		done := all || s.failure != nil
		ch := s.changed
		s.mu.Unlock()
		if done {
			break
		}
		select {
		case <-ch:
			continue
		case <-ctx.Done():
			err = ctx.Err()
		}
		break
	}
	s.Stop()
	return err
}

// Stop ends the service: calls in flight get a short grace (they all end
// promptly once the job has failed or every process has left, so a failure
// reaches every process before the connections close), then the rest are
// cancelled and the streams cut.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		if s.grpc == nil {
			close(s.stop)
			return
		}
		done := make(chan struct{})
		go func() {
			s.grpc.GracefulStop()
			close(done)
		}()
		t := time.NewTimer(min(2*s.heartbeat+100*time.Millisecond, s.timeout))
		select {
		case <-done:
		case <-t.C:
		}
		t.Stop()
		close(s.stop)
		s.grpc.Stop()
		<-done
	})
	s.wg.Wait()
}

// notifyLocked wakes every waiter; s.mu must be held.
func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// failLocked records the job's failure once and wakes everyone.
func (s *Server) failLocked(f *clusterpb.Failure) {
	if s.failure != nil {
		return
	}
	if f.Host == "" && f.Index >= 0 && int(f.Index) < s.n && s.procs[f.Index] != nil {
		f.Host = s.procs[f.Index].Host
	}
	s.failure = f
	close(s.failed)
	s.notifyLocked()
}

func (s *Server) failedStatus() error {
	st := status.New(codes.Aborted, failureError(s.failure).Error())
	if d, err := st.WithDetails(s.failure); err == nil {
		st = d
	}
	return st.Err()
}

// monitor fails the job when a process has not joined within the timeout
// or has sent no heartbeat for longer than the timeout.
func (s *Server) monitor() {
	tick := time.NewTicker(min(s.heartbeat, s.timeout/4))
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.failed:
			return
		case now := <-tick.C:
			s.mu.Lock()
			if s.joined < s.n && now.Sub(s.start) > s.timeout {
				for i := range s.n {
					if s.procs[i] == nil {
						s.failLocked(&clusterpb.Failure{Kind: clusterpb.Failure_MISSING, Index: int32(i),
							Reason: fmt.Sprintf("did not join within %v (%d of %d joined)", s.timeout, s.joined, s.n)})
						break
					}
				}
			}
			for i := range s.n {
				if s.joined == s.n && !s.left[i] && now.Sub(s.lastBeat[i]) > s.timeout {
					s.failLocked(&clusterpb.Failure{Kind: clusterpb.Failure_LOST, Index: int32(i),
						Reason: fmt.Sprintf("no heartbeat for %v", now.Sub(s.lastBeat[i]).Round(time.Millisecond))})
					break
				}
			}
			s.mu.Unlock()
		}
	}
}

// wait blocks until cond (evaluated under s.mu) holds, the job fails, the
// deadline passes or ctx ends. It returns cond's final value and whether
// the job failed.
func (s *Server) wait(ctx context.Context, deadline time.Time, cond func() bool) (ok bool, failed bool, err error) {
	var timer <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		timer = t.C
	}
	for {
		s.mu.Lock()
		if s.failure != nil {
			s.mu.Unlock()
			return false, true, nil
		}
		if cond() {
			s.mu.Unlock()
			return true, false, nil
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-timer:
			return false, false, nil
		case <-ctx.Done():
			return false, false, ctx.Err()
		case <-s.stop:
			return false, false, status.Error(codes.Unavailable, "coordinator shutting down")
		}
	}
}

func (s *Server) checkIndex(i int32) error {
	if i < 0 || int(i) >= s.n {
		return status.Errorf(codes.InvalidArgument, "process index %d outside 0..%d", i, s.n-1)
	}
	return nil
}

// Join implements the Coordination service.
func (s *Server) Join(ctx context.Context, req *clusterpb.JoinRequest) (*clusterpb.JoinResponse, error) {
	p := req.GetProcess()
	if p == nil {
		return nil, status.Error(codes.InvalidArgument, "join without a process")
	}
	s.mu.Lock()
	// A join that does not fit the job is refused to its caller alone: the
	// job goes on, and a legitimate process that never joins is reported
	// missing when the join timeout passes.
	refuse := func(code codes.Code, format string, a ...any) (*clusterpb.JoinResponse, error) {
		s.mu.Unlock()
		return nil, status.Errorf(code, "join refused: "+format, a...)
	}
	switch {
	case s.failure != nil:
		err := s.failedStatus()
		s.mu.Unlock()
		return nil, err
	case req.Job != s.job:
		return refuse(codes.PermissionDenied, "job %.64q, the coordinator's is another", req.Job)
	case int(req.ProcessCount) != s.n:
		return refuse(codes.InvalidArgument, "expects %d processes, the coordinator %d", req.ProcessCount, s.n)
	case p.Index < 0 || int(p.Index) >= s.n:
		return refuse(codes.InvalidArgument, "index %d outside 0..%d", p.Index, s.n-1)
	case s.procs[p.Index] != nil:
		return refuse(codes.AlreadyExists, "index %d already taken by %s (pid %d)", p.Index, s.procs[p.Index].Host, s.procs[p.Index].Pid)
	case len(p.Host) > 255 || len(p.DeviceKind) > 255:
		return refuse(codes.InvalidArgument, "host or device kind longer than 255 bytes")
	}
	secret := newSessionSecret()
	s.procs[p.Index] = p
	s.secrets[p.Index] = secret
	s.lastBeat[p.Index] = time.Now()
	s.joined++
	if s.joined == s.n { // silences are counted from here: early joiners wait in Join, not in a session
		now := time.Now()
		for i := range s.lastBeat {
			s.lastBeat[i] = now
		}
	}
	s.notifyLocked()
	s.mu.Unlock()
	s.proven(ctx) // a process of the job: its connection is never evicted

	ok, failed, err := s.wait(ctx, time.Time{}, func() bool { return s.joined == s.n })
	switch {
	case failed:
		s.mu.Lock()
		defer s.mu.Unlock()
		return nil, s.failedStatus()
	case err != nil:
		return nil, err
	case !ok:
		return nil, status.Error(codes.Internal, "join ended early")
	}
	if err := grpc.SetHeader(ctx, metadata.Pairs(sessionKey, secret)); err != nil {
		return nil, status.Errorf(codes.Internal, "sending the session secret: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return &clusterpb.JoinResponse{
		Processes: append([]*clusterpb.Process(nil), s.procs...), Incarnation: s.incarnation,
		HeartbeatIntervalMs: s.heartbeat.Milliseconds(), TimeoutMs: s.timeout.Milliseconds(),
	}, nil
}

// Session implements the Coordination service.
func (s *Server) Session(stream clusterpb.Coordination_SessionServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	idx := first.Index
	if err := s.checkSession(stream.Context(), idx); err != nil {
		return err
	}
	s.mu.Lock()
	if s.procs[idx] == nil {
		s.mu.Unlock()
		return status.Errorf(codes.FailedPrecondition, "process %d opened a session before joining", idx)
	}
	if s.session[idx] {
		s.mu.Unlock()
		return status.Errorf(codes.AlreadyExists, "process %d already has a session", idx)
	}
	s.session[idx] = true
	s.lastBeat[idx] = time.Now()
	s.mu.Unlock()

	beats := make(chan struct{}, 1)
	recvErr := make(chan error, 1)
	ctx := stream.Context()
	go func() { // ends when the stream does: the handler's return cancels ctx
		for {
			if _, err := stream.Recv(); err != nil {
				recvErr <- err
				return
			}
			s.mu.Lock()
			s.lastBeat[idx] = time.Now()
			s.mu.Unlock()
			select {
			case beats <- struct{}{}:
			default:
			}
		}
	}()
	send := func(f *clusterpb.Failure) error {
		return stream.Send(&clusterpb.SessionEvent{Failure: f, UnixNano: time.Now().UnixNano()})
	}
	if err := send(nil); err != nil {
		return err
	}
	for {
		select {
		case <-beats:
			if err := send(nil); err != nil {
				return err
			}
		case <-s.failed:
			s.mu.Lock()
			f := s.failure
			s.mu.Unlock()
			_ = send(f)
			return nil
		case err := <-recvErr:
			s.sessionEnded(idx, err)
			return nil
		case <-ctx.Done(): // the client cancelled the stream or its connection broke
			select {
			case <-s.stop:
				return status.Error(codes.Unavailable, "coordinator shutting down")
			default:
			}
			s.sessionEnded(idx, ctx.Err())
			return ctx.Err()
		case <-s.stop:
			return status.Error(codes.Unavailable, "coordinator shutting down")
		}
	}
}

// sessionEnded fails the job when a process's session ends before it left.
func (s *Server) sessionEnded(idx int32, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.session[idx] = false
	if s.left[idx] {
		return
	}
	why := "session ended without leave (process exited or connection lost)"
	if err != nil && !errors.Is(err, io.EOF) {
		why += ": " + status.Convert(err).Message()
	}
	s.failLocked(&clusterpb.Failure{Kind: clusterpb.Failure_LOST, Index: idx, Reason: why})
}

// Put implements the Coordination service.
func (s *Server) Put(ctx context.Context, req *clusterpb.PutRequest) (*clusterpb.PutResponse, error) {
	if err := s.checkSession(ctx, req.Index); err != nil {
		return nil, err
	}
	if err := s.checkKey(req.Key); err != nil {
		return nil, err
	}
	if len(req.Value) > s.limits.MaxValueBytes {
		return nil, status.Errorf(codes.ResourceExhausted, "value of %d bytes for key %.64q: the limit is %d", len(req.Value), req.Key, s.limits.MaxValueBytes)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failure != nil {
		return nil, s.failedStatus()
	}
	if old, ok := s.kv[req.Key]; ok {
		if string(old) != string(req.Value) {
			return nil, status.Errorf(codes.AlreadyExists, "key %q already holds another value", req.Key)
		}
		return &clusterpb.PutResponse{}, nil
	}
	size := int64(len(req.Key) + len(req.Value))
	if s.kvKeys[req.Index] >= s.limits.MaxKeys || s.kvBytes[req.Index]+size > s.limits.MaxBytes {
		return nil, status.Errorf(codes.ResourceExhausted, "process %d has put %d keys (%d bytes): the limits are %d keys and %d bytes per process",
			req.Index, s.kvKeys[req.Index], s.kvBytes[req.Index], s.limits.MaxKeys, s.limits.MaxBytes)
	}
	s.kv[req.Key] = append([]byte(nil), req.Value...)
	s.kvKeys[req.Index]++
	s.kvBytes[req.Index] += size
	s.notifyLocked()
	return &clusterpb.PutResponse{}, nil
}

// Get implements the Coordination service.
func (s *Server) Get(ctx context.Context, req *clusterpb.GetRequest) (*clusterpb.GetResponse, error) {
	if err := s.checkSession(ctx, req.Index); err != nil {
		return nil, err
	}
	if err := s.checkKey(req.Key); err != nil {
		return nil, err
	}
	timeout := s.capWait(req.TimeoutMs)
	var v []byte
	ok, failed, err := s.wait(ctx, time.Now().Add(timeout), func() bool {
		var found bool
		v, found = s.kv[req.Key]
		return found
	})
	switch {
	case failed:
		s.mu.Lock()
		defer s.mu.Unlock()
		return nil, s.failedStatus()
	case err != nil:
		return nil, err
	case !ok:
		return nil, status.Errorf(codes.DeadlineExceeded, "key %q not put within %v", req.Key, timeout)
	}
	return &clusterpb.GetResponse{Value: v}, nil
}

// TryGet implements the Coordination service.
func (s *Server) TryGet(ctx context.Context, req *clusterpb.TryGetRequest) (*clusterpb.GetResponse, error) {
	if err := s.checkSession(ctx, req.Index); err != nil {
		return nil, err
	}
	if err := s.checkKey(req.Key); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failure != nil {
		return nil, s.failedStatus()
	}
	v, ok := s.kv[req.Key]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "key %q not found", req.Key)
	}
	return &clusterpb.GetResponse{Value: v}, nil
}

// Barrier implements the Coordination service.
func (s *Server) Barrier(ctx context.Context, req *clusterpb.BarrierRequest) (*clusterpb.BarrierResponse, error) {
	if err := s.checkSession(ctx, req.Index); err != nil {
		return nil, err
	}
	if len(req.Name) > s.limits.MaxKeyBytes {
		return nil, status.Errorf(codes.InvalidArgument, "barrier name of %d bytes: the limit is %d", len(req.Name), s.limits.MaxKeyBytes)
	}
	timeout := s.capWait(req.TimeoutMs)
	s.mu.Lock()
	if s.failure != nil {
		defer s.mu.Unlock()
		return nil, s.failedStatus()
	}
	if !s.passed[req.Name] {
		arrived := s.barriers[req.Name]
		if arrived == nil {
			arrived = make([]bool, s.n)
			s.barriers[req.Name] = arrived
		}
		arrived[req.Index] = true
		all := true
		for _, a := range arrived {
			all = all && a
		}
		if all {
			s.passed[req.Name] = true
			delete(s.barriers, req.Name)
			s.notifyLocked()
		}
	}
	s.mu.Unlock()

	ok, failed, err := s.wait(ctx, time.Now().Add(timeout), func() bool { return s.passed[req.Name] })
	switch {
	case failed:
	case err != nil:
		return nil, err
	case ok:
		return &clusterpb.BarrierResponse{}, nil
	default: // timed out: fail the job naming the first process not there
		s.mu.Lock()
		if arrived := s.barriers[req.Name]; arrived != nil && !s.passed[req.Name] {
			for i, a := range arrived {
				if !a {
					s.failLocked(&clusterpb.Failure{Kind: clusterpb.Failure_MISSING, Index: int32(i), Barrier: req.Name,
						Reason: fmt.Sprintf("did not reach the barrier within %v", timeout)})
					break
				}
			}
		}
		s.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failure == nil { // passed while we took the lock
		return &clusterpb.BarrierResponse{}, nil
	}
	return nil, s.failedStatus()
}

// Leave implements the Coordination service.
func (s *Server) Leave(ctx context.Context, req *clusterpb.LeaveRequest) (*clusterpb.LeaveResponse, error) {
	if err := s.checkSession(ctx, req.Index); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.left[req.Index] = true
	s.notifyLocked()
	return &clusterpb.LeaveResponse{}, nil
}

// checkKey bounds a key's size.
func (s *Server) checkKey(k string) error {
	if len(k) > s.limits.MaxKeyBytes {
		return status.Errorf(codes.InvalidArgument, "key of %d bytes: the limit is %d", len(k), s.limits.MaxKeyBytes)
	}
	return nil
}

// failureError turns the wire's Failure into a *WorkerError.
func failureError(f *clusterpb.Failure) *WorkerError {
	k := Lost
	switch f.Kind {
	case clusterpb.Failure_MISSING:
		k = Missing
	case clusterpb.Failure_REFUSED:
		k = Refused
	}
	return &WorkerError{Kind: k, Index: int(f.Index), Host: f.Host, Reason: f.Reason, Barrier: f.Barrier}
}
