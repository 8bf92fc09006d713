package lease_test

import (
	"context"
	"testing"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/lease"
)

// Two slices of a key taken at one store instant (a store clock that
// stands still, or one coarser than a slice's round trip) share their At:
// a refund of a unit the first slice admitted, made while the second is
// in use, was capped at what the second had admitted and the rest
// dropped, so the shared store kept units charged that nobody held (here
// 2 of a budget of 100, for good: a quota's budget shrank with each such
// refund).
func TestAdversaryRefundAcrossSlicesOfOneInstant(t *testing.T) {
	for _, kind := range []algo.Kind{algo.FixedWindow, algo.TokenBucket} {
		t.Run(kind.String(), func(t *testing.T) {
			clk := newClock() // stands still: every slice is taken at one instant
			m := shared(t, clk)
			l := quota(t, kind, 100)
			s, err := lease.New(noClose{m}, lease.WithSlice(5), lease.WithClock(clk.Now))
			if err != nil {
				t.Fatal(err)
			}
			_, first := take(t, s, "k", l, 3)  // slice A: 5 charged, 3 admitted
			take(t, s, "k", l, 2)              // A spent
			_, second := take(t, s, "k", l, 1) // slice B: 5 charged, 1 admitted
			if first.At != second.At {
				t.Fatalf("the slices' At differ (%d, %d): the clock moved", first.At, second.At)
			}
			if err := s.Refund(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 3, At: first.At}}); err != nil {
				t.Fatal(err)
			}
			// Held now: 2 (A) + 1 (B) admitted; nothing else may stay
			// charged once the instance gives its slice back.
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if got := 100 - remaining(t, m, "k", l); got != 3 {
				t.Fatalf("after the refund of 3 and Close, the shared store holds %d charged; want 3, the units still admitted", got)
			}
		})
	}
}
