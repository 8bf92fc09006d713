package redis

import (
	"fmt"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// TestSlidingWindowRemainingRounding: sliding_window.lua's Remaining
// agrees with its own admission test est + cost <= limit, as algo's does.
// floor(limit - est) gave 2277450 here while a Take of 2277451 was
// admitted (limit - est and est + cost round differently).
func TestSlidingWindowRemainingRounding(t *testing.T) {
	url := redisURL(t)
	l, err := algo.Compile(algo.Params{Algorithm: algo.SlidingWindow, Limit: 5_325_637, Period: 168 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const week = int64(168 * time.Hour / time.Microsecond)
	start := int64(1703721600000000) // a window boundary
	now := int64(1704931199999998)
	ck := new(clock)
	s := openT(t, url, WithTestClock(ck.Now), withTestTTLFloor(time.Hour))
	key := fmt.Sprintf("{slidinground%s}", runID)
	take := func(at, cost int64) algo.Decision {
		t.Helper()
		ck.us.Store(at)
		out := make([]algo.Decision, 1)
		if _, err := s.Take(t.Context(), []store.Request{{Key: key, Limit: l, Cost: cost}}, out); err != nil {
			t.Fatalf("Take(%d) at %d: %v", cost, at, err)
		}
		return out[0]
	}
	if d := take(start, 184); !d.Allowed {
		t.Fatalf("Take(184) = %+v, want admitted", d)
	}
	if d := take(start+week, 3_048_186); !d.Allowed {
		t.Fatalf("Take(3048186) = %+v, want admitted", d)
	}
	ck.us.Store(now)
	peek := make([]algo.Decision, 1)
	if err := s.Peek(t.Context(), []store.Request{{Key: key, Limit: l}}, peek); err != nil {
		t.Fatalf("Peek: %v", err)
	}
	if peek[0].Remaining != 2_277_451 {
		t.Errorf("Peek(0).Remaining = %d, want 2277451", peek[0].Remaining)
	}
	if d := take(now, 2_277_452); d.Allowed || d.Remaining != 2_277_451 {
		t.Errorf("Take(2277452) = %+v, want refused with Remaining 2277451", d)
	}
	if d := take(now, 2_277_451); !d.Allowed || d.Remaining != 0 {
		t.Errorf("Take(2277451) = %+v, want admitted with Remaining 0", d)
	}
}
