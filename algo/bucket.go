package algo

import (
	"math/bits"
	"time"
)

// Token bucket, GCRA and Shaper state: A = level, B = time of the last
// update (µs), C = 1 + the time of the latest take that charged (µs), 1
// for a key in use that none has charged yet (the zero C marks a fresh
// key; B cannot, since 0 is a valid time). A refund reads C to tell
// whether the level has fallen since the take it gives back (see
// bucketRefund).
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

// The divisions by the period and by the rate are multiplications by
// precomputed reciprocals (see divisor), and the refill test is a 128-bit
// multiplication: the results are those of the integer divisions they
// replace, exactly (the Redis and Memcached stores compute the same with
// plain arithmetic).

func (l *Limit) refill(s *State, now int64) int64 {
	capLevel := l.capLevel
	if s.C == 0 {
		s.A = capLevel
		if init := l.p.InitialTokens; init != nil {
			s.A = *init * l.periodUS
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
		// dt ≥ ⌈need ÷ rate⌉ ⟺ dt × rate ≥ need, with the product in 128
		// bits (dt and rate are below 2^53).
		dt := now - s.B
		if hi, lo := bits.Mul64(uint64(dt), uint64(l.p.Limit)); hi != 0 || lo >= uint64(need) {
			s.A = capLevel
		} else {
			s.A += int64(lo)
		}
	}
	s.B = now
	return now
}

func (l *Limit) bucket(d *Decision, s *State, now, cost int64, commit bool) {
	if !commit && s.C == 0 {
		// Peek must not start a fresh key's clock: with InitialTokens
		// below the capacity that would refill it from this instant.
		tmp := *s
		s = &tmp
	}
	now = l.refill(s, now)
	per, capLevel := l.periodUS, l.capLevel
	level := s.A
	// The Decision's fields are computed in locals and written once at
	// the end (see decide).
	var allowed bool
	var retry, delay time.Duration
	switch {
	case cost > l.capacity:
		retry = Never
	case level >= cost*per:
		allowed = true
		if l.p.Algorithm == Shaper {
			delay = micros(l.rateDiv.ceil(capLevel - level - l.p.Delay*per))
		}
		level -= cost * per
		if commit {
			s.A = level
			if cost > 0 {
				s.C = now + 1
			}
		}
	default:
		retry = micros(l.rateDiv.ceil(cost*per - level))
	}
	// level is in [0, capLevel]: the quotients of non-negative numbers.
	d.Allowed = allowed
	d.Limit = l.capacity
	d.Remaining = int64(l.perDiv.div(uint64(level)))
	d.RetryAfter = retry
	d.ResetAfter = micros(l.rateDiv.ceil(capLevel - level))
	d.Delay = delay
}

// bucketRefund gives back cost units of a take at at. The bucket without
// the take would hold the cost more, up to its capacity, where it reached
// it: from then on it wastes refill that the bucket with the take keeps,
// and the two draw closer. When nothing has been taken since at, the
// level has only risen, and its highest is now's: the cost, up to the
// capacity, is exactly what the take still keeps. After other takes, the
// level may have been higher in between (full again, then spent): giving
// back the whole cost, a bucket full again after a while admitted its
// capacity and then the refunded units on top, at one instant. Then it
// gives back the cost less what refilled since at, the most the take can
// still keep from the bucket whatever happened since (it left the level
// at least cost below the capacity, and the level has risen by at most
// the refill since); a take stamped after at (the state's time was ahead
// of its store's) counts as one since, which errs the same way.
func (l *Limit) bucketRefund(s *State, now, at, cost int64) {
	if s.C == 0 {
		return
	}
	now = l.refill(s, now)
	capLevel := l.capLevel
	if cost > l.capacity {
		cost = l.capacity
	}
	back := cost * l.periodUS
	if dt := now - at; s.C-1 > at && dt > 0 {
		// dt × rate ≥ back, with the product in 128 bits, as in refill.
		hi, lo := bits.Mul64(uint64(dt), uint64(l.p.Limit))
		if hi != 0 || lo >= uint64(back) {
			return
		}
		back -= int64(lo)
	}
	s.A = min(s.A+back, capLevel)
}

// bucketExpiry is when the bucket is full, plus the retention for a token
// bucket that starts below its capacity.
func (l *Limit) bucketExpiry(s *State) int64 {
	if s.C == 0 {
		return 0
	}
	return l.retained(s.B + l.rateDiv.ceil(l.capLevel-min(max(s.A, 0), l.capLevel)))
}
