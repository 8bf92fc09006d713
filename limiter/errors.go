package limiter

import (
	"errors"
	"fmt"
	"time"
)

// ErrLimited is matched (errors.Is) by every *RetryError: the request was
// refused for now.
var ErrLimited = errors.New("limiter: rate limited")

// ErrNever is returned (wrapped) when a cost exceeds the limit's capacity:
// no wait can admit it.
var ErrNever = errors.New("limiter: cost exceeds the limit's capacity")

// ErrNotConcurrency is returned (wrapped) by Acquire on a limiter whose
// algorithm is not algo.Concurrency.
var ErrNotConcurrency = errors.New("limiter: not a concurrency limit")

// RetryError reports a refusal and when to try again. Wait returns it at
// once when the wait would outlast the context's deadline; Acquire returns
// it when no slot is free.
type RetryError struct {
	// Limiter is the name of the Limiter that refused; "" for a Local.
	Limiter string
	// After is how long to wait before the same request would be admitted
	// if nobody else takes meanwhile (rounded up; see algo.Decision). For
	// a Wait refused behind other waiters it is the queue's projection of
	// its wait (see Limiter.Wait).
	After time.Duration
}

// Error describes the refusal, e.g. `limiter "api": rate limited, retry
// after 50ms`.
func (e *RetryError) Error() string {
	if e.Limiter == "" {
		return fmt.Sprintf("limiter: rate limited, retry after %v", e.After)
	}
	return fmt.Sprintf("limiter %q: rate limited, retry after %v", e.Limiter, e.After)
}

// Is makes errors.Is(err, ErrLimited) true.
func (e *RetryError) Is(target error) bool { return target == ErrLimited }
