package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tensorbridge/tensorbridge/cluster/clusterpb"
)

// Self is what a process tells the others about itself when it joins.
type Self struct {
	Devices    int
	DeviceKind string
}

// Process is one process of the job as it described itself at join.
type Process struct {
	Index      int    `json:"index"`
	Host       string `json:"host"`
	PID        int    `json:"pid"`
	Devices    int    `json:"devices"`
	DeviceKind string `json:"device_kind,omitempty"`
	SliceID    int    `json:"slice_id"`
}

// Client is one process's membership in the job: joined, heartbeating, with
// the coordination service's key-value store and barriers at hand. Process
// 0's Client also runs the service. A Client fails, and every call on it
// returns the failure, as soon as any process of the job is missing or lost
// (*WorkerError) or the coordinator is (*CoordinatorError).
type Client struct {
	cfg    *Config
	server *Server // process 0 only
	conn   *grpc.ClientConn
	rpc    clusterpb.CoordinationClient
	procs  []Process
	incarn uint64

	life    context.Context // the session's lifetime
	cancel  context.CancelFunc
	wg      sync.WaitGroup // session goroutines
	leaving atomic.Bool
	lastAck atomic.Int64 // unix nanos of the coordinator's last session event
	session atomic.Value // string: the session secret Join handed out

	mu     sync.Mutex
	err    error
	failed chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// Connect joins the job cfg describes. Process 0 first starts the
// coordination service on the coordinator address's port; it refuses to
// where other machines can reach that port and nothing authenticates
// callers (no token, no mutual TLS), unless cfg.Security says Insecure
// (a *ConfigError, ErrConfig). Connect returns
// when every process has joined; it fails within about twice the cluster
// timeout when the coordinator cannot be reached (*CoordinatorError) or a
// process does not join (*WorkerError, ErrWorkerMissing). A single-process
// job with no coordinator address gets a service of its own on loopback.
func Connect(ctx context.Context, cfg *Config, self Self) (*Client, error) {
	c := &Client{cfg: cfg, failed: make(chan struct{})}
	addr := cfg.Coordinator.Value
	if cfg.ProcessIndex.Value == 0 {
		listen := "127.0.0.1:0"
		if addr != "" {
			var err error
			if listen, err = serveAddress(addr, cfg.Bind.Value); err != nil {
				return nil, err
			}
			if err := checkExposure(listen, cfg.Security); err != nil {
				return nil, err
			}
		}
		srv, err := NewServer(ServerOptions{Processes: cfg.ProcessCount.Value, Job: cfg.Job.Value, Timeout: cfg.Timeout.Value, Heartbeat: cfg.Heartbeat.Value,
			Security: cfg.Security, Limits: cfg.Limits, Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		var lc net.ListenConfig
		lis, err := lc.Listen(ctx, "tcp", listen)
		if err != nil {
			return nil, fmt.Errorf("cluster: process 0 cannot serve the coordinator at %s: %w", listen, err)
		}
		srv.Serve(lis)
		c.server = srv
		if addr == "" {
			addr = lis.Addr().String()
		}
	}
	if addr == "" {
		return nil, &ConfigError{Field: "coordinator", Reason: "no coordinator address"}
	}
	creds := insecure.NewCredentials()
	if cfg.Security.TLS() {
		creds = clientCreds(cfg.Security, addr)
	}
	// Messages up to the largest put the service accepts, both ways (gRPC's
	// default receive limit, 4 MiB, is below a 4 MiB value and its framing).
	lim := cfg.Limits.withDefaults(cfg.Timeout.Value)
	msg := lim.MaxValueBytes + lim.MaxKeyBytes + 1024
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(msg), grpc.MaxCallSendMsgSize(msg)),
		grpc.WithUnaryInterceptor(c.unaryMD),
		grpc.WithStreamInterceptor(c.streamMD),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: min(time.Second, cfg.Timeout.Value/4)},
			MinConnectTimeout: min(time.Second, cfg.Timeout.Value),
		}))
	if err != nil {
		c.stopServer()
		return nil, &ConfigError{Field: "coordinator", Value: addr, Source: cfg.Coordinator.Source, Reason: err.Error()}
	}
	c.conn = conn
	c.rpc = clusterpb.NewCoordinationClient(conn)

	host := cfg.Host
	jctx, jcancel := context.WithTimeout(ctx, 2*cfg.Timeout.Value+cfg.Heartbeat.Value)
	defer jcancel()
	var header metadata.MD
	resp, err := c.rpc.Join(jctx, &clusterpb.JoinRequest{
		Process: &clusterpb.Process{Index: int32(cfg.ProcessIndex.Value), Host: host, Pid: int32(os.Getpid()),
			Devices: int32(self.Devices), DeviceKind: self.DeviceKind, SliceId: int32(cfg.SliceID.Value)},
		ProcessCount: int32(cfg.ProcessCount.Value), Job: cfg.Job.Value,
	}, grpc.WaitForReady(true), grpc.Header(&header))
	if err != nil {
		switch code := status.Code(err); {
		case ctx.Err() == nil && (code == codes.DeadlineExceeded || code == codes.Unavailable):
			err = &CoordinatorError{Address: addr, Reason: fmt.Sprintf("no answer to join within %v", 2*cfg.Timeout.Value+cfg.Heartbeat.Value), Err: err}
		case code == codes.Unauthenticated || code == codes.PermissionDenied || code == codes.InvalidArgument || code == codes.AlreadyExists:
			// Refused to this process alone; the job goes on without it.
			err = &WorkerError{Kind: Refused, Index: cfg.ProcessIndex.Value, Host: host, Reason: status.Convert(err).Message()}
		default:
			err = c.convert(ctx, "join", err)
		}
		c.teardown()
		return nil, err
	}
	if v := header.Get(sessionKey); len(v) == 1 && v[0] != "" {
		c.session.Store(v[0])
	} else {
		c.teardown()
		return nil, &CoordinatorError{Address: addr, Reason: "the coordinator's join answer carries no session secret (a coordinator of another version?)"}
	}
	c.incarn = resp.Incarnation
	for _, p := range resp.Processes {
		c.procs = append(c.procs, Process{Index: int(p.Index), Host: p.Host, PID: int(p.Pid), Devices: int(p.Devices), DeviceKind: p.DeviceKind, SliceID: int(p.SliceId)})
	}
	c.life, c.cancel = context.WithCancel(context.Background())
	stream, err := c.rpc.Session(c.life)
	if err == nil {
		err = stream.Send(&clusterpb.Heartbeat{Index: int32(cfg.ProcessIndex.Value), Incarnation: c.incarn})
	}
	if err != nil {
		err = c.convert(ctx, "session", err)
		c.teardown()
		return nil, err
	}
	c.lastAck.Store(time.Now().UnixNano())
	c.wg.Add(2)
	go c.receive(stream)
	go c.beat(stream)
	return c, nil
}

// Config is the bootstrap configuration the client joined with.
func (c *Client) Config() *Config { return c.cfg }

// Processes is every process of the job, by index, as each described itself.
func (c *Client) Processes() []Process { return append([]Process(nil), c.procs...) }

// Index is this process's index.
func (c *Client) Index() int { return c.cfg.ProcessIndex.Value }

// Err is the job's failure, or nil while it is healthy.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Done is closed when the job fails; Err then says why.
func (c *Client) Done() <-chan struct{} { return c.failed }

// fail records the first failure and cancels everything in flight.
func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
		close(c.failed)
	}
	c.mu.Unlock()
	if c.cancel != nil {
		c.cancel()
	}
}

// receive reads the coordinator's session events: answers to heartbeats,
// or the job's failure.
func (c *Client) receive(stream clusterpb.Coordination_SessionClient) {
	defer c.wg.Done()
	for {
		ev, err := stream.Recv()
		if err != nil {
			if !c.leaving.Load() {
				c.fail(&CoordinatorError{Address: c.cfg.Coordinator.Value, Reason: "session ended", Err: err})
			}
			return
		}
		c.lastAck.Store(time.Now().UnixNano())
		if f := ev.GetFailure(); f != nil {
			c.fail(c.workerError(f))
			return
		}
	}
}

// beat sends heartbeats and gives up on a coordinator that has not answered
// for the cluster timeout.
func (c *Client) beat(stream clusterpb.Coordination_SessionClient) {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.Heartbeat.Value)
	defer t.Stop()
	for {
		select {
		case <-c.life.Done():
			return
		case <-t.C:
			if silent := time.Since(time.Unix(0, c.lastAck.Load())); silent > c.cfg.Timeout.Value {
				c.fail(&CoordinatorError{Address: c.cfg.Coordinator.Value, Reason: fmt.Sprintf("no answer to heartbeats for %v", silent.Round(time.Millisecond))})
				return
			}
			if err := stream.Send(&clusterpb.Heartbeat{Index: int32(c.cfg.ProcessIndex.Value), Incarnation: c.incarn}); err != nil {
				return // receive reports why
			}
		}
	}
}

// workerError completes a Failure with the host the bootstrap lists for
// the process when the process never joined.
func (c *Client) workerError(f *clusterpb.Failure) *WorkerError {
	e := failureError(f)
	if e.Host == "" && e.Index >= 0 && e.Index < len(c.cfg.Hosts) {
		e.Host = c.cfg.Hosts[e.Index]
	}
	return e
}

// convert turns an RPC error into this package's errors; a job failure or a
// lost coordinator also fails the client.
func (c *Client) convert(ctx context.Context, op string, err error) error {
	if e := c.Err(); e != nil {
		return e
	}
	if ctx.Err() != nil {
		return fmt.Errorf("cluster: %s: %w", op, ctx.Err())
	}
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("cluster: %s: %w", op, err)
	}
	switch st.Code() {
	case codes.Aborted:
		for _, d := range st.Details() {
			if f, ok := d.(*clusterpb.Failure); ok {
				we := c.workerError(f)
				c.fail(we)
				return we
			}
		}
	case codes.Unavailable:
		// A coordinator that stops after the job failed sends the failure
		// on the session stream first, but this call can lose the race to
		// it: give the session the server's own grace to deliver it, so
		// everyone names the process that was lost, not the coordinator.
		if c.life != nil {
			t := time.NewTimer(2*c.cfg.Heartbeat.Value + 100*time.Millisecond)
			select {
			case <-c.failed:
			case <-t.C:
			}
			t.Stop()
			if e := c.Err(); e != nil {
				return e
			}
		}
		ce := &CoordinatorError{Address: c.cfg.Coordinator.Value, Reason: op + " failed", Err: err}
		if c.life != nil {
			c.fail(ce)
		}
		return ce
	case codes.Canceled:
		if c.life != nil && c.life.Err() != nil {
			if e := c.Err(); e != nil {
				return e
			}
			return fmt.Errorf("cluster: %s: %w", op, ErrClosed)
		}
	}
	return fmt.Errorf("cluster: %s: %w", op, err)
}

// call runs one RPC with ctx, cut short when the job fails.
func (c *Client) call(ctx context.Context, op string, f func(context.Context) error) error {
	if e := c.Err(); e != nil {
		return e
	}
	if c.life == nil || c.life.Err() != nil {
		return fmt.Errorf("cluster: %s: %w", op, ErrClosed)
	}
	rctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.life, cancel)
	defer func() {
		stop()
		cancel()
	}()
	if err := f(rctx); err != nil {
		return c.convert(ctx, op, err)
	}
	return nil
}

// Put stores value under key. A key holds one value: putting another
// value under it is a *KeyError matching ErrKeyExists; a put beyond the
// coordinator's Limits is one matching ErrKeyLimit.
func (c *Client) Put(ctx context.Context, key string, value []byte) error {
	return unwrapKey(c.call(ctx, "put", func(ctx context.Context) error {
		_, err := c.rpc.Put(ctx, &clusterpb.PutRequest{Key: key, Value: value, Index: int32(c.Index())})
		switch status.Code(err) {
		case codes.AlreadyExists:
			return &keyStatus{key, ErrKeyExists, err}
		case codes.ResourceExhausted, codes.InvalidArgument:
			return &keyStatus{key, ErrKeyLimit, err}
		}
		return err
	}))
}

// Get returns key's value, waiting up to timeout (the cluster timeout when
// 0) for some process to put it; then it is a *KeyError matching
// ErrKeyTimeout.
func (c *Client) Get(ctx context.Context, key string, timeout time.Duration) ([]byte, error) {
	if timeout <= 0 {
		timeout = c.cfg.Timeout.Value
	}
	var v []byte
	err := c.call(ctx, "get", func(ctx context.Context) error {
		r, err := c.rpc.Get(ctx, &clusterpb.GetRequest{Key: key, TimeoutMs: max(1, timeout.Milliseconds()), Index: int32(c.Index())})
		if status.Code(err) == codes.DeadlineExceeded && ctx.Err() == nil {
			return &keyStatus{key, ErrKeyTimeout, err}
		}
		if err != nil {
			return err
		}
		v = r.Value
		return nil
	})
	return v, unwrapKey(err)
}

// TryGet returns key's value at once, or a *KeyError matching ErrNotFound.
func (c *Client) TryGet(ctx context.Context, key string) ([]byte, error) {
	var v []byte
	err := c.call(ctx, "try-get", func(ctx context.Context) error {
		r, err := c.rpc.TryGet(ctx, &clusterpb.TryGetRequest{Key: key, Index: int32(c.Index())})
		if status.Code(err) == codes.NotFound {
			return &keyStatus{key, ErrNotFound, err}
		}
		if err != nil {
			return err
		}
		v = r.Value
		return nil
	})
	return v, unwrapKey(err)
}

// Barrier returns when every process has called Barrier with the same
// name. Names are single-use. A process that does not arrive within the
// cluster timeout fails the job (*WorkerError, ErrWorkerMissing) naming it.
func (c *Client) Barrier(ctx context.Context, name string) error {
	return c.call(ctx, "barrier "+name, func(ctx context.Context) error {
		_, err := c.rpc.Barrier(ctx, &clusterpb.BarrierRequest{Name: name, Index: int32(c.Index()), TimeoutMs: c.cfg.Timeout.Value.Milliseconds()})
		return err
	})
}

// ShutdownBarrier is the barrier Close passes before leaving.
const ShutdownBarrier = "tensorbridge/shutdown"

// Close leaves the job in order: a barrier with every process, then Leave,
// so that nobody's departure reads as a loss; process 0 then waits for the
// others to leave (at most the cluster timeout) and stops the service. On a
// failed job it only releases what the client holds. It returns the
// barrier's error, if any.
func (c *Client) Close(ctx context.Context) error {
	c.closeOnce.Do(func() {
		if c.Err() == nil {
			c.closeErr = c.Barrier(ctx, ShutdownBarrier)
			if c.closeErr == nil {
				c.leaving.Store(true)
				lctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout.Value)
				_, err := c.rpc.Leave(lctx, &clusterpb.LeaveRequest{Index: int32(c.Index())})
				cancel()
				if err != nil {
					c.closeErr = c.convert(ctx, "leave", err)
				}
			}
		}
		c.teardown()
	})
	return c.closeErr
}

// Abort leaves without the barrier: the others see this process as lost.
func (c *Client) Abort() {
	c.closeOnce.Do(c.teardown)
}

// teardown stops the session goroutines, the connection and, on process 0,
// the service.
func (c *Client) teardown() {
	c.leaving.Store(true)
	if c.cancel != nil {
		c.cancel()
	}
	c.wg.Wait()
	if c.conn != nil {
		_ = c.conn.Close()
	}
	c.stopServer()
}

func (c *Client) stopServer() {
	if c.server == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout.Value)
	defer cancel()
	_ = c.server.Shutdown(ctx)
}

// keyStatus carries a key error through call's conversion.
type keyStatus struct {
	key  string
	kind error
	st   error
}

func (k *keyStatus) Error() string { return k.st.Error() }

func unwrapKey(err error) error {
	var ks *keyStatus
	if errors.As(err, &ks) {
		return &KeyError{Key: ks.key, Err: ks.kind}
	}
	return err
}
