package algo

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"
)

func TestSlidingLogSteps(t *testing.T) {
	l := mustCompile(t, Params{Algorithm: SlidingLog, Limit: 3, Period: 10 * time.Second})
	s := runSteps(t, l, instants{
		"t0": 0,
		"t1": 2 * time.Second,
		"t2": 5 * time.Second,
		"t3": 10*time.Second - time.Microsecond,
		"t4": 10 * time.Second,
		"t5": 11 * time.Second,
		"t6": 12 * time.Second,
	}, []step{
		{at: "t0", cost: 1, allowed: true, remaining: 2},
		{at: "t1", cost: 2, allowed: true, remaining: 0},
		// The unit of t0 leaves the window (now-10s, now] at t0+10s.
		{at: "t2", cost: 1, allowed: false, remaining: 0, retry: 5 * time.Second},
		{at: "t3", cost: 1, allowed: false, remaining: 0, retry: time.Microsecond},
		{at: "t4", cost: 1, allowed: true, remaining: 0},
		// Two units must leave: the second oldest is one of t1's.
		{at: "t5", cost: 2, allowed: false, remaining: 0, retry: time.Second},
		{at: "t5", cost: 4, allowed: false, remaining: 0, retry: Never},
		{at: "t6", cost: 3, allowed: false, remaining: 2, retry: 8 * time.Second},
		{at: "t6", cost: 0, allowed: true, remaining: 2},
		{at: "t6", op: opPeek, cost: 2, allowed: true, remaining: 0},
		{at: "t6", cost: 2, allowed: true, remaining: 0},
		// Time going back is treated as the latest time seen: t1's units
		// do not come back.
		{at: "t1", cost: 1, allowed: false, remaining: 0, retry: 8 * time.Second},
		{at: "t6", op: opRefund, from: "t6", cost: 1},
		{at: "t6", cost: 1, allowed: true, remaining: 0},
		// t1's units left the window at t1+10s = t6: only units stamped
		// at t1 could go, and there are none (see TestSlidingLogRefundStamp).
		{at: "t6", op: opRefund, from: "t1", cost: 1},
		{at: "t6", cost: 1, allowed: false, remaining: 0, retry: 8 * time.Second},
	})
	if got, want := l.ExpiresAt(s), base+(22*time.Second).Microseconds(); got != want {
		t.Errorf("ExpiresAt = t0+%v, want t0+22s", time.Duration(got-base)*time.Microsecond)
	}
}

// The classic boundary burst: Limit at the end of one fixed window and
// Limit again at the start of the next. Unlike the fixed window, the log
// refuses the second burst until the first has slid out.
func TestSlidingLogRefusesBoundaryBurst(t *testing.T) {
	l := mustCompile(t, Params{Algorithm: SlidingLog, Limit: 10, Period: time.Minute})
	var s State
	end := base + time.Minute.Microseconds()
	if d := l.Take(&s, end-1, 10); !d.Allowed {
		t.Fatalf("Take(end-1µs, 10) = %+v, want allowed", d)
	}
	d := l.Take(&s, end, 1)
	if d.Allowed || d.RetryAfter != time.Minute-time.Microsecond {
		t.Fatalf("Take(end, 1) = %+v, want refused until the burst slides out (59.999999s)", d)
	}
}

func TestSlidingWindowOneSubWindowSteps(t *testing.T) {
	// The worked example of the two-window estimate: 8 units in the window
	// [0, 10s); at 12s, 20% into the next window, the estimate is
	// 8 × 0.8 + 0 = 6.4.
	l := mustCompile(t, Params{Algorithm: SlidingWindow, Limit: 10, Period: 10 * time.Second})
	runSteps(t, l, instants{
		"t0": time.Second,
		"t1": 12 * time.Second,
		"t2": 12500*time.Millisecond - time.Microsecond,
		"t3": 12500 * time.Millisecond,
		"t4": 20 * time.Second,
		"t5": 30 * time.Second,
	}, []step{
		{at: "t0", cost: 8, allowed: true, remaining: 2},
		// 6.4 + 3 = 9.4 <= 10: admitted, floor(0.6) = 0 remain.
		{at: "t1", cost: 3, allowed: true, remaining: 0},
		// 9.4 + 1 > 10. The estimate 3 + 8 × (10s−e)/10s reaches 9 at
		// e = 2.5s, that is at 12.5s.
		{at: "t1", cost: 1, allowed: false, remaining: 0, retry: 500 * time.Millisecond},
		{at: "t1", cost: 11, allowed: false, remaining: 0, retry: Never},
		{at: "t2", cost: 1, allowed: false, remaining: 0, retry: time.Microsecond},
		{at: "t3", cost: 1, allowed: true, remaining: 0},
		// At 20s the window [10s, 20s) holds 4 and weighs fully.
		{at: "t4", cost: 7, allowed: false, remaining: 6, retry: 2500 * time.Millisecond},
		{at: "t4", cost: 6, allowed: true, remaining: 0},
		{at: "t5", cost: 10, allowed: false, remaining: 4, retry: 10 * time.Second},
		{at: "t5", cost: 4, allowed: true, remaining: 0},
	})
}

func TestSlidingWindowSubWindowsSteps(t *testing.T) {
	// Five sub-windows of 2s. 8 units at 9s fall in [8s, 10s).
	l := mustCompile(t, Params{Algorithm: SlidingWindow, Limit: 10, Period: 10 * time.Second, SubWindows: 5})
	runSteps(t, l, instants{
		"t0": 9 * time.Second,
		"t1": 12 * time.Second,
		"t2": 18500 * time.Millisecond,
		"t3": 19 * time.Second,
		"t4": 20 * time.Second,
	}, []step{
		{at: "t0", cost: 8, allowed: true, remaining: 2},
		// At 12s [8s, 10s) is one of the five newest: it counts in full
		// (the two-window estimate would give 8 × 0.8 = 6.4).
		// It weighs less once it is the oldest: 8 × (2s−e)/2s + 3 <= 10
		// from e = 0.25s in [18s, 20s).
		{at: "t1", cost: 3, allowed: false, remaining: 2, retry: 6250 * time.Millisecond},
		{at: "t1", cost: 2, allowed: true, remaining: 0},
		// At 18.5s the estimate is 2 + 8 × 0.75 = 8.
		{at: "t2", cost: 0, allowed: true, remaining: 2},
		// 2 + 8 × (2s−e)/2s + 1 <= 10 from e = 0.25s, that is 18.25s,
		// which has passed.
		{at: "t2", cost: 1, allowed: true, remaining: 1},
		// 3 + 8 × (2s−e)/2s + 2 <= 10 from e = 0.75s.
		{at: "t2", cost: 2, allowed: false, remaining: 1, retry: 250 * time.Millisecond},
		// At 19s: 3 + 8 × 0.5 + 2 = 9.
		{at: "t3", cost: 2, allowed: true, remaining: 1},
		// At 20s [8s, 10s) has left; 5 remain in [12s, 20s). The 2 of
		// [12s, 14s) weigh 2 × (2s−e)/2s + 3 + 6 <= 10 from 23s.
		{at: "t4", cost: 6, allowed: false, remaining: 5, retry: 3 * time.Second},
		{at: "t4", cost: 5, allowed: true, remaining: 0},
	})
}

// A burst at the end of a window and another at the start of the next:
// the estimate counts the first burst almost fully, so the second is
// refused (compare TestFixedWindowAdmitsTwiceLimitAcrossBoundary).
func TestSlidingWindowRefusesBoundaryBurst(t *testing.T) {
	for _, n := range []int{1, 6, 60} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			l := mustCompile(t, Params{Algorithm: SlidingWindow, Limit: 10, Period: time.Minute, SubWindows: n})
			var s State
			end := base + time.Minute.Microseconds()
			if d := l.Take(&s, end-1, 10); !d.Allowed {
				t.Fatalf("Take(end-1µs, 10) = %+v, want allowed", d)
			}
			if d := l.Take(&s, end, 1); d.Allowed {
				t.Fatalf("Take(end, 1) = %+v, want refused", d)
			}
		})
	}
}

// trueCount is the number of units admitted in (now-period, now].
func trueCount(log []int64, now, period int64) int64 {
	var n int64
	for _, at := range log {
		if at > now-period && at <= now {
			n++
		}
	}
	return n
}

// estimateAt reads the sliding window's estimate at now without changing s.
func (l *Limit) estimateAt(s State, now int64) (est float64, old int64) {
	s = s.Clone()
	now, idx := l.advance(&s, now)
	full, old := l.windowSums(&s, idx)
	return estimate(full, old, l.subUS, now-idx*l.subUS), old
}

// The estimate is off from the true count by at most the count of the
// oldest (weighted) sub-window: the documented error bound. More
// sub-windows make that sub-window, and so the error, smaller.
func TestSlidingWindowErrorBound(t *testing.T) {
	// A worked example first: 8 units at 9s, looked at from 18.5s (the
	// window (8.5s, 18.5s] holds all 8).
	for _, tt := range []struct {
		n       int
		wantEst float64
	}{
		{1, 8 * 0.15}, // 8 × (10s − 8.5s)/10s: off by 6.8
		{5, 8 * 0.75}, // 8 × (2s − 0.5s)/2s: off by 2
		{10, 8},       // [9s, 10s) is one of the ten newest: exact
	} {
		l := mustCompile(t, Params{Algorithm: SlidingWindow, Limit: 100, Period: 10 * time.Second, SubWindows: tt.n})
		var s State
		l.Take(&s, base+9e6, 8)
		est, old := l.estimateAt(s, base+18.5e6)
		if diff := est - tt.wantEst; diff > 1e-9 || diff < -1e-9 {
			t.Errorf("N=%d: estimate at 18.5s = %v, want %v", tt.n, est, tt.wantEst)
		}
		if err := 8 - est; err > float64(old)+1e-9 {
			t.Errorf("N=%d: error %v exceeds the oldest sub-window's count %d", tt.n, err, old)
		}
	}

	// Then the bound over random traffic.
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 5, 10} {
		l := mustCompile(t, Params{Algorithm: SlidingWindow, Limit: 50, Period: 10 * time.Second, SubWindows: n})
		per := l.periodUS
		var s State
		var log []int64
		now := base
		for range 5000 {
			now += r.Int64N(per / 20)
			cost := r.Int64N(4)
			est, old := l.estimateAt(s, now)
			tc := trueCount(log, now, per)
			if d := est - float64(tc); d > float64(old)+1e-6 || -d > float64(old)+1e-6 {
				t.Fatalf("N=%d at %d: estimate %v, true count %d: off by more than the oldest sub-window's %d", n, now-base, est, tc, old)
			}
			if l.Take(&s, now, cost).Allowed {
				for range cost {
					log = append(log, now)
				}
				// What was admitted in (now-Period, now] is at most
				// Limit plus the oldest sub-window's count.
				if tc := trueCount(log, now, per); tc > l.p.Limit+old {
					t.Fatalf("N=%d at %d: %d admitted in a Period, over Limit %d + oldest sub-window %d", n, now-base, tc, l.p.Limit, old)
				}
			}
		}
	}
}

// The sliding window is approximate: traffic that piles into the last
// moments of a sub-window, then waits until that sub-window is the oldest,
// gets close to 2×Limit within one Period. The doc states this bound.
func TestSlidingWindowWorstCase(t *testing.T) {
	l := mustCompile(t, Params{Algorithm: SlidingWindow, Limit: 100, Period: 60 * time.Second})
	var s State
	var log []int64
	per := l.periodUS
	burst := base + per - 100_000 // 59.9s
	if !l.Take(&s, burst, 100).Allowed {
		t.Fatal("the first burst was refused")
	}
	for range 100 {
		log = append(log, burst)
	}
	// Take one unit whenever the estimate allows, up to 59.8s into the
	// next window.
	for now := base + per; now < base+2*per-200_000; now += 10_000 {
		if l.Take(&s, now, 1).Allowed {
			log = append(log, now)
		}
	}
	worst := trueCount(log, burst+per-1, per)
	if worst <= 190 || worst >= 200 {
		t.Fatalf("admitted %d in a span of one Period, want just under 2×Limit (the documented worst case)", worst)
	}
}

func TestSlidingWindowRefund(t *testing.T) {
	l := mustCompile(t, Params{Algorithm: SlidingWindow, Limit: 4, Period: 4 * time.Second, SubWindows: 4})
	runSteps(t, l, instants{"t0": 0, "t1": time.Second, "t2": 3 * time.Second, "t3": 6 * time.Second}, []step{
		{at: "t0", cost: 2, allowed: true, remaining: 2},
		{at: "t1", cost: 2, allowed: true, remaining: 0},
		{at: "t2", op: opRefund, from: "t0", cost: 1},
		{at: "t2", cost: 1, allowed: true, remaining: 0},
		{at: "t3", op: opRefund, from: "t0", cost: 1}, // t0's sub-window has left the ring
		{at: "t3", cost: 3, allowed: true, remaining: 0},
	})
}

// Time going backwards is treated as the latest time seen: the earlier
// window does not come back, and the estimate is the one of that time.
func TestSlidingWindowTimeBackwards(t *testing.T) {
	l := mustCompile(t, Params{Algorithm: SlidingWindow, Limit: 10, Period: 10 * time.Second})
	runSteps(t, l, instants{"t0": 0, "t1": 15 * time.Second, "t2": 5 * time.Second, "t3": 12 * time.Second}, []step{
		{at: "t0", cost: 10, allowed: true, remaining: 0},
		// 10 × 0.5 + 5 = 10.
		{at: "t1", cost: 5, allowed: true, remaining: 0},
		{at: "t2", cost: 0, allowed: true, remaining: 0},
		{at: "t3", cost: 1, allowed: false, remaining: 0, retry: time.Second},
	})
}

// A store whose takes of one key race reports a take's time (at) earlier
// than its units' stamp: the state had seen a later time (see monotonic).
// While the state's time is below at + Period, a refund at at removes the
// oldest entries stamped at or after at; from then on only entries stamped
// at, as before.
func TestSlidingLogRefundStamp(t *testing.T) {
	in := instants{
		"t0": 0,
		"t1": time.Second,
		"t2": 2 * time.Second,
		"t3": 9 * time.Second,
		"t4": 10 * time.Second,
		"t5": 11 * time.Second,
	}
	t.Run("stamped later", func(t *testing.T) {
		l := mustCompile(t, Params{Algorithm: SlidingLog, Limit: 3, Period: 10 * time.Second})
		runSteps(t, l, in, []step{
			{at: "t1", cost: 1, allowed: true, remaining: 2},
			// A take at t0 after one at t1: its units are stamped t1.
			{at: "t0", cost: 2, allowed: true, remaining: 0},
			{at: "t1", op: opRefund, from: "t0", cost: 2},
			{at: "t1", cost: 2, allowed: true, remaining: 0},
			{at: "t1", cost: 1, allowed: false, remaining: 0, retry: 10 * time.Second},
		})
	})
	t.Run("window passed", func(t *testing.T) {
		l := mustCompile(t, Params{Algorithm: SlidingLog, Limit: 3, Period: 10 * time.Second})
		runSteps(t, l, in, []step{
			{at: "t0", cost: 1, allowed: true, remaining: 2},
			{at: "t4", cost: 1, allowed: true, remaining: 2}, // t0's unit has left
			// The state's time is t0 + Period: t4's unit is not t0's.
			{at: "t4", op: opRefund, from: "t0", cost: 1},
			{at: "t4", cost: 3, allowed: false, remaining: 2, retry: 10 * time.Second},
			// Within Period of t1, the refund of a take at t1 finds t4's unit.
			{at: "t4", op: opRefund, from: "t1", cost: 1},
			{at: "t4", cost: 3, allowed: true, remaining: 0},
		})
	})
	t.Run("interleaved", func(t *testing.T) {
		l := mustCompile(t, Params{Algorithm: SlidingLog, Limit: 2, Period: 10 * time.Second})
		runSteps(t, l, in, []step{
			{at: "t2", cost: 1, allowed: true, remaining: 1}, // B, at t2
			{at: "t3", cost: 1, allowed: true, remaining: 0}, // A, reported at t0
			// A's refund removes B's unit (the oldest from t0 on), which is
			// earlier than A's: the unit left, at t3, is charged longer.
			{at: "t3", op: opRefund, from: "t0", cost: 1},
			{at: "t3", op: opPeek, cost: 2, allowed: false, remaining: 1, retry: 10 * time.Second},
			// B's refund finds A's unit, after t2.
			{at: "t3", op: opRefund, from: "t2", cost: 1},
			{at: "t5", cost: 2, allowed: true, remaining: 0},
		})
	})
}

// TestSlidingLogRefundNeverLooser plays random takes of one key, each
// reported at a time up to two periods before its stamp (or at it), and
// refunds each admitted take at most once, in random order, against a
// log that removes each take's own units instead. The refunded log never
// has more capacity: at every time from now on, it counts at least as many
// entries at or after that time. A refund made while the state's time is
// below at + Period gives back all of its cost.
func TestSlidingLogRefundNeverLooser(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 7))
		period := 1 + r.Int64N(100)
		limit := 1 + r.Int64N(8)
		l := mustCompile(t, Params{Algorithm: SlidingLog, Limit: limit, Period: time.Duration(period) * time.Microsecond})
		type take struct{ at, stamp, cost int64 }
		var got, want State
		var out []take
		now := base
		for i := range 300 {
			now += r.Int64N(period/2 + 1)
			where := fmt.Sprintf("seed %d (limit %d, period %dµs), op %d", seed, limit, period, i)
			if len(out) == 0 || r.IntN(2) == 0 {
				tm := now - r.Int64N(period/4+1) // a take whose clock read earlier
				cost := 1 + r.Int64N(limit)
				d := l.Take(&got, tm, cost)
				if !d.Allowed {
					l.Peek(&want, tm, cost) // the same time seen
					continue
				}
				if !l.Take(&want, tm, cost).Allowed {
					t.Fatalf("%s: Take(%d) admitted by the refunded log, refused by the exact one", where, cost)
				}
				at := got.C
				if r.IntN(2) == 0 {
					at -= r.Int64N(2*period + 1)
				}
				out = append(out, take{at: at, stamp: got.C, cost: cost})
				continue
			}
			k := r.IntN(len(out))
			q := out[k]
			out = slices.Delete(out, k, k+1)
			n, c := len(got.Ext), got.C
			l.Refund(&got, now, q.at, q.cost)
			if c < q.at+period && len(got.Ext) != n-int(q.cost) {
				t.Fatalf("%s: Refund(at %d, %d) of a take stamped %d (state time %d) removed %d entries of %v, want %d", where, q.at, q.cost, q.stamp, c, n-len(got.Ext), got.Ext, q.cost)
			}
			drop := q.cost // the take's own units, exactly
			want.Ext = slices.DeleteFunc(want.Ext, func(e int64) bool {
				if e == q.stamp && drop > 0 {
					drop--
					return true
				}
				return false
			})
			if got.C != want.C {
				t.Fatalf("%s: state times %d and %d differ", where, got.C, want.C)
			}
			for _, x := range append(slices.Clone(got.Ext), want.Ext...) {
				if x+period <= got.C {
					continue // out of the window from now on
				}
				g := len(got.Ext) - sort.Search(len(got.Ext), func(i int) bool { return got.Ext[i] >= x })
				w := len(want.Ext) - sort.Search(len(want.Ext), func(i int) bool { return want.Ext[i] >= x })
				if g < w {
					t.Fatalf("%s: after Refund(at %d, %d) of a take stamped %d: %d entries at or after %d, want at least %d (%v, exact %v)", where, q.at, q.cost, q.stamp, g, x, w, got.Ext, want.Ext)
				}
			}
		}
	}
}

// Remaining agrees with the admission test est + cost <= limit even where
// ⌊limit − est⌋ rounds differently: here it was 2277450 while Take(2277451)
// was admitted.
func TestSlidingWindowRemainingRounding(t *testing.T) {
	l := mustCompile(t, Params{Algorithm: SlidingWindow, Limit: 5_325_637, Period: 168 * time.Hour})
	var s State
	const week = int64(168 * time.Hour / time.Microsecond)
	start := int64(1703721600000000) // a window boundary
	if d := l.Take(&s, start, 184); !d.Allowed {
		t.Fatalf("Take(184) = %+v, want admitted", d)
	}
	if d := l.Take(&s, start+week, 3_048_186); !d.Allowed {
		t.Fatalf("Take(3048186) = %+v, want admitted", d)
	}
	now := int64(1704931199999998)
	c := s.Clone()
	m := l.Peek(&c, now, 0).Remaining
	if m != 2_277_451 {
		t.Errorf("Peek(0).Remaining = %d, want 2277451", m)
	}
	c = s.Clone()
	if d := l.Take(&c, now, m); !d.Allowed || d.Remaining != 0 {
		t.Errorf("Take(Remaining %d) = %+v, want admitted with 0 remaining", m, d)
	}
	c = s.Clone()
	if d := l.Take(&c, now, m+1); d.Allowed || d.Remaining != m {
		t.Errorf("Take(Remaining+1 = %d) = %+v, want refused with Remaining %d", m+1, d, m)
	}
}

// Remaining is exact at limits up to 2^53, where the estimate's rounding
// makes ⌊limit − est⌋ one off in either direction: Take(Remaining) is
// admitted, Take(Remaining+1) refused, and a decision's Remaining is the
// next Peek's.
func TestSlidingWindowRemainingExactLargeLimits(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 53))
	for i := range 3000 {
		n := 1 + r.IntN(4)
		p := Params{
			Algorithm:  SlidingWindow,
			Limit:      1<<44 + r.Int64N(1<<53-1<<44),
			SubWindows: n,
			Period:     time.Duration(n) * time.Duration(1+r.Int64N(1<<40)) * time.Microsecond,
		}
		if i%3 == 0 {
			p.Limit = 1<<53 - 1 - r.Int64N(1<<20)
		}
		l := mustCompile(t, p)
		sub := l.subUS
		var s State
		now := r.Int64N(1 << 52)
		for range 1 + r.IntN(6) {
			now += r.Int64N(sub + sub/2)
			cost := r.Int64N(p.Limit/2 + 1)
			if r.IntN(3) == 0 {
				c := s.Clone()
				cost = max(l.Peek(&c, now, 0).Remaining-r.Int64N(3), 0)
			}
			d := l.Take(&s, now, cost)
			c := s.Clone()
			if next := l.Peek(&c, now, 0).Remaining; d.Remaining != next {
				t.Fatalf("%v at %d: Take(%d) = %+v, but the next Peek(0).Remaining is %d", l, now, cost, d, next)
			}
		}
		now += r.Int64N(sub)
		c := s.Clone()
		m := l.Peek(&c, now, 0).Remaining
		c = s.Clone()
		if d := l.Take(&c, now, m); !d.Allowed {
			t.Fatalf("%v state %+v at %d: Remaining %d, but Take(%d) = %+v", l, s, now, m, m, d)
		}
		c = s.Clone()
		if d := l.Take(&c, now, m+1); d.Allowed {
			t.Fatalf("%v state %+v at %d: Remaining %d, but Take(%d) was admitted", l, s, now, m, m+1)
		}
	}
}
