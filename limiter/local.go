package limiter

import (
	"context"
	"fmt"
	"math/bits"
	"sync"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// LocalOption configures a Local; see NewLocal for the defaults.
type LocalOption func(*localConfig)

type localConfig struct {
	clock func() time.Time
}

// WithLocalClock makes the limiter read the time from clock (default: the
// wall clock at NewLocal plus the monotonic time elapsed since, one
// monotonic clock read per decision). Tests pass a fake clock.
func WithLocalClock(clock func() time.Time) LocalOption {
	return func(c *localConfig) { c.clock = clock }
}

// Local is one in-process limiter with no key: one algorithm state under a
// mutex, for code that needs a single limiter object as with
// golang.org/x/time/rate. It is safe for concurrent use and exact: a budget
// of K admits exactly K across all goroutines.
type Local struct {
	mu    sync.Mutex
	st    algo.State
	limit *algo.Limit
	clock clock
	// bucket is set for TokenBucket and GCRA, whose Allow and AllowN skip
	// the divisions that only the full Decision needs; see allowBucket.
	bucket                   bool
	per, rate, cap, capLevel int64
}

// NewLocal returns a limiter applying p. Options and their defaults:
//
//   - WithLocalClock: a monotonic clock anchored on the wall clock.
//
// It returns an error wrapping algo.ErrInvalid when p is invalid, and an
// error for algo.Concurrency, whose leases need a key and an ID: use New
// with a memory store and Acquire.
func NewLocal(p algo.Params, opts ...LocalOption) (*Local, error) {
	l, err := algo.Compile(p)
	if err != nil {
		return nil, fmt.Errorf("limiter: %w", err)
	}
	if l.Algorithm() == algo.Concurrency {
		return nil, fmt.Errorf("limiter: NewLocal: %w: use New with a memory store and Acquire for leases", ErrNotConcurrency)
	}
	var c localConfig
	for _, o := range opts {
		o(&c)
	}
	loc := &Local{limit: l, clock: newClock(c.clock)}
	if k := l.Algorithm(); k == algo.TokenBucket || k == algo.GCRA {
		p := l.Params()
		loc.bucket = true
		loc.per = int64(p.Period / time.Microsecond)
		loc.rate = p.Limit
		loc.cap = l.Capacity()
		loc.capLevel = loc.cap * loc.per
	}
	return loc, nil
}

// Limit returns the compiled limit.
func (l *Local) Limit() *algo.Limit { return l.limit }

// Allow reports whether one unit may be taken now and, if so, takes it.
func (l *Local) Allow() bool { return l.AllowN(1) }

// AllowN reports whether n units may be taken now and, if so, takes them.
// A negative n is refused (false), as Limiter.AllowN refuses it with an
// error; 0 takes nothing and reports whether the limiter is usable now.
func (l *Local) AllowN(n int64) bool {
	if n < 0 {
		return false
	}
	now := l.clock.now()
	l.mu.Lock()
	ok, done := l.allowBucket(now, n)
	if !done {
		ok = l.limit.Take(&l.st, now, n).Allowed
	}
	l.mu.Unlock()
	return ok
}

// maxTime is the latest instant the algo package works with (2^53-1 µs);
// later ones, and times before the epoch, take algo's own path.
const maxTime = 1<<53 - 1

// allowBucket is algo's token bucket (and GCRA) Take for a key in use,
// reduced to the admission: the same exact integer refill in unit·µs (see
// algo/bucket.go), with the refill test done by a 128-bit multiplication
// instead of a division, and without the Remaining and ResetAfter that
// Allow does not report. It leaves the state exactly as algo's Take would
// (TestLocalMatchesAlgo and FuzzLocalMatchesAlgo hold it to that). done is
// false when the case is not the common one (a fresh state, a cost beyond
// the capacity or below 0, a time out of range): the caller then asks algo.
// l.mu is held.
func (l *Local) allowBucket(now, n int64) (ok, done bool) {
	s := &l.st
	if !l.bucket || s.C == 0 || n < 0 || n > l.cap || now < 0 || now > maxTime {
		return false, false
	}
	level := min(max(s.A, 0), l.capLevel)
	if now > s.B {
		if need := l.capLevel - level; need > 0 {
			hi, lo := bits.Mul64(uint64(now-s.B), uint64(l.rate))
			if hi != 0 || lo >= uint64(need) {
				level = l.capLevel
			} else {
				level += int64(lo)
			}
		}
		s.B = now
	}
	if cost := n * l.per; level >= cost {
		level -= cost
		ok = true
	}
	s.A = level
	return ok, true
}

// Take decides n units now, takes them if admitted, and returns the whole
// decision. A negative n is refused and takes nothing: the decision is
// Peek(n)'s.
func (l *Local) Take(n int64) algo.Decision {
	if n < 0 {
		return l.Peek(n)
	}
	now := l.clock.now()
	l.mu.Lock()
	d := l.limit.Take(&l.st, now, n)
	l.mu.Unlock()
	return d
}

// Peek returns the decision Take(n) would make, taking nothing. For a
// negative n that is a refusal that no wait can turn into an admission
// (RetryAfter algo.Never) with the state as Peek(0) reports it.
func (l *Local) Peek(n int64) algo.Decision {
	now := l.clock.now()
	l.mu.Lock()
	d := l.limit.Peek(&l.st, now, max(n, 0))
	l.mu.Unlock()
	if n < 0 {
		d.Allowed, d.RetryAfter, d.Delay = false, algo.Never, 0
	}
	return d
}

// Reset forgets the state: the limiter is as new.
func (l *Local) Reset() {
	l.mu.Lock()
	l.st = algo.State{}
	l.mu.Unlock()
}

// Wait blocks until n units are admitted, as Limiter.Wait: it returns a
// *RetryError at once when the wait would outlast ctx's deadline (a
// refusal's RetryAfter plus algo.Limit.AdmissionDelay), an error
// wrapping ErrNever when n exceeds the capacity, and ctx's error when ctx
// ends first; an admitted Delay is waited out, and the units given back if
// that wait cannot finish. A negative n is an error wrapping
// store.ErrBadRequest, as for Limiter.Wait.
func (l *Local) Wait(ctx context.Context, n int64) error {
	if n < 0 {
		return fmt.Errorf("limiter: %w: cost %d is negative", store.ErrBadRequest, n)
	}
	for {
		now := l.clock.now()
		l.mu.Lock()
		d := l.limit.Take(&l.st, now, n)
		l.mu.Unlock()
		if d.Allowed {
			if err := sleep(ctx, d.Delay); err != nil {
				l.mu.Lock()
				l.limit.Refund(&l.st, l.clock.now(), now, n)
				l.mu.Unlock()
				return err
			}
			return nil
		}
		if d.IsNever() {
			return fmt.Errorf("limiter: %w: cost %d, capacity %d", ErrNever, n, d.Limit)
		}
		if err := sleepThen(ctx, d.RetryAfter, l.limit.AdmissionDelay(n)); err != nil {
			return err
		}
	}
}

// clock reads the time in µs since the epoch: from an injected clock, or
// from the monotonic clock anchored on the wall clock at creation, which
// costs one clock read where time.Now costs two.
type clock struct {
	fn     func() time.Time
	base   time.Time
	baseUS int64
}

func newClock(fn func() time.Time) clock {
	now := time.Now()
	return clock{fn: fn, base: now, baseUS: now.UnixMicro()}
}

func (c *clock) now() int64 {
	if c.fn != nil {
		return c.fn().UnixMicro()
	}
	return c.baseUS + int64(time.Since(c.base)/time.Microsecond)
}
