package llm

import (
	"context"
	"sync"
	"time"
)

// A generation's token stream.
//
// The engine's goroutine produces every sequence's tokens and must never
// wait for one reader: a slow client would stall every other sequence,
// and one that stops reading would stop the engine. A stream's channel
// therefore holds a bounded number of tokens (the request's max_tokens,
// at most streamCap) plus one slot kept free for the last event, and what
// does not fit waits in the stream's pending list, delivered in order by a
// goroutine that exists only while there is a backlog. Memory follows the
// tokens a reader has not yet taken, not the context length. Because the
// last event's slot is never taken by a token, ending a stream never
// blocks, even for a reader that cancelled and went away.

// streamCap bounds the tokens a stream's channel holds ahead of its
// reader: 256 tokens of 64 bytes (16 KiB), against 8 MiB for a
// channel sized by a 131,072-token context.
const streamCap = 256

// maxBacklogPoll bounds how long a backlogged stream waits before it looks
// again for room in its channel (the reader takes tokens without telling
// anyone). The reader has up to streamCap tokens in hand meanwhile.
const maxBacklogPoll = 20 * time.Millisecond

// stream is the sending side of one generation's channel. The engine's
// goroutine calls send and end; forward runs while pending is not empty.
// At any time exactly one of them sends (forwarding says which), so a
// send into a channel seen with room never blocks.
type stream struct {
	ctx context.Context // the request's: once done, tokens are no longer owed
	ch  chan Token      // tokens use at most cap-1 slots: one is the last event's

	mu         sync.Mutex
	pending    []Token // events the channel had no room for, oldest first
	forwarding bool    // forward is running and owns the sends
	ended      bool    // end was called: pending's last event is the last
}

// newStream makes a stream of up to tokens tokens in its channel, plus
// the last event.
func newStream(ctx context.Context, tokens int) *stream {
	return &stream{ctx: ctx, ch: make(chan Token, tokens+1)}
}

// room reports whether the channel has a free slot besides the last
// event's.
func (s *stream) room() bool { return len(s.ch) < cap(s.ch)-1 }

// send delivers a token event without blocking: into the channel when it
// has room and nothing is pending, else after the pending ones.
func (s *stream) send(t Token) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.forwarding {
		if s.room() {
			s.ch <- t
			return
		}
		s.forwarding = true
		go s.forward()
	}
	s.pending = append(s.pending, t)
}

// end delivers the last event (Finish set) and closes the channel once
// every event before it is delivered. A reader that cancelled is owed no
// more tokens: what is pending is dropped.
func (s *stream) end(last Token) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	if s.ctx.Err() != nil {
		s.pending = s.pending[:0]
	}
	if !s.forwarding {
		s.ch <- last // its slot is always free
		close(s.ch)
		return
	}
	s.pending = append(s.pending, last)
}

// forward delivers the pending events in order, waiting for room, until
// none is left (the stream is then back to direct sends) or the last event
// is delivered and the channel closed.
func (s *stream) forward() {
	for {
		s.mu.Lock()
		if len(s.pending) == 0 {
			s.forwarding = false
			s.mu.Unlock()
			return
		}
		t := s.pending[0]
		s.pending = s.pending[1:]
		last := s.ended && len(s.pending) == 0
		s.mu.Unlock()
		switch {
		case last:
			s.ch <- t // its slot is always free
			close(s.ch)
			return
		case s.waitRoom():
			s.ch <- t
		default: // the reader cancelled: drop the tokens, keep the last event
			s.mu.Lock()
			if s.ended && len(s.pending) > 0 {
				s.pending = s.pending[len(s.pending)-1:]
			} else {
				s.pending = s.pending[:0]
			}
			s.mu.Unlock()
		}
	}
}

// waitRoom waits until the channel has room for a token (true) or the
// reader cancelled (false), looking again after growing pauses.
func (s *stream) waitRoom() bool {
	pause := 100 * time.Microsecond
	var timer *time.Timer
	for !s.room() {
		if timer == nil {
			timer = time.NewTimer(pause)
			defer timer.Stop()
		} else {
			timer.Reset(pause)
		}
		select {
		case <-s.ctx.Done():
			return false
		case <-timer.C:
		}
		pause = min(2*pause, maxBacklogPoll)
	}
	return s.ctx.Err() == nil
}
