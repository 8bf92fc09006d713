package limiter

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrLimited is matched (errors.Is) by every *RetryError: the request was
// refused for now.
var ErrLimited = errors.New("limiter: rate limited")

// ErrNever is returned (wrapped) by Wait (a Limiter's and a Local's) when a
// cost exceeds the limit's capacity (for SmoothBursty and SmoothWarmup,
// which admit more than their capacity at once, algo.Limit.MaxCost; the
// error's text names that bound): no wait can admit it. AllowN, Reserve
// and AllowAll answer such a cost with no error but a refused Decision
// whose IsNever reports true (its RetryAfter is algo.Never, about 292
// years: check IsNever before putting it in a Retry-After).
var ErrNever = errors.New("limiter: cost exceeds the limit's capacity")

// ErrQueueFull is matched (errors.Is) by the *RetryError a Wait returns at
// once when its key's wait queue already holds the limiter's most waiters
// (WithMaxWaiters, WithLocalMaxWaiters; DefaultMaxWaiters). Such an error
// matches ErrLimited too: a caller that answers ErrLimited with "too many
// requests" does the same for a full queue.
var ErrQueueFull = errors.New("limiter: wait queue full")

// ErrNotConcurrency is returned (wrapped) by Acquire on a limiter whose
// algorithm is not algo.Concurrency.
var ErrNotConcurrency = errors.New("limiter: not a concurrency limit")

// RetryError reports a refusal and when to try again. Wait returns it
// when its context's deadline ends the wait: at once when the wait would
// outlast it, or when it passes (Err is then set); and at once when its
// key's wait queue is full (Err is ErrQueueFull). Acquire returns it when
// no slot is free (Slots is then set).
type RetryError struct {
	// Limiter is the name of the Limiter that refused; "" for a Local.
	Limiter string
	// After is how long to wait before the same request would be admitted
	// if nobody else takes meanwhile (rounded up; see algo.Decision). For
	// a Wait refused behind other waiters it is the queue's projection of
	// its wait, and for a Wait whose deadline passed an estimate, 0 when
	// there is none (see Limiter.Wait).
	After time.Duration
	// Err is the context's error (context.DeadlineExceeded) when a Wait's
	// deadline passed before it was admitted, ErrQueueFull when its key's
	// wait queue was full; nil for a refusal foreseen while there was
	// still time, and for Acquire.
	Err error
	// Slots is, for Acquire's refusal, the concurrency limit's number of
	// slots, all in use; After is then when the oldest lease expires at
	// the latest (a release may free a slot sooner). 0 for the refusals
	// of Wait.
	Slots int64
}

// Error describes the refusal, e.g. `limiter "api": rate limited, retry
// after 50ms`, followed by Err if set: `limiter "api": rate limited, retry
// after 50ms: context deadline exceeded`, `limiter "api": rate limited,
// retry after 2s: wait queue full`. Acquire's refusal says that the slots
// are taken, not that a rate was passed: `limiter "db": all 5 concurrency
// slots in use; the oldest lease expires in 1m0s at the latest`.
func (e *RetryError) Error() string {
	s := "limiter: "
	if e.Limiter != "" {
		s = fmt.Sprintf("limiter %q: ", e.Limiter)
	}
	if e.Slots > 0 {
		s += fmt.Sprintf("all %d concurrency slots in use; the oldest lease expires in %v at the latest", e.Slots, e.After)
	} else {
		s += fmt.Sprintf("rate limited, retry after %v", e.After)
	}
	if e.Err != nil {
		s += ": " + strings.TrimPrefix(e.Err.Error(), "limiter: ")
	}
	return s
}

// Is makes errors.Is(err, ErrLimited) true.
func (e *RetryError) Is(target error) bool { return target == ErrLimited }

// Unwrap returns Err, so that a Wait whose deadline passed also matches
// context.DeadlineExceeded.
func (e *RetryError) Unwrap() error { return e.Err }
