package server

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
)

// TestIdleReset: an unused fixed window resets at its end (windows from
// the epoch, or the calendar month or year), a sliding one after its
// period; a bucket or a concurrency limit nothing used resets nothing.
func TestIdleReset(t *testing.T) {
	now := time.Date(2026, 12, 31, 23, 59, 20, 300_000_000, time.UTC)
	lim := func(p algo.Params) *algo.Limit {
		t.Helper()
		l, err := algo.Compile(p)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	for _, tc := range []struct {
		p    algo.Params
		want time.Duration
	}{
		{algo.Params{Algorithm: algo.FixedWindow, Limit: 5, Period: time.Minute}, 39700 * time.Millisecond},
		{algo.Params{Algorithm: algo.FixedWindow, Limit: 5, Period: time.Second}, 700 * time.Millisecond},
		{algo.Params{Algorithm: algo.FixedWindow, Limit: 5, Period: time.Hour}, 39*time.Second + 700*time.Millisecond},
		{algo.Params{Algorithm: algo.FixedWindow, Limit: 5, Calendar: algo.CalendarMonth}, 39*time.Second + 700*time.Millisecond},
		{algo.Params{Algorithm: algo.FixedWindow, Limit: 5, Calendar: algo.CalendarYear}, 39*time.Second + 700*time.Millisecond},
		{algo.Params{Algorithm: algo.SlidingLog, Limit: 5, Period: time.Minute}, time.Minute},
		{algo.Params{Algorithm: algo.SlidingWindow, Limit: 5, Period: time.Minute}, time.Minute},
		{algo.Params{Algorithm: algo.TokenBucket, Limit: 5, Period: time.Minute}, 0},
		{algo.Params{Algorithm: algo.GCRA, Limit: 5, Period: time.Minute}, 0},
		{algo.Params{Algorithm: algo.Concurrency, Limit: 5}, 0},
	} {
		if got := idleReset(lim(tc.p), now); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc.p, got, tc.want)
		}
	}
	// A month that does not end the year.
	mid := time.Date(2026, 2, 27, 12, 0, 0, 0, time.UTC)
	if got := idleReset(lim(algo.Params{Algorithm: algo.FixedWindow, Limit: 5, Calendar: algo.CalendarMonth}), mid); got != 36*time.Hour {
		t.Errorf("February 27 noon: %v, want 36h", got)
	}
}

// TestResetSeconds: whole seconds rounded up, at least 1 when anything
// resets; a refusal that waits longer than the reset says the wait; 0 when
// nothing resets.
func TestResetSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    algo.Decision
		want int64
	}{
		{algo.Decision{Allowed: true, ResetAfter: 700 * time.Millisecond}, 1},
		{algo.Decision{Allowed: true, ResetAfter: time.Microsecond}, 1},
		{algo.Decision{Allowed: true, ResetAfter: 59*time.Second + time.Millisecond}, 60},
		{algo.Decision{Allowed: true, ResetAfter: 60 * time.Second}, 60},
		{algo.Decision{Allowed: true}, 0},
		{algo.Decision{RetryAfter: 2500 * time.Millisecond, ResetAfter: time.Second}, 3},
		{algo.Decision{RetryAfter: algo.Never, ResetAfter: 1500 * time.Millisecond}, 2},
	} {
		if got := resetSeconds(tc.d); got != tc.want {
			t.Errorf("%+v: %d, want %d", tc.d, got, tc.want)
		}
	}
}
