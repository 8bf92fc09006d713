package limiter_test

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store/storetest"
)

// TestLocalSetParamsCountAboveLimit: a window's count above its Limit
// (SetParams lowered the Limit within the window, and the count carried
// as it was) carries whole into another window shape, at most the new
// Limit. It carried as the old Limit's clamp of it: 15 units taken, the
// Limit lowered to 10, then a window of a minute and a Limit of 20
// counted 10 of the 15 and admitted 10 more within the minute, 25 on a
// limit of 20.
func TestLocalSetParamsCountAboveLimit(t *testing.T) {
	const ms = time.Millisecond
	for _, k := range []algo.Kind{algo.FixedWindow, algo.SlidingWindow} {
		t.Run(k.String(), func(t *testing.T) {
			l, clock := newFakeLocal(t, algo.Params{Algorithm: k, Limit: 20, Period: time.Second})
			clock.Set(storetest.Epoch.Add(200 * ms))
			if !l.AllowN(15) {
				t.Fatal("AllowN(15) of 20 refused")
			}
			clock.Set(storetest.Epoch.Add(300 * ms))
			if err := l.SetParams(algo.Params{Algorithm: k, Limit: 10, Period: time.Second}); err != nil {
				t.Fatal(err)
			}
			if l.AllowN(1) {
				t.Fatal("AllowN(1) with 15 counted on a limit of 10 admitted")
			}
			if err := l.SetParams(algo.Params{Algorithm: k, Limit: 20, Period: time.Minute}); err != nil {
				t.Fatal(err)
			}
			if got := l.Peek(0).Remaining; got != 5 {
				t.Errorf("after 15 taken 100ms ago, a window of a minute with a limit of 20: Remaining %d, want 5", got)
			}
			n := 0
			for l.AllowN(1) {
				n++
			}
			if n != 5 {
				t.Errorf("admitted %d more within the minute, want 5 (15 + 5 = the limit of 20)", n)
			}
			// A lower new Limit still caps what carries.
			if err := l.SetParams(algo.Params{Algorithm: k, Limit: 3, Period: 2 * time.Minute}); err != nil {
				t.Fatal(err)
			}
			if d := l.Peek(0); d.Remaining != 0 {
				t.Errorf("a limit of 3 after 20 counted: Remaining %d, want 0", d.Remaining)
			}
		})
	}
}
