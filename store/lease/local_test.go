package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/lease"
)

// TestTakeLocal: TakeLocal answers what a slice (or a remembered refusal)
// answers, as Take does, and declines, having changed nothing, whatever
// needs the shared store: a key without a slice, a slice too small or
// expired, another limit, several requests, a cost beyond the slice, and
// everything once Close has begun.
func TestTakeLocal(t *testing.T) {
	clk := newClock()
	m := shared(t, clk)
	s := instance(t, m, clk, lease.WithSlice(4), lease.WithTTL(time.Second))
	l := quota(t, algo.FixedWindow, 5)
	other := quota(t, algo.FixedWindow, 50)
	local := func(key string, l *algo.Limit, cost int64) (algo.Decision, store.Result, bool) {
		out := make([]algo.Decision, 1)
		res, ok := s.TakeLocal([]store.Request{{Key: key, Limit: l, Cost: cost}}, out)
		return out[0], res, ok
	}
	if _, _, ok := local("k", l, 1); ok {
		t.Fatal("TakeLocal answered a key without a slice")
	}
	if d, _ := take(t, s, "k", l, 1); !d.Allowed { // takes a slice of 4
		t.Fatalf("first take refused: %+v", d)
	}
	if _, _, ok := local("k", l, 4); ok {
		t.Fatal("TakeLocal answered a cost of 4 from 3 units")
	}
	if _, _, ok := local("k", other, 1); ok {
		t.Fatal("TakeLocal answered for another limit from the slice")
	}
	two := make([]algo.Decision, 2)
	if _, ok := s.TakeLocal([]store.Request{{Key: "k", Limit: l, Cost: 1}, {Key: "j", Limit: l, Cost: 1}}, two); ok {
		t.Fatal("TakeLocal answered two requests")
	}
	for i := range 3 {
		d, res, ok := local("k", l, 1)
		if !ok || !d.Allowed || !res.Allowed {
			t.Fatalf("unit %d of the slice: ok %v, %+v, %+v; want admitted in process", i+2, ok, d, res)
		}
		if want := int64(5 - 2 - i); d.Remaining != want {
			t.Errorf("unit %d: Remaining %d, want %d", i+2, d.Remaining, want)
		}
	}
	if _, _, ok := local("k", l, 1); ok {
		t.Fatal("TakeLocal answered from an empty slice")
	}
	// The store's refusal, remembered: the 5th unit was left, the 6th is
	// refused by the store, and the refusal is then repeated in process.
	if d, _ := take(t, s, "k", l, 1); !d.Allowed {
		t.Fatalf("5th take refused: %+v", d)
	}
	if d, _ := take(t, s, "k", l, 1); d.Allowed {
		t.Fatalf("6th take admitted: %+v", d)
	}
	if d, _, ok := local("k", l, 1); !ok || d.Allowed || d.RetryAfter <= 0 {
		t.Fatalf("after the store's refusal TakeLocal = ok %v, %+v; want the refusal repeated", ok, d)
	}

	// An expired slice's units go back to the store: Take's to do.
	if d, _ := take(t, s, "e", l, 1); !d.Allowed {
		t.Fatalf("take on e refused: %+v", d)
	}
	clk.Add(time.Second)
	if _, _, ok := local("e", l, 1); ok {
		t.Fatal("TakeLocal answered from an expired slice")
	}
	if d, _ := take(t, s, "e", l, 1); !d.Allowed {
		t.Fatalf("take on e after the TTL refused: %+v", d)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := local("e", l, 1); ok {
		t.Fatal("TakeLocal answered after Close")
	}
}

// Held says the unused units of a key's slice, nothing for another limit
// or once the TTL has ended, and charges nothing.
func TestHeld(t *testing.T) {
	clk := newClock()
	m := shared(t, clk)
	s := instance(t, m, clk, lease.WithSlice(10), lease.WithTTL(time.Second))
	l := quota(t, algo.TokenBucket, 100)
	if n := s.Held("k", l); n != 0 {
		t.Fatalf("Held before any Take: %d, want 0", n)
	}
	out := make([]algo.Decision, 1)
	for range 3 {
		if res, err := s.Take(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 1}}, out); err != nil || !res.Allowed {
			t.Fatalf("Take: %v %+v", err, out[0])
		}
	}
	if n := s.Held("k", l); n != 7 {
		t.Fatalf("Held after 3 of a slice of 10: %d, want 7", n)
	}
	if n := s.Held("k", quota(t, algo.TokenBucket, 100)); n != 0 {
		t.Fatalf("Held under another limit: %d, want 0", n)
	}
	if got := remaining(t, m, "k", l); got != 90 {
		t.Fatalf("the shared store has %d left after Held, want 90 (one slice charged)", got)
	}
	clk.Add(time.Second)
	if n := s.Held("k", l); n != 0 {
		t.Fatalf("Held past the TTL: %d, want 0", n)
	}
}
