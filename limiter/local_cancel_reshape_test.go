package limiter_test

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store/storetest"
)

// A reservation made before SetParams changed a window's shape (its
// Period, Calendar or SubWindows) was given back to the state SetParams
// rebuilt in the new window, although that state counts only what the old
// limit counted at the change: a reservation of a window that had passed
// by then, counted nowhere in it, took units off others' count, and one
// the rebuilt state capped at the new limit took off more than it held.
// Either way the new window admitted beyond its limit. So did a sliding
// log's reservation after a longer Period: the change forgot its units
// under the old Period, and the refund removed the units taken since in
// their place. A Cancel after such a change now gives nothing back, as
// after a change of algorithm.
func TestLocalCancelAfterWindowReshape(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name      string
		from, to  algo.Params
		reserveAt time.Duration // the reservation of reserve units
		reserve   int64
		takeAt    time.Duration // then take units, not cancelled
		take      int64
		setAt     time.Duration // then SetParams(to), and Cancel
		// want is Peek(0).Remaining after the Cancel: what the new limit
		// leaves of the units taken and never given back.
		want int64
	}{
		{
			// The reservation's window had passed at the change: the new
			// minute counts the 10 taken since, and nothing of it.
			name:      "fixed_window_past_window",
			from:      algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Second},
			to:        algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Minute},
			reserveAt: 500 * ms, reserve: 10,
			takeAt: 1500 * ms, take: 10,
			setAt: 1600 * ms, want: 0,
		},
		{
			// 100 counted at the change, carried as the new limit of 60:
			// giving back the reservation's 50 left 10 used of 60 where
			// the 50 still held fill the minute's 60 but 10.
			name:      "fixed_window_capped",
			from:      algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Period: time.Second},
			to:        algo.Params{Algorithm: algo.FixedWindow, Limit: 60, Period: time.Minute},
			reserveAt: 100 * ms, reserve: 50,
			takeAt: 200 * ms, take: 50,
			setAt: 300 * ms, want: 0,
		},
		{
			name:      "sliding_window_past_window",
			from:      algo.Params{Algorithm: algo.SlidingWindow, Limit: 10, Period: time.Second},
			to:        algo.Params{Algorithm: algo.SlidingWindow, Limit: 10, Period: time.Minute},
			reserveAt: 500 * ms, reserve: 10,
			takeAt: 2100 * ms, take: 10,
			setAt: 2200 * ms, want: 0,
		},
		{
			// The old Period forgot the reservation's units at the change;
			// under the longer new one, the refund found the units taken
			// since in their place and removed them.
			name:      "sliding_log_longer_period",
			from:      algo.Params{Algorithm: algo.SlidingLog, Limit: 10, Period: time.Second},
			to:        algo.Params{Algorithm: algo.SlidingLog, Limit: 10, Period: time.Minute},
			reserveAt: 500 * ms, reserve: 10,
			takeAt: 1500 * ms, take: 10,
			setAt: 1600 * ms, want: 0,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, clock := newFakeLocal(t, c.from)
			clock.Set(storetest.Epoch.Add(c.reserveAt))
			r := l.Reserve(c.reserve)
			if !r.OK() {
				t.Fatalf("Reserve(t+%v, %d) refused: %+v", c.reserveAt, c.reserve, r.Decision())
			}
			clock.Set(storetest.Epoch.Add(c.takeAt))
			if d := l.Take(c.take); !d.Allowed {
				t.Fatalf("Take(t+%v, %d) refused: %+v", c.takeAt, c.take, d)
			}
			clock.Set(storetest.Epoch.Add(c.setAt))
			if err := l.SetParams(c.to); err != nil {
				t.Fatal(err)
			}
			before := l.Peek(0).Remaining
			r.Cancel()
			if got := l.Peek(0).Remaining; got != c.want {
				t.Fatalf("after SetParams to %v at t+%v and the Cancel of the reservation of %d at t+%v: Remaining %d (%d before the Cancel), want %d",
					c.to.Period, c.setAt, c.reserve, c.reserveAt, got, before, c.want)
			}
			// And the new window admits no more than that.
			admitted := int64(0)
			for range 100 {
				if l.AllowN(1) {
					admitted++
				}
			}
			if admitted != c.want {
				t.Fatalf("the new window admitted %d more, want %d", admitted, c.want)
			}
		})
	}
}
