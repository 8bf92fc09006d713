// Package queue is the bounded waiting queue behind the "wait" strategy: a
// request that a limiter refused waits here, up to a deadline, for capacity
// to come back instead of being rejected at once.
//
// # Model
//
// A Queue is generic over how capacity is obtained. It is built around a
// TryFunc that attempts to take capacity (typically a store's Take) and, when
// it cannot, says how long until it might succeed (the Decision's RetryAfter).
// Waiters line up in order; only the waiter at the head calls the TryFunc, and
// only one call is in flight at a time, so capacity goes to waiters in queue
// order and a crowd of waiters never stampedes the store. When the head's try
// fails, the retry hint becomes the queue's next attempt time: the head arms a
// timer for it, and whoever is head when it fires tries again. When the head
// leaves (admitted, timed out, cancelled) it wakes the next one.
//
// The order is by priority (higher first, first-in first-out within one
// priority) or strictly first-in first-out (WithOrder(FIFO)), where the
// priority argument is ignored. Priority is strict, without aging: a
// waiter is served only when no waiter of a higher priority is queued, so
// under a steady stream of higher priorities it waits until its TTL or
// deadline ends the wait; the TTL is what bounds its starvation.
//
// # Bounds and errors
//
// The queue holds at most WithSize waiters. An arrival that finds it full gets
// ErrFull at once; in priority order an arrival with a higher priority than
// the lowest waiter pushes that waiter out instead (it gets ErrFull): low
// priority is shed first. Each waiter has a time-to-live (WithTTL) and the
// deadline of its context; when either passes it leaves with a *TimeoutError
// (errors.Is ErrTimeout) or the context's error. A waiter whose retry hint
// would outlive its deadline leaves at once with a *TimeoutError rather than
// wait for a certain failure, as golang.org/x/time/rate's Wait does, and
// WaitFrom refuses on arrival a waiter whose projection (its own retry
// hint, plus a unit and a hand-off per waiter ahead, plus its own
// hand-off; the hand-off is WithHandoff or the longest recent try, the
// timer's lateness included) reaches its deadline; WaitProjected does the
// same with a projection of the caller's, for a capacity that comes back a
// window's quota at a time rather than a unit at a time. A retry
// hint of Never (the same value as algo.Never: the cost can never be
// admitted) gives ErrNever. A TryFunc error is returned to the waiter that
// called it as is; the next waiter then tries on its own. A TryFunc that
// panics takes its waiter out of the queue (counted failed) and wakes the
// next before the panic goes on up the waiter's goroutine.
//
// # Concurrency and clock
//
// A Queue is safe for concurrent use. It owns no goroutine: every waiter
// runs in its caller's goroutine and all timers belong to a waiter, so Close
// only wakes the waiters (they return ErrClosed) and nothing leaks. Time is
// the runtime's clock (time.Now and timers), which testing/synctest fakes:
// the tests run every timeline in a synctest bubble without real sleeps.
package queue
