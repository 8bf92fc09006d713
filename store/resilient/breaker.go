package resilient

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
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

// CircuitOpenError is the error of a call the breaker kept from the store,
// and the cause Hooks.Fallback reports for it: it says how many
// consecutive calls failed and how the last one did, so that a log of it
// shows why the store is not used (READONLY, NOPERM, a refused connection)
// rather than only that it is not. It wraps ErrCircuitOpen, and so
// store.ErrUnavailable; Last is not wrapped, so that errors.Is sees an
// open circuit, not the store's failure of seconds ago.
type CircuitOpenError struct {
	// Failures is the number of consecutive failed calls when the breaker
	// opened, failed half-open probes included.
	Failures int
	// Last is the error of the call that opened the breaker: the store's
	// (which never holds a password: store errors show URLs redacted) or
	// the timeout's.
	Last error
	// Reopened is set when a half-open probe failed: the breaker was
	// already open, and opens again every cool-down while the store keeps
	// failing. A log can report the first opening and then changes of
	// Last's text only.
	Reopened bool
	// Partition names the failure domain whose breaker opened when the
	// store has one breaker per partition (store.Partitioner's
	// PartitionName: "slots 5376-5631", "server 10.0.0.8:11211"); "" when
	// it has one breaker.
	Partition string
}

// maxCause bounds the length of Last's text in Error: a script error can
// quote a long script.
const maxCause = 300

// Error says "resilient: circuit open after N consecutive failures; last:"
// and the last failure's text, cut at 300 bytes; with a Partition,
// "resilient: circuit open for slots 5376-5631 after N consecutive
// failures; last: …".
func (e *CircuitOpenError) Error() string {
	last := "unknown"
	if e.Last != nil {
		last = e.Last.Error()
	}
	if len(last) > maxCause {
		cut := maxCause
		for cut > 0 && !utf8.RuneStart(last[cut]) {
			cut--
		}
		last = last[:cut] + "…"
	}
	if e.Partition != "" {
		return fmt.Sprintf("resilient: circuit open for %s after %d consecutive failures; last: %s", e.Partition, e.Failures, last)
	}
	return fmt.Sprintf("resilient: circuit open after %d consecutive failures; last: %s", e.Failures, last)
}

// Unwrap returns ErrCircuitOpen.
func (e *CircuitOpenError) Unwrap() error { return ErrCircuitOpen }

// breaker counts consecutive failures. Its fast path (closed, no failure)
// takes an uncontended mutex; it is not worth an atomic protocol next to a
// network round trip.
type breaker struct {
	mu       sync.Mutex
	state    BreakerState
	fails    int // consecutive failures since the last success
	tripped  int // failures since the breaker was last closed, probes included
	openErr  *CircuitOpenError
	openedAt time.Time
	name     string // CircuitOpenError.Partition
	limit    int
	cooldown time.Duration
	now      func() time.Time
	onChange func(from, to BreakerState)
	onTrip   func(err *CircuitOpenError)
	// late counts the calls over this partition (and others) that their
	// callers left at the deadline and the store has not answered yet
	// (see job.handOff). It is not under mu.
	late atomic.Int32
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
		b.tripped = 0
		b.set(Closed)
	}
}

// failure records a failed call and its error.
func (b *breaker) failure(probe bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe || b.state == HalfOpen {
		if probe {
			b.tripped++
			b.trip(err, true)
		}
		return
	}
	if b.state == Open {
		return
	}
	b.fails++
	if b.fails >= b.limit {
		b.tripped = b.fails
		b.fails = 0
		b.trip(err, false)
	}
}

// trip opens the breaker on err, again after a failed probe when reopen
// is set; b.mu is held.
func (b *breaker) trip(err error, reopen bool) {
	b.openErr = &CircuitOpenError{Failures: b.tripped, Last: err, Reopened: reopen, Partition: b.name}
	b.openedAt = b.now()
	b.set(Open)
	if b.onTrip != nil {
		b.onTrip(b.openErr)
	}
}

// refusal is the error of a call the breaker does not allow.
func (b *breaker) refusal() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.openErr == nil {
		return ErrCircuitOpen
	}
	return b.openErr
}

// cancelProbe gives the probe slot back when the probe ended for a reason
// that says nothing about the store (the caller cancelled).
func (b *breaker) cancelProbe() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == HalfOpen {
		b.set(Open) // openedAt is unchanged: the next call probes again
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
