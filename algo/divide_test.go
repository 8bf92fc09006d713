package algo

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestDivisor compares divisor with the / operator on divisors and
// numerators at the edges (powers of two and their neighbours, the
// algorithms' bound 2^53, the largest uint64) and at random.
func TestDivisor(t *testing.T) {
	var edges []uint64
	for i := range 64 {
		p := uint64(1) << i
		edges = append(edges, p-1, p, p+1)
	}
	edges = append(edges, 3, 5, 7, 10, 1000, 1_000_000, 60_000_000, 3_600_000_000, 86_400_000_000, maxExact-1, maxExact+1, math.MaxUint64, math.MaxUint64-1)
	r := rand.New(rand.NewPCG(1, 2))
	check := func(d, n uint64) {
		t.Helper()
		if got, want := newDivisor(d).div(n), n/d; got != want {
			t.Fatalf("%d / %d = %d, want %d", n, d, got, want)
		}
	}
	for _, d := range edges {
		if d == 0 || d > 1<<63 {
			continue
		}
		for _, n := range edges {
			check(d, n)
			// Around the multiples of d, where a quotient that is off by
			// one would show.
			if k := n / d; k > 0 && k < math.MaxUint64/d-1 {
				for _, m := range []uint64{k*d - 1, k * d, k*d + 1, (k+1)*d - 1} {
					check(d, m)
				}
			}
		}
		for range 2000 {
			check(d, r.Uint64())
			check(d, r.Uint64N(1<<53))
		}
	}
	for range 200_000 {
		d := r.Uint64N(1<<uint(r.IntN(63)+1)) + 1
		if d > 1<<63 {
			continue
		}
		check(d, r.Uint64())
		n := r.Uint64N(1 << 53)
		check(d, n)
		check(d, n/d*d)
		if n/d*d > 0 {
			check(d, n/d*d-1)
		}
	}
}

// TestDivisorCeil compares divisor.ceil with ceilDiv.
func TestDivisorCeil(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, d := range []int64{1, 2, 3, 7, 1000, 1_000_000, 1<<53 - 1} {
		v := newDivisor(uint64(d))
		for _, a := range []int64{math.MinInt64, -1, 0, 1, d - 1, d, d + 1, 2*d - 1, 2 * d, 1<<53 - 1, 1 << 53} {
			if got, want := v.ceil(a), ceilDiv(a, d); got != want {
				t.Fatalf("⌈%d / %d⌉ = %d, want %d", a, d, got, want)
			}
		}
		for range 10_000 {
			a := r.Int64N(1 << 54)
			if got, want := v.ceil(a), ceilDiv(a, d); got != want {
				t.Fatalf("⌈%d / %d⌉ = %d, want %d", a, d, got, want)
			}
		}
	}
}

// FuzzDivisor holds divisor to the / operator on any divisor from 1 to
// 2^63 and any numerator.
func FuzzDivisor(f *testing.F) {
	f.Add(uint64(7), uint64(100))
	f.Add(uint64(1_000_000), uint64(1<<53-1))
	f.Add(uint64(1<<63), uint64(math.MaxUint64))
	f.Fuzz(func(t *testing.T, d, n uint64) {
		if d == 0 || d > 1<<63 {
			return
		}
		if got, want := newDivisor(d).div(n), n/d; got != want {
			t.Fatalf("%d / %d = %d, want %d", n, d, got, want)
		}
	})
}

// divBucket is the token bucket (GCRA, Shaper) as written with integer
// divisions — the formulas the Redis and Memcached stores port — against
// which the reciprocal version is checked.
func divBucket(l *Limit, s *State, now, cost int64, commit bool) Decision {
	if cost < 0 {
		cost = 0
	}
	now = clampTime(now)
	if !commit && s.C == 0 {
		tmp := *s
		s = &tmp
	}
	per, rate, capLevel := l.periodUS, l.p.Limit, l.capacity*l.periodUS
	if s.C == 0 {
		s.A = capLevel
		if init := l.p.InitialTokens; init != nil {
			s.A = *init * per
		}
		s.B, s.C = now, 1
	} else {
		s.A = min(max(s.A, 0), capLevel)
		if now <= s.B {
			now = s.B
		} else {
			if need := capLevel - s.A; need > 0 {
				if dt := now - s.B; dt >= ceilDiv(need, rate) {
					s.A = capLevel
				} else {
					s.A += dt * rate
				}
			}
			s.B = now
		}
	}
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
			if cost > 0 {
				s.C = now + 1 // the latest take, for refunds
			}
		}
	default:
		d.RetryAfter = micros(ceilDiv(cost*per-level, rate))
	}
	d.Remaining = level / per
	d.ResetAfter = micros(ceilDiv(capLevel-level, rate))
	return d
}

// TestBucketMatchesDivisions runs random operations on random bucket
// limits (periods and rates of every magnitude, up to the 2^53 bound) with
// both the reciprocal arithmetic and the plain divisions, and requires the
// same decisions, states and expiries.
func TestBucketMatchesDivisions(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	kinds := []Kind{TokenBucket, GCRA, Shaper}
	compiled := 0
	for i := range 3000 {
		p := Params{Algorithm: kinds[i%3], Limit: 1 + r.Int64N(1<<uint(r.IntN(40)+1))}
		p.Period = time.Duration(1+r.Int64N(1<<uint(r.IntN(36)+1))) * time.Microsecond
		p.Burst = r.Int64N(1 << uint(r.IntN(30)+1))
		if p.Algorithm == Shaper {
			p.Delay = r.Int64N(p.Burst + 1)
		}
		if p.Algorithm == TokenBucket && r.IntN(3) == 0 {
			init := r.Int64N(max(p.Burst, p.Limit) + 1)
			p.InitialTokens = &init
		}
		l, err := Compile(p)
		if err != nil {
			continue // capacity × period over 2^53, etc.
		}
		compiled++
		var a, b State
		now := base + r.Int64N(1<<40)
		for range 50 {
			switch r.IntN(4) {
			case 0:
				now += r.Int64N(l.periodUS + 1)
			case 1:
				now += r.Int64N(1 << uint(r.IntN(50)+1))
			case 2:
				now -= r.Int64N(1000) // an earlier time
			}
			cost := r.Int64N(l.capacity + 2)
			if r.IntN(10) == 0 {
				cost = r.Int64N(1 << 40)
			}
			commit := r.IntN(5) != 0
			var got Decision
			if commit {
				got = l.Take(&a, now, cost)
			} else {
				got = l.Peek(&a, now, cost)
			}
			want := divBucket(l, &b, now, cost, commit)
			if got != want || a.A != b.A || a.B != b.B || a.C != b.C {
				t.Fatalf("%v at %d cost %d commit %v:\n got %+v state %+v\nwant %+v state %+v", l, now, cost, commit, got, a, want, b)
			}
			wantExp := int64(0)
			if b.C != 0 {
				wantExp = b.B + ceilDiv(l.capacity*l.periodUS-min(max(b.A, 0), l.capacity*l.periodUS), l.p.Limit)
				if init := l.p.InitialTokens; init != nil && *init < l.capacity {
					// Kept the default hour after it is full, up to 2^53-1.
					wantExp = min(wantExp+int64(time.Hour/time.Microsecond), max(wantExp, maxTime))
				}
			}
			if got := l.ExpiresAt(&a); got != wantExp {
				t.Fatalf("%v: ExpiresAt(%+v) = %d, want %d", l, a, got, wantExp)
			}
		}
	}
	if compiled < 1000 {
		t.Fatalf("only %d of 3000 random limits compiled: the test covers too little", compiled)
	}
}

// TestWindowBoundsMatchDivisions checks the fixed window's start, computed
// with a reciprocal, against floorMod for every magnitude of period.
func TestWindowBoundsMatchDivisions(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 2000 {
		period := time.Duration(1+r.Int64N(1<<uint(r.IntN(52)+1))) * time.Microsecond
		l, err := Compile(Params{Algorithm: FixedWindow, Limit: 10, Period: period})
		if err != nil {
			t.Fatal(err)
		}
		for range 100 {
			now := r.Int64N(maxTime+1) - r.Int64N(1<<20)
			start, end := l.windowBounds(now)
			ws := now - floorMod(now, l.periodUS)
			if start != ws || end != ws+l.periodUS {
				t.Fatalf("period %v at %d: [%d, %d), want [%d, %d)", period, now, start, end, ws, ws+l.periodUS)
			}
		}
	}
}
