package limiter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/algo"
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
// Wait returns at once a *RetryError (errors.Is ErrLimited) when the wait
// would outlast ctx's deadline: for a refusal, its RetryAfter plus the
// Delay an admission would then carry (algo.Limit.AdmissionDelay: a
// shaper's queue, a smooth limiter's MaxWait); behind other waiters, the
// queue's projection (queue.Queue.WaitFrom: each waiter ahead takes a
// unit's refill time and a hand-off of at least 100µs), which is then the
// RetryError's After. A waiter that the projection let in but that
// is still refused when its deadline comes (others took the units) gets
// the *RetryError then. Wait returns an error wrapping ErrNever when n
// exceeds the capacity, and one wrapping ctx's error when ctx ends first.
// An admitted decision with a Delay (Shaper, SmoothBursty, SmoothWarmup)
// is waited out as well; if that wait cannot finish, the units are given
// back. Every error names the limiter. Wait sleeps with time.Timer.
//
// A Concurrency limit has no Wait: its units are slots that a Wait could
// never release. Wait returns an error wrapping store.ErrBadRequest; use
// Acquire and Release. A negative n is an error wrapping
// store.ErrBadRequest.
func (l *Limiter) Wait(ctx context.Context, key string, n int64) error {
	if l.limit.Algorithm() == algo.Concurrency {
		return fmt.Errorf("limiter %q: %w: Wait on a concurrency limit would hold a slot nothing can release: use Acquire and Release", l.name, store.ErrBadRequest)
	}
	if l.waits.n.Load() != 0 {
		return l.waitQueued(ctx, key, n, nil, 0)
	}
	var start time.Time
	if l.mem == nil {
		start = time.Now() // a remote store's trip tells the queue what a try costs
	}
	d, at, err := l.take(ctx, key, n, 0)
	if err != nil {
		return err
	}
	if d.Allowed {
		return l.hold(ctx, key, n, at, d.Delay)
	}
	var took time.Duration
	if l.mem == nil {
		took = time.Since(start)
	}
	return l.waitQueued(ctx, key, n, &d, took)
}

// waitQueued is Wait past its first take: first is that take's refusal,
// made in took, or nil when someone waits on the limiter and key's queue
// must be looked at before taking anything.
func (l *Limiter) waitQueued(ctx context.Context, key string, n int64, first *algo.Decision, took time.Duration) error {
	w := &waitSlot{key: key, n: n, adm: l.limit.AdmissionDelay(n)}
	wq := l.waits.join(key, nil)
	var d algo.Decision
	switch {
	case first != nil:
		d = *first
		w.hint, w.hintAt = d.RetryAfter, time.Now()
	case wq != nil:
		// Others wait on key: line up behind them, taking nothing. Peek
		// says how soon the units could be there were it alone; the queue
		// adds the waiters ahead.
		var err error
		if d, err = l.Peek(ctx, key, n); err != nil {
			l.waits.leave(key, wq)
			return err
		}
	default:
		// Nobody waits on key: take, as Wait does.
		var at int64
		var err error
		if d, at, err = l.take(ctx, key, n, 0); err != nil {
			return err
		}
		if d.Allowed {
			return l.hold(ctx, key, n, at, d.Delay)
		}
		w.hint, w.hintAt = d.RetryAfter, time.Now()
	}
	if err := l.refusal(ctx, n, &d, w.adm); err != nil {
		l.waits.leaveIf(key, wq)
		return err
	}
	if wq == nil {
		wq = l.waits.join(key, l.tryWaiter)
	}
	if took > 0 {
		wq.q.Observe(took)
	}
	err := wq.q.WaitFrom(context.WithValue(ctx, slotKey{}, w), 0, retryOf(d)+w.adm, l.each)
	l.waits.leave(key, wq)
	if err != nil {
		return waitError(ctx, l.name, err)
	}
	return l.hold(ctx, key, n, w.at, w.d.Delay)
}

// tryWaiter is the TryFunc of the limiter's queues: it takes for the
// waiter at the head of a key's queue.
func (l *Limiter) tryWaiter(ctx context.Context) (bool, time.Duration, error) {
	w, ok := ctx.Value(slotKey{}).(*waitSlot)
	if !ok {
		return false, 0, errors.New("limiter: wait queue called without a waiter")
	}
	if h := w.reuseHint(); h > 0 {
		return false, h, nil
	}
	d, at, err := l.take(ctx, w.key, w.n, 0)
	switch {
	case err != nil:
		return false, 0, err
	case d.Allowed:
		w.d, w.at = d, at
		return true, 0, nil
	}
	if err := l.refusal(ctx, w.n, &d, w.adm); err != nil {
		return false, 0, err
	}
	return false, d.RetryAfter, nil
}

// hold waits out an admitted decision's delay; when it cannot, the units
// will not be used and are given back, even if ctx is already done.
func (l *Limiter) hold(ctx context.Context, key string, n, at int64, delay time.Duration) error {
	if delay <= 0 {
		return nil
	}
	if err := sleep(ctx, l.name, delay); err != nil {
		if rerr := l.giveBack(context.WithoutCancel(ctx), key, n, at, 0); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
	return nil
}

// refusal returns the error that ends a Wait refused with d at once: the
// cost can never pass, or the wait would outlast ctx's deadline.
func (l *Limiter) refusal(ctx context.Context, n int64, d *algo.Decision, adm time.Duration) error {
	if d.IsNever() {
		return l.errNever(n, d.Limit)
	}
	if tooLate(ctx, d.RetryAfter, adm) {
		return &RetryError{Limiter: l.name, After: d.RetryAfter}
	}
	return nil
}

func (l *Limiter) errNever(n, capacity int64) error {
	return fmt.Errorf("limiter %q: %w: cost %d, capacity %d", l.name, ErrNever, n, capacity)
}

// Wait blocks until n units are admitted, as Limiter.Wait does for a key:
// waiters are served first-in first-out through one queue, a Wait that
// nobody waits before costs one decision, and it returns a *RetryError at
// once when the wait would outlast ctx's deadline, an error wrapping
// ErrNever when n exceeds the capacity (and on the zero Local, which has
// no limit), and one wrapping ctx's error when ctx ends first; an
// admitted Delay is waited out, and the units given back if that wait
// cannot finish. Its errors start with "limiter: ". A negative n is an
// error wrapping store.ErrBadRequest.
func (l *Local) Wait(ctx context.Context, n int64) error {
	if n < 0 {
		return fmt.Errorf("limiter: %w: cost %d is negative", store.ErrBadRequest, n)
	}
	if err := ctx.Err(); err != nil {
		return wrapName("", err)
	}
	if l.waits.n.Load() != 0 {
		return l.waitQueued(ctx, n, nil)
	}
	d, at, lim, gen := l.take(n)
	if lim == nil {
		return errZeroLocal
	}
	if d.Allowed {
		return l.hold(ctx, n, at, gen, d.Delay)
	}
	return l.waitQueued(ctx, n, &d)
}

// errZeroLocal is what the zero Local's Wait returns.
var errZeroLocal = fmt.Errorf("%w: the zero Local has no limit to apply; create it with NewLocal", ErrNever)

// waitQueued is Local.Wait past its first decision, as for Limiter.
func (l *Local) waitQueued(ctx context.Context, n int64, first *algo.Decision) error {
	w := &waitSlot{n: n}
	wq := l.waits.join("", nil)
	var d algo.Decision
	switch {
	case first != nil:
		d = *first
		w.hint, w.hintAt = d.RetryAfter, time.Now()
	case wq != nil:
		d = l.Peek(n) // see Limiter.waitQueued
	default:
		var at int64
		var lim *algo.Limit
		var gen uint64
		if d, at, lim, gen = l.take(n); lim == nil {
			return errZeroLocal
		}
		if d.Allowed {
			return l.hold(ctx, n, at, gen, d.Delay)
		}
		w.hint, w.hintAt = d.RetryAfter, time.Now()
	}
	lim := l.Limit()
	if lim == nil {
		l.waits.leaveIf("", wq)
		return errZeroLocal
	}
	w.adm = lim.AdmissionDelay(n)
	if err := localRefusal(ctx, n, &d, w.adm); err != nil {
		l.waits.leaveIf("", wq)
		return err
	}
	if wq == nil {
		wq = l.waits.join("", l.tryWaiter)
	}
	err := wq.q.WaitFrom(context.WithValue(ctx, slotKey{}, w), 0, retryOf(d)+w.adm, unitInterval(lim))
	l.waits.leave("", wq)
	if err != nil {
		return waitError(ctx, "", err)
	}
	return l.hold(ctx, n, w.at, w.gen, w.d.Delay)
}

// localRefusal is Limiter.refusal for a Local.
func localRefusal(ctx context.Context, n int64, d *algo.Decision, adm time.Duration) error {
	if d.IsNever() {
		return fmt.Errorf("%w: cost %d, capacity %d", ErrNever, n, d.Limit)
	}
	if tooLate(ctx, d.RetryAfter, adm) {
		return &RetryError{After: d.RetryAfter}
	}
	return nil
}

// tryWaiter is the TryFunc of the Local's queue.
func (l *Local) tryWaiter(ctx context.Context) (bool, time.Duration, error) {
	w, ok := ctx.Value(slotKey{}).(*waitSlot)
	if !ok {
		return false, 0, errors.New("limiter: wait queue called without a waiter")
	}
	if h := w.reuseHint(); h > 0 {
		return false, h, nil
	}
	d, at, lim, gen := l.take(w.n)
	switch {
	case lim == nil:
		return false, 0, errZeroLocal
	case d.Allowed:
		w.d, w.at, w.gen = d, at, gen
		return true, 0, nil
	}
	if err := localRefusal(ctx, w.n, &d, lim.AdmissionDelay(w.n)); err != nil {
		return false, 0, err
	}
	return false, d.RetryAfter, nil
}

// hold is Limiter.hold for a Local.
func (l *Local) hold(ctx context.Context, n, at int64, gen uint64, delay time.Duration) error {
	if delay <= 0 {
		return nil
	}
	if err := sleep(ctx, "", delay); err != nil {
		l.giveBack(n, at, gen)
		return err
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
	n  atomic.Int64
	mu sync.Mutex // guards m and the refs; never held across a store call
	m  map[string]*waitQueue
}

type waitQueue struct {
	q    *queue.Queue
	refs int
}

// queueOptions are those of every Wait queue: FIFO; no bound on the
// number of waiters (Wait never had one; the deadlines bound the waits);
// retries as soon as a refusal's RetryAfter says, down to 10µs rather
// than the queue's 1ms, so that a busy key's waiters are not held back;
// and a hand-off of at least 100µs rather than 1ms in the projection that
// refuses a waiter on arrival: a library's try is a memory store's
// microsecond or one round trip to a remote store, which Wait reports
// (Observe), and the queue adds what it measures beyond (a late timer).
// With 1ms, 6 hand-offs would not fit in the 5ms that golang.org/x/time/rate
// leaves the 6th of 10 waiters arriving 1ms apart on a 20/s, burst 1 limit
// with 300ms deadlines, and the queue would refuse it where rate admits it.
var queueOptions = []queue.Option{
	queue.WithOrder(queue.FIFO),
	queue.WithSize(math.MaxInt),
	queue.WithMinRetry(10 * time.Microsecond),
	queue.WithHandoff(100 * time.Microsecond),
}

// join returns key's queue with one more reference, creating it with try
// if there is none; with a nil try it returns nil then.
func (ws *waitQueues) join(key string, try queue.TryFunc) *waitQueue {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	wq := ws.m[key]
	if wq == nil {
		if try == nil {
			return nil
		}
		q, err := queue.New(try, queueOptions...)
		if err != nil {
			panic("limiter: " + err.Error()) // queueOptions are constant and valid
		}
		if ws.m == nil {
			ws.m = map[string]*waitQueue{}
		}
		wq = &waitQueue{q: q}
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
	key string
	n   int64
	adm time.Duration // the limit's AdmissionDelay(n)
	// hint is the RetryAfter of the waiter's own refusal at hintAt: its
	// first try, if it comes before that refusal's units can be back, asks
	// nothing of the store.
	hint   time.Duration
	hintAt time.Time

	d   algo.Decision
	at  int64
	gen uint64 // Local's state generation
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

// unitInterval is the time a limit takes to refill one unit, what each
// waiter ahead in a queue adds to a wait at least; 0 when it has no
// steady refill (the windows free their units all at once).
func unitInterval(l *algo.Limit) time.Duration {
	switch l.Algorithm() {
	case algo.TokenBucket, algo.GCRA, algo.Shaper:
		p := l.Params()
		return p.Period / time.Duration(p.Limit)
	}
	return 0
}

// waitError names a queue's error after the limiter: the context's errors
// (which the queue returns as they are) are wrapped, a refusal on arrival
// becomes a *RetryError, and the TryFunc's own errors already name it.
func waitError(ctx context.Context, name string, err error) error {
	var te *queue.TimeoutError
	switch {
	case errors.As(err, &te):
		if te.RetryAfter > 0 {
			return &RetryError{Limiter: name, After: te.RetryAfter}
		}
		return wrapName(name, context.DeadlineExceeded)
	case err == ctx.Err():
		return wrapName(name, err)
	case errors.Is(err, queue.ErrFull), errors.Is(err, queue.ErrClosed), errors.Is(err, queue.ErrNever):
		return wrapName(name, err) // not expected: no bound, closed when empty, Never is ErrNever
	}
	return err
}

// sleep waits d, or returns a *RetryError at once if d would outlast ctx's
// deadline, or ctx's error if it ends first, naming the limiter.
func sleep(ctx context.Context, name string, d time.Duration) error {
	if tooLate(ctx, d, 0) {
		return &RetryError{Limiter: name, After: d}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return wrapName(name, ctx.Err())
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
// Local, which has none.
func wrapName(name string, err error) error {
	if name == "" {
		return fmt.Errorf("limiter: %w", err)
	}
	return fmt.Errorf("limiter %q: %w", name, err)
}
