package capi

import (
	"fmt"
	"os"
	"sync"
)

// clientHolds counts the holders of a client (calls that need it alive
// until they end) and defers its destruction past Close to the last of
// them: Close never blocks on work its callers abandoned (an execution
// whose context was cancelled goes on in the plugin), and the plugin's
// client is still never freed under a call that uses it.
type clientHolds struct {
	mu        sync.Mutex
	n         int  // holders now
	closing   bool // Close was called: no new holder
	destroyed bool // destroyAll ran or is running
}

// hold registers a holder; false once Close was called.
func (c *Client) hold() bool {
	h := &c.holds
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return false
	}
	h.n++
	return true
}

// release ends a hold; the last one after Close destroys the client.
func (c *Client) release() {
	h := &c.holds
	h.mu.Lock()
	h.n--
	last := h.n == 0 && h.closing && !h.destroyed
	if last {
		h.destroyed = true
	}
	h.mu.Unlock()
	if last {
		if err := c.destroyAll(); err != nil {
			// No caller is left to return it to.
			fmt.Fprintln(os.Stderr, "pjrt: destroying the client after its last call:", err)
		}
	}
}

// closeNow marks the client closing and reports whether the caller (Close)
// must destroy it now: false when it was already closed, or when holders
// remain (the last release destroys it).
func (h *clientHolds) closeNow() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return false
	}
	h.closing = true
	if h.n > 0 {
		return false
	}
	h.destroyed = true
	return true
}

// holders reports the calls holding the client now, and whether Close
// was called.
func (c *Client) holders() (n int, closing bool) {
	c.holds.mu.Lock()
	defer c.holds.mu.Unlock()
	return c.holds.n, c.holds.closing
}

// isDestroyed reports whether the client's handle was freed.
func (c *Client) isDestroyed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.h == 0
}
