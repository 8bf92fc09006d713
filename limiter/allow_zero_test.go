package limiter_test

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/storetest"
)

// TestAllowNZero: AllowN(ctx, key, 0) takes nothing. A bucket or a window
// with nothing left admits it, as x/time/rate's AllowN(now, 0) does; a
// SmoothBursty or SmoothWarmup limit refuses it while its next free
// ticket is further away than MaxWait, as Guava's tryAcquire(0) does,
// with the RetryAfter of the ticket (AllowN's doc said "always allowed").
func TestAllowNZero(t *testing.T) {
	both(t, func(t *testing.T, st store.Store, clock *storetest.Clock) {
		ctx := t.Context()
		for _, c := range []struct {
			p     algo.Params
			allow bool
			retry time.Duration
		}{
			{algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Second}, true, 0},
			{algo.Params{Algorithm: algo.GCRA, Limit: 1, Period: time.Second}, true, 0},
			{algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Second}, true, 0},
			{algo.Params{Algorithm: algo.SlidingLog, Limit: 1, Period: time.Second}, true, 0},
			{algo.Params{Algorithm: algo.SlidingWindow, Limit: 1, Period: time.Second}, true, 0},
			{algo.Params{Algorithm: algo.SmoothBursty, Limit: 1, Period: time.Second}, false, time.Second},
			{algo.Params{Algorithm: algo.SmoothBursty, Limit: 1, Period: time.Second, MaxWait: time.Second}, true, 0},
			{algo.Params{Algorithm: algo.SmoothWarmup, Limit: 1, Period: time.Second, WarmupPeriod: time.Second}, false, 1500 * time.Millisecond},
		} {
			name := c.p.Algorithm.String() + "-" + c.p.MaxWait.String()
			l := newLimiter(t, st, name, c.p)
			if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
				t.Fatalf("%s: AllowN(1) on a fresh key = %+v, %v", name, d, err)
			}
			before, _ := l.Peek(ctx, "k", 0)
			d, err := l.AllowN(ctx, "k", 0)
			if err != nil || d.Allowed != c.allow || d.RetryAfter != c.retry {
				t.Errorf("%s: AllowN(0) after AllowN(1) = %+v, %v; want allowed %v, retry %v", name, d, err, c.allow, c.retry)
			}
			if after, _ := l.Peek(ctx, "k", 0); after != before {
				t.Errorf("%s: AllowN(0) changed the state: Peek(0) %+v, before %+v", name, after, before)
			}
		}
	})
}

// TestLocalAllowNTakesForLater: a Shaper admits units to be used after a
// Delay; Local.AllowN reports them as true (taken), which its doc says,
// and Take reports the Delay.
func TestLocalAllowNTakesForLater(t *testing.T) {
	l, _ := newFakeLocal(t, algo.Params{Algorithm: algo.Shaper, Limit: 10, Period: time.Second, Burst: 2})
	for i := range 2 {
		if !l.AllowN(1) {
			t.Fatalf("a shaper of burst 2: AllowN(1) %d refused", i+1)
		}
	}
	if d := l.Take(1); !d.Allowed || d.Delay != 200*time.Millisecond {
		t.Errorf("third unit: Take(1) = %+v; want allowed, Delay 200ms behind the two queued", d)
	}
}
