package algo

import (
	"fmt"
	"math"
	"time"
)

// Smooth state (Guava's RateLimiter): A = stored permits (float64 bits),
// B = the next free ticket (µs; 0 marks a fresh key), C = the latest time seen.
//
// The math follows Guava's SmoothRateLimiter line for line, in float64 µs
// with the same truncations, so a worked Guava example gives the same waits.
// A request is admitted when the next free ticket is within MaxWait; it then
// moves the ticket by the time its permits are worth, which the next request
// pays: one acquire(3) costs what three acquire(1) do.

type smoothParams struct {
	stable, coolDown      float64 // µs per permit
	maxPermits, threshold float64
	slope                 float64 // µs per permit², warm-up only
	// maxCost bounds one request's cost (see Limit.MaxCost).
	maxCost int64
}

// setMaxCost sets the largest cost a request may carry: the stored permits
// plus what the longer of one Period and MaxWait is worth at the stable
// rate. Guava admits any acquire(n) and lets the following requests pay for
// it; bounded so, one request cannot hold a shared key for longer than
// that (a cost of 2^63 would hold it for centuries).
func (sp *smoothParams) setMaxCost(p Params, maxWaitUS int64) {
	horizon := math.Max(float64(p.Limit), float64(maxWaitUS)/sp.stable)
	c := math.Floor(sp.maxPermits) + math.Floor(horizon)
	if !(c < float64(maxExact)) {
		c = float64(maxExact)
	}
	sp.maxCost = int64(c)
}

func (l *Limit) compileSmooth() error {
	p := l.p
	sp := &l.smooth
	sp.stable = float64(l.periodUS) / float64(p.Limit)
	if sp.stable < 1 {
		return fmt.Errorf("%w: limit: %s needs at most one permit per µs, got %d per %v", ErrInvalid, p.Algorithm, p.Limit, p.Period)
	}
	l.maxWait = int64(p.MaxWait / time.Microsecond)
	if p.Algorithm == SmoothBursty {
		if l.p.MaxBurstSeconds == 0 {
			l.p.MaxBurstSeconds = 1
		}
		// Refilling the store takes MaxBurstSeconds; keep that a time the
		// algorithms can add to a clock.
		if l.p.MaxBurstSeconds*1e6 > maxExact/2 {
			return fmt.Errorf("%w: max_burst_seconds: at most %v, got %v", ErrInvalid, float64(maxExact/2)/1e6, l.p.MaxBurstSeconds)
		}
		sp.maxPermits = l.p.MaxBurstSeconds * 1e6 / sp.stable
		sp.coolDown = sp.stable
		l.capacity = int64(sp.maxPermits) + 1
		sp.setMaxCost(l.p, l.maxWait)
		l.setRetain() // a fresh key stores no permits
		return nil
	}
	if p.WarmupPeriod <= 0 {
		return fmt.Errorf("%w: warmup_period: required for smooth_warmup", ErrInvalid)
	}
	if l.p.ColdFactor == 0 {
		l.p.ColdFactor = 3
	}
	warm := float64(p.WarmupPeriod / time.Microsecond)
	cold := sp.stable * l.p.ColdFactor
	sp.threshold = 0.5 * warm / sp.stable
	sp.maxPermits = sp.threshold + 2.0*warm/(sp.stable+cold)
	sp.slope = (cold - sp.stable) / (sp.maxPermits - sp.threshold)
	sp.coolDown = warm / sp.maxPermits
	// A cold factor so large that the warm-up band vanishes in float64
	// makes the slope infinite; no real limiter wants one.
	if math.IsInf(sp.slope, 0) || math.IsNaN(sp.slope) {
		return fmt.Errorf("%w: cold_factor: %v is too large for warmup_period %v at this rate", ErrInvalid, l.p.ColdFactor, p.WarmupPeriod)
	}
	l.capacity = 1
	sp.setMaxCost(l.p, l.maxWait)
	return nil
}

// storedPermitsToWaitTime is Guava's: the integral of the interval over the
// permits taken from storage (zero for the bursty variant).
func (l *Limit) storedPermitsToWaitTime(stored, take float64) int64 {
	sp := &l.smooth
	if l.p.Algorithm == SmoothBursty {
		return 0
	}
	var us int64
	if above := stored - sp.threshold; above > 0 {
		t := math.Min(above, take)
		length := sp.stable + above*sp.slope + sp.stable + (above-t)*sp.slope
		us = int64(t * length / 2.0)
		take -= t
	}
	return us + int64(sp.stable*take)
}

func (l *Limit) smoothResync(s *State, now int64) (stored float64) {
	sp := &l.smooth
	if s.B == 0 {
		s.B = now
		if l.p.Algorithm == SmoothWarmup {
			stored = sp.maxPermits // a new limiter starts cold
		}
		s.A = int64(math.Float64bits(stored))
		return stored
	}
	stored = math.Float64frombits(uint64(s.A))
	if !(stored >= 0) { // NaN or negative: not a state this package wrote
		stored = 0
	}
	stored = math.Min(stored, sp.maxPermits)
	if now > s.B {
		stored = math.Min(sp.maxPermits, stored+float64(now-s.B)/sp.coolDown)
		s.B = now
		s.A = int64(math.Float64bits(stored))
	}
	return stored
}

func (l *Limit) smoothTake(s *State, now, cost int64, commit bool) Decision {
	if !commit && s.B == 0 {
		// Peek must not start a fresh key's clock: SmoothBursty would
		// store permits from this instant.
		tmp := *s
		s = &tmp
	}
	now = monotonic(&s.C, now)
	stored := l.smoothResync(s, now)
	d := Decision{Limit: l.capacity}
	if cost > l.MaxCost() {
		// Guava would admit it and let the following requests pay for
		// it: one request could then hold a shared key for as long as
		// its cost is worth (years, for a huge one). Beyond MaxCost it
		// can never pass instead, as a bucket's request for more than
		// its capacity.
		d.RetryAfter = Never
		d.Remaining = l.smoothFree(s, stored, now)
		d.ResetAfter = l.smoothReset(s, stored, now)
		return d
	}
	wait := s.B - now
	if wait > l.maxWait {
		d.RetryAfter = micros(wait - l.maxWait)
		d.Remaining = 0
		d.ResetAfter = l.smoothReset(s, stored, now)
		return d
	}
	d.Allowed = true
	d.Delay = micros(wait)
	spend := math.Min(float64(cost), stored)
	fresh := float64(cost) - spend
	// Like Guava's saturated add: a huge cost pushes the ticket to the end
	// of time rather than overflowing it. Saturated at each step: the
	// wait for the stored permits alone can take it past maxTime, where
	// a store keeping it as a double (Redis) would round it.
	next := min(s.B+l.storedPermitsToWaitTime(stored, spend), maxTime)
	if pay := fresh * l.smooth.stable; pay < float64(maxTime-next) {
		next += int64(pay)
	} else {
		next = maxTime
	}
	stored -= spend
	if commit {
		s.B = next
		s.A = int64(math.Float64bits(stored))
	}
	d.Remaining = l.smoothFree(&State{B: next}, stored, now)
	d.ResetAfter = l.smoothReset(&State{B: next}, stored, now)
	return d
}

// smoothFree counts the unit requests that would pass at now without
// waiting, with stored permits and the next free ticket s.B: SmoothBursty's
// stored permits are free, SmoothWarmup's are not (they are what make a
// cold limiter slow), and one more passes if the ticket is free.
func (l *Limit) smoothFree(s *State, stored float64, now int64) int64 {
	var n int64
	if l.p.Algorithm == SmoothBursty {
		n = int64(stored)
	}
	if s.B <= now {
		n++
	}
	return n
}

func (l *Limit) smoothReset(s *State, stored float64, now int64) time.Duration {
	return micros(l.smoothUntilFull(s.B, stored) - now)
}

func (l *Limit) smoothUntilFull(next int64, stored float64) int64 {
	return next + int64(math.Ceil((l.smooth.maxPermits-stored)*l.smooth.coolDown))
}

// smoothRefund gives back cost units of a take at at: the ticket time the
// cost is worth at the stable rate, less what the permits stored since at
// are worth (one every coolDown): without the take, the limiter may have
// filled its store meanwhile and lost those, which the limiter with it
// kept, and giving them back as well let a request that would have waited
// pass at once (reserved at t, 10 taken at t+5s, cancelled: 15 at one
// instant on a burst of 5). It never moves the ticket before the latest
// time seen, and does not restore the stored permits the take spent; but
// the ticket time it gives back for those lets the next request proceed
// sooner than had the take not been made, by at most their worth (random
// histories exceed the burst by up to 3 units where they exceeded it by
// 48 before the refill was taken off).
func (l *Limit) smoothRefund(s *State, now, at, cost int64) {
	if s.B == 0 {
		return
	}
	if s.B <= s.C {
		return
	}
	back := float64(cost) * l.smooth.stable
	if dt := max(now, s.C) - at; dt > 0 {
		if back -= float64(dt) * l.smooth.stable / l.smooth.coolDown; back <= 0 {
			return
		}
	}
	if back < float64(s.B-s.C) {
		s.B -= int64(back)
	} else {
		s.B = s.C
	}
}

// smoothExpiry is when the stored permits are full, plus for SmoothBursty
// the retention (a fresh SmoothBursty key stores none; a fresh
// SmoothWarmup key is cold, which is full).
func (l *Limit) smoothExpiry(s *State) int64 {
	if s.B == 0 {
		return 0
	}
	return l.retained(l.smoothUntilFull(s.B, math.Float64frombits(uint64(s.A))))
}
