package limiter_test

import (
	"errors"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/storetest"
)

// TestRenewKeepsTheSlot: a Concurrency slot taken by Reserve or Acquire
// and renewed before its one-minute lease runs out is still held 100 s
// after it was taken (a third holder is refused), and one not renewed
// has expired by then; Renew after Cancel or Release revives nothing.
func TestRenewKeepsTheSlot(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	st := newStore(t, memory.WithClock(clock.Now))
	l := newLimiter(t, st, "streams", algo.Params{Algorithm: algo.Concurrency, Limit: 2, LeaseTTL: time.Minute})
	ctx := t.Context()
	r, err := l.Reserve(ctx, "u", 1)
	if err != nil || !r.OK() {
		t.Fatalf("Reserve: %v, %v", r.Decision(), err)
	}
	a, err := l.Acquire(ctx, "u")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, "u"); !errors.Is(err, limiter.ErrLimited) {
		t.Fatalf("third holder: %v, want ErrLimited", err)
	}
	clock.Advance(50 * time.Second)
	if err := r.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	clock.Advance(50 * time.Second) // 100 s after the takes: both renewed leases run to 110 s
	if _, err := l.Acquire(ctx, "u"); !errors.Is(err, limiter.ErrLimited) {
		t.Fatalf("a third holder 100 s in, both slots renewed at 50 s: %v, want ErrLimited", err)
	}
	if err := r.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := l.Acquire(ctx, "u")
	if err != nil {
		t.Fatalf("after Cancel and a Renew: %v, want the slot free", err)
	}
	clock.Advance(11 * time.Second) // a's lease (renewed at 50 s) has expired; b's runs to 160 s
	if d, err := l.Peek(ctx, "u", 0); err != nil || d.Remaining != 1 {
		t.Errorf("after a's lease expired: remaining %d, %v; want 1 (b's slot held)", d.Remaining, err)
	}
	if err := a.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.Peek(ctx, "u", 0); d.Remaining != 1 {
		t.Errorf("Renew of an expired lease: remaining %d, want 1 (not revived)", d.Remaining)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRenewNoOps: Renew does nothing for a refused reservation, another
// algorithm or a nil one, and says a store that cannot renew cannot.
func TestRenewNoOps(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	tb := newLimiter(t, st, "rate", algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Minute})
	r, _ := tb.Reserve(ctx, "k", 1)
	if err := r.Renew(ctx); err != nil {
		t.Errorf("Renew of a token bucket's reservation: %v", err)
	}
	var nilRes *limiter.Reservation
	var nilLease *limiter.Lease
	if nilRes.Renew(ctx) != nil || nilLease.Renew(ctx) != nil {
		t.Error("Renew on nil: an error")
	}
	conc := algo.Params{Algorithm: algo.Concurrency, Limit: 1, LeaseTTL: time.Minute}
	c := newLimiter(t, opaque{st}, "conc", conc)
	held, err := c.Reserve(ctx, "k", 1)
	if err != nil || !held.OK() {
		t.Fatal(held.Decision(), err)
	}
	refused, err := c.Reserve(ctx, "k", 1)
	if err != nil || refused.OK() {
		t.Fatal(refused.Decision(), err)
	}
	if err := refused.Renew(ctx); err != nil {
		t.Errorf("Renew of a refused reservation: %v", err)
	}
	err = held.Renew(ctx)
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Renew on a store without store.Renewer: %v, want ErrUnsupported", err)
	}
	t.Log(err)
}
