package algo

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// randomParams returns valid, varied parameters for kind k, small enough
// that random histories reach every branch.
func randomParams(r *rand.Rand, k Kind) Params {
	p := Params{Algorithm: k, Limit: 1 + r.Int64N(20)}
	// Periods from 1ms to 2h, in whole µs, often not round.
	p.Period = time.Duration(1_000+r.Int64N(7_200_000_000)) * time.Microsecond
	if r.IntN(3) == 0 {
		p.Period = []time.Duration{time.Second, time.Minute, 36 * time.Hour}[r.IntN(3)]
	}
	switch k {
	case FixedWindow:
		if r.IntN(4) == 0 {
			p.Period, p.Calendar = 0, CalendarMonth
			if r.IntN(2) == 0 {
				p.Calendar = CalendarYear
			}
		}
	case SlidingWindow:
		p.SubWindows = 1 + r.IntN(8)
		p.Period = time.Duration(p.SubWindows) * time.Duration(100+r.Int64N(1_000_000)) * time.Microsecond
	case TokenBucket, GCRA:
		p.Burst = r.Int64N(30)
		if k == TokenBucket && r.IntN(3) == 0 {
			c := p.Burst
			if c == 0 {
				c = p.Limit
			}
			p.InitialTokens = ptr(r.Int64N(c + 1))
			if *p.InitialTokens < c && r.IntN(2) == 0 {
				p.Retain = time.Duration(1+r.Int64N(us(3*p.Period))) * time.Microsecond
			}
		}
	case Shaper:
		p.Burst = r.Int64N(10)
		p.Delay = r.Int64N(p.Burst + 1)
	case SmoothBursty:
		p.MaxBurstSeconds = r.Float64() * 3
		if r.IntN(2) == 0 {
			p.Retain = time.Duration(1+r.Int64N(us(3*p.Period))) * time.Microsecond
		}
		if r.IntN(2) == 0 {
			p.MaxWait = time.Duration(r.Int64N(int64(p.Period)))
		}
	case SmoothWarmup:
		p.WarmupPeriod = time.Duration(1+r.Int64N(int64(3*p.Period/time.Microsecond))) * time.Microsecond
		p.ColdFactor = 1 + r.Float64()*9
		if r.IntN(2) == 0 {
			p.MaxWait = time.Duration(r.Int64N(int64(p.Period)))
		}
	case Concurrency:
		p.Period = 0
		p.LeaseTTL = time.Duration(1+r.Int64N(60_000_000)) * time.Microsecond
	}
	return p
}

// scale is a time step that makes histories of l interesting.
func scale(l *Limit) int64 {
	switch {
	case l.p.Calendar != CalendarNone:
		return 3 * 24 * time.Hour.Microseconds()
	case l.p.Algorithm == Concurrency:
		return l.leaseUS
	case l.p.Algorithm == SmoothBursty || l.p.Algorithm == SmoothWarmup:
		return max(int64(l.smooth.stable)*2, 1)
	}
	return l.periodUS
}

// maxCost is the largest cost worth trying: one above the capacity.
func maxCost(l *Limit) int64 {
	if l.p.Algorithm == SmoothBursty || l.p.Algorithm == SmoothWarmup {
		return 4
	}
	return l.Capacity() + 1
}

// play applies n random operations to s from now on, time never going
// back, and returns the last instant.
func play(r *rand.Rand, l *Limit, s *State, now int64, n int) int64 {
	step := scale(l)
	for range n {
		switch r.IntN(4) {
		case 0: // a burst at the same instant
		case 1:
			now += r.Int64N(step/8 + 1)
		default:
			now += r.Int64N(step/2 + 1)
		}
		cost := r.Int64N(maxCost(l) + 1)
		if l.p.Algorithm == Concurrency {
			switch r.IntN(8) {
			case 0, 1:
				l.Release(s, now, uint64(r.IntN(5)))
				continue
			case 2:
				l.Renew(s, now, uint64(r.IntN(5)))
				continue
			}
			l.TakeLease(s, now, cost, uint64(r.IntN(5)))
			continue
		}
		l.Take(s, now, cost)
	}
	return now
}

const propertyTrials = 400

// forEachRandomState calls f with propertyTrials random limits of every
// algorithm and a state that has seen a random history ending at now.
func forEachRandomState(t *testing.T, seed uint64, f func(t *testing.T, r *rand.Rand, l *Limit, s State, now int64)) {
	for _, k := range Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, uint64(k)))
			for range propertyTrials {
				l := mustCompile(t, randomParams(r, k))
				var s State
				now := play(r, l, &s, base+r.Int64N(scale(l)), r.IntN(30))
				f(t, r, l, s, now)
				if t.Failed() {
					return
				}
			}
		})
	}
}

func us(d time.Duration) int64 { return int64(d / time.Microsecond) }

// RetryAfter is exact for every algorithm: a caller that waits it out is
// admitted with the same cost, and one that comes back 1µs sooner is not.
// (For Concurrency it is exact when no lease is released meanwhile; a
// release can only make the slot free sooner, so it is an upper bound.)
func TestRetryAfterIsExact(t *testing.T) {
	forEachRandomState(t, 1, func(t *testing.T, r *rand.Rand, l *Limit, s State, now int64) {
		now += r.Int64N(scale(l)/4 + 1)
		for cost := int64(1); cost <= maxCost(l); cost++ {
			// The refused Take, which starts a fresh key's clock.
			s := s.Clone()
			d := l.Take(&s, now, cost)
			if d.Allowed || d.IsNever() {
				continue
			}
			if d.RetryAfter <= 0 {
				t.Fatalf("%v: Peek(%d, %d) refused with RetryAfter %v", l, now, cost, d.RetryAfter)
			}
			at := now + us(d.RetryAfter)
			c := s.Clone()
			if got := l.Take(&c, at, cost); !got.Allowed {
				t.Fatalf("%v state %+v: Take(now, %d) said retry after %v, but Take(now+%v, %d) = %+v",
					l, s, cost, d.RetryAfter, d.RetryAfter, cost, got)
			}
			c = s.Clone()
			if got := l.Take(&c, at-1, cost); got.Allowed {
				t.Fatalf("%v state %+v: Take(now, %d) said retry after %v, but Take(now+%v-1µs, %d) was admitted already",
					l, s, cost, d.RetryAfter, d.RetryAfter, cost)
			}
		}
	})
}

// A cost above the capacity is never admitted and says so; the Smooth
// algorithms admit any cost while their ticket is free (the next request
// pays for it).
func TestCostAboveCapacityIsNever(t *testing.T) {
	forEachRandomState(t, 2, func(t *testing.T, r *rand.Rand, l *Limit, s State, now int64) {
		if l.p.Algorithm == SmoothBursty || l.p.Algorithm == SmoothWarmup {
			return
		}
		for _, cost := range []int64{l.Capacity() + 1, l.Capacity() * 2, 1 << 62, 1<<63 - 1} {
			c := s.Clone()
			if d := l.Take(&c, now, cost); d.Allowed || !d.IsNever() {
				t.Fatalf("%v: Take(%d) above capacity %d = %+v, want refused with Never", l, cost, l.Capacity(), d)
			}
		}
		// And a fresh key admits the whole capacity at once, unless it
		// starts short on purpose.
		if l.p.InitialTokens == nil && l.p.Algorithm != SlidingWindow {
			var fresh State
			if d := l.Take(&fresh, now, l.Capacity()); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("%v: a fresh key's Take(capacity %d) = %+v, want allowed with 0 remaining", l, l.Capacity(), d)
			}
		}
	})
}

// Remaining is exact for every algorithm but the Smooth ones (whose next
// request may take any size): Remaining more units are admitted, one
// more is not.
func TestRemainingIsExact(t *testing.T) {
	forEachRandomState(t, 3, func(t *testing.T, r *rand.Rand, l *Limit, s State, now int64) {
		if l.p.Algorithm == SmoothBursty || l.p.Algorithm == SmoothWarmup {
			return
		}
		c := s.Clone()
		m := l.Peek(&c, now, 0).Remaining
		if m < 0 || m > l.Capacity() {
			t.Fatalf("%v: Remaining %d out of [0, %d]", l, m, l.Capacity())
		}
		c = s.Clone()
		if d := l.Take(&c, now, m); !d.Allowed {
			t.Fatalf("%v state %+v: Remaining %d, but Take(%d) = %+v", l, s, m, m, d)
		}
		c = s.Clone()
		if d := l.Take(&c, now, m+1); d.Allowed {
			t.Fatalf("%v state %+v: Remaining %d, but Take(%d) was admitted", l, s, m, m+1)
		}
	})
}

// sameFuture plays the same random requests on a and b from now on and
// reports the first decision that differs.
func sameFuture(r *rand.Rand, l *Limit, a, b State, now int64, n int) error {
	step := scale(l)
	for i := range n {
		now += r.Int64N(step/4 + 1)
		cost := r.Int64N(maxCost(l) + 1)
		lease := uint64(1 + r.IntN(3))
		if l.p.Algorithm == Concurrency && r.IntN(4) == 0 {
			if x, y := l.Release(&a, now, lease), l.Release(&b, now, lease); x != y {
				return fmt.Errorf("request %d: Release(lease %d) = %v and %v", i, lease, x, y)
			}
			continue
		}
		if l.p.Algorithm == Concurrency && r.IntN(8) == 0 {
			if x, y := l.Renew(&a, now, lease), l.Renew(&b, now, lease); x != y {
				return fmt.Errorf("request %d: Renew(lease %d) = %v and %v", i, lease, x, y)
			}
			continue
		}
		x, y := l.TakeLease(&a, now, cost, lease), l.TakeLease(&b, now, cost, lease)
		if x != y {
			return fmt.Errorf("request %d at +%d: Take(%d) = %+v and %+v", i, now, cost, x, y)
		}
	}
	return nil
}

// From ExpiresAt on, a state decides like a fresh one, so a store may
// delete it. The exceptions start fresh keys short on purpose:
// TokenBucket with InitialTokens below the capacity and SmoothBursty,
// which starts with no stored permits. Their states are kept full for
// Retain before ExpiresAt, and a forgotten key then admits no more than
// the kept one would.
func TestExpiresAt(t *testing.T) {
	forEachRandomState(t, 4, func(t *testing.T, r *rand.Rand, l *Limit, s State, now int64) {
		exp := l.ExpiresAt(&s)
		at := max(exp, now) + r.Int64N(3)
		shortFresh := l.p.Algorithm == SmoothBursty || (l.p.InitialTokens != nil && *l.p.InitialTokens < l.Capacity())
		if shortFresh != (l.retainUS > 0) {
			t.Fatalf("%v: retains %dµs; want a retention exactly when a fresh state is short", l, l.retainUS)
		}
		if shortFresh {
			// Between the instant it is full (exp - Retain, unless
			// saturated) and exp, the kept state is full.
			if exp > 0 && exp < maxTime {
				if before := exp - 1 - r.Int64N(l.retainUS); before >= now {
					kept := s.Clone()
					if d := l.Peek(&kept, before, 0); d.Remaining != l.Capacity() {
						t.Fatalf("%v: %dµs before ExpiresAt the kept state %+v has Remaining %d, want full (%d)", l, exp-before, s, d.Remaining, l.Capacity())
					}
				}
			}
			var fresh State
			kept := s.Clone()
			f, k := l.Peek(&fresh, at, 0), l.Peek(&kept, at, 0)
			if f.Remaining > k.Remaining {
				t.Fatalf("%v: a fresh key has Remaining %d, more than the expired state's %d", l, f.Remaining, k.Remaining)
			}
			return
		}
		if err := sameFuture(r, l, s.Clone(), State{}, at, 20); err != nil {
			t.Fatalf("%v: from ExpiresAt (+%d) on, the state %+v and a fresh one differ: %v", l, at-exp, s, err)
		}
	})
}

// A refund of a Take at the same instant undoes it: the future is the one
// the state had before. Concurrency gives slots back with Release, and the
// Smooth refund is approximate (see TestSmoothRefund).
func TestRefundUndoesTake(t *testing.T) {
	forEachRandomState(t, 5, func(t *testing.T, r *rand.Rand, l *Limit, s State, now int64) {
		if l.p.Algorithm == Concurrency || l.p.Algorithm == SmoothBursty || l.p.Algorithm == SmoothWarmup {
			return
		}
		before := s.Clone()
		l.Take(&before, now, 0) // the same bookkeeping: expiry, a fresh key's clock
		cost := 1 + r.Int64N(l.Capacity())
		if !l.Take(&s, now, cost).Allowed {
			return
		}
		later := now
		if k := l.p.Algorithm; k == TokenBucket || k == GCRA || k == Shaper {
			later += r.Int64N(scale(l)) // a bucket refund may come any time later
		}
		l.Refund(&s, later, now, cost)
		if err := sameFuture(r, l, s, before, later, 20); err != nil {
			t.Fatalf("%v: after Take(%d) and its Refund: %v", l, cost, err)
		}
	})
}

// A Take of cost 0 reports and charges nothing.
func TestCostZeroChangesNothing(t *testing.T) {
	forEachRandomState(t, 6, func(t *testing.T, r *rand.Rand, l *Limit, s State, now int64) {
		if s.C == 0 && (l.p.Algorithm == SmoothBursty || l.p.InitialTokens != nil) {
			return // a cost-0 Take starts a fresh key's clock (see Take)
		}
		before := s.Clone()
		l.Peek(&before, now, 0)
		d := l.Take(&s, now, 0)
		if !d.Allowed && l.p.Algorithm != SmoothBursty && l.p.Algorithm != SmoothWarmup {
			t.Fatalf("%v: Take(0) = %+v, want allowed", l, d)
		}
		if err := sameFuture(r, l, s, before, now, 20); err != nil {
			t.Fatalf("%v: after Take(0): %v", l, err)
		}
	})
}

// Peek decides like Take and changes nothing Take's decision depends on,
// not even on a fresh key.
func TestPeekChangesNothing(t *testing.T) {
	forEachRandomState(t, 7, func(t *testing.T, r *rand.Rand, l *Limit, s State, now int64) {
		if r.IntN(4) == 0 {
			s = State{}
		}
		before := s.Clone()
		cost := r.Int64N(maxCost(l) + 1)
		p := l.Peek(&s, now, cost)
		c := before.Clone()
		if tk := l.Take(&c, now, cost); tk != p {
			t.Fatalf("%v: Peek(%d) = %+v, Take = %+v", l, cost, p, tk)
		}
		if err := sameFuture(r, l, s, before, now, 20); err != nil {
			t.Fatalf("%v: after Peek(%d): %v", l, cost, err)
		}
	})
}

// A clock that steps back is read as the latest time seen: the decision is
// the one at that time, and the state's time does not move back.
func TestTimeGoingBackwards(t *testing.T) {
	forEachRandomState(t, 8, func(t *testing.T, r *rand.Rand, l *Limit, s State, now int64) {
		t0 := stateTime(l, &s)
		if t0 == 0 {
			return // a fresh key has no time yet
		}
		back := t0 - 1 - r.Int64N(scale(l))
		a, b := s.Clone(), s.Clone()
		da, db := l.Peek(&a, back, 1), l.Peek(&b, t0, 1)
		if da != db {
			t.Fatalf("%v: Peek %dµs before the state's time = %+v, at its time = %+v", l, t0-back, da, db)
		}
		c := s.Clone()
		l.Take(&c, back, maxCost(l)/2)
		if t1 := stateTime(l, &c); t1 < t0 {
			t.Fatalf("%v: the state's time went back from %d to %d", l, t0, t1)
		}
	})
}

// stateTime is the latest time a state records, per the layout comments.
func stateTime(l *Limit, s *State) int64 {
	switch l.p.Algorithm {
	case TokenBucket, GCRA, Shaper:
		return s.B
	case SlidingWindow:
		return s.A
	}
	return s.C
}
