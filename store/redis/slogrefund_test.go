package redis

import (
	"fmt"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/storetest"
)

// TestSlidingLogRefundStampedLater: a take whose clock reads before the
// state's time is stamped at the state's time, and its refund at the
// take's own time removes the oldest entries from then on, as algo's
// Refund does (sliding_log.lua against the Go reference, state by state).
// Of a time's entries it removes the newest: the members of one time are
// numbered 1..n and a take at that time adds n+1 on, so removing the
// oldest made the next take's members overwrite the ones left (two units
// counted as one).
func TestSlidingLogRefundStampedLater(t *testing.T) {
	url := redisURL(t)
	const sec = int64(time.Second / time.Microsecond)
	t0 := time.Date(2026, time.December, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	type op struct {
		now, cost int64
		at        int64 // a refund of a take at at when set
		allowed   bool  // a take's
	}
	for _, tc := range []struct {
		name string
		ops  []op
	}{
		{"one time", []op{
			{now: t0 + sec, cost: 3, allowed: true},
			{now: t0, cost: 2, allowed: true}, // stamped t0+1s
			{now: t0, cost: 2, at: t0},        // the newest two of t0+1s
			{now: t0 + sec, cost: 2, allowed: true},
			{now: t0 + sec, cost: 1, allowed: false},
		}},
		{"two times", []op{
			{now: t0 + sec, cost: 1, allowed: true},
			{now: t0 + 2*sec, cost: 3, allowed: true},
			{now: t0, cost: 1, allowed: true}, // stamped t0+2s
			{now: t0, cost: 2, at: t0},        // t0+1s's and one of t0+2s
			{now: t0 + 2*sec, cost: 2, allowed: true},
			{now: t0 + 2*sec, cost: 1, allowed: false},
		}},
		{"window passed", []op{
			{now: t0, cost: 1, allowed: true},
			{now: t0 + 10*sec, cost: 1, allowed: true},
			{now: t0 + 10*sec, cost: 1, at: t0}, // only entries at t0, gone
			{now: t0 + 10*sec, cost: 4, allowed: true},
			{now: t0 + 10*sec, cost: 1, allowed: false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := algo.Compile(algo.Params{Algorithm: algo.SlidingLog, Limit: 5, Period: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			ck := new(clock)
			s := openT(t, url, WithTestClock(ck.Now), withTestTTLFloor(time.Hour))
			key := fmt.Sprintf("{slogrefund%s}:%s", runID, tc.name)
			ref := storetest.NewReference()
			for i, o := range tc.ops {
				ck.us.Store(o.now)
				q := store.Request{Key: key, Limit: l, Cost: o.cost, At: o.at}
				where := fmt.Sprintf("step %d", i)
				if o.at != 0 {
					ref.Refund(q, o.now)
					if err := s.Refund(t.Context(), []store.Request{q}); err != nil {
						t.Fatalf("%s: Refund: %v", where, err)
					}
				} else {
					ok, want := ref.Take([]store.Request{q}, o.now)
					out := make([]algo.Decision, 1)
					res, err := s.Take(t.Context(), []store.Request{q}, out)
					if err != nil {
						t.Fatalf("%s: Take: %v", where, err)
					}
					if res.Allowed != o.allowed || ok != o.allowed || out[0] != want[0] {
						t.Fatalf("%s at t0+%dµs: Take(cost %d) = %v %+v, reference %v %+v, want allowed %v", where, o.now-t0, o.cost, res.Allowed, out[0], ok, want[0], o.allowed)
					}
				}
				compareState(t, where, s, ref, key, l, o.now)
			}
		})
	}
}
