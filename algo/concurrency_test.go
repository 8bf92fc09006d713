package algo

import (
	"testing"
	"time"
)

func TestConcurrencySteps(t *testing.T) {
	l := mustCompile(t, Params{Algorithm: Concurrency, Limit: 2, LeaseTTL: 30 * time.Second})
	s := runSteps(t, l, instants{
		"t0": 0,
		"t1": 10 * time.Second,
		"t2": 40*time.Second - time.Microsecond,
		"t3": 40 * time.Second,
		"t4": 70 * time.Second,
	}, []step{
		{at: "t0", op: opLease, cost: 1, lease: 7, allowed: true, remaining: 1},
		{at: "t0", op: opLease, cost: 1, lease: 8, allowed: true, remaining: 0},
		// Full: at the latest the oldest lease expires in 30s; a release
		// may come sooner, so this RetryAfter is an upper bound.
		{at: "t0", op: opLease, cost: 1, lease: 9, allowed: false, remaining: 0, retry: 30 * time.Second},
		{at: "t0", op: opLease, cost: 3, lease: 9, allowed: false, remaining: 0, retry: Never},
		{at: "t1", op: opRelease, lease: 7, allowed: true},
		{at: "t1", op: opRelease, lease: 7, allowed: false}, // already released
		{at: "t1", op: opRelease, lease: 0, allowed: false}, // the anonymous lease cannot be released
		{at: "t1", op: opLease, cost: 1, lease: 9, allowed: true, remaining: 0},
		// Lease 8 expires at 30s, lease 9 at 40s.
		{at: "t1", cost: 0, allowed: true, remaining: 0},
		{at: "t1", cost: 2, allowed: false, remaining: 0, retry: 30 * time.Second},
		{at: "t2", cost: 1, allowed: true, remaining: 0},
		{at: "t2", cost: 1, allowed: false, remaining: 0, retry: time.Microsecond},
		// Time going back is read as the latest time seen: no lease
		// comes back to life.
		{at: "t0", cost: 1, allowed: false, remaining: 0, retry: time.Microsecond},
		{at: "t3", op: opPeek, cost: 1, allowed: true, remaining: 0},
		{at: "t3", cost: 1, allowed: true, remaining: 0},
		// Take's anonymous leases only expire.
		{at: "t3", op: opRelease, lease: 0, allowed: false},
		{at: "t3", cost: 1, allowed: false, remaining: 0, retry: 30*time.Second - time.Microsecond},
	})
	if got, want := l.ExpiresAt(s), base+(70*time.Second).Microseconds(); got != want {
		t.Errorf("ExpiresAt = t0+%v, want t0+70s", time.Duration(got-base)*time.Microsecond)
	}
	if d := l.Take(s, base+(70*time.Second).Microseconds(), 2); !d.Allowed || d.ResetAfter != 30*time.Second {
		t.Errorf("Take(t4, 2) = %+v, want allowed, reset in 30s", d)
	}
}

func TestConcurrencyLeaseWithCost(t *testing.T) {
	l := mustCompile(t, Params{Algorithm: Concurrency, Limit: 5, LeaseTTL: time.Minute})
	runSteps(t, l, instants{"t0": 0}, []step{
		{at: "t0", op: opLease, cost: 3, lease: 1, allowed: true, remaining: 2},
		{at: "t0", op: opLease, cost: 2, lease: 2, allowed: true, remaining: 0},
		{at: "t0", op: opRelease, lease: 1, allowed: true}, // all three slots
		{at: "t0", op: opLease, cost: 3, lease: 3, allowed: true, remaining: 0},
	})
}

// Shortening LeaseTTL (a configuration reload) under existing leases keeps
// them in order of expiry, so the new, earlier-expiring lease is found and
// the retry is still exact.
func TestConcurrencyLeaseTTLShortened(t *testing.T) {
	long := mustCompile(t, Params{Algorithm: Concurrency, Limit: 2, LeaseTTL: time.Hour})
	short := mustCompile(t, Params{Algorithm: Concurrency, Limit: 2, LeaseTTL: time.Minute})
	var s State
	long.TakeLease(&s, base, 1, 1)
	short.TakeLease(&s, base, 1, 2)
	d := short.Take(&s, base, 1)
	if d.Allowed || d.RetryAfter != time.Minute {
		t.Fatalf("Take = %+v, want refused for 1m (lease 2 expires first)", d)
	}
	if d := short.Take(&s, base+time.Minute.Microseconds(), 1); !d.Allowed {
		t.Fatalf("Take after the short lease expired = %+v, want allowed", d)
	}
}

// Renew moves a live lease's slots to now + LeaseTTL; a lease that has
// expired or been released is not revived.
func TestConcurrencyRenewSteps(t *testing.T) {
	l := mustCompile(t, Params{Algorithm: Concurrency, Limit: 2, LeaseTTL: 30 * time.Second})
	s := runSteps(t, l, instants{
		"t0": 0,
		"t1": 27 * time.Second, // 0.9 TTL
		"t2": 45 * time.Second, // 1.5 TTL: held only thanks to the renewal
		"t3": 57*time.Second - time.Microsecond,
		"t4": 57 * time.Second, // the renewed lease expires
		"t5": 90 * time.Second,
	}, []step{
		{at: "t0", op: opLease, cost: 1, lease: 7, allowed: true, remaining: 1},
		{at: "t0", op: opLease, cost: 1, lease: 8, allowed: true, remaining: 0},
		{at: "t0", op: opRenew, lease: 9, allowed: false}, // never held
		{at: "t0", op: opRenew, lease: 0, allowed: false}, // the anonymous lease only expires
		{at: "t1", op: opRenew, lease: 7, allowed: true},
		// Lease 8 expires first now: the order of expiry was kept.
		{at: "t1", cost: 1, allowed: false, remaining: 0, retry: 3 * time.Second},
		{at: "t2", op: opLease, cost: 1, lease: 9, allowed: true, remaining: 0},
		{at: "t2", cost: 1, allowed: false, remaining: 0, retry: 12 * time.Second},
		// Lease 8 expired at 30s: renewing it does not bring it back.
		{at: "t2", op: opRenew, lease: 8, allowed: false},
		{at: "t2", cost: 1, allowed: false, remaining: 0, retry: 12 * time.Second},
		{at: "t3", cost: 1, allowed: false, remaining: 0, retry: time.Microsecond},
		{at: "t4", op: opRenew, lease: 7, allowed: false}, // expired at t4
		{at: "t4", op: opLease, cost: 1, lease: 10, allowed: true, remaining: 0},
		// Released, then renewed: still free.
		{at: "t4", op: opRelease, lease: 10, allowed: true},
		{at: "t4", op: opRenew, lease: 10, allowed: false},
		{at: "t4", op: opPeek, cost: 1, allowed: true, remaining: 0},
		// A clock that steps back renews from the latest time seen.
		{at: "t0", op: opRenew, lease: 9, allowed: true},
	})
	if got, want := l.ExpiresAt(s), base+(87*time.Second).Microseconds(); got != want {
		t.Errorf("ExpiresAt = t0+%v, want t0+87s (lease 9 renewed at t4)", time.Duration(got-base)*time.Microsecond)
	}
}

// Renewing all the slots of a lease with a cost keeps them together and
// the state in order of expiry; other algorithms ignore Renew.
func TestConcurrencyRenewCost(t *testing.T) {
	l := mustCompile(t, Params{Algorithm: Concurrency, Limit: 5, LeaseTTL: time.Minute})
	runSteps(t, l, instants{"t0": 0, "t1": 10 * time.Second, "t2": 65 * time.Second}, []step{
		{at: "t0", op: opLease, cost: 3, lease: 1, allowed: true, remaining: 2},
		{at: "t0", op: opLease, cost: 2, lease: 2, allowed: true, remaining: 0},
		{at: "t1", op: opRenew, lease: 1, allowed: true},
		// At 65s lease 2 has expired and lease 1's three slots are held.
		{at: "t2", cost: 3, allowed: false, remaining: 2, retry: 5 * time.Second},
		{at: "t2", cost: 2, allowed: true, remaining: 0},
	})
	w := mustCompile(t, Params{Algorithm: FixedWindow, Limit: 5, Period: time.Minute})
	var s State
	w.TakeLease(&s, base, 1, 1)
	if w.Renew(&s, base, 1) {
		t.Error("FixedWindow Renew = true, want false")
	}
}
