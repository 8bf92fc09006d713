package algo

import "slices"

// Concurrency state: Ext = pairs (lease id, expiry µs), one pair per held
// slot, in order of expiry; C = the latest time seen. A lease whose expiry
// has passed is forgotten: that is how the slots of a holder that died come
// back.

func (l *Limit) concurrency(s *State, now, cost int64, lease uint64, commit bool) Decision {
	now = concurrencyPrune(s, now)
	held := int64(len(s.Ext) / 2)
	d := Decision{Limit: l.p.Limit}
	switch {
	case cost > l.p.Limit:
		d.Remaining = max(l.p.Limit-held, 0)
		d.RetryAfter = Never
	case held+cost <= l.p.Limit:
		d.Allowed = true
		d.Remaining = l.p.Limit - held - cost
		if commit {
			concurrencyHold(s, lease, leaseEnd(now, l.leaseUS), cost)
		}
	default:
		d.Remaining = max(l.p.Limit-held, 0)
		// At the latest, the oldest leases expire; a release may come sooner.
		k := held + cost - l.p.Limit
		// (At least 1µs: only a state this package did not write, out of
		// order, could say otherwise.)
		d.RetryAfter = micros(max(s.Ext[2*k-1]-now, 1))
	}
	if n := len(s.Ext); n > 0 {
		d.ResetAfter = micros(s.Ext[n-1] - now)
	}
	if d.Allowed && cost > 0 && !commit {
		d.ResetAfter = max(d.ResetAfter, micros(leaseEnd(now, l.leaseUS)-now)) // what Take would report
	}
	return d
}

// concurrencyPrune forgets the leases that have expired at now (or at the
// latest time seen, if later) and returns that time.
func concurrencyPrune(s *State, now int64) int64 {
	now = monotonic(&s.C, now)
	if len(s.Ext)%2 != 0 {
		s.Ext = s.Ext[:len(s.Ext)-1] // not a state this package wrote
	}
	cut := 0
	for cut < len(s.Ext) && s.Ext[cut+1] <= now {
		cut += 2
	}
	if cut > 0 {
		s.Ext = s.Ext[:copy(s.Ext, s.Ext[cut:])]
	}
	return now
}

// concurrencyHold adds cost slots of lease expiring at exp, keeping Ext in
// order of expiry. New leases go last unless LeaseTTL was shortened since
// older ones were taken (a configuration reload), so the search from the
// end stops at once in the usual case.
func concurrencyHold(s *State, lease uint64, exp, cost int64) {
	at := len(s.Ext)
	for at > 0 && s.Ext[at-1] > exp {
		at -= 2
	}
	add, n := int(2*cost), len(s.Ext)
	s.Ext = slices.Grow(s.Ext, add)[:n+add]
	copy(s.Ext[at+add:], s.Ext[at:n])
	for i := at; i < at+add; i += 2 {
		s.Ext[i], s.Ext[i+1] = int64(lease), exp
	}
}

func concurrencyRelease(s *State, now int64, lease uint64) bool {
	concurrencyPrune(s, now) // an expired lease is no longer held
	out := s.Ext[:0]
	for i := 0; i < len(s.Ext); i += 2 {
		if uint64(s.Ext[i]) != lease {
			out = append(out, s.Ext[i], s.Ext[i+1])
		}
	}
	found := len(out) != len(s.Ext)
	s.Ext = out
	return found
}

// concurrencyRenew moves the slots of lease to expire at now+ttl (never
// earlier than they did), keeping Ext in order of expiry: the renewed slots
// are taken out and held again, which puts them last in the usual case.
func concurrencyRenew(s *State, now int64, lease uint64, ttl int64) bool {
	now = concurrencyPrune(s, now) // an expired lease is not revived
	exp, n := leaseEnd(now, ttl), int64(0)
	out := s.Ext[:0]
	for i := 0; i < len(s.Ext); i += 2 {
		if uint64(s.Ext[i]) == lease {
			exp = max(exp, s.Ext[i+1])
			n++
			continue
		}
		out = append(out, s.Ext[i], s.Ext[i+1])
	}
	s.Ext = out
	if n > 0 {
		concurrencyHold(s, lease, exp, n)
	}
	return n > 0
}

// leaseEnd is when a lease taken or renewed at now (at most maxTime)
// expires: ttl later, saturated at 2^53 so that a store keeping it as a
// double (Redis' sorted-set scores) keeps it exactly — now + ttl reaches
// 2^54 with the longest LeaseTTL — and still after now, so that a lease
// taken at the end of time is held for at least 1µs.
func leaseEnd(now, ttl int64) int64 {
	if now >= maxExact-ttl {
		return maxExact
	}
	return now + ttl
}

func concurrencyExpiry(s *State) int64 {
	if n := len(s.Ext); n > 0 {
		return s.Ext[n-1]
	}
	return 0
}
