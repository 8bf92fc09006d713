package limiter_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memory"
)

// TestWaitProjectsWindowsAndSmooth: the reviewer's scenario. With the
// limit used up and four Waits queued with long deadlines, a fifth whose
// deadline comes before the units the four leave it is refused on
// arrival, with After the projection, rather than held until its deadline
// and refused then. For a window the four take its quota as each window
// opens; for a smooth limit, one unit each at the stable rate.
func TestWaitProjectsWindowsAndSmooth(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    algo.Params
		// want is when the fifth waiter's unit comes, from the start:
		// the windows' third (2/min: 60s, 60s, 120s, 120s, then 180s);
		// the smooth limit's fifth at 1 per 10s, the first at 10s (20s
		// for the warm-up one, which the drain left partly cold).
		want time.Duration
	}{
		{"fixed_window", algo.Params{Algorithm: algo.FixedWindow, Limit: 2, Period: time.Minute}, 180 * time.Second},
		{"sliding_log", algo.Params{Algorithm: algo.SlidingLog, Limit: 2, Period: time.Minute}, 180 * time.Second},
		{"smooth_bursty", algo.Params{Algorithm: algo.SmoothBursty, Limit: 1, Period: 10 * time.Second, MaxWait: time.Millisecond}, 50 * time.Second},
		{"smooth_warmup", algo.Params{Algorithm: algo.SmoothWarmup, Limit: 1, Period: 10 * time.Second, WarmupPeriod: 20 * time.Second, MaxWait: time.Millisecond}, 60 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newLimiter(t, newStore(t, memory.WithSweepInterval(0)), "w", tc.p)
				ctx := t.Context()
				for {
					d, err := l.Allow(ctx, "k")
					if err != nil {
						t.Fatal(err)
					}
					if !d.Allowed {
						break
					}
				}
				start := time.Now()
				long, cancel := context.WithTimeout(ctx, 10*time.Minute)
				defer cancel()
				var wg sync.WaitGroup
				for range 4 {
					wg.Go(func() {
						if err := l.Wait(long, "k", 1); err != nil {
							t.Errorf("a waiter with 10 minutes: %v", err)
						}
					})
					synctest.Wait() // queued in this order
				}
				if _, n := limiter.WaitQueues(l); n != 4 {
					t.Fatalf("%d waiters queued, want 4", n)
				}

				short, cancelShort := context.WithTimeout(ctx, tc.want-15*time.Second)
				defer cancelShort()
				err := l.Wait(short, "k", 1)
				re, ok := errors.AsType[*limiter.RetryError](err)
				switch {
				case !ok || errors.Is(err, context.DeadlineExceeded):
					t.Errorf("fifth Wait = %v; want a *RetryError on arrival", err)
				case time.Since(start) != 0:
					t.Errorf("fifth Wait refused after %v; want at once", time.Since(start))
				case re.After < tc.want-time.Second || re.After > tc.want+time.Second:
					t.Errorf("After = %v; want about %v", re.After, tc.want)
				}

				// One whose deadline leaves room is let in, and served.
				roomy, cancelRoomy := context.WithTimeout(ctx, tc.want+15*time.Second)
				defer cancelRoomy()
				if err := l.Wait(roomy, "k", 1); err != nil {
					t.Errorf("fifth Wait with room: %v", err)
				} else if got := time.Since(start); got < tc.want-time.Second || got > tc.want+time.Second {
					t.Errorf("fifth Wait with room served at %v, want about %v", got, tc.want)
				}
				wg.Wait()
			})
		})
	}
}
