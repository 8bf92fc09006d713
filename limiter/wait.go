package limiter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/queueretry"
	"github.com/floodgate/floodgate/queue"
	"github.com/floodgate/floodgate/store"
)

// Wait blocks until n units for key are admitted, then returns nil.
//
// Waiters on one key of one Limiter are served first-in first-out, as
// with golang.org/x/time/rate: a Wait whose first take is refused lines
// up in the key's queue (package queue), only the waiter at its head asks
// the store again, when the refusal's RetryAfter says the units are back,
// and a Wait arriving while others wait on the key lines up behind them
// instead of taking first. A Wait that nobody waits before costs what
// AllowN costs: one store call. Waiters in other processes, other Limiters
// sharing the store, and AllowN or Reserve callers are not in the queue:
// they take units as they come, and can make a waiter's wait longer.
//
// Wait returns a *RetryError (errors.Is ErrLimited) whenever ctx's
// deadline ends the wait:
//
//   - at once when the wait would outlast the deadline, which has not
//     passed: for a refusal, its RetryAfter plus the Delay an admission
//     would then carry (algo.Limit.AdmissionDelay: a shaper's queue, a
//     smooth limiter's MaxWait); behind other waiters, the queue's
//     projection (queue.Queue.WaitProjected), which has the waiters ahead
//     take the units first, one each, then adds this waiter's own retry:
//     a unit's refill time per waiter ahead for TokenBucket, GCRA and
//     Shaper, and the stable rate's for SmoothBursty and SmoothWarmup
//     (what they pace at once refusals have used up their stored
//     permits); the quota as each window opens for FixedWindow,
//     SlidingWindow and SlidingLog; counting only the units handed out
//     before the last of the ahead waiters' deadlines (who stays past its
//     deadline leaves with nothing); and a hand-off of at least 100µs per
//     try, its own included. After is that wait. The projection is exact
//     for FixedWindow and the buckets; for SlidingLog and SlidingWindow,
//     whose units come back as the requests that took them age out of
//     the window rather than all at its start, and for a SmoothWarmup
//     key with stored permits left (colder, slower), it can be short, and
//     the waiter it lets in may then reach its deadline in the queue.
//   - when the deadline passes: in the queue (the projection let the
//     waiter in, but AllowN callers or other processes took the units), in
//     an admitted Delay, during a store call, or before Wait was called.
//     The error then also matches context.DeadlineExceeded (its Err), and
//     After is Wait's best estimate: in the queue, the time until the
//     head's next try plus, for the waiters still queued, a unit's refill
//     time each (a window's quota as each window opens); in a Delay, what
//     remained of it; otherwise 0.
//
// A Wait that would queue behind WithMaxWaiters others on key
// (DefaultMaxWaiters, 1024) returns at once a *RetryError matching
// ErrQueueFull (and ErrLimited), its After when the waiters ahead will
// have been served: the limit's retry, then a unit's refill each (for a
// window, its quota as each window opens), counting only the units handed
// out before the last of their deadlines, and a hand-off each, its own
// included (the estimate policy's wait strategy gives a request its queue
// turns away); a deadline the wait would outlast is told first, as above.
//
// A cancelled ctx gives its error (context.Canceled), wrapped. Wait
// returns an error wrapping ErrNever when n exceeds the capacity, and the
// store's errors as they are. An admitted decision with a Delay (Shaper,
// SmoothBursty, SmoothWarmup) is waited out as well; if that wait cannot
// finish, the units are given back (store.Refund): exactly for Shaper,
// inexactly for SmoothBursty and SmoothWarmup, whose stored permits are
// not restored and whose ticket moves back only by the units' worth at the
// stable rate (see Reservation.Cancel), leaving the key stricter than if
// the Wait had not been made. Every error names the limiter. Wait
// sleeps with time.Timer.
//
// A Concurrency limit has no Wait: its units are slots that a Wait could
// never release. Wait returns an error wrapping store.ErrBadRequest; use
// Acquire and Release. A negative n is an error wrapping
// store.ErrBadRequest.
func (l *Limiter) Wait(ctx context.Context, key string, n int64) error {
	if !l.made() {
		return errNotMade
	}
	if l.limit.Algorithm() == algo.Concurrency {
		return fmt.Errorf("limiter %q: %w: Wait on a concurrency limit would hold a slot nothing can release: use Acquire and Release", l.name, store.ErrBadRequest)
	}
	if l.waits.n.Load() != 0 {
		return waitQueued(ctx, l, l.waits, key, n, nil)
	}
	var start time.Time
	if l.mem == nil {
		start = time.Now() // a remote store's trip tells the queue what a try costs
	}
	d, res, err := l.take(ctx, key, n, 0)
	if err != nil {
		return ended(ctx, l.name, err, 0)
	}
	if d.Allowed {
		return hold(ctx, l, key, n, grant{lim: l.limit, at: res.At, fallback: res.Fallback}, d.Delay)
	}
	first := refused{d: d, lim: l.limit}
	if l.mem == nil {
		first.took = time.Since(start)
	}
	return waitQueued(ctx, l, l.waits, key, n, &first)
}

// waitTake, waitPeek, waitGiveBack and waitName make a Limiter a
// waitTarget.
func (l *Limiter) waitTake(ctx context.Context, key string, n int64) (algo.Decision, grant, error) {
	d, res, err := l.take(ctx, key, n, 0)
	return d, grant{lim: l.limit, at: res.At, fallback: res.Fallback}, err
}

func (l *Limiter) waitPeek(ctx context.Context, key string, n int64) (algo.Decision, *algo.Limit, error) {
	d, err := l.Peek(ctx, key, n)
	return d, l.limit, err
}

func (l *Limiter) waitGiveBack(ctx context.Context, key string, n int64, g grant) error {
	return l.giveBack(ctx, key, n, g.at, 0, g.fallback)
}

func (l *Limiter) waitName() string { return l.name }

// Wait blocks until n units are admitted, as Limiter.Wait does for a key:
// waiters are served first-in first-out through one queue, and a Wait
// that nobody waits before costs one decision. Its errors are
// Limiter.Wait's, starting with "limiter: ": a *RetryError when ctx's
// deadline ends the wait (at once when the wait would outlast it; matching
// context.DeadlineExceeded as well when it has passed, before Wait was
// called included), ctx's error when ctx is cancelled, and one wrapping
// ErrNever when n exceeds the capacity (and on the zero Local, which has
// no limit). An admitted Delay is waited out, and the units given back if
// that wait cannot finish: exactly for Shaper, inexactly for SmoothBursty
// and SmoothWarmup (see LocalReservation.Cancel). At most WithLocalMaxWaiters Waits queue
// (DefaultMaxWaiters, 1024): one more gets a *RetryError matching
// ErrQueueFull at once. A negative n is an error wrapping
// store.ErrBadRequest.
func (l *Local) Wait(ctx context.Context, n int64) error {
	if n < 0 {
		return fmt.Errorf("limiter: %w: cost %d is negative", store.ErrBadRequest, n)
	}
	if err := ctx.Err(); err != nil {
		return ended(ctx, "", err, 0)
	}
	if l.waits.n.Load() != 0 {
		return waitQueued(ctx, l, &l.waits, "", n, nil)
	}
	d, at, lim, gen := l.take(n)
	if lim == nil {
		return errZeroLocal
	}
	if d.Allowed {
		return hold(ctx, l, "", n, grant{lim: lim, at: at, gen: gen}, d.Delay)
	}
	return waitQueued(ctx, l, &l.waits, "", n, &refused{d: d, lim: lim})
}

// errZeroLocal is what the zero Local's Wait returns.
var errZeroLocal = fmt.Errorf("%w: the zero Local has no limit to apply; create it with NewLocal", ErrNever)

// waitTake, waitPeek, waitGiveBack and waitName make a Local a waitTarget
// with the one key "".
func (l *Local) waitTake(_ context.Context, _ string, n int64) (algo.Decision, grant, error) {
	d, at, lim, gen := l.take(n)
	if lim == nil {
		return d, grant{}, errZeroLocal
	}
	return d, grant{lim: lim, at: at, gen: gen}, nil
}

func (l *Local) waitPeek(_ context.Context, _ string, n int64) (algo.Decision, *algo.Limit, error) {
	d := l.Peek(n)
	lim := l.Limit()
	if lim == nil {
		return d, nil, errZeroLocal
	}
	return d, lim, nil
}

func (l *Local) waitGiveBack(_ context.Context, _ string, n int64, g grant) error {
	l.giveBack(n, g.at, g.gen)
	return nil
}

func (l *Local) waitName() string { return "" }

// waitTarget is what a Wait takes units from: a key of a Limiter, or a
// Local, whose key is always "". Past the first take, the one
// implementation of waitQueued, tryWaiter and hold serves both.
type waitTarget interface {
	// waitTake decides n units for key now and takes them if admitted.
	waitTake(ctx context.Context, key string, n int64) (algo.Decision, grant, error)
	// waitPeek returns the decision waitTake would make, taking nothing,
	// and the limit it was made under.
	waitPeek(ctx context.Context, key string, n int64) (algo.Decision, *algo.Limit, error)
	// waitGiveBack gives back n units that waitTake admitted with g.
	waitGiveBack(ctx context.Context, key string, n int64, g grant) error
	// waitName is the name errors start with: "" for a Local.
	waitName() string
}

// grant is what a decision was made with, for giving its units back.
type grant struct {
	lim *algo.Limit // the limit that decided
	at  int64       // the decision's instant
	gen uint64      // a Local's state generation
	// fallback: a store's failure policy decided (store.Result.Fallback),
	// charging nothing on the store to give back.
	fallback bool
}

// refused is a Wait's first take, when it was refused.
type refused struct {
	d    algo.Decision
	lim  *algo.Limit
	took time.Duration // the store's trip; 0 in process
}

// waitQueued is Wait past its first take: first is that take's refusal, or
// nil when someone waits on t and key's queue must be looked at before
// taking anything.
func waitQueued(ctx context.Context, t waitTarget, ws *waitQueues, key string, n int64, first *refused) error {
	name := t.waitName()
	w := &waitSlot{t: t, key: key, n: n}
	wq := ws.join(key, false)
	var d algo.Decision
	var lim *algo.Limit
	var took time.Duration
	switch {
	case first != nil:
		d, lim, took = first.d, first.lim, first.took
		w.hint, w.hintAt = d.RetryAfter, time.Now()
	case wq != nil:
		// Others wait on key: line up behind them, taking nothing. Peek
		// says how soon the units could be there were it alone; the queue
		// adds the waiters ahead.
		var err error
		if d, lim, err = t.waitPeek(ctx, key, n); err != nil {
			ws.leave(key, wq)
			return ended(ctx, name, err, 0)
		}
	default:
		// Nobody waits on key: take, as Wait does.
		var g grant
		var err error
		if d, g, err = t.waitTake(ctx, key, n); err != nil {
			return ended(ctx, name, err, 0)
		}
		if d.Allowed {
			return hold(ctx, t, key, n, g, d.Delay)
		}
		lim = g.lim
		w.hint, w.hintAt = d.RetryAfter, time.Now()
	}
	w.adm = lim.AdmissionDelay(n)
	if err := refusal(ctx, name, n, &d, lim, w.adm); err != nil {
		if re, ok := errors.AsType[*RetryError](err); ok && wq != nil {
			// Behind others: the waiters ahead take the units first, as
			// the queue's projection counts them (a refusal by the queue
			// itself tells the same).
			re.After = max(re.After, roundUp(wq.estimate(lim)))
		}
		ws.leaveIf(key, wq)
		return err
	}
	if wq == nil {
		wq = ws.join(key, true)
	}
	w.wq = wq
	if took > 0 {
		wq.q.Observe(took)
	}
	own := retryOf(d) + w.adm
	err := wq.q.WaitProjected(context.WithValue(ctx, slotKey{}, w), 0, func(ahead int, last time.Time, handoff time.Duration) time.Duration {
		// The waiters ahead take the units first: a unit's refill each, a
		// window's quota as each window opens, and only until they must
		// leave; then this waiter's own, a hand-off each.
		return queueretry.After(lim, own, ahead, queueretry.Left(last), handoff)
	})
	if err != nil {
		var after time.Duration
		if errors.Is(err, queue.ErrFull) {
			after = queueretry.Behind(wq.q, 0, lim, max(wq.headIn(), own))
		} else {
			after = wq.estimate(lim)
		}
		ws.leave(key, wq)
		return waitError(ctx, name, err, after)
	}
	ws.leave(key, wq)
	return hold(ctx, t, key, n, w.g, w.d.Delay)
}

// tryWaiter is the TryFunc of every Wait queue: it takes for the waiter at
// the head of a queue.
func tryWaiter(ctx context.Context) (bool, time.Duration, error) {
	w, ok := ctx.Value(slotKey{}).(*waitSlot)
	if !ok {
		return false, 0, errors.New("limiter: wait queue called without a waiter")
	}
	if h := w.reuseHint(); h > 0 {
		w.wq.retryIn(h)
		return false, h, nil
	}
	d, g, err := w.t.waitTake(ctx, w.key, w.n)
	switch {
	case err != nil:
		return false, 0, err
	case d.Allowed:
		w.d, w.g = d, g
		return true, 0, nil
	}
	if err := refusal(ctx, w.t.waitName(), w.n, &d, g.lim, g.lim.AdmissionDelay(w.n)); err != nil {
		return false, 0, err
	}
	w.wq.retryIn(d.RetryAfter)
	return false, d.RetryAfter, nil
}

// hold waits out an admitted decision's delay; when it cannot, the units
// will not be used and are given back, even if ctx is already done.
func hold(ctx context.Context, t waitTarget, key string, n int64, g grant, delay time.Duration) error {
	if delay <= 0 {
		return nil
	}
	if err := sleep(ctx, t.waitName(), delay); err != nil {
		if rerr := t.waitGiveBack(context.WithoutCancel(ctx), key, n, g); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
	return nil
}

// refusal returns the error that ends a Wait refused with d, under lim, at
// once: the cost can never pass, or the wait would outlast ctx's deadline.
func refusal(ctx context.Context, name string, n int64, d *algo.Decision, lim *algo.Limit, adm time.Duration) error {
	if d.IsNever() {
		err := fmt.Errorf("%w: cost %d, capacity %d", ErrNever, n, d.Limit)
		if lim != nil && lim.MaxCost() != d.Limit {
			// The Smooth algorithms admit a request beyond their capacity,
			// up to MaxCost: that is the bound the cost passed.
			err = fmt.Errorf("%w: cost %d, at most %d a request (capacity %d)", ErrNever, n, lim.MaxCost(), d.Limit)
		}
		if name == "" {
			return err // ErrNever's text starts with "limiter: "
		}
		return wrapName(name, err)
	}
	if tooLate(ctx, d.RetryAfter, adm) {
		return retryError(ctx, name, d.RetryAfter)
	}
	return nil
}

// waitQueues are the Wait queues of a Limiter, one per key with waiters,
// or of a Local, one under the key "": created on demand, dropped when the
// last waiter leaves, so that an idle key costs nothing. The zero value is
// ready to use.
type waitQueues struct {
	// n counts the waiters holding a queue: a Wait that reads 0 goes
	// straight to the store, with no lock and no map.
	n atomic.Int64
	// size bounds each queue's waiters; 0 is DefaultMaxWaiters.
	size int
	mu   sync.Mutex // guards m and the refs; never held across a store call
	m    map[string]*waitQueue
}

type waitQueue struct {
	q    *queue.Queue
	refs int
	// next is when the head's latest refusal said its units could be
	// back, as time since born: what a waiter whose deadline passes behind
	// others estimates its RetryError's After from.
	born time.Time
	next atomic.Int64
}

// retryIn records that the head's units could be back after d.
func (wq *waitQueue) retryIn(d time.Duration) {
	wq.next.Store(int64(time.Since(wq.born) + d))
}

// estimate is how long a Wait joining wq now would wait at least: until
// the head's next try, then what every waiter in the queue takes: a unit's
// refill each, or a window's quota as each window opens (queueretry.After,
// with no hand-offs and no deadlines counted).
func (wq *waitQueue) estimate(lim *algo.Limit) time.Duration {
	return queueretry.After(lim, wq.headIn(), wq.q.Len(), -1, 0)
}

// headIn is how soon the head's latest refusal said its units could be
// back; 0 once that has passed.
func (wq *waitQueue) headIn() time.Duration {
	return max(time.Duration(wq.next.Load())-time.Since(wq.born), 0)
}

// queueOptions are those of every Wait queue, to which join adds the
// bound on its waiters (waitQueues.size): FIFO; retries as soon as a
// refusal's RetryAfter says, down to 10µs rather than the queue's 1ms, so
// that a busy key's waiters are not held back; and a hand-off of at least
// 100µs rather than 1ms in the projection that refuses a waiter on
// arrival: a library's try is a memory store's
// microsecond or one round trip to a remote store, which Wait reports
// (Observe), and the queue adds what it measures beyond (a late timer).
// With 1ms, 6 hand-offs would not fit in the 5ms that golang.org/x/time/rate
// leaves the 6th of 10 waiters arriving 1ms apart on a 20/s, burst 1 limit
// with 300ms deadlines, and the queue would refuse it where rate admits it.
var queueOptions = []queue.Option{
	queue.WithOrder(queue.FIFO),
	queue.WithMinRetry(10 * time.Microsecond),
	queue.WithHandoff(100 * time.Microsecond),
}

// join returns key's queue with one more reference, creating it if there
// is none and create is set, and returning nil then otherwise.
func (ws *waitQueues) join(key string, create bool) *waitQueue {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	wq := ws.m[key]
	if wq == nil {
		if !create {
			return nil
		}
		size := ws.size
		if size == 0 {
			size = DefaultMaxWaiters
		}
		q, err := queue.New(tryWaiter, append(queueOptions[:len(queueOptions):len(queueOptions)], queue.WithSize(size))...)
		if err != nil {
			panic("limiter: " + err.Error()) // queueOptions are constant and valid, size checked by New
		}
		if ws.m == nil {
			ws.m = map[string]*waitQueue{}
		}
		wq = &waitQueue{q: q, born: time.Now()}
		ws.m[key] = wq
	}
	wq.refs++
	ws.n.Add(1)
	return wq
}

// leaveIf is leave for a queue that may be nil.
func (ws *waitQueues) leaveIf(key string, wq *waitQueue) {
	if wq != nil {
		ws.leave(key, wq)
	}
}

// leave drops a reference join gave, and the queue with the last one.
func (ws *waitQueues) leave(key string, wq *waitQueue) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.n.Add(-1)
	if wq.refs--; wq.refs == 0 {
		delete(ws.m, key)
		_ = wq.q.Close()
	}
}

// waitSlot is one waiter's request and, once admitted, its decision; the
// queue hands it to the TryFunc in the context.
type waitSlot struct {
	t   waitTarget
	wq  *waitQueue
	key string
	n   int64
	adm time.Duration // the limit's AdmissionDelay(n)
	// hint is the RetryAfter of the waiter's own refusal at hintAt: its
	// first try, if it comes before that refusal's units can be back, asks
	// nothing of the store.
	hint   time.Duration
	hintAt time.Time

	d algo.Decision
	g grant
}

type slotKey struct{}

// reuseHint returns what remains of the waiter's own refusal's RetryAfter,
// once: a new queue's head tries at once, and the store would only
// repeat that refusal.
func (w *waitSlot) reuseHint() time.Duration {
	if w.hint <= 0 {
		return 0
	}
	h := w.hint - time.Since(w.hintAt)
	w.hint = 0
	return h
}

// retryOf is how soon d's units could be taken: 0 when it admits.
func retryOf(d algo.Decision) time.Duration {
	if d.Allowed {
		return 0
	}
	return d.RetryAfter
}

// waitError is the error a queue ended a wait with, as Wait returns it: a
// refusal on arrival or of the head becomes a *RetryError, a full queue
// one wrapping ErrQueueFull with after (the queue's estimate) for After,
// the context's errors are ended's with after for After, and the
// TryFunc's own errors already name the limiter.
func waitError(ctx context.Context, name string, err error, after time.Duration) error {
	var te *queue.TimeoutError
	switch {
	case errors.As(err, &te):
		if te.RetryAfter > 0 {
			after = te.RetryAfter
		}
		return retryError(ctx, name, after)
	case errors.Is(err, queue.ErrFull):
		return &RetryError{Limiter: name, After: roundUp(after), Err: ErrQueueFull}
	case errors.Is(err, queue.ErrClosed), errors.Is(err, queue.ErrNever):
		return wrapName(name, err) // not expected: closed when empty, Never is ErrNever
	}
	return ended(ctx, name, err, after)
}

// ended returns err, which ended a Wait, as Wait returns it. When ctx's
// deadline has passed and err is or wraps its error (from the queue, a
// sleep, a store call, or before Wait began) it is a *RetryError wrapping
// that error, with after for After: a caller that maps ErrLimited to "too
// many requests" sees a deadline the same whether it was foreseen or not.
// Otherwise ctx's own error is named, and any other err returned as is.
func ended(ctx context.Context, name string, err error, after time.Duration) error {
	var re *RetryError
	switch cerr := ctx.Err(); {
	case errors.As(err, &re):
		return err
	case cerr != nil && errors.Is(cerr, context.DeadlineExceeded) && errors.Is(err, context.DeadlineExceeded):
		return &RetryError{Limiter: name, After: roundUp(after), Err: cerr}
	case err == cerr:
		return wrapName(name, err)
	}
	return err
}

// retryError is the *RetryError of a Wait that ctx's deadline ends, with
// after for After; it wraps ctx's error once the deadline has passed.
func retryError(ctx context.Context, name string, after time.Duration) error {
	re := &RetryError{Limiter: name, After: roundUp(after)}
	if err := ctx.Err(); errors.Is(err, context.DeadlineExceeded) {
		re.Err = err
	}
	return re
}

// roundUp rounds d up to a microsecond, as algo.Decision rounds its
// durations: the queue's projections are measured in nanoseconds.
func roundUp(d time.Duration) time.Duration {
	if d <= 0 || d >= algo.Never-time.Microsecond {
		return d
	}
	return (d + time.Microsecond - 1).Truncate(time.Microsecond)
}

// sleep waits d, or returns a *RetryError at once if d would outlast ctx's
// deadline, or ended's error if ctx ends first, naming the limiter.
func sleep(ctx context.Context, name string, d time.Duration) error {
	if tooLate(ctx, d, 0) {
		return retryError(ctx, name, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	due := time.Now().Add(d)
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ended(ctx, name, ctx.Err(), max(time.Until(due), 0))
	}
}

// tooLate reports whether a wait of d after which another of then must
// follow would outlast ctx's deadline.
func tooLate(ctx context.Context, d, then time.Duration) bool {
	dl, ok := ctx.Deadline()
	if !ok {
		return false
	}
	total := d + then
	if total < d {
		total = algo.Never // overflowed: no deadline is that far
	}
	return time.Until(dl) < total
}

// wrapName prefixes err with the limiter's name, or with "limiter" for a
// Local, which has none. The package's own errors start with "limiter: ";
// that prefix is dropped from err's text after the name, so that the text
// says "limiter" once (`limiter "w": cost exceeds …`, not
// `limiter "w": limiter: cost exceeds …`); errors.Is and errors.As still
// see err.
func wrapName(name string, err error) error {
	return &namedError{name: name, err: err}
}

// namedError is wrapName's error.
type namedError struct {
	name string
	err  error
}

func (e *namedError) Error() string {
	msg := strings.TrimPrefix(e.err.Error(), "limiter: ")
	if e.name == "" {
		return "limiter: " + msg
	}
	return "limiter " + strconv.Quote(e.name) + ": " + msg
}

func (e *namedError) Unwrap() error { return e.err }
