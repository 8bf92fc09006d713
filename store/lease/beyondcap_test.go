package lease_test

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store/lease"
)

// TestCostBeyondCapacity: a cost above the limit's capacity but within
// the slice (cost 7 on a burst of 5, slice 10) is the shared store's
// "never": refused, IsNever, nothing charged, for every leased algorithm,
// as the shared store alone answers it. It was admitted, from a slice of
// the capacity (5 units) taken for a request of 7, and left the slice at
// -2 units.
func TestCostBeyondCapacity(t *testing.T) {
	for _, kind := range []algo.Kind{algo.TokenBucket, algo.GCRA, algo.FixedWindow, algo.SlidingWindow} {
		t.Run(kind.String(), func(t *testing.T) {
			clk := newClock()
			m := shared(t, clk)
			s := instance(t, m, clk, lease.WithSlice(10))
			l := compile(t, algo.Params{Algorithm: kind, Limit: 5, Period: time.Hour})
			for i := range 2 {
				d, res := take(t, s, "k", l, 7)
				if d.Allowed || res.Allowed || !d.IsNever() {
					t.Fatalf("take %d of 7 over a capacity of 5: %+v, %+v; want refused, IsNever", i, d, res)
				}
			}
			if got := remaining(t, m, "k", l); got != 5 {
				t.Fatalf("the shared store has %d left, want 5: nothing charged", got)
			}
			// The key still serves what fits.
			if d, _ := take(t, s, "k", l, 5); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("take of 5 after the refusals: %+v, want allowed with 0 remaining", d)
			}
		})
	}
}

// TestCostBeyondCapacityAfterARefusal: a cost above the capacity is "never"
// also while the key remembers the shared store's refusal of a smaller
// cost: that refusal's RetryAfter is a wait after which the smaller cost
// passes, not the larger, which never does. It was repeated for the cost
// of 7 (36m for a token bucket of 5 an hour spent, slice 10), a wait after
// which the request is refused again.
func TestCostBeyondCapacityAfterARefusal(t *testing.T) {
	for _, kind := range []algo.Kind{algo.TokenBucket, algo.GCRA, algo.FixedWindow, algo.SlidingWindow} {
		t.Run(kind.String(), func(t *testing.T) {
			clk := newClock()
			m := shared(t, clk)
			s := instance(t, m, clk, lease.WithSlice(10))
			l := compile(t, algo.Params{Algorithm: kind, Limit: 5, Period: time.Hour})
			if d, _ := take(t, s, "k", l, 5); !d.Allowed {
				t.Fatalf("take of 5 on a fresh limit of 5: %+v, want allowed", d)
			}
			if d, _ := take(t, s, "k", l, 3); d.Allowed || d.IsNever() {
				t.Fatalf("take of 3 with nothing left: %+v, want refused for a while", d)
			}
			d, res := take(t, s, "k", l, 7)
			if d.Allowed || res.Allowed || !d.IsNever() {
				t.Fatalf("take of 7 over a capacity of 5, a refusal of 3 remembered: %+v; want refused, IsNever", d)
			}
			if d, _ := take(t, s, "k", l, 3); d.Allowed || d.IsNever() {
				t.Fatalf("take of 3 after the never: %+v, want refused for a while", d)
			}
		})
	}
}
