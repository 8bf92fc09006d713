package resilient

import (
	"fmt"
	"sync"
	"time"
)

// BreakerState is the circuit breaker's state.
type BreakerState int32

// Breaker states. The numbers are what the circuit-state metric reports.
const (
	// Closed: calls go to the store.
	Closed BreakerState = 0
	// Open: calls are answered by the failure policy until the cool-down
	// has passed.
	Open BreakerState = 1
	// HalfOpen: one probe call is on its way to the store; the others are
	// answered by the failure policy.
	HalfOpen BreakerState = 2
)

// String returns "closed", "open" or "half-open".
func (s BreakerState) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("BreakerState(%d)", int32(s))
}

// breaker counts consecutive failures. Its fast path (closed, no failure)
// takes an uncontended mutex; it is not worth an atomic protocol next to a
// network round trip.
type breaker struct {
	mu       sync.Mutex
	state    BreakerState
	fails    int
	openedAt time.Time
	limit    int
	cooldown time.Duration
	now      func() time.Time
	onChange func(from, to BreakerState)
}

// allow reports whether a call may go to the store, and whether it is the
// half-open probe.
func (b *breaker) allow() (ok, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case Closed:
		return true, false
	case Open:
		if b.now().Sub(b.openedAt) >= b.cooldown {
			b.set(HalfOpen)
			return true, true
		}
	}
	return false, false
}

// retryAfter is how long until the breaker lets a probe through (at least
// the cool-down when it is not open).
func (b *breaker) retryAfter() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == Open {
		if d := b.cooldown - b.now().Sub(b.openedAt); d > 0 {
			return d
		}
	}
	return b.cooldown
}

func (b *breaker) success(probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fails = 0
	if probe && b.state != Closed {
		b.set(Closed)
	}
}

func (b *breaker) failure(probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe || b.state == HalfOpen {
		if probe {
			b.openedAt = b.now()
			b.set(Open)
		}
		return
	}
	if b.state == Open {
		return
	}
	b.fails++
	if b.fails >= b.limit {
		b.fails = 0
		b.openedAt = b.now()
		b.set(Open)
	}
}

// cancelProbe gives the probe slot back when the probe ended for a reason
// that says nothing about the store (the caller cancelled).
func (b *breaker) cancelProbe() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == HalfOpen {
		b.state = Open // openedAt is unchanged: the next call probes again
	}
}

func (b *breaker) get() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

// set changes the state and reports it; b.mu is held.
func (b *breaker) set(to BreakerState) {
	from := b.state
	if from == to {
		return
	}
	b.state = to
	if b.onChange != nil {
		b.onChange(from, to)
	}
}
