package algo

// Token bucket, GCRA and Shaper state: A = level, B = time of the last
// update (µs), C = 1 once the key is in use (the zero C marks a fresh key;
// B cannot, since 0 is a valid time).
//
// The level is kept in unit·µs: one unit is worth Period µs and the bucket
// refills Limit unit·µs every µs, so a rate such as 3 per second needs no
// rounding and every operation is exact integer arithmetic below 2^53
// (Compile checks capacity × Period). GCRA's theoretical arrival time is
// the same information: TAT = B + (capacity·Period − level) ÷ Limit.
//
// The Shaper is a token bucket of capacity Burst+1 read the other way: the
// missing level is the water in a leaky bucket, and an admitted request
// waits until the water ahead of it, less Delay units, has drained.

func (l *Limit) refill(s *State, now int64) int64 {
	per, capLevel := l.periodUS, l.capacity*l.periodUS
	if s.C == 0 {
		s.A = capLevel
		if init := l.p.InitialTokens; init != nil {
			s.A = *init * per
		}
		s.B, s.C = now, 1
		return now
	}
	// A level outside [0, capacity] comes from a limit whose burst was
	// lowered since (a configuration reload): the smaller capacity rules.
	s.A = min(max(s.A, 0), capLevel)
	if now <= s.B {
		return s.B
	}
	if need := capLevel - s.A; need > 0 {
		if dt := now - s.B; dt >= ceilDiv(need, l.p.Limit) {
			s.A = capLevel
		} else {
			s.A += dt * l.p.Limit
		}
	}
	s.B = now
	return now
}

func (l *Limit) bucket(s *State, now, cost int64, commit bool) Decision {
	if !commit && s.C == 0 {
		// Peek must not start a fresh key's clock: with InitialTokens
		// below the capacity that would refill it from this instant.
		tmp := *s
		s = &tmp
	}
	now = l.refill(s, now)
	per, rate, capLevel := l.periodUS, l.p.Limit, l.capacity*l.periodUS
	d := Decision{Limit: l.capacity}
	level := s.A
	switch {
	case cost > l.capacity:
		d.RetryAfter = Never
	case level >= cost*per:
		d.Allowed = true
		if l.p.Algorithm == Shaper {
			d.Delay = micros(ceilDiv(capLevel-level-l.p.Delay*per, rate))
		}
		level -= cost * per
		if commit {
			s.A = level
		}
	default:
		d.RetryAfter = micros(ceilDiv(cost*per-level, rate))
	}
	d.Remaining = level / per
	d.ResetAfter = micros(ceilDiv(capLevel-level, rate))
	return d
}

func (l *Limit) bucketRefund(s *State, now, cost int64) {
	if s.C == 0 {
		return
	}
	l.refill(s, now)
	capLevel := l.capacity * l.periodUS
	if cost > l.capacity {
		cost = l.capacity
	}
	s.A += cost * l.periodUS
	if s.A > capLevel {
		s.A = capLevel
	}
}

func (l *Limit) bucketExpiry(s *State) int64 {
	if s.C == 0 {
		return 0
	}
	return s.B + ceilDiv(l.capacity*l.periodUS-min(max(s.A, 0), l.capacity*l.periodUS), l.p.Limit)
}
