// Package queueretry estimates when a request that a wait queue turned
// away may ask again: the Retry-After of policy's wait strategy and the
// After of limiter.Wait's ErrQueueFull.
package queueretry

import (
	"math"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/queue"
)

// Behind is After for a request of priority that q turned away: the
// waiters ahead of it, the latest of their deadlines and the hand-off
// from q.Ahead.
func Behind(q *queue.Queue, priority int, l *algo.Limit, retry time.Duration) time.Duration {
	ahead, last, handoff := q.Ahead(priority)
	return After(l, retry, ahead, Left(last), handoff)
}

// Left is After's left for the latest deadline of the waiters ahead, as
// queue.Queue.Ahead reports it: the time from now until last, or -1 when
// last is zero (one of them has no deadline).
func Left(last time.Time) time.Duration {
	if last.IsZero() {
		return -1
	}
	return max(time.Until(last), 0)
}

// After is how long a request that the wait queue turned away (full,
// or unable to serve it within its deadline) should wait before asking
// again, for its Retry-After. The limit's own retry, when its next unit is
// back, is too soon when others wait for that unit: the ahead waiters are
// served first, a unit and a hand-off each (as queue.Queue.WaitFrom
// projects). None of them stays past its deadline, though (left from now;
// negative: one of them has none), so they take only the units the limit
// hands out by then and the rest leave with nothing. The request's own
// unit is the one after theirs, after its own hand-off:
//
//	retry + (the time from retry to unit number served) + (served+1) × handoff
//	served = min(ahead, the units l hands out from retry until left)
//
// A steady algorithm (token_bucket, gcra, shaper, the smooth ones; a
// warm-up's stable rate) hands out a unit every period ÷
// requests_per_unit; a window (fixed, sliding, sliding log) its whole
// quota as each window opens, the first at retry (a calendar month counts
// as 28 days, a year as 365). A limit of neither kind (concurrency, or l
// nil) counts the hand-offs alone. Every waiter is taken to need one
// unit, as in the queue's projection. The result is never below retry and
// saturates below algo.Never (which would mean never).
func After(l *algo.Limit, retry time.Duration, ahead int, left, handoff time.Duration) time.Duration {
	var every, window time.Duration // a unit's spacing, or a window's length
	var quota int64                 // a window's units
	if l != nil {
		p := l.Params()
		switch p.Algorithm {
		case algo.TokenBucket, algo.GCRA, algo.Shaper, algo.SmoothBursty, algo.SmoothWarmup:
			every = p.Period / time.Duration(p.Limit)
		case algo.FixedWindow, algo.SlidingWindow, algo.SlidingLog:
			window, quota = p.Period, p.Limit
			switch p.Calendar {
			case algo.CalendarMonth:
				window = 28 * 24 * time.Hour
			case algo.CalendarYear:
				window = 365 * 24 * time.Hour
			}
		}
	}
	served := int64(ahead)
	var at time.Duration // from retry to unit number served
	switch {
	case every > 0:
		if left >= 0 {
			served = min(served, handedOut(left-retry, every, 1))
		}
		at = mulSat(served, every)
	case window > 0 && quota > 0:
		if left >= 0 {
			served = min(served, handedOut(left-retry, window, quota))
		}
		at = mulSat(served/quota, window)
	}
	return addSat(addSat(retry, at), mulSat(served+1, handoff))
}

// handedOut is how many units a limit that hands out per units every
// interval, the first ones at 0, has handed out by t (none before 0).
func handedOut(t, interval time.Duration, per int64) int64 {
	if t < 0 {
		return 0
	}
	n := int64(t/interval) + 1
	if n > math.MaxInt64/per {
		return math.MaxInt64
	}
	return n * per
}

// mulSat is n × d, saturating below algo.Never.
func mulSat(n int64, d time.Duration) time.Duration {
	if n <= 0 || d <= 0 {
		return 0
	}
	if n > int64(algo.Never-1)/int64(d) {
		return algo.Never - 1
	}
	return time.Duration(n) * d
}

// addSat is a + b for non-negative a and b, saturating below algo.Never.
func addSat(a, b time.Duration) time.Duration {
	if a > algo.Never-1-b {
		return algo.Never - 1
	}
	return a + b
}
