package policy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/queueretry"
	"github.com/floodgate/floodgate/queue"
)

// errStop ends a wait whose request a rule without the wait strategy
// refused: waiting cannot help it.
var errStop = errors.New("policy: refused by a rule that does not wait")

// queues are the wait strategy's queues, one per exhausted key with
// waiters, created on demand and dropped when the last waiter leaves.
type queues struct {
	mu sync.Mutex
	m  map[string]*waitQueue
}

type waitQueue struct {
	q    *queue.Queue
	refs int
}

type waitSlot struct {
	req  Request
	resp Response
	set  bool
}

type slotKey struct{}

func (qs *queues) acquire(e *Engine, key string, r *Rule) (*waitQueue, error) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if wq := qs.m[key]; wq != nil {
		wq.refs++
		return wq, nil
	}
	opts := []queue.Option{queue.WithTTL(r.MaxWait)}
	if r.MaxWaiters > 0 {
		opts = append(opts, queue.WithSize(r.MaxWaiters))
	}
	if r.QueueOrder == "fifo" {
		opts = append(opts, queue.WithOrder(queue.FIFO))
	}
	q, err := queue.New(e.tryWaiter, opts...)
	if err != nil {
		return nil, err
	}
	if qs.m == nil {
		qs.m = map[string]*waitQueue{}
	}
	wq := &waitQueue{q: q, refs: 1}
	qs.m[key] = wq
	return wq, nil
}

func (qs *queues) release(key string, wq *waitQueue) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if wq.refs--; wq.refs == 0 && qs.m[key] == wq {
		delete(qs.m, key)
		_ = wq.q.Close()
	}
}

// Waiting returns the number of requests waiting in the wait strategy's
// queues, for a queue-depth gauge.
func (e *Engine) Waiting() int {
	e.queues.mu.Lock()
	defer e.queues.mu.Unlock()
	n := 0
	for _, wq := range e.queues.m {
		n += wq.q.Len()
	}
	return n
}

// tryWaiter is the queues' TryFunc: it decides the request of the waiter
// at the head of a queue.
func (e *Engine) tryWaiter(ctx context.Context) (bool, time.Duration, error) {
	slot, _ := ctx.Value(slotKey{}).(*waitSlot)
	if slot == nil {
		return false, 0, errors.New("policy: wait queue called without a request")
	}
	resp, err := e.Decide(ctx, slot.req)
	if err != nil {
		return false, 0, err
	}
	slot.resp, slot.set = resp, true
	switch {
	case resp.Code == CodeOK:
		return true, 0, nil
	case resp.Strategy != StrategyWait:
		return false, 0, errStop
	}
	return false, resp.Delay, nil
}

// DecideWait is Decide for a caller that can hold the request. When the
// request is refused and every refusing rule has strategy wait (and the
// wait fits their max_wait), it waits in a bounded queue for the exhausted
// limit, FIFO or by priority class as the rule says, up to the rule's
// max_wait and ctx's deadline, retrying when the store says capacity will
// be back; an admitted request whose response has a Delay (a shaper's
// queue) is held for it too. Response.Waited says how long it waited and
// Delay is then zero.
//
// The answer is the last decision: OK once admitted; OVER_LIMIT (strategy
// reject) when the queue was full, the wait would outlive its deadline, or
// a rule that does not wait refused. A request the queue turned away (full,
// or unable to serve it by its deadline) is told to retry when the waiters
// ahead of it have been served or have left, not when the limit's next
// unit is back, which they would take: its refusing limits' RetryAfter,
// and so its Retry-After, is raised to that estimate
// (internal/queueretry.After: a unit's refill per waiter ahead for the
// buckets and the smooth algorithms' stable rate, a window's quota as
// each window opens for the windows and logs, a hand-off each).
//
// A request is refused on arrival, rather than held until its deadline,
// when that estimate reaches max_wait or ctx's deadline (the estimate plus
// the Delay its admission would carry, for a shaper or a smooth limit):
// the waiters ahead of it are those of its priority class or a higher one
// (all of them with queue_order fifo); later arrivals of a higher class
// can still push it back. The estimate is exact for fixed_window, the
// buckets (token_bucket, gcra, shaper) and smooth_bursty (which stores no
// permits while it refuses); for sliding_log
// and sliding_window, whose units come back as the requests that took
// them age out of the window rather than all at its start, and for a
// smooth_warmup key still warming up (colder, slower), it can be short,
// and the waiter it lets in may then reach its deadline in the queue.
//
// Cancelling ctx removes the waiter and returns ctx's error, never with
// Code OK: a request admitted with a Delay whose ctx ends during the hold
// does not proceed, and is answered UNKNOWN with what it charged given
// back (Refund: its units, as of when they were taken, and its
// concurrency slots), so the next request's delay is as if it had never
// come, and the requests DecideWait holds behind it on the same shaper key
// move up into the turn it gave up (Turns). A request arriving while
// others wait for the same key is decided at once, as with
// golang.org/x/time/rate: the queue orders the waiters, not the newcomers.
func (e *Engine) DecideWait(ctx context.Context, req Request) (Response, error) {
	start := time.Now()
	resp, err := e.Decide(ctx, req)
	if err != nil {
		return resp, err
	}
	decided := time.Since(start)
	if resp.Code == CodeOK {
		return e.hold(ctx, req, resp, start)
	}
	if resp.Strategy != StrategyWait || resp.waitRule == nil {
		return resp, nil
	}
	wq, err := e.queues.acquire(e, resp.waitKey, resp.waitRule)
	if err != nil {
		return Response{}, err
	}
	defer e.queues.release(resp.waitKey, wq)
	slot := &waitSlot{req: req}
	prio := 0
	if d := e.Config().Domain(req.Domain); d != nil && resp.Priority != "" {
		prio = len(d.Priorities) - d.priorityRank(resp.Priority)
	}
	// The request cannot pass before its retry (resp.Delay), nor before
	// the waiters ahead of it (those of its priority class or a higher
	// one) took their units — a unit's refill each for the buckets and
	// the smooth algorithms' stable rate, a window's quota as each window
	// opens for the windows and logs, and only until the last of them
	// must leave — each hand-off costing a trip to the store like the
	// Decide above (queueretry.After, the estimate a request the queue
	// turns away is told). One that would outlive its max_wait even so is
	// refused now rather than held until then, as is one whose caller's
	// deadline would pass during the Delay its admission then carries (a
	// shaper's queue, a smooth limiter's max_wait), which it is held for.
	wq.q.Observe(decided)
	lim, retry, adm := resp.waitLim, resp.Delay, resp.waitAdm
	deadline, hasDeadline := ctx.Deadline()
	before := time.Now()
	err = wq.q.WaitProjected(context.WithValue(ctx, slotKey{}, slot), prio, func(ahead int, last time.Time, handoff time.Duration) time.Duration {
		turn := queueretry.After(lim, retry, ahead, queueretry.Left(last), handoff)
		if hasDeadline && adm > 0 && turn >= time.Until(deadline)-adm {
			// Admitted in time, but held past the deadline: as late.
			// The queue measures from its own start, after before.
			return max(turn+min(adm, algo.Never-1-turn), deadline.Sub(before))
		}
		return turn
	})
	if slot.set {
		resp = slot.resp
	}
	resp.Waited = time.Since(start)
	switch {
	case err == nil:
		return e.hold(ctx, req, resp, start)
	case ctx.Err() != nil:
		return resp, ctx.Err()
	case errors.Is(err, errStop):
		return resp, nil
	case errors.Is(err, queue.ErrFull), errors.Is(err, queue.ErrTimeout):
		// Turned away by the queue: the waiters ahead take the units the
		// limit's retry (resp.Delay) speaks of first, so a client told only
		// that would be refused again.
		raiseRetry(&resp, queueretry.Behind(wq.q, prio, resp.waitLim, resp.Delay))
		resp.Code, resp.Strategy, resp.Delay = CodeOverLimit, StrategyReject, 0
		return resp, nil
	case errors.Is(err, queue.ErrNever), errors.Is(err, queue.ErrClosed):
		resp.Code, resp.Strategy, resp.Delay = CodeOverLimit, StrategyReject, 0
		return resp, nil
	}
	return Response{}, err
}

// raiseRetry makes every limit that refused resp, and every refused
// status's Decision, say retry at the earliest: the Retry-After and
// retry_after_ms that the headers and the native API derive from them then
// tell the queue's estimate. A limit that can never pass stays Never.
func raiseRetry(resp *Response, retry time.Duration) {
	raise := func(d *algo.Decision) {
		if !d.Allowed && d.RetryAfter != algo.Never && d.RetryAfter < retry {
			d.RetryAfter = retry
		}
	}
	for i := range resp.Statuses {
		s := &resp.Statuses[i]
		if s.Code != CodeOverLimit {
			continue
		}
		raise(&s.Decision)
		for j := range s.Limits {
			if l := &s.Limits[j]; !l.Shadow && !l.Borrowed {
				raise(&l.Decision)
			}
		}
	}
}

// hold waits out an admitted response's Delay, in turn with the other
// requests DecideWait holds on the same shaper keys (Turns: a turn given
// up moves those behind it up). When ctx ends first, the request does not
// proceed (see abandon).
func (e *Engine) hold(ctx context.Context, req Request, resp Response, start time.Time) (Response, error) {
	if resp.Delay > 0 {
		if e.turns.Hold(ctx, req, resp) != nil {
			return e.abandon(ctx, resp, start)
		}
		resp.Delay = 0
	}
	resp.Waited = time.Since(start)
	return resp, nil
}

// releaseTimeout bounds giving back what a request whose context has
// ended charged.
const releaseTimeout = 5 * time.Second

// abandon answers an admitted request that will not proceed, its ctx
// having ended during its hold: Code UNKNOWN (not OK: the caller must not
// go on) with ctx's error, and what it charged given back (Refund: its
// units and its concurrency slots), which the caller, seeing an error,
// would not give back.
func (e *Engine) abandon(ctx context.Context, resp Response, start time.Time) (Response, error) {
	err := ctx.Err()
	if resp.Holds() || len(resp.charged) > 0 {
		// ctx is done; what it charged must come back anyway.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		if rerr := e.Refund(rctx, resp); rerr != nil {
			err = errors.Join(err, fmt.Errorf("policy: giving back what a request that did not proceed charged: %w", rerr))
		}
		cancel()
		resp.leases, resp.charged = nil, nil
	}
	resp.Code, resp.Delay, resp.Waited = CodeUnknown, 0, time.Since(start)
	return resp, err
}
