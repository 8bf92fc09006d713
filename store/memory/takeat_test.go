package memory_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
)

// A Take reads the clock before it locks its key. One that read it in the
// last microsecond of a fixed window and reached the key after another
// had taken in the next window was decided, and counted, in the next
// window (a state's time never moves back), but reported the instant it
// read as Result.At: its Refund then looked for its units in the window
// before, found the key had moved on and gave nothing back, and the units
// stayed charged until the window ended. Result.At (and TakeKey's time)
// is now the instant the take was decided at. A sliding window's refund
// took the units off the sub-window before, which held none of them. A
// Take of several keys reads the clock again once it holds them all.
func TestTakeAtIsTheDecisionsInstant(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name  string
		p     algo.Params
		other bool // the first Take has a second key: one of several
	}{
		{"fixed_window", algo.Params{Algorithm: algo.FixedWindow, Limit: 5, Period: time.Minute}, false},
		{"sliding_window", algo.Params{Algorithm: algo.SlidingWindow, Limit: 5, Period: time.Minute}, false},
		{"fixed_window_two_keys", algo.Params{Algorithm: algo.FixedWindow, Limit: 5, Period: time.Minute}, true},
	}
	for _, c := range cases {
		p := c.p
		t.Run(c.name, func(t *testing.T) {
			var calls atomic.Int64
			reading, release := make(chan struct{}), make(chan struct{})
			clock := func() time.Time {
				if calls.Add(1) == 1 {
					// The first Take reads the window's last µs, then
					// stalls before it locks the key.
					close(reading)
					<-release
					return base.Add(time.Minute - time.Microsecond)
				}
				return base.Add(time.Minute) // the next window
			}
			m, err := memory.New(memory.WithClock(clock), memory.WithSweepInterval(0))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			l, err := algo.Compile(p)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			var first store.Result
			var firstErr error
			var wg sync.WaitGroup
			reqs := []store.Request{{Key: "k", Limit: l, Cost: 2}}
			if c.other {
				reqs = append(reqs, store.Request{Key: "o", Limit: l, Cost: 1})
			}
			wg.Go(func() {
				first, firstErr = m.Take(ctx, reqs, make([]algo.Decision, len(reqs)))
			})
			<-reading
			out := make([]algo.Decision, 1)
			if _, err := m.Take(ctx, []store.Request{{Key: "k", Limit: l, Cost: 1}}, out); err != nil || !out[0].Allowed {
				t.Fatalf("the second Take = %+v, %v", out[0], err)
			}
			close(release)
			wg.Wait()
			if firstErr != nil || !first.Allowed {
				t.Fatalf("the first Take = %+v, %v", first, firstErr)
			}
			if err := m.Refund(ctx, []store.Request{{Key: "k", Limit: l, Cost: 2, At: first.At}}); err != nil {
				t.Fatal(err)
			}
			if err := m.Peek(ctx, []store.Request{{Key: "k", Limit: l}}, out); err != nil {
				t.Fatal(err)
			}
			if out[0].Remaining != 4 {
				t.Fatalf("after the first Take's Refund at its Result.At (%d), Remaining %d; want 4, the second Take's 1 held", first.At, out[0].Remaining)
			}
		})
	}
}
