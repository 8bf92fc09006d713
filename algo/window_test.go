package algo

import (
	"testing"
	"time"
)

func TestFixedWindowSteps(t *testing.T) {
	l := mustCompile(t, Params{Algorithm: FixedWindow, Limit: 3, Period: time.Minute})
	in := instants{
		"t0": 0,
		"t1": 10 * time.Second,
		"t2": time.Minute - time.Microsecond,
		"t3": time.Minute,
		"t4": time.Minute + time.Second,
	}
	runSteps(t, l, in, []step{
		{at: "t0", cost: 1, allowed: true, remaining: 2},
		{at: "t0", cost: 2, allowed: true, remaining: 0},
		{at: "t1", cost: 1, allowed: false, remaining: 0, retry: 50 * time.Second},
		{at: "t1", cost: 0, allowed: true, remaining: 0},
		{at: "t1", cost: 4, allowed: false, remaining: 0, retry: Never},
		{at: "t2", cost: 1, allowed: false, remaining: 0, retry: time.Microsecond},
		{at: "t3", cost: 1, allowed: true, remaining: 2},
		// Back to t2: treated as t3, the window does not go back to the
		// full one before it, nor does it start afresh.
		{at: "t2", cost: 1, allowed: true, remaining: 1},
		{at: "t4", cost: 2, allowed: false, remaining: 1, retry: 59 * time.Second},
		{at: "t4", op: opPeek, cost: 1, allowed: true, remaining: 0},
		{at: "t4", cost: 1, allowed: true, remaining: 0},
		{at: "t4", cost: -3, allowed: true, remaining: 0},
	})
}

func TestFixedWindowRefund(t *testing.T) {
	l := mustCompile(t, Params{Algorithm: FixedWindow, Limit: 3, Period: time.Minute})
	in := instants{"t0": 0, "t1": time.Second, "t2": time.Minute}
	runSteps(t, l, in, []step{
		{at: "t0", cost: 3, allowed: true, remaining: 0},
		{at: "t1", op: opRefund, from: "t0", cost: 2},
		{at: "t1", cost: 2, allowed: true, remaining: 0},
		{at: "t1", op: opRefund, from: "t1", cost: 10}, // never below zero
		{at: "t1", cost: 3, allowed: true, remaining: 0},
		{at: "t2", op: opRefund, from: "t1", cost: 3}, // that window has gone
		{at: "t2", cost: 3, allowed: true, remaining: 0},
		{at: "t2", cost: 1, allowed: false, remaining: 0, retry: time.Minute},
	})
}

// The fixed window's known weakness, stated as a test: Limit at the end of
// one window and Limit again at the start of the next, 2×Limit within 2µs.
func TestFixedWindowAdmitsTwiceLimitAcrossBoundary(t *testing.T) {
	l := mustCompile(t, Params{Algorithm: FixedWindow, Limit: 10, Period: time.Minute})
	var s State
	end := base + time.Minute.Microseconds()
	admitted := 0
	for _, now := range []int64{end - 1, end} {
		for range 10 {
			if l.Take(&s, now, 1).Allowed {
				admitted++
			}
		}
		if l.Take(&s, now, 1).Allowed {
			t.Fatalf("Take(%d, 1) admitted an 11th unit in one window", now-base)
		}
	}
	if admitted != 20 {
		t.Fatalf("admitted %d across the boundary, want 2×Limit = 20", admitted)
	}
}

func TestFixedWindowNonDivisiblePeriod(t *testing.T) {
	// 36h windows are aligned to multiples of 36h since the epoch.
	l := mustCompile(t, Params{Algorithm: FixedWindow, Limit: 1, Period: 36 * time.Hour})
	var s State
	d := l.Take(&s, base, 1)
	per := (36 * time.Hour).Microseconds()
	wantReset := time.Duration(per-base%per) * time.Microsecond
	if !d.Allowed || d.ResetAfter != wantReset {
		t.Fatalf("Take = %+v, want allowed with ResetAfter %v", d, wantReset)
	}
	if d := l.Take(&s, base, 1); d.RetryAfter != wantReset {
		t.Fatalf("RetryAfter = %v, want %v (the window end)", d.RetryAfter, wantReset)
	}
}

func utc(y int, m time.Month, d, hh, mm, ss, us int) int64 {
	return time.Date(y, m, d, hh, mm, ss, us*1000, time.UTC).UnixMicro()
}

func TestFixedWindowCalendarMonth(t *testing.T) {
	l := mustCompile(t, Params{Algorithm: FixedWindow, Limit: 2, Calendar: CalendarMonth})
	type row struct {
		name      string
		now       int64
		cost      int64
		allowed   bool
		remaining int64
		retry     time.Duration
	}
	day := 24 * time.Hour
	rows := []row{
		{"Jan 31 23:59:59.999999", utc(2024, 1, 31, 23, 59, 59, 999999), 2, true, 0, 0},
		{"Jan 31 23:59:59.999999", utc(2024, 1, 31, 23, 59, 59, 999999), 1, false, 0, time.Microsecond},
		{"Feb 1 00:00", utc(2024, 2, 1, 0, 0, 0, 0), 2, true, 0, 0},
		{"Feb 29 (leap)", utc(2024, 2, 29, 0, 0, 0, 0), 1, false, 0, day},
		{"Mar 1", utc(2024, 3, 1, 0, 0, 0, 0), 1, true, 1, 0},
		{"Mar 31 12:00", utc(2024, 3, 31, 12, 0, 0, 0), 2, false, 1, 12 * time.Hour},
		{"Mar 31 12:00 cost 3", utc(2024, 3, 31, 12, 0, 0, 0), 3, false, 1, Never},
	}
	var s State
	for _, r := range rows {
		d := l.Take(&s, r.now, r.cost)
		if d.Allowed != r.allowed || d.Remaining != r.remaining || d.RetryAfter != r.retry {
			t.Errorf("Take(%s, %d) = %v rem %d retry %s, want %v rem %d retry %s",
				r.name, r.cost, d.Allowed, d.Remaining, fmtDur(d.RetryAfter), r.allowed, r.remaining, fmtDur(r.retry))
		}
	}
	for _, w := range []struct {
		name string
		now  int64
		want time.Duration
	}{
		{"Feb 2024", utc(2024, 2, 10, 0, 0, 0, 0), 29 * day},
		{"Feb 2023", utc(2023, 2, 10, 0, 0, 0, 0), 28 * day},
		{"Feb 2100 (not leap)", utc(2100, 2, 10, 0, 0, 0, 0), 28 * day},
		{"Feb 2000 (leap)", utc(2000, 2, 10, 0, 0, 0, 0), 29 * day},
		{"Apr 2024", utc(2024, 4, 30, 23, 0, 0, 0), 30 * day},
		{"Dec 2024", utc(2024, 12, 31, 23, 0, 0, 0), 31 * day},
	} {
		if got := l.Window(w.now); got != w.want {
			t.Errorf("Window(%s) = %v, want %v", w.name, got, w.want)
		}
	}
}

func TestFixedWindowCalendarYear(t *testing.T) {
	l := mustCompile(t, Params{Algorithm: FixedWindow, Limit: 1000, Calendar: CalendarYear})
	var s State
	last := utc(2024, 12, 31, 23, 59, 59, 999999)
	if d := l.Take(&s, utc(2024, 3, 1, 0, 0, 0, 0), 1000); !d.Allowed {
		t.Fatalf("Take(Mar 1 2024, 1000) = %+v, want allowed", d)
	}
	if d := l.Take(&s, last, 1); d.Allowed || d.RetryAfter != time.Microsecond {
		t.Fatalf("Take(Dec 31 2024 23:59:59.999999, 1) = %+v, want refused for 1µs", d)
	}
	if d := l.Take(&s, last+1, 1000); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("Take(Jan 1 2025, 1000) = %+v, want allowed, nothing remaining", d)
	}
	if got, want := l.Window(last), 366*24*time.Hour; got != want {
		t.Errorf("Window(2024) = %v, want %v", got, want)
	}
	if got, want := l.Window(last+1), 365*24*time.Hour; got != want {
		t.Errorf("Window(2025) = %v, want %v", got, want)
	}
	if got, want := l.ExpiresAt(&s), utc(2026, 1, 1, 0, 0, 0, 0); got != want {
		t.Errorf("ExpiresAt = %d, want Jan 1 2026 (%d)", got, want)
	}
}
