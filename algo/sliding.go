package algo

import "math"

// Sliding window state: A = the latest time seen (µs); the sub-window that
// holds it (A ÷ sub-window length) is the current one. The counts of the
// current and the N previous sub-windows live in a ring of N+1 slots: B and
// C when N = 1, Ext otherwise.
//
// The estimate of the units in the last Period is the sum of the current
// and N-1 previous sub-windows plus the oldest one weighted by the part of
// it still inside the window. With N = 1 this is the classic
// "previous × (1 - elapsed/period) + current"; the estimate is exact for
// steady traffic and is off by at most one sub-window's count otherwise.
// The arithmetic is float64 in a fixed order so that Lua computes the same
// bits.

func (l *Limit) slot(s *State, i int64) *int64 {
	n := int64(l.p.SubWindows)
	if n == 1 {
		if i&1 == 0 {
			return &s.B
		}
		return &s.C
	}
	return &l.ring(s)[floorMod(i, n+1)]
}

// ring returns the N+1 counts of an N > 1 window; sub-window i is at
// i mod N+1.
func (l *Limit) ring(s *State) []int64 {
	if n := l.p.SubWindows + 1; len(s.Ext) != n {
		// nil for a fresh key; another length when SubWindows changed
		// since the state was written (a configuration reload), whose
		// counts cannot be mapped onto the new ring.
		s.Ext = make([]int64, n)
	}
	return s.Ext
}

// counts returns the ring for reading, the N = 1 one copied into buf.
func (l *Limit) counts(s *State, buf *[2]int64) []int64 {
	if l.p.SubWindows == 1 {
		buf[0], buf[1] = s.B, s.C
		return buf[:]
	}
	return l.ring(s)
}

// advance moves the state to now, or to the latest time it has seen if
// that is later, zeroing the slots of the sub-windows that fell out of the
// ring. It returns the time used and its sub-window.
func (l *Limit) advance(s *State, now int64) (int64, int64) {
	if now < s.A {
		now = s.A
	}
	n := int64(l.p.SubWindows)
	cur, idx := s.A/l.subUS, now/l.subUS
	if gap := idx - cur; gap > n {
		s.B, s.C = 0, 0
		if n > 1 {
			clear(l.ring(s))
		}
	} else {
		for j := range gap {
			*l.slot(s, idx-j) = 0
		}
	}
	s.A = now
	return now, idx
}

// windowSums returns, for the current sub-window idx, the count of the N
// newest sub-windows and the count of the oldest, weighted one. The ring
// holds exactly sub-windows idx-N … idx, so the N newest are all but one.
func (l *Limit) windowSums(s *State, idx int64) (full, old int64) {
	var buf [2]int64
	ring := l.counts(s, &buf)
	for _, c := range ring {
		full += c
	}
	old = ring[floorMod(idx-int64(l.p.SubWindows), int64(len(ring)))]
	return full - old, old
}

func estimate(full, old, sub, elapsed int64) float64 {
	return float64(full) + float64(old)*float64(sub-elapsed)/float64(sub)
}

// slidingRemaining is the largest m with e + m <= limit, the admission test
// of a request of m units against the estimate e (the next request's: after
// an admitted one, the estimate that counts it). ⌊limit − e⌋ alone can be one
// off, as limit − e and e + m round differently (often near 2^44 and above),
// so it is stepped by one to agree with the test. sliding_window.lua's
// remaining does the same operations in the same order.
func slidingRemaining(limit, e float64) int64 {
	m := math.Floor(limit - e)
	if e+(m+1) <= limit {
		m++
	} else if m > 0 && e+m > limit {
		m--
	}
	return int64(m)
}

func (l *Limit) slidingWindow(s *State, now, cost int64, commit bool) Decision {
	sub := l.subUS
	if l.p.SubWindows == 1 && s.Ext != nil {
		s.Ext = nil // left by a limit that had more sub-windows
	}
	now, idx := l.advance(s, now)
	elapsed := now - idx*sub
	full, old := l.windowSums(s, idx)
	est := estimate(full, old, sub, elapsed)
	limit := float64(l.p.Limit)
	d := Decision{Limit: l.p.Limit}
	switch {
	case est+float64(cost) <= limit:
		d.Allowed = true
		if commit {
			*l.slot(s, idx) += cost
		}
		d.Remaining = slidingRemaining(limit, estimate(full+cost, old, sub, elapsed))
	case cost > l.p.Limit:
		d.RetryAfter = Never
		d.Remaining = slidingRemaining(limit, est)
	default:
		d.Remaining = slidingRemaining(limit, est)
		d.RetryAfter = micros(l.slidingRetry(s, idx, now, cost))
	}
	// (Only counts this package did not write, negative ones, could take
	// Remaining above the limit.)
	d.Remaining = min(max(d.Remaining, 0), l.p.Limit)
	exp := l.slidingWindowExpiry(s)
	if d.Allowed && cost > 0 && !commit {
		exp = (idx + int64(l.p.SubWindows) + 1) * sub // what Take would report
	}
	if exp > now {
		d.ResetAfter = micros(exp - now)
	}
	return d
}

// slidingRetry finds the earliest instant at which cost fits under the
// estimate, assuming nothing more is taken, and returns how far it is from
// now. It walks the sub-windows from the current one; within a sub-window
// the estimate only falls, so a binary search over the float64 estimate
// itself (not a closed form that rounding could put 1µs off) finds the
// first microsecond that fits. O(N + log sub-window) per refusal.
func (l *Limit) slidingRetry(s *State, idx, now, cost int64) int64 {
	sub, n := l.subUS, int64(l.p.SubWindows)
	limit := float64(l.p.Limit)
	full, old := l.windowSums(s, idx)
	var buf [2]int64
	ring := l.counts(s, &buf)
	pos := floorMod(idx-n, n+1) // ring position of sub-window idx+k-n
	for k := int64(0); k <= n+1; k++ {
		if k > 0 {
			// Sub-window idx+k: the ring's sub-window idx+k-n becomes
			// the oldest and leaves the full sum; newer ones are empty.
			if pos++; pos == n+1 {
				pos = 0
			}
			old = 0
			if k <= n {
				old = ring[pos]
			}
			full -= old
		}
		if full+cost > l.p.Limit {
			continue
		}
		fits := func(e int64) bool { return estimate(full, old, sub, e)+float64(cost) <= limit }
		if !fits(sub - 1) {
			continue
		}
		lo, hi := int64(0), sub-1
		if k == 0 {
			lo = now - idx*sub
		}
		// The closed form old × (sub − e) ÷ sub <= Limit − cost − full
		// is almost always right; the search only settles rounding.
		if old > 0 {
			x := float64(l.p.Limit-cost-full) * float64(sub) / float64(old)
			if e := sub - int64(x); e > lo && e < hi && fits(e) && !fits(e-1) {
				return (idx+k)*sub + e - now
			}
		}
		for lo < hi {
			if mid := lo + (hi-lo)/2; fits(mid) {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		return (idx+k)*sub + lo - now
	}
	return (idx+n+1)*sub - now
}

func (l *Limit) slidingWindowRefund(s *State, at, cost int64) {
	i, cur := at/l.subUS, s.A/l.subUS
	if i > cur || i < cur-int64(l.p.SubWindows) {
		return
	}
	p := l.slot(s, i)
	*p -= cost
	if *p < 0 {
		*p = 0
	}
}

// slidingWindowExpiry is the end of the last sub-window whose count still
// weighs on the estimate.
func (l *Limit) slidingWindowExpiry(s *State) int64 {
	n, cur := int64(l.p.SubWindows), s.A/l.subUS
	var buf [2]int64
	ring := l.counts(s, &buf)
	pos := floorMod(cur, n+1)
	for j := int64(0); j <= n; j++ {
		if ring[pos] != 0 {
			return (cur - j + n + 1) * l.subUS
		}
		if pos--; pos < 0 {
			pos = n
		}
	}
	return 0
}
