package algo

// Concurrency state: Ext = pairs (lease id, expiry µs), one pair per held
// slot, in order of expiry; C = the latest time seen. A lease whose expiry
// has passed is forgotten: that is how the slots of a holder that died come
// back.

func (l *Limit) concurrency(s *State, now, cost int64, lease uint64, commit bool) Decision {
	now = monotonic(&s.C, now)
	cut := 0
	for cut < len(s.Ext) && s.Ext[cut+1] <= now {
		cut += 2
	}
	if cut > 0 {
		s.Ext = s.Ext[:copy(s.Ext, s.Ext[cut:])]
	}
	held := int64(len(s.Ext) / 2)
	d := Decision{Limit: l.p.Limit}
	switch {
	case held+cost <= l.p.Limit:
		d.Allowed = true
		d.Remaining = l.p.Limit - held - cost
		if commit {
			exp := now + l.leaseUS
			for i := int64(0); i < cost; i++ {
				s.Ext = append(s.Ext, int64(lease), exp)
			}
		}
	case cost > l.p.Limit:
		d.Remaining = l.p.Limit - held
		d.RetryAfter = Never
	default:
		d.Remaining = l.p.Limit - held
		// At the latest, the oldest leases expire; a release may come sooner.
		k := held + cost - l.p.Limit
		d.RetryAfter = micros(s.Ext[2*k-1] - now)
	}
	if n := len(s.Ext); n > 0 {
		d.ResetAfter = micros(s.Ext[n-1] - now)
	}
	return d
}

func concurrencyRelease(s *State, lease uint64) bool {
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

func concurrencyExpiry(s *State) int64 {
	if n := len(s.Ext); n > 0 {
		return s.Ext[n-1]
	}
	return 0
}
