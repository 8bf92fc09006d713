package algo

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"testing"
	"time"
)

// fuzzParams builds Params from raw fuzz values without filtering: Compile
// is what decides whether they are valid.
func fuzzParams(kind, calendar uint8, limit, period, burst, initial int64, hasInitial bool, sub int, delay, warmup int64, cold, maxBurst float64, maxWait, ttl int64) Params {
	p := Params{
		Algorithm:       Kind(kind),
		Limit:           limit,
		Period:          time.Duration(period),
		Calendar:        Calendar(calendar),
		Burst:           burst,
		SubWindows:      sub,
		Delay:           delay,
		WarmupPeriod:    time.Duration(warmup),
		ColdFactor:      cold,
		MaxBurstSeconds: maxBurst,
		MaxWait:         time.Duration(maxWait),
		LeaseTTL:        time.Duration(ttl),
	}
	if hasInitial {
		p.InitialTokens = &initial
	}
	return p
}

// addParamSeeds seeds f with one valid limit of every algorithm and a few
// absurd ones.
func addParamSeeds(f *testing.F, extra ...any) {
	s, m, h := int64(time.Second), int64(time.Minute), int64(time.Hour)
	seeds := [][]any{
		{uint8(FixedWindow), uint8(0), int64(10), m, int64(0), int64(0), false, 0, int64(0), int64(0), 0.0, 0.0, int64(0), int64(0)},
		{uint8(FixedWindow), uint8(CalendarMonth), int64(1000), int64(0), int64(0), int64(0), false, 0, int64(0), int64(0), 0.0, 0.0, int64(0), int64(0)},
		{uint8(SlidingLog), uint8(0), int64(5), s, int64(0), int64(0), false, 0, int64(0), int64(0), 0.0, 0.0, int64(0), int64(0)},
		{uint8(SlidingWindow), uint8(0), int64(100), m, int64(0), int64(0), false, 6, int64(0), int64(0), 0.0, 0.0, int64(0), int64(0)},
		{uint8(SlidingWindow), uint8(0), int64(7), 10 * s, int64(0), int64(0), false, 1, int64(0), int64(0), 0.0, 0.0, int64(0), int64(0)},
		{uint8(TokenBucket), uint8(0), int64(10), s, int64(20), int64(3), true, 0, int64(0), int64(0), 0.0, 0.0, int64(0), int64(0)},
		{uint8(GCRA), uint8(0), int64(3), s, int64(5), int64(0), false, 0, int64(0), int64(0), 0.0, 0.0, int64(0), int64(0)},
		{uint8(Shaper), uint8(0), int64(2), s, int64(4), int64(0), false, 0, int64(2), int64(0), 0.0, 0.0, int64(0), int64(0)},
		{uint8(SmoothBursty), uint8(0), int64(5), s, int64(0), int64(0), false, 0, int64(0), int64(0), 0.0, 2.0, int64(100 * time.Millisecond), int64(0)},
		{uint8(SmoothWarmup), uint8(0), int64(2), s, int64(0), int64(0), false, 0, int64(0), 4 * s, 3.0, 0.0, int64(time.Second), int64(0)},
		{uint8(Concurrency), uint8(0), int64(3), int64(0), int64(0), int64(0), false, 0, int64(0), int64(0), 0.0, 0.0, int64(0), 30 * s},
		{uint8(TokenBucket), uint8(0), int64(1<<53 - 1), h, int64(0), int64(0), false, 0, int64(0), int64(0), 0.0, 0.0, int64(0), int64(0)},
		{uint8(SmoothWarmup), uint8(0), int64(1), int64(math.MaxInt64), int64(0), int64(0), false, 0, int64(0), int64(math.MaxInt64), 1e300, 0.0, int64(math.MaxInt64), int64(0)},
		{uint8(SmoothBursty), uint8(0), int64(1), int64(time.Microsecond), int64(-1), int64(-1), true, -1, int64(-1), int64(-1), math.NaN(), math.Inf(1), int64(-1), int64(-1)},
	}
	for _, sd := range seeds {
		f.Add(append(sd, extra...)...)
	}
}

// FuzzCompile: Compile never panics; what it accepts has a positive
// capacity, and what it rejects wraps ErrInvalid.
func FuzzCompile(f *testing.F) {
	addParamSeeds(f)
	f.Fuzz(func(t *testing.T, kind, calendar uint8, limit, period, burst, initial int64, hasInitial bool, sub int, delay, warmup int64, cold, maxBurst float64, maxWait, ttl int64) {
		p := fuzzParams(kind, calendar, limit, period, burst, initial, hasInitial, sub, delay, warmup, cold, maxBurst, maxWait, ttl)
		l, err := Compile(p)
		if err != nil {
			if l != nil || !isInvalid(err) {
				t.Fatalf("Compile(%+v) = %v, %v: an error must wrap ErrInvalid and come alone", p, l, err)
			}
			return
		}
		if l.Capacity() < 1 {
			t.Fatalf("Compile(%+v).Capacity() = %d", p, l.Capacity())
		}
		_ = l.String()
		_ = l.Window(base)
	})
}

// FuzzTake drives any limit Compile accepts with any instants (backwards,
// before the epoch, at the end of int64) and any costs. Nothing panics,
// every Decision is well formed, and the state's time never moves back.
func FuzzTake(f *testing.F) {
	ops := func(pairs ...int64) []byte {
		var b []byte
		for _, v := range pairs {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
		return b
	}
	addParamSeeds(f, ops(base, 1, 0, 5, 1_000_000, 3, -5_000_000, 1, 60_000_000, 1<<62))
	addParamSeeds(f, ops(0, 1, 0, 1, math.MinInt64, math.MaxInt64, math.MaxInt64, 1, -1, -1))
	f.Fuzz(func(t *testing.T, kind, calendar uint8, limit, period, burst, initial int64, hasInitial bool, sub int, delay, warmup int64, cold, maxBurst float64, maxWait, ttl int64, ops []byte) {
		l, err := Compile(fuzzParams(kind, calendar, limit, period, burst, initial, hasInitial, sub, delay, warmup, cold, maxBurst, maxWait, ttl))
		if err != nil {
			return
		}
		var s State
		var last int64
		for i := 0; i+16 <= len(ops) && i < 16*64; i += 16 {
			now := int64(binary.LittleEndian.Uint64(ops[i:]))
			cost := int64(binary.LittleEndian.Uint64(ops[i+8:]))
			var d Decision
			switch cost & 3 {
			case 0:
				d = l.Peek(&s, now, cost)
			case 1:
				d = l.TakeLease(&s, now, cost, uint64(cost>>2&3))
			case 2:
				l.Release(&s, now, uint64(cost>>2&3))
				l.Refund(&s, now, now-cost>>8, cost>>2)
				cost = 0 // what the Peek asks, which checkDecision checks
				d = l.Peek(&s, now, cost)
			default:
				d = l.Take(&s, now, cost)
			}
			checkDecision(t, l, d, now, cost)
			if tm := stateTime(l, &s); tm < last {
				t.Fatalf("%v: the state's time went back from %d to %d at op %d (now %d)", l, last, tm, i/16, now)
			} else {
				last = tm
			}
			_ = l.ExpiresAt(&s)
		}
		var back State
		b, _ := s.MarshalBinary()
		if err := back.UnmarshalBinary(b); err != nil || !sameState(s, back) {
			t.Fatalf("state %+v did not survive encoding: %+v, %v", s, back, err)
		}
	})
}

func checkDecision(t *testing.T, l *Limit, d Decision, now, cost int64) {
	t.Helper()
	smooth := l.p.Algorithm == SmoothBursty || l.p.Algorithm == SmoothWarmup
	switch {
	case d.Limit != l.Capacity():
		t.Fatalf("%v at %d cost %d: Limit %d, want the capacity %d", l, now, cost, d.Limit, l.Capacity())
	case d.Remaining < 0 || d.Remaining > d.Limit:
		t.Fatalf("%v at %d cost %d: Remaining %d out of [0, %d]", l, now, cost, d.Remaining, d.Limit)
	case d.Allowed && d.RetryAfter != 0:
		t.Fatalf("%v at %d cost %d: admitted with RetryAfter %v", l, now, cost, d.RetryAfter)
	case !d.Allowed && d.RetryAfter <= 0:
		t.Fatalf("%v at %d cost %d: refused with RetryAfter %v", l, now, cost, d.RetryAfter)
	case d.IsNever() && cost <= l.MaxCost():
		t.Fatalf("%v at %d cost %d: Never for a cost within MaxCost %d", l, now, cost, l.MaxCost())
	case cost > l.MaxCost() && (d.Allowed || !d.IsNever()):
		t.Fatalf("%v at %d cost %d: a cost above MaxCost %d not refused as Never: %+v", l, now, cost, l.MaxCost(), d)
	case d.ResetAfter < 0 || d.Delay < 0:
		t.Fatalf("%v at %d cost %d: negative duration in %+v", l, now, cost, d)
	case d.Delay != 0 && !smooth && l.p.Algorithm != Shaper:
		t.Fatalf("%v at %d cost %d: Delay %v from an algorithm that does not delay", l, now, cost, d.Delay)
	}
}

func sameState(a, b State) bool {
	return a.A == b.A && a.B == b.B && a.C == b.C && slices.Equal(a.Ext, b.Ext)
}

// admission is one admitted request, at the time the algorithm used.
type admission struct{ at, cost int64 }

// FuzzAdmittedBound checks what the exact algorithms promise about any
// span of time, on any sequence of requests, with a clock that may step
// back (the algorithms then use the latest time they have seen):
//
//	SlidingLog    at most Limit in any span (t−Period, t].
//	FixedWindow   at most Limit within one window; hence at most 2×Limit
//	              in any span of Period.
//	TokenBucket,  at most Burst + ⌊Limit × span ÷ Period⌋ in any closed
//	GCRA          span [t1, t2] of length span (Burst+1 for the Shaper),
//	Shaper        whatever InitialTokens is.
//	Concurrency   at most Limit leases live (neither released nor
//	              expired) at any instant.
func FuzzAdmittedBound(f *testing.F) {
	seed := func(pairs ...uint16) []byte {
		var b []byte
		for _, v := range pairs {
			b = binary.LittleEndian.AppendUint16(b, v)
		}
		return b
	}
	for k := uint8(0); k < 6; k++ {
		f.Add(k, uint8(5), uint16(1000), uint8(3), seed(0, 1, 0, 5, 999, 2, 1, 3, 1000, 5, 0xfff0, 1, 3000, 4))
		f.Add(k, uint8(1), uint16(7), uint8(0), seed(1, 1, 1, 1, 6, 1, 7, 1, 8, 1))
	}
	kinds := [...]Kind{SlidingLog, FixedWindow, TokenBucket, GCRA, Shaper, Concurrency}
	f.Fuzz(func(t *testing.T, which, limit uint8, period uint16, burst uint8, ops []byte) {
		k := kinds[int(which)%len(kinds)]
		p := Params{Algorithm: k, Limit: 1 + int64(limit%32), Period: time.Duration(1+int64(period)) * time.Microsecond, Burst: int64(burst % 40)}
		switch k {
		case Shaper:
			p.Delay = int64(burst/40) % (p.Burst + 1)
		case TokenBucket:
			if burst >= 128 {
				c := p.Burst
				if c == 0 {
					c = p.Limit
				}
				init := int64(burst) % (c + 1)
				p.InitialTokens = &init
			}
		case Concurrency:
			p.LeaseTTL, p.Period, p.Burst = p.Period, 0, 0
		case SlidingLog, FixedWindow:
			p.Burst = 0
		}
		l, err := Compile(p)
		if err != nil {
			t.Fatalf("Compile(%+v): %v", p, err)
		}
		per := l.periodUS
		var s State
		var got []admission
		type lease struct {
			id       uint64
			exp, n   int64
			released bool
		}
		var leases []lease
		now, seen := base, int64(0)
		for i := 0; i+4 <= len(ops) && i < 4*300; i += 4 {
			step := int64(binary.LittleEndian.Uint16(ops[i:]))
			arg := binary.LittleEndian.Uint16(ops[i+2:])
			if step >= 0xff00 {
				now -= (step - 0xff00) * 37 // the clock steps back
			} else {
				now += step
			}
			seen = max(seen, now)
			cost := int64(arg % 8)
			id := uint64(arg>>3) % 4
			if k == Concurrency && arg&0x8000 != 0 {
				if l.Release(&s, now, id) {
					for j := range leases {
						if leases[j].id == id && leases[j].exp > seen {
							leases[j].released = true
						}
					}
				}
				continue
			}
			d := l.TakeLease(&s, now, cost, id)
			if !d.Allowed || cost == 0 {
				continue
			}
			got = append(got, admission{seen, cost})
			switch k {
			case SlidingLog:
				if n := sumIn(got, seen-per+1, seen); n > l.p.Limit {
					t.Fatalf("%v: %d admitted in (%d, %d], over the limit %d", l, n, seen-per, seen, l.p.Limit)
				}
			case FixedWindow:
				start, end := l.windowBounds(seen)
				if n := sumIn(got, start, end-1); n > l.p.Limit {
					t.Fatalf("%v: %d admitted in the window [%d, %d), over the limit %d", l, n, start, end, l.p.Limit)
				}
				if n := sumIn(got, seen-per+1, seen); n > 2*l.p.Limit {
					t.Fatalf("%v: %d admitted in a span of Period, over 2×Limit", l, n)
				}
			case TokenBucket, GCRA, Shaper:
				var n int64
				for j := len(got) - 1; j >= 0; j-- {
					n += got[j].cost
					span := seen - got[j].at
					if bound := l.Capacity() + l.p.Limit*span/per; n > bound {
						t.Fatalf("%v: %d admitted in [%d, %d], a span of %dµs, over capacity %d + rate × span = %d", l, n, got[j].at, seen, span, l.Capacity(), bound)
					}
				}
			case Concurrency:
				leases = append(leases, lease{id: id, exp: seen + l.leaseUS, n: cost})
				var live int64
				for _, ls := range leases {
					if !ls.released && ls.exp > seen {
						live += ls.n
					}
				}
				if live > l.p.Limit {
					t.Fatalf("%v: %d leases live at %d, over the limit %d", l, live, seen, l.p.Limit)
				}
			}
		}
	})
}

// sumIn adds the costs admitted in [from, to].
func sumIn(got []admission, from, to int64) int64 {
	var n int64
	for _, a := range got {
		if a.at >= from && a.at <= to {
			n += a.cost
		}
	}
	return n
}

// FuzzUnmarshalBinary: decoding arbitrary bytes never panics; what decodes
// re-encodes to the same bytes; and every algorithm survives being handed
// such a state (from a corrupted cache entry or a limit whose parameters
// changed under an existing key) without panicking.
func FuzzUnmarshalBinary(f *testing.F) {
	for _, s := range []State{
		{},
		{A: 1, B: -2, C: math.MaxInt64},
		{A: base, Ext: []int64{1, base + 5, 2, base + 7}},
		{Ext: []int64{0, 0, 0}},
		{A: math.MinInt64, Ext: []int64{math.MaxInt64, math.MinInt64}},
	} {
		b, _ := s.MarshalBinary()
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{2, 0, 0, 0, 0})
	limits := make([]*Limit, 0, len(Kinds())+2)
	for _, k := range Kinds() {
		p := Params{Algorithm: k, Limit: 4, Period: time.Second}
		if k == SmoothWarmup {
			p.WarmupPeriod = time.Second
		}
		limits = append(limits, mustCompile(f, p))
	}
	limits = append(limits, mustCompile(f, Params{Algorithm: SlidingWindow, Limit: 4, Period: time.Second, SubWindows: 4}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s State
		if err := s.UnmarshalBinary(b); err != nil {
			if !isBadState(err) {
				t.Fatalf("UnmarshalBinary error %v does not wrap ErrBadState", err)
			}
			return
		}
		again, err := s.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var s2 State
		if err := s2.UnmarshalBinary(again); err != nil || !sameState(s, s2) {
			t.Fatalf("re-decoding %x gave %+v, %v, want %+v", again, s2, err, s)
		}
		for _, l := range limits {
			c := s.Clone()
			for _, now := range []int64{base, base + 1, s.C, s.B + 1} {
				checkDecision(t, l, l.Take(&c, now, 1), now, 1)
				checkDecision(t, l, l.TakeLease(&c, now, 2, 1), now, 2)
				l.Release(&c, now, 1)
				l.Refund(&c, now, now, 1)
				_ = l.ExpiresAt(&c)
			}
		}
	})
}

// FuzzStateRoundTrip: every State encodes and decodes to itself.
func FuzzStateRoundTrip(f *testing.F) {
	f.Add(int64(0), int64(0), int64(0), []byte{})
	f.Add(base, int64(-1), int64(math.MinInt64), []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	f.Fuzz(func(t *testing.T, a, b, c int64, ext []byte) {
		s := State{A: a, B: b, C: c}
		for i := 0; i+8 <= len(ext); i += 8 {
			s.Ext = append(s.Ext, int64(binary.LittleEndian.Uint64(ext[i:])))
		}
		enc, err := s.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		// Decode into a state that already holds something, as stores
		// reusing a State do.
		back := State{A: 9, Ext: []int64{1, 2, 3, 4, 5, 6, 7, 8, 9}}
		if err := back.UnmarshalBinary(enc); err != nil {
			t.Fatalf("UnmarshalBinary(MarshalBinary(%+v)): %v", s, err)
		}
		if !sameState(s, back) {
			t.Fatalf("round trip of %+v gave %+v", s, back)
		}
	})
}

func isInvalid(err error) bool  { return errors.Is(err, ErrInvalid) }
func isBadState(err error) bool { return errors.Is(err, ErrBadState) }

// FuzzRetain drives the limits that keep a full state for Retain — a
// TokenBucket whose InitialTokens are below its capacity and SmoothBursty
// — through a store that forgets a key as soon as ExpiresAt allows (the
// memory store's sweep, a Redis key's TTL), with any Retain, any steps
// (the clock may step back) and any costs:
//
//   - every Decision is well formed;
//   - the state's time never moves back, across forgotten keys too: a key
//     is forgotten only once the clock has reached its ExpiresAt, which is
//     never before its time;
//   - at the instant a key is forgotten, a fresh key has no more units
//     than the kept one would (Params.Retain's promise);
//   - TokenBucket, exact, admits at most Capacity + ⌊Limit × span ÷
//     Period⌋ in any closed span of the state's time, forgotten keys
//     included. (The state's time, not the clock: when the clock steps
//     back, a state decides at the latest time it has seen, and a fresh
//     key, having seen none, at the clock's.)
func FuzzRetain(f *testing.F) {
	seed := func(pairs ...uint16) []byte {
		var b []byte
		for _, v := range pairs {
			b = binary.LittleEndian.AppendUint16(b, v)
		}
		return b
	}
	for _, smooth := range []bool{false, true} {
		f.Add(smooth, uint8(5), uint16(1000), uint8(3), uint8(0), uint32(10), uint8(8),
			seed(0, 1, 0, 5, 999, 2, 3000, 3, 20, 1, 0xff10, 1, 9000, 7, 1, 1))
		f.Add(smooth, uint8(1), uint16(7), uint8(0), uint8(1), uint32(0), uint8(0), seed(1, 1, 1, 1, 6, 1, 7, 1, 8, 1))
		f.Add(smooth, uint8(31), uint16(60000), uint8(39), uint8(38), uint32(1<<30), uint8(255), seed(60000, 7, 60000, 7, 0xfff0, 6))
	}
	f.Fuzz(func(t *testing.T, smooth bool, limit uint8, period uint16, burst, initial uint8, retain uint32, maxBurst uint8, ops []byte) {
		p := Params{Algorithm: TokenBucket, Limit: 1 + int64(limit%32), Period: time.Duration(1+int64(period)) * time.Microsecond,
			Retain: time.Duration(1+int64(retain%(1<<24))) * time.Microsecond}
		if smooth {
			p.Algorithm = SmoothBursty
			p.Period += time.Duration(p.Limit) * time.Microsecond // at most a permit per µs
			p.MaxBurstSeconds = float64(1+int64(maxBurst)) / 32
		} else {
			p.Burst = int64(burst % 40)
			c := p.Burst
			if c == 0 {
				c = p.Limit
			}
			init := int64(initial) % c // below the capacity: the key starts short
			p.InitialTokens = &init
		}
		l, err := Compile(p)
		if err != nil {
			t.Fatalf("Compile(%+v): %v", p, err)
		}
		if got := l.Params().Retain; got != p.Retain {
			t.Fatalf("%v: Retain %v, want %v", l, got, p.Retain)
		}
		per := l.periodUS
		var s State
		var got []admission
		now, last := base, int64(math.MinInt64)
		for i := 0; i+4 <= len(ops) && i < 4*300; i += 4 {
			step := int64(binary.LittleEndian.Uint16(ops[i:]))
			arg := binary.LittleEndian.Uint16(ops[i+2:])
			if step >= 0xff00 {
				now -= (step - 0xff00) * 37 // the clock steps back
			} else {
				now += step
			}
			if !sameState(s, State{}) && now >= l.ExpiresAt(&s) {
				var fresh State
				kept := s.Clone()
				if fd, kd := l.Peek(&fresh, now, 0), l.Peek(&kept, now, 0); fd.Remaining > kd.Remaining {
					t.Fatalf("%v: forgotten at %d (ExpiresAt %d), a fresh key has %d units, more than the kept state's %d (%+v)",
						l, now, l.ExpiresAt(&s), fd.Remaining, kd.Remaining, s)
				}
				s = State{}
			}
			cost := int64(arg % 8)
			var d Decision
			if arg&0x8000 != 0 {
				d = l.Peek(&s, now, cost)
			} else {
				d = l.Take(&s, now, cost)
			}
			checkDecision(t, l, d, now, cost)
			if sameState(s, State{}) {
				continue // a Peek at a fresh key writes nothing
			}
			seen := stateTime(l, &s)
			if seen < last {
				t.Fatalf("%v: the state's time went back from %d to %d at op %d (now %d)", l, last, seen, i/4, now)
			}
			last = seen
			if smooth || arg&0x8000 != 0 || !d.Allowed || cost == 0 {
				continue
			}
			got = append(got, admission{seen, cost})
			var n int64
			for j := len(got) - 1; j >= 0; j-- {
				n += got[j].cost
				span := seen - got[j].at
				if bound := l.Capacity() + l.p.Limit*span/per; n > bound {
					t.Fatalf("%v: %d admitted in [%d, %d], a span of %dµs, over capacity %d + rate × span = %d", l, n, got[j].at, seen, span, l.Capacity(), bound)
				}
			}
		}
	})
}
