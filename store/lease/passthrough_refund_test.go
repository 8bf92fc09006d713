package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/lease"
)

// A Take of several requests goes to the shared store as it is, and a
// refund of it names the shared store's instant. When a slice of one of
// its keys was taken at that same instant (a store clock that stands
// still, or one coarser than the round trips), the refund went to the
// slice, and only up to the units the slice had admitted: the rest was
// dropped, and the shared store kept charged units nobody held (here 3
// of a quota of 100, for good). What a slice cannot take back goes back
// to the shared store, up to what this instance charged there at that
// instant outside its slices; and a refund of a slice's unit that the
// slice cannot take back since a pass-through refund filled it goes
// there as well.
func TestRefundOfPassThroughAtTheSliceInstant(t *testing.T) {
	for _, kind := range []algo.Kind{algo.FixedWindow, algo.TokenBucket, algo.SlidingWindow} {
		t.Run(kind.String(), func(t *testing.T) {
			clk := newClock() // stands still: every call is at one instant
			m := shared(t, clk)
			l, other := quota(t, kind, 100), quota(t, kind, 100)
			s, err := lease.New(noClose{m}, lease.WithSlice(4), lease.WithClock(clk.Now))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			_, first := take(t, s, "k", l, 1) // a slice: 4 charged, 1 admitted
			reqs := []store.Request{{Key: "o", Limit: other, Cost: 1}, {Key: "k", Limit: l, Cost: 3}}
			res, err := s.Take(ctx, reqs, make([]algo.Decision, 2))
			if err != nil || !res.Allowed {
				t.Fatalf("Take of two keys = %+v, %v", res, err)
			}
			if res.At != first.At {
				t.Fatalf("the Takes' At differ (%d, %d): the clock moved", first.At, res.At)
			}
			for i := range reqs {
				reqs[i].At = res.At
			}
			if err := s.Refund(ctx, reqs); err != nil {
				t.Fatal(err)
			}
			// The slice's unit too: held now, nothing.
			if err := s.Refund(ctx, []store.Request{{Key: "k", Limit: l, Cost: 1, At: first.At}}); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if got := 100 - remaining(t, m, "k", l); got != 0 {
				t.Fatalf("after the refunds and Close, the shared store holds %d charged; want 0, nothing is admitted", got)
			}
			if got := 100 - remaining(t, m, "o", other); got != 0 {
				t.Fatalf("key o holds %d charged; want 0", got)
			}
		})
	}
}

// The same when the slice is taken after the pass-through Take, at its
// instant: the key's entry (an earlier slice's) keeps what the Take
// charged, for the refunds of that instant.
func TestRefundOfPassThroughBeforeTheSlice(t *testing.T) {
	clk := newClock()
	m := shared(t, clk)
	l, other := quota(t, algo.FixedWindow, 100), quota(t, algo.FixedWindow, 100)
	s, err := lease.New(noClose{m}, lease.WithSlice(4), lease.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, first := take(t, s, "k", l, 1) // a slice at t: 4 charged, 1 admitted
	clk.Add(time.Millisecond)
	reqs := []store.Request{{Key: "o", Limit: other, Cost: 1}, {Key: "k", Limit: l, Cost: 3}}
	res, err := s.Take(ctx, reqs, make([]algo.Decision, 2))
	if err != nil || !res.Allowed {
		t.Fatalf("Take of two keys = %+v, %v", res, err)
	}
	_, second := take(t, s, "k", l, 4) // the 3 left go back; a slice at t+1ms, spent
	if second.At != res.At {
		t.Fatalf("the slice's At %d is not the Take's %d", second.At, res.At)
	}
	for i := range reqs {
		reqs[i].At = res.At
	}
	if err := s.Refund(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	for _, r := range []store.Request{{Key: "k", Limit: l, Cost: 4, At: second.At}, {Key: "k", Limit: l, Cost: 1, At: first.At}} {
		if err := s.Refund(ctx, []store.Request{r}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := 100 - remaining(t, m, "k", l); got != 0 {
		t.Fatalf("after the refunds and Close, the shared store holds %d charged; want 0, nothing is admitted", got)
	}
}

// What pass-through Takes charged at the slice's instant is kept while
// later ones come: 88cc9eb kept the latest instant only, and a refund of
// a Take of the slice's instant, made after Takes at later instants, was
// dropped as before.
func TestRefundOfPassThroughAfterLaterOnes(t *testing.T) {
	clk := newClock()
	m := shared(t, clk)
	l, other := quota(t, algo.FixedWindow, 100), quota(t, algo.FixedWindow, 100)
	s, err := lease.New(noClose{m}, lease.WithSlice(5), lease.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, first := take(t, s, "k", l, 1) // a slice at t: 5 charged, 1 admitted
	var passes [][]store.Request
	for i, cost := range []int64{3, 3, 2} { // at t, t+1ms, t+2ms
		if i > 0 {
			clk.Add(time.Millisecond)
		}
		reqs := []store.Request{{Key: "o", Limit: other, Cost: 1}, {Key: "k", Limit: l, Cost: cost}}
		res, err := s.Take(ctx, reqs, make([]algo.Decision, 2))
		if err != nil || !res.Allowed {
			t.Fatalf("Take of two keys = %+v, %v", res, err)
		}
		for j := range reqs {
			reqs[j].At = res.At
		}
		passes = append(passes, reqs)
	}
	for _, reqs := range passes {
		if err := s.Refund(ctx, reqs); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Refund(ctx, []store.Request{{Key: "k", Limit: l, Cost: 1, At: first.At}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := 100 - remaining(t, m, "k", l); got != 0 {
		t.Fatalf("after the refunds and Close, the shared store holds %d charged; want 0, nothing is admitted", got)
	}
}

// The same when the pass-through Take comes before the key has any
// entry, and its first slice is taken at the Take's instant: the shard
// keeps the Take's note until then.
func TestRefundOfPassThroughBeforeTheFirstSlice(t *testing.T) {
	clk := newClock() // stands still
	m := shared(t, clk)
	l, other := quota(t, algo.FixedWindow, 100), quota(t, algo.FixedWindow, 100)
	s, err := lease.New(noClose{m}, lease.WithSlice(5), lease.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	reqs := []store.Request{{Key: "o", Limit: other, Cost: 1}, {Key: "k", Limit: l, Cost: 4}}
	res, err := s.Take(ctx, reqs, make([]algo.Decision, 2))
	if err != nil || !res.Allowed {
		t.Fatalf("Take of two keys = %+v, %v", res, err)
	}
	_, first := take(t, s, "k", l, 1) // the key's first slice: 5 charged, 1 admitted
	if first.At != res.At {
		t.Fatalf("the slice's At %d is not the Take's %d", first.At, res.At)
	}
	for i := range reqs {
		reqs[i].At = res.At
	}
	if err := s.Refund(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	if err := s.Refund(ctx, []store.Request{{Key: "k", Limit: l, Cost: 1, At: first.At}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := 100 - remaining(t, m, "k", l); got != 0 {
		t.Fatalf("after the refunds and Close, the shared store holds %d charged; want 0, nothing is admitted", got)
	}
}
