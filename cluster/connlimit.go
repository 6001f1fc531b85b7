package cluster

import (
	"context"
	"net"
	"sync"

	"google.golang.org/grpc/peer"
)

// connLimit caps the connections the coordination service holds open at
// once (Limits.MaxConnections). At the cap, a new connection evicts one
// that has not yet carried an authenticated call: the oldest of those
// from the source IP that holds the most of them. When every open
// connection has carried one, the new connection is closed. A flood of
// connections from outside the job, idle or making refused calls,
// therefore cannot lock the job's processes out: each of them
// authenticates with its first call and is then never evicted, and a
// flood from a few addresses evicts its own connections first, so that a
// process connecting from elsewhere has the time to make that call. A cap
// that merely held new connections in the kernel's accept queue would
// not do: the job's clients give up on a connection whose server preface
// does not come within a second and join the back of the queue again.
type connLimit struct {
	max int

	mu   sync.Mutex
	seq  uint64
	open map[string]*trackedConn // by remote address, as gRPC's peer reports it
}

// trackedConn is one accepted connection.
type trackedConn struct {
	net.Conn
	l      *connLimit
	key    string
	ip     string // the source IP, without the port
	seq    uint64 // accept order
	proven bool   // an authenticated call came over it
	once   sync.Once
}

func newConnLimit(n int) *connLimit {
	return &connLimit{max: n, open: map[string]*trackedConn{}}
}

// listener wraps ln so that its connections are counted against the cap.
func (l *connLimit) listener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, l: l}
}

type limitListener struct {
	net.Listener
	l *connLimit
}

// Accept returns the next connection it can admit, closing those it
// cannot (every open one proven) and evicting an unproven one at the cap.
func (ll *limitListener) Accept() (net.Conn, error) {
	for {
		conn, err := ll.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c := ll.l.admit(conn); c != nil {
			return c, nil
		}
		_ = conn.Close()
	}
}

// admit registers conn, evicting the oldest unproven connection when the
// cap is reached; nil when every open connection is proven.
func (l *connLimit) admit(conn net.Conn) *trackedConn {
	l.mu.Lock()
	var victim *trackedConn
	if len(l.open) >= l.max {
		victim = l.victimLocked()
		if victim == nil {
			l.mu.Unlock()
			return nil
		}
		delete(l.open, victim.key)
	}
	l.seq++
	c := &trackedConn{Conn: conn, l: l, key: conn.RemoteAddr().String(), seq: l.seq}
	c.ip = c.key
	if host, _, err := net.SplitHostPort(c.key); err == nil {
		c.ip = host
	}
	l.open[c.key] = c
	l.mu.Unlock()
	if victim != nil {
		_ = victim.Conn.Close() // gRPC's transport sees it fail and ends its streams
	}
	return c
}

// victimLocked picks the connection to evict: among those that carried
// no authenticated call, the oldest from the source IP with the most.
func (l *connLimit) victimLocked() *trackedConn {
	perIP := map[string]int{}
	for _, c := range l.open {
		if !c.proven {
			perIP[c.ip]++
		}
	}
	var victim *trackedConn
	for _, c := range l.open {
		if c.proven {
			continue
		}
		if victim == nil || perIP[c.ip] > perIP[victim.ip] || perIP[c.ip] == perIP[victim.ip] && c.seq < victim.seq {
			victim = c
		}
	}
	return victim
}

// prove marks the connection of ctx's call as carrying an authenticated
// call (it is then never evicted).
func (l *connLimit) prove(ctx context.Context) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return
	}
	l.mu.Lock()
	if c, ok := l.open[p.Addr.String()]; ok {
		c.proven = true
	}
	l.mu.Unlock()
}

// count is how many connections are open.
func (l *connLimit) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.open)
}

// Close closes the connection and gives its slot back (once).
func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		if c.l.open[c.key] == c {
			delete(c.l.open, c.key)
		}
		c.l.mu.Unlock()
	})
	return err
}
