package queue

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// Never is the retry hint of a TryFunc whose request can never succeed (its
// cost exceeds the capacity). It equals algo.Never, so a Decision's
// RetryAfter can be returned as is.
const Never = time.Duration(math.MaxInt64)

// Sentinel errors, for errors.Is.
var (
	// ErrFull is returned when the queue was full on arrival, or when the
	// waiter was pushed out by a higher-priority arrival.
	ErrFull = errors.New("queue: full")
	// ErrTimeout is matched by every *TimeoutError.
	ErrTimeout = errors.New("queue: timed out")
	// ErrNever is returned when the TryFunc's retry hint was Never.
	ErrNever = errors.New("queue: request can never be admitted")
	// ErrClosed is returned by Wait after Close, and to the waiters Close
	// woke.
	ErrClosed = errors.New("queue: closed")
)

// TimeoutError is returned when a waiter's time-to-live or its context's
// deadline passed, or would pass before the next retry. It matches
// ErrTimeout.
type TimeoutError struct {
	// Deadline is the instant the waiter had to be admitted by: the
	// earlier of its arrival plus the TTL and its context's deadline.
	Deadline time.Time
	// Waited is how long the waiter was in the queue.
	Waited time.Duration
	// RetryAfter is the retry hint that would have outlived Deadline, or
	// zero when Deadline itself passed.
	RetryAfter time.Duration
}

// Error describes the timeout, e.g. "queue: timed out after 2s (deadline
// would pass before the retry in 1s)".
func (e *TimeoutError) Error() string {
	if e.RetryAfter > 0 {
		return fmt.Sprintf("queue: timed out after %v (deadline would pass before the retry in %v)", e.Waited, e.RetryAfter)
	}
	return fmt.Sprintf("queue: timed out after %v", e.Waited)
}

// Unwrap returns ErrTimeout.
func (e *TimeoutError) Unwrap() error { return ErrTimeout }

// TryFunc attempts to obtain capacity for the waiter at the head of the
// queue, with that waiter's context. It returns ok when the capacity was
// taken; otherwise retryAfter is how long until it may succeed (values below
// the queue's minimum retry interval are raised to it, Never gives ErrNever).
// A non-nil err ends that waiter's wait with err.
type TryFunc func(ctx context.Context) (ok bool, retryAfter time.Duration, err error)

// Order is how waiters are served.
type Order int

const (
	// ByPriority serves the highest priority first and arrivals of equal
	// priority first-in first-out. It is the default; with a single
	// priority it is FIFO.
	ByPriority Order = iota
	// FIFO serves waiters strictly in arrival order; priorities are
	// ignored.
	FIFO
)

// String returns "priority" or "fifo".
func (o Order) String() string {
	if o == FIFO {
		return "fifo"
	}
	return "priority"
}

// Option configures a Queue; see New for the defaults.
type Option func(*config)

type config struct {
	size     int
	ttl      time.Duration
	order    Order
	minRetry time.Duration
	handoff  time.Duration
}

// WithSize bounds the number of waiters (default 1024; at least 1).
func WithSize(n int) Option { return func(c *config) { c.size = n } }

// WithTTL sets every waiter's time-to-live, counted from its arrival
// (default 0: no TTL, only the context's deadline applies; not negative).
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithOrder sets the service order (default ByPriority).
func WithOrder(o Order) Option { return func(c *config) { c.order = o } }

// WithMinRetry sets the shortest interval between two tries, applied to
// smaller retry hints (default 1ms; positive). It keeps a TryFunc that
// answers "retry in 0" from spinning.
func WithMinRetry(d time.Duration) Option { return func(c *config) { c.minRetry = d } }

// WithHandoff sets the least time WaitFrom's projection allows for each
// hand-off (default 1ms; not negative): a retry timer firing late and the
// try's trip to the store. A bucket holding a single unit loses that time
// for good (it is full, and stops refilling, from the instant the unit is
// back until a try takes it), so every waiter served later by it. The
// queue also measures its tries and uses the longer of the two.
func WithHandoff(d time.Duration) Option { return func(c *config) { c.handoff = d } }

// Stats are a Queue's counters since New, for metrics.
type Stats struct {
	// Waiting is the current depth.
	Waiting int
	// Admitted counts waits that obtained capacity.
	Admitted uint64
	// Rejected counts arrivals refused because the queue was full and
	// waiters pushed out by a higher priority (ErrFull).
	Rejected uint64
	// TimedOut counts waits ended by their TTL or deadline (ErrTimeout,
	// or the context's DeadlineExceeded, also when the TryFunc returned
	// it).
	TimedOut uint64
	// Canceled counts waits ended by their context's cancellation, also
	// when the TryFunc returned it.
	Canceled uint64
	// Failed counts waits ended by another TryFunc error, a TryFunc
	// panic or ErrNever.
	Failed uint64
}

// Queue is a bounded waiting queue. Create it with New; it is safe for
// concurrent use.
type Queue struct {
	try TryFunc
	cfg config

	mu     sync.Mutex
	h      waiters
	seq    uint64
	trying bool          // a head is inside try; nobody else may try
	next   time.Time     // no try before this instant (the last retry hint)
	slack  time.Duration // measured hand-off time: see observeLocked
	closed bool
	stats  Stats
}

// New returns a Queue that obtains capacity through try. Options and their
// defaults: WithSize(1024), WithTTL(0) (none), WithOrder(ByPriority),
// WithMinRetry(time.Millisecond), WithHandoff(time.Millisecond); a nil
// Option is ignored. It returns an error for a nil try or an invalid
// option value.
func New(try TryFunc, opts ...Option) (*Queue, error) {
	if try == nil {
		return nil, errors.New("queue: nil TryFunc")
	}
	cfg := config{size: 1024, order: ByPriority, minRetry: time.Millisecond, handoff: time.Millisecond}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	switch {
	case cfg.size < 1:
		return nil, fmt.Errorf("queue: size %d: must be at least 1", cfg.size)
	case cfg.ttl < 0:
		return nil, fmt.Errorf("queue: TTL %v: must not be negative", cfg.ttl)
	case cfg.order != ByPriority && cfg.order != FIFO:
		return nil, fmt.Errorf("queue: unknown order %d", cfg.order)
	case cfg.minRetry <= 0:
		return nil, fmt.Errorf("queue: minimum retry %v: must be positive", cfg.minRetry)
	case cfg.handoff < 0:
		return nil, fmt.Errorf("queue: hand-off %v: must not be negative", cfg.handoff)
	}
	return &Queue{try: try, cfg: cfg}, nil
}

// Len returns the number of waiters, for a queue-depth gauge.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.h)
}

// Stats returns the current depth and counters.
func (q *Queue) Stats() Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.stats
	s.Waiting = len(q.h)
	return s
}

// Ahead describes the waiters an arrival of priority would be served
// after (all of them under FIFO; else those of at least its priority, as
// in WaitFrom's projection): how many, the latest of their deadlines (zero
// when one of them has none: it may stay for as long as its context
// lasts), and the hand-off the projection allows each (WithHandoff, or the
// longest recent try). A caller the queue turned away (ErrFull, a
// *TimeoutError) estimates from it when asking again has a chance: the
// waiters ahead are served, or gone, by then.
func (q *Queue) Ahead(priority int) (n int, last time.Time, handoff time.Duration) {
	if q.cfg.order == FIFO {
		priority = 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.aheadLocked(priority)
}

// aheadLocked is Ahead with q.mu held and the priority made 0 under FIFO.
func (q *Queue) aheadLocked(priority int) (n int, last time.Time, handoff time.Duration) {
	noDeadline := false
	for _, w := range q.h {
		if w.prio < priority {
			continue
		}
		n++
		if w.deadline.IsZero() {
			noDeadline = true
		} else if w.deadline.After(last) {
			last = w.deadline
		}
	}
	if noDeadline {
		last = time.Time{}
	}
	return n, last, max(q.cfg.handoff, q.slack)
}

// Close makes every current waiter and every later Wait return ErrClosed.
// A try in flight completes; if it obtained capacity its waiter gets nil.
// Close is idempotent and always returns nil.
func (q *Queue) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	for _, w := range q.h {
		w.index = -1
		w.err = ErrClosed
		w.signal()
	}
	clear(q.h)
	q.h = q.h[:0]
	return nil
}

// Wait blocks until the queue's TryFunc obtained capacity for this caller
// (nil), or the wait ended: ErrFull (no room), a *TimeoutError (TTL or
// deadline), ctx.Err() (cancelled, or its deadline passed while waiting),
// ErrNever, ErrClosed, or the TryFunc's error. A higher priority is served
// first unless the order is FIFO. A waiter that leaves for any reason is
// removed from the queue at once.
func (q *Queue) Wait(ctx context.Context, priority int) error {
	return q.WaitFrom(ctx, priority, 0, 0)
}

// WaitFrom is Wait for a waiter that knows how soon it could be served at
// the earliest: not before earliest from now were it alone (its own retry
// hint), and each waiter to be served before it adds at least each (the
// time a bucket takes to refill the one unit any request needs; 0 when
// nothing is known). Every try, its own included, also costs a hand-off
// (see WithHandoff): a bucket that holds a single unit starts refilling
// the next one only when a try took the last, so these delays add up
// along the queue. A waiter whose deadline would pass before
//
//	earliest + (each + handoff) × (the waiters ahead of it) + handoff
//
// is refused at once with a *TimeoutError whose RetryAfter is that
// projection, rather than held for a unit that comes too late and refused
// then. Only the waiters already queued with at least its priority count
// (all of them under FIFO): later arrivals can only make its wait longer.
// A waiter it admits is served within its deadline as long as no hand-off
// takes longer than the projection allowed.
func (q *Queue) WaitFrom(ctx context.Context, priority int, earliest, each time.Duration) error {
	if earliest <= 0 && each <= 0 {
		return q.WaitProjected(ctx, priority, nil)
	}
	return q.WaitProjected(ctx, priority, func(ahead int, _ time.Time, handoff time.Duration) time.Duration {
		return project(ahead, earliest, each, handoff)
	})
}

// Projection is how soon from now a newcomer could be served, given the
// waiters that would be served before it as Ahead describes them: how
// many, the latest of their deadlines (zero when one of them has none),
// and the hand-off to allow each try, the newcomer's own included.
// WaitProjected calls it with the queue's lock held: it must be quick and
// must not call the Queue.
type Projection func(ahead int, last time.Time, handoff time.Duration) time.Duration

// WaitProjected is WaitFrom with the projection left to the caller, for a
// capacity that does not come back a unit at a time: a window's quota
// comes back all at once as each window opens (see
// internal/queueretry.After). A waiter whose deadline would pass before
// project's answer (taken under the queue's lock, so that nobody joins
// ahead meanwhile) is refused at once with a *TimeoutError whose
// RetryAfter is that answer. A nil project refuses nobody on arrival, as
// Wait.
func (q *Queue) WaitProjected(ctx context.Context, priority int, project Projection) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if q.cfg.order == FIFO {
		priority = 0
	}
	start := time.Now()
	w := &waiter{prio: priority, wake: make(chan struct{}, 1)}
	if q.cfg.ttl > 0 {
		w.deadline = start.Add(q.cfg.ttl)
	}
	if d, ok := ctx.Deadline(); ok && (w.deadline.IsZero() || d.Before(w.deadline)) {
		w.deadline = d
	}

	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	if !w.deadline.IsZero() && project != nil {
		// As for a head whose retry hint reaches its deadline: served at
		// the deadline is too late.
		if proj := project(q.aheadLocked(priority)); proj >= w.deadline.Sub(start) {
			// A refusal is a try that does not happen: the measured
			// hand-off fades as for one, or a stall measured once
			// would refuse every later arrival, and no try would
			// ever measure the store again.
			q.slack -= q.slack / 8
			q.stats.TimedOut++
			q.mu.Unlock()
			return &TimeoutError{Deadline: w.deadline, RetryAfter: proj}
		}
	}
	if len(q.h) >= q.cfg.size && !q.evictFor(priority) {
		q.stats.Rejected++
		q.mu.Unlock()
		return ErrFull
	}
	w.seq = q.seq
	q.seq++
	heap.Push(&q.h, w)
	q.kick()
	q.mu.Unlock()

	var ttl <-chan time.Time
	if q.cfg.ttl > 0 {
		t := time.NewTimer(q.cfg.ttl)
		defer t.Stop()
		ttl = t.C
	}
	var retry lazyTimer // most waits never need it
	defer retry.stop()
	var due time.Time // the instant the retry timer was armed for

	for {
		fired := false
		select {
		case <-w.wake:
		case <-retry.c():
			fired = true
		case <-ctx.Done():
			err := ctx.Err()
			return q.leave(w, err, func(s *Stats) {
				if errors.Is(err, context.DeadlineExceeded) {
					s.TimedOut++
				} else {
					s.Canceled++
				}
			})
		case <-ttl:
			err := &TimeoutError{Deadline: w.deadline, Waited: time.Since(start)}
			return q.leave(w, err, func(s *Stats) { s.TimedOut++ })
		}

		q.mu.Lock()
		if w.index < 0 { // pushed out or closed
			q.mu.Unlock()
			return w.err
		}
		if q.trying || q.h[0] != w {
			q.mu.Unlock()
			continue
		}
		if wait := time.Until(q.next); wait > 0 {
			if w.expiresBy(q.next) {
				q.stats.TimedOut++
				q.removeLocked(w)
				q.mu.Unlock()
				return &TimeoutError{Deadline: w.deadline, Waited: time.Since(start), RetryAfter: wait}
			}
			due = q.next
			q.mu.Unlock()
			retry.reset(wait)
			continue
		}
		q.trying = true
		q.mu.Unlock()

		began := time.Now()
		if fired && began.After(due) {
			began = due // the timer's lateness is part of the hand-off
		}
		ok, after, err := q.tryFor(ctx, w)

		q.mu.Lock()
		q.trying = false
		q.observeLocked(time.Since(began))
		switch {
		case ok:
			if w.index < 0 && w.err == ErrFull {
				// Pushed out while its try was in flight, which obtained
				// capacity: it is admitted (the capacity is its own), not
				// rejected as evictFor counted it.
				q.stats.Rejected--
			}
			q.stats.Admitted++
			q.removeLocked(w)
			q.mu.Unlock()
			return nil
		case w.index < 0: // pushed out or closed while trying
			q.kick()
			q.mu.Unlock()
			return w.err
		case err != nil:
			// A TryFunc that gives up when the waiter's context ends
			// returns the context's error: the context ended the
			// wait, not a failure of the try.
			switch cerr := ctx.Err(); {
			case cerr != nil && errors.Is(err, cerr) && errors.Is(cerr, context.DeadlineExceeded):
				q.stats.TimedOut++
			case cerr != nil && errors.Is(err, cerr):
				q.stats.Canceled++
			default:
				q.stats.Failed++
			}
			q.removeLocked(w)
			q.mu.Unlock()
			return err
		case after == Never:
			q.stats.Failed++
			q.removeLocked(w)
			q.mu.Unlock()
			return ErrNever
		}
		after = max(after, q.cfg.minRetry)
		now := time.Now()
		q.next = now.Add(after)
		if w.expiresBy(q.next) {
			q.stats.TimedOut++
			q.removeLocked(w)
			q.mu.Unlock()
			return &TimeoutError{Deadline: w.deadline, Waited: now.Sub(start), RetryAfter: after}
		}
		if q.h[0] != w { // a higher priority arrived while we tried
			q.kick()
		}
		due = q.next
		q.mu.Unlock()
		retry.reset(after)
	}
}

// tryFor calls the TryFunc for w, the head, with q.trying set. Should the
// TryFunc panic (or call runtime.Goexit), w leaves the queue, counted
// failed, and the next waiter is woken to try before the panic goes on: a
// try that never returned would hold q.trying, and w its place, for the
// rest of the queue's life, and net/http recovers a handler's panic, so
// the queue outlives it.
func (q *Queue) tryFor(ctx context.Context, w *waiter) (ok bool, after time.Duration, err error) {
	returned := false
	defer func() {
		if returned {
			return
		}
		q.mu.Lock()
		defer q.mu.Unlock()
		q.trying = false
		if w.index >= 0 { // else pushed out or closed, and counted then
			q.stats.Failed++
		}
		q.removeLocked(w)
	}()
	ok, after, err = q.try(ctx)
	returned = true
	return ok, after, err
}

// project is WaitFrom's projection, the soonest a newcomer could be
// served: earliest, plus each and a hand-off for every waiter that would
// be served before it (ahead), plus its own hand-off.
func project(n int, earliest, each, handoff time.Duration) time.Duration {
	ahead := int64(n)
	// Saturate rather than overflow: a projection past any deadline is
	// all that matters.
	step := int64(each) + int64(handoff)
	if step < 0 || int64(earliest) > math.MaxInt64-int64(handoff) {
		return Never
	}
	base := int64(earliest) + int64(handoff)
	if step > 0 && ahead > (math.MaxInt64-base)/step {
		return Never
	}
	return time.Duration(base + ahead*step)
}

// Observe records the duration of a try made outside the queue, such as
// the caller's own refused decision just before WaitFrom, as if the queue
// had made it: it tells the projection how long a trip to the store takes
// before the queue has timed one of its own, which matters for a crowd
// arriving at once.
func (q *Queue) Observe(d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.observeLocked(d)
}

// observeLocked records how long a try took, from the instant it was due
// (its retry timer's, so that the timer's lateness counts) to its answer:
// the hand-off aheadLocked hands a Projection is the longer of WithHandoff and the
// longest recent one, which fades by an eighth per try, and per arrival
// WaitProjected refuses, so that one stall does not make the queue refuse
// waiters for the rest of its life. q.mu is held.
func (q *Queue) observeLocked(d time.Duration) {
	q.slack = max(d, q.slack-q.slack/8)
}

// leave removes w after its own timeout or cancellation and returns err,
// unless someone else removed it first (pushed out, closed): then that
// outcome stands.
func (q *Queue) leave(w *waiter, err error, count func(*Stats)) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.index < 0 {
		return w.err
	}
	count(&q.stats)
	q.removeLocked(w)
	return err
}

// removeLocked takes w out of the heap (if still in) and wakes the new head.
func (q *Queue) removeLocked(w *waiter) {
	if w.index >= 0 {
		heap.Remove(&q.h, w.index)
	}
	q.kick()
}

// kick wakes the head so it tries, unless a try is in flight (its caller
// kicks when done).
func (q *Queue) kick() {
	if !q.trying && len(q.h) > 0 {
		q.h[0].signal()
	}
}

// evictFor pushes out the lowest-priority, latest waiter when an arrival of
// a strictly higher priority finds the queue full. It scans the waiters, so
// it costs O(size), paid only when the queue is full.
func (q *Queue) evictFor(priority int) bool {
	if q.cfg.order == FIFO {
		return false
	}
	var low *waiter
	for _, w := range q.h {
		if low == nil || w.prio < low.prio || (w.prio == low.prio && w.seq > low.seq) {
			low = w
		}
	}
	if low == nil || low.prio >= priority {
		return false
	}
	q.stats.Rejected++
	heap.Remove(&q.h, low.index)
	low.err = ErrFull
	low.signal()
	return true
}

// lazyTimer is a timer created on first use; its channel is nil until then.
type lazyTimer struct{ t *time.Timer }

func (l *lazyTimer) c() <-chan time.Time {
	if l.t == nil {
		return nil
	}
	return l.t.C
}

func (l *lazyTimer) reset(d time.Duration) {
	if l.t == nil {
		l.t = time.NewTimer(d)
		return
	}
	l.t.Reset(d)
}

func (l *lazyTimer) stop() {
	if l.t != nil {
		l.t.Stop()
	}
}

// waiter is one caller of Wait.
type waiter struct {
	prio     int
	seq      uint64
	index    int           // position in the heap; -1 once out of it
	wake     chan struct{} // capacity 1: a pending wake-up is never lost
	err      error         // the outcome when someone else removed it
	deadline time.Time     // zero: none
}

// expiresBy reports whether w's deadline comes no later than t: a try at t
// would be too late.
func (w *waiter) expiresBy(t time.Time) bool {
	return !w.deadline.IsZero() && !t.Before(w.deadline)
}

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// waiters is a heap: highest priority first, then arrival order.
type waiters []*waiter

func (h waiters) Len() int { return len(h) }
func (h waiters) Less(i, j int) bool {
	if h[i].prio != h[j].prio {
		return h[i].prio > h[j].prio
	}
	return h[i].seq < h[j].seq
}
func (h waiters) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *waiters) Push(x any) {
	w := x.(*waiter)
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *waiters) Pop() any {
	old := *h
	n := len(old) - 1
	w := old[n]
	old[n] = nil
	w.index = -1
	*h = old[:n]
	return w
}
