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
		sp.maxPermits = l.p.MaxBurstSeconds * 1e6 / sp.stable
		sp.coolDown = sp.stable
		l.capacity = int64(sp.maxPermits) + 1
		return nil
	}
	if p.WarmupPeriod <= 0 {
		return fmt.Errorf("%w: warmup_period: required for smooth_warmup", ErrInvalid)
	}
	if l.p.ColdFactor == 0 {
		l.p.ColdFactor = 3
	}
	if l.p.ColdFactor < 1 {
		return fmt.Errorf("%w: cold_factor: must be >= 1, got %v", ErrInvalid, l.p.ColdFactor)
	}
	warm := float64(p.WarmupPeriod / time.Microsecond)
	cold := sp.stable * l.p.ColdFactor
	sp.threshold = 0.5 * warm / sp.stable
	sp.maxPermits = sp.threshold + 2.0*warm/(sp.stable+cold)
	sp.slope = (cold - sp.stable) / (sp.maxPermits - sp.threshold)
	sp.coolDown = warm / sp.maxPermits
	l.capacity = 1
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
	if now > s.B {
		stored = math.Min(sp.maxPermits, stored+float64(now-s.B)/sp.coolDown)
		s.B = now
		s.A = int64(math.Float64bits(stored))
	}
	return stored
}

func (l *Limit) smoothTake(s *State, now, cost int64, commit bool) Decision {
	now = monotonic(&s.C, now)
	stored := l.smoothResync(s, now)
	d := Decision{Limit: l.capacity}
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
	next := s.B + l.storedPermitsToWaitTime(stored, spend) + int64(fresh*l.smooth.stable)
	stored -= spend
	if commit {
		s.B = next
		s.A = int64(math.Float64bits(stored))
	}
	d.Remaining = int64(stored)
	if next <= now {
		d.Remaining++
	}
	d.ResetAfter = l.smoothReset(&State{B: next}, stored, now)
	return d
}

func (l *Limit) smoothReset(s *State, stored float64, now int64) time.Duration {
	return micros(l.smoothUntilFull(s.B, stored) - now)
}

func (l *Limit) smoothUntilFull(next int64, stored float64) int64 {
	return next + int64(math.Ceil((l.smooth.maxPermits-stored)*l.smooth.coolDown))
}

func (l *Limit) smoothRefund(s *State, cost int64) {
	if s.B == 0 {
		return
	}
	s.B -= int64(float64(cost) * l.smooth.stable)
	if s.B < s.C {
		s.B = s.C
	}
}

func (l *Limit) smoothExpiry(s *State) int64 {
	if s.B == 0 {
		return 0
	}
	return l.smoothUntilFull(s.B, math.Float64frombits(uint64(s.A)))
}
