package redis

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// aheadState takes one unit of key with a Store whose clock is d ahead of
// the servers' (another instance, or a node, whose clock is ahead): the
// key's state has then seen a time d later than any node's TIME.
func aheadState(t *testing.T, url, key string, l *algo.Limit, d time.Duration) {
	t.Helper()
	ck := new(clock)
	ck.us.Store(time.Now().Add(d).UnixMicro())
	s := openT(t, url, WithTestClock(ck.Now), withTestTTLFloor(time.Hour))
	res, err := s.Take(t.Context(), []store.Request{{Key: key, Limit: l, Cost: 1}}, make([]algo.Decision, 1))
	if err != nil || !res.Allowed {
		t.Fatalf("Take ahead: %+v, %v", res, err)
	}
}

// TestCrossSlotLateStampNoRollback: a key whose state has seen a time
// 10 s ahead of the servers' (an instance's or a node's clock ahead),
// second in a cross-slot Take, is stamped at that later time, where a
// Refund at Result.At still finds its units (a window's in the same
// window; a sliding log's within its period): the Take is not rolled back
// and reserved again. 746e45c did, twice per Take while the clocks
// differed (review3's finding and test; a69c548).
func TestCrossSlotLateStampNoRollback(t *testing.T) {
	url := clusterURL(t)
	for _, p := range []algo.Params{
		{Algorithm: algo.FixedWindow, Limit: 1000, Period: 24 * time.Hour},
		{Algorithm: algo.SlidingWindow, Limit: 1000, Period: 24 * time.Hour, SubWindows: 2},
		// A sliding log's refund at an instant before the stamp finds the
		// units while the state's time is below at + Period (f0ffc64).
		{Algorithm: algo.SlidingLog, Limit: 1000, Period: time.Hour},
	} {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			l, err := algo.Compile(p)
			if err != nil {
				t.Fatal(err)
			}
			keys := slotKeys(t, "lsr:"+runKey()+":", 2)
			aheadState(t, url, keys[1], l, 10*time.Second)
			s := openT(t, url)
			var rollbacks atomic.Int64
			s.beforeRollback = func() error { rollbacks.Add(1); return nil }
			const n = 5
			for range n {
				reqs := []store.Request{{Key: keys[0], Limit: l, Cost: 1}, {Key: keys[1], Limit: l, Cost: 1}}
				res, err := s.Take(t.Context(), reqs, make([]algo.Decision, 2))
				if err != nil || !res.Allowed {
					t.Fatalf("Take: %+v, %v", res, err)
				}
			}
			if got := rollbacks.Load(); got != 0 {
				t.Errorf("%d cross-slot takes, each stamped in Result.At's window, were rolled back %d times (%d extra round trips), want 0", n, got, 3*got)
			}
		})
	}
}
