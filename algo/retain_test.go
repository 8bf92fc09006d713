package algo

import (
	"math"
	"testing"
	"time"
)

// The steps below run as a store keeps a key (runStoreSteps): the state is
// forgotten once its ExpiresAt has passed, and a Peek writes nothing.

// A token bucket that starts empty keeps the tokens it earned while idle:
// more idle time never means fewer tokens, until it has been full for
// Retain (default one hour) and restarts empty.
func TestRetainTokenBucketIdle(t *testing.T) {
	l := mustCompile(t, Params{Algorithm: TokenBucket, Limit: 10, Period: time.Second, InitialTokens: ptr[int64](0)})
	full := time.Second // refilled from empty at 10 per second
	in := instants{
		"t0":        0,
		"0.5s":      500 * time.Millisecond,
		"2.5s":      2500 * time.Millisecond,
		"kept":      full + time.Hour - time.Microsecond,
		"forgotten": full + time.Hour,
	}
	t.Run("peeks", func(t *testing.T) {
		runStoreSteps(t, l, in, []step{
			{at: "t0", cost: 0, allowed: true, remaining: 0}, // starts the clock
			{at: "0.5s", op: opPeek, cost: 0, allowed: true, remaining: 5},
			{at: "2.5s", op: opPeek, cost: 0, allowed: true, remaining: 10},
			{at: "kept", op: opPeek, cost: 0, allowed: true, remaining: 10},
			// Full for an hour: forgotten, it restarts at InitialTokens.
			{at: "forgotten", op: opPeek, cost: 0, allowed: true, remaining: 0},
			{at: "forgotten", cost: 1, allowed: false, remaining: 0, retry: 100 * time.Millisecond},
		})
	})
	t.Run("take after idle", func(t *testing.T) {
		runStoreSteps(t, l, in, []step{
			{at: "t0", cost: 0, allowed: true, remaining: 0},
			{at: "2.5s", cost: 5, allowed: true, remaining: 5},
			{at: "2.5s", cost: 5, allowed: true, remaining: 0},
			{at: "2.5s", cost: 1, allowed: false, remaining: 0, retry: 100 * time.Millisecond},
		})
	})
}

// An explicit Retain, counted from the instant the bucket is full.
func TestRetainTokenBucketExplicit(t *testing.T) {
	l := mustCompile(t, Params{Algorithm: TokenBucket, Limit: 10, Period: time.Second, Burst: 20,
		InitialTokens: ptr[int64](5), Retain: 10 * time.Second})
	full := 1500 * time.Millisecond // 5 → 20 at 10 per second
	runStoreSteps(t, l, instants{
		"t0":        0,
		"full":      full,
		"kept":      full + 10*time.Second - time.Microsecond,
		"forgotten": full + 10*time.Second,
	}, []step{
		{at: "t0", cost: 0, allowed: true, remaining: 5},
		{at: "full", op: opPeek, cost: 0, allowed: true, remaining: 20},
		{at: "kept", op: opPeek, cost: 0, allowed: true, remaining: 20},
		{at: "forgotten", op: opPeek, cost: 0, allowed: true, remaining: 5},
	})
}

// SmoothBursty's stored permits (Guava's burst after idleness) are there
// through a store: 5 per second, one second stored, idle 1.3s or 2s,
// serves 5 stored permits and the free ticket at once, as the pure
// algorithm and Guava do. Full for Retain, the key restarts with none.
func TestRetainSmoothBurstyIdle(t *testing.T) {
	l := mustCompile(t, Params{Algorithm: SmoothBursty, Limit: 5, Period: time.Second, MaxBurstSeconds: 1})
	// After a take at t0 the ticket is at 200ms; 5 permits are stored 1s later.
	full := 1200 * time.Millisecond
	burst := func(at string) []step {
		return []step{
			{at: at, cost: 1, allowed: true, remaining: 5},
			{at: at, cost: 1, allowed: true, remaining: 4},
			{at: at, cost: 1, allowed: true, remaining: 3},
			{at: at, cost: 1, allowed: true, remaining: 2},
			{at: at, cost: 1, allowed: true, remaining: 1},
			{at: at, cost: 1, allowed: true, remaining: 0}, // the free ticket
			{at: at, cost: 1, allowed: false, remaining: 0, retry: 200 * time.Millisecond},
		}
	}
	in := instants{
		"t0":        0,
		"1.3s":      1300 * time.Millisecond,
		"2s":        2 * time.Second,
		"kept":      full + time.Hour - time.Microsecond,
		"forgotten": full + time.Hour,
	}
	first := step{at: "t0", cost: 1, allowed: true, remaining: 0}
	for _, at := range []string{"1.3s", "2s", "kept"} {
		t.Run("idle until "+at, func(t *testing.T) {
			runStoreSteps(t, l, in, append([]step{first}, burst(at)...))
		})
	}
	t.Run("forgotten", func(t *testing.T) {
		runStoreSteps(t, l, in, []step{
			first,
			{at: "forgotten", cost: 1, allowed: true, remaining: 0},
			{at: "forgotten", cost: 1, allowed: false, remaining: 0, retry: 200 * time.Millisecond},
		})
	})
}

// A limit whose fresh state is full keeps its ExpiresAt: the instant the
// state is full again, with nothing retained.
func TestRetainOnlyWhereFreshIsShort(t *testing.T) {
	sec := time.Second
	now := base
	for _, p := range []Params{
		{Algorithm: TokenBucket, Limit: 10, Period: sec},
		{Algorithm: TokenBucket, Limit: 10, Period: sec, InitialTokens: ptr[int64](10)},
		{Algorithm: TokenBucket, Limit: 10, Period: sec, InitialTokens: ptr[int64](10), Retain: time.Minute},
		{Algorithm: GCRA, Limit: 10, Period: sec},
		{Algorithm: Shaper, Limit: 10, Period: sec, Burst: 9},
	} {
		l := mustCompile(t, p)
		if r := l.Params().Retain; r != 0 {
			t.Errorf("%v: Params().Retain = %v, want 0 (a fresh bucket is full)", l, r)
		}
		var s State
		l.Take(&s, now, 1)
		if got, want := l.ExpiresAt(&s), now+100_000; got != want {
			t.Errorf("%v: after Take(1), ExpiresAt = now%+dµs, want now+100000µs (when it is full)", l, got-now)
		}
	}
	l := mustCompile(t, Params{Algorithm: SmoothWarmup, Limit: 10, Period: sec, WarmupPeriod: sec})
	var s State
	l.Take(&s, now, 1)
	if got, want := l.ExpiresAt(&s), l.smoothUntilFull(s.B, math.Float64frombits(uint64(s.A))); got != want {
		t.Errorf("%v: ExpiresAt = %d, want %d, when it is cold again (as fresh)", l, got, want)
	}
}

// Retain near the end of time saturates at 2^53-1 instead of overflowing,
// and never comes before the instant the state is full.
func TestRetainSaturates(t *testing.T) {
	maxRetain := time.Duration(maxTime) * time.Microsecond
	for _, tc := range []struct {
		name string
		p    Params
		now  int64
	}{
		{"bucket, longest retain", Params{Algorithm: TokenBucket, Limit: 1, Period: time.Hour, InitialTokens: ptr[int64](0), Retain: maxRetain}, base},
		{"bucket at the end of time", Params{Algorithm: TokenBucket, Limit: 1, Period: 200 * 365 * 24 * time.Hour, InitialTokens: ptr[int64](0), Retain: maxRetain}, maxTime},
		{"bucket, 36h period", Params{Algorithm: TokenBucket, Limit: 3, Period: 36 * time.Hour, InitialTokens: ptr[int64](0)}, maxTime - 1},
		{"bursty, longest retain", Params{Algorithm: SmoothBursty, Limit: 5, Period: time.Second, Retain: maxRetain}, base},
		{"bursty at the end of time", Params{Algorithm: SmoothBursty, Limit: 1, Period: time.Hour, MaxBurstSeconds: 1e9}, maxTime},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := mustCompile(t, tc.p)
			var s State
			l.Take(&s, tc.now, 0)
			var full int64
			if tc.p.Algorithm == SmoothBursty {
				full = l.smoothUntilFull(s.B, math.Float64frombits(uint64(s.A)))
			} else {
				full = s.B + l.rateDiv.ceil(l.capLevel-s.A)
			}
			exp := l.ExpiresAt(&s)
			if want := min(full+l.retainUS, max(full, maxTime)); exp != want {
				t.Errorf("ExpiresAt = %d, want %d (full at %d, retain %dµs)", exp, want, full, l.retainUS)
			}
			if exp < full || exp < tc.now {
				t.Errorf("ExpiresAt = %d, before the state is full (%d) or now (%d)", exp, full, tc.now)
			}
		})
	}
}
