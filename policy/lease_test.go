package policy

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const leaseConfig = `
domain: d
descriptors:
  - key: job
    rate_limit: {algorithm: concurrency, requests_per_unit: 2, lease_ttl: 30s}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// TestReleaseLeases: the Leases of a response, given to ReleaseLeases
// instead of the Response, free its slots; a second release frees nothing.
func TestReleaseLeases(t *testing.T) {
	e := newMemEngine(t, mustParse(t, leaseConfig), frozen(scenarioT0))
	ctx := context.Background()
	r := req("d", ent("job", "export"))
	first, _ := e.Decide(ctx, r)
	second, _ := e.Decide(ctx, r)
	if first.Code != CodeOK || second.Code != CodeOK {
		t.Fatalf("codes %s %s, want OK OK", first.Code, second.Code)
	}
	ls := first.Leases()
	if len(ls) != 1 {
		t.Fatalf("Leases() = %+v, want one", ls)
	}
	if l := ls[0]; l.ID == 0 || l.Cost != 1 || l.Limit != 2 || l.TTL != 30*time.Second || !strings.HasPrefix(l.Key, DefaultKeyPrefix) {
		t.Fatalf("Leases()[0] = %+v, want a non-zero id, cost 1, limit 2, TTL 30s and a key under %q", l, DefaultKeyPrefix)
	}
	if second.Leases()[0].ID == ls[0].ID {
		t.Fatalf("two decisions share the lease id %d", ls[0].ID)
	}
	if err := e.ReleaseLeases(ctx, ls); err != nil {
		t.Fatalf("release: %v", err)
	}
	if got, _ := e.Decide(ctx, r); got.Code != CodeOK {
		t.Fatalf("after the release: %s, want OK", got.Code)
	}
	// The limit is full again: releasing the same lease a second time
	// succeeds and frees nothing.
	if err := e.ReleaseLeases(ctx, ls); err != nil {
		t.Fatalf("second release: %v", err)
	}
	if got, _ := e.Decide(ctx, r); got.Code != CodeOverLimit {
		t.Fatalf("after the second release: %s, want OVER_LIMIT", got.Code)
	}
	if peek, _ := e.Peek(ctx, r); peek.Holds() || peek.Leases() != nil {
		t.Fatalf("a peek holds leases %+v", peek.Leases())
	}
}

// TestReleaseLeasesRefusesForgeries: a lease that does not name a
// concurrency key of this Engine, or does not compile, is refused before
// any store call, naming what is wrong.
func TestReleaseLeasesRefusesForgeries(t *testing.T) {
	e := newMemEngine(t, mustParse(t, leaseConfig), frozen(scenarioT0))
	ctx := context.Background()
	good, _ := e.Decide(ctx, req("d", ent("job", "x")))
	rate, _ := e.Decide(ctx, req("d", ent("user", "u")))
	if !good.Holds() || rate.Holds() {
		t.Fatalf("Holds: concurrency %v, rate %v; want true, false", good.Holds(), rate.Holds())
	}
	base := good.Leases()[0]
	rateKey := strings.Replace(base.Key, "job=x#concurrency:0", "user=u#fixed_window:60000000", 1)
	if rateKey == base.Key {
		t.Fatalf("the test's rate key was not derived from %q", base.Key)
	}
	for _, tc := range []struct {
		name string
		edit func(*Lease)
		want string
	}{
		{"id 0", func(l *Lease) { l.ID = 0 }, "anonymous lease"},
		{"cost 0", func(l *Lease) { l.Cost = 0 }, "cost 0"},
		{"outside the prefix", func(l *Lease) { l.Key = "other:" + l.Key }, "outside the key prefix"},
		{"no fingerprint", func(l *Lease) { l.Key = DefaultKeyPrefix + "d|job=x" }, "no limit fingerprint"},
		{"a rate limit's key", func(l *Lease) { l.Key = rateKey }, "not a concurrency limit's key"},
		{"limit 0", func(l *Lease) { l.Limit = 0 }, "limit: must be > 0"},
		{"negative TTL", func(l *Lease) { l.TTL = -time.Second }, "lease_ttl: must not be negative"},
	} {
		l := base
		tc.edit(&l)
		err := e.ReleaseLeases(ctx, []Lease{base, l})
		if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "lease 1: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: ReleaseLeases = %v, want ErrBadRequest for lease 1 saying %q", tc.name, err, tc.want)
		}
	}
	// Nothing was released by the refused calls (lease 0 was good).
	if got, _ := e.Decide(ctx, req("d", ent("job", "x"))); got.Code != CodeOK {
		t.Fatalf("second slot: %s, want OK", got.Code)
	}
	if got, _ := e.Decide(ctx, req("d", ent("job", "x"))); got.Code != CodeOverLimit {
		t.Fatalf("third slot: %s, want OVER_LIMIT: a refused release freed a slot", got.Code)
	}
}

// TestRenew: a response's slots renewed at 27 s (0.9 of the 30 s TTL) are
// still held at 45 s and free at 57 s; renewing after that, or after a
// release, revives nothing. RenewLeases does the same from the Leases and
// refuses what ReleaseLeases refuses.
func TestRenew(t *testing.T) {
	var now atomic.Int64
	now.Store(scenarioT0.UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	at := func(d time.Duration) { now.Store(scenarioT0.Add(d).UnixNano()) }
	e := newMemEngine(t, mustParse(t, leaseConfig), clock)
	ctx := context.Background()
	r := req("d", ent("job", "export"))
	first, _ := e.Decide(ctx, r)
	second, _ := e.Decide(ctx, r)
	if first.Code != CodeOK || second.Code != CodeOK {
		t.Fatalf("codes %s %s, want OK OK", first.Code, second.Code)
	}
	if got := first.LeaseTTL(); got != 30*time.Second {
		t.Fatalf("LeaseTTL() = %v, want 30s", got)
	}
	at(27 * time.Second)
	if err := e.Renew(ctx, first); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if err := e.RenewLeases(ctx, second.Leases()); err != nil {
		t.Fatalf("RenewLeases: %v", err)
	}
	at(45 * time.Second)
	if got, _ := e.Peek(ctx, r); got.Code != CodeOverLimit {
		t.Fatalf("at 45s, after renewals at 27s: %s, want OVER_LIMIT (both slots held)", got.Code)
	}
	if err := e.Release(ctx, second); err != nil {
		t.Fatal(err)
	}
	at(57 * time.Second)
	if err := e.Renew(ctx, first); err != nil { // expired at 57s
		t.Fatalf("Renew of an expired lease: %v", err)
	}
	if err := e.Renew(ctx, second); err != nil { // released
		t.Fatalf("Renew of a released lease: %v", err)
	}
	if got, _ := e.Peek(ctx, req("d", ent("job", "export"))); got.Code != CodeOK || got.Statuses[0].Limits[0].Decision.Remaining != 1 {
		t.Fatalf("at 57s: %+v, want both slots free", got)
	}
	var none Response
	if err := e.Renew(ctx, none); err != nil || none.LeaseTTL() != 0 {
		t.Fatalf("Renew of a response that holds nothing: %v, LeaseTTL %v", err, none.LeaseTTL())
	}
	bad := first.Leases()
	bad[0].ID = 0
	if err := e.RenewLeases(ctx, bad); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("RenewLeases of lease id 0 = %v, want ErrBadRequest", err)
	}
}

// TestRenewLeasesCapsTheTTL: a lease's TTL comes from the client (the
// server's token), so a renewal never extends a slot by more than the
// longest lease TTL of the key's domain: a forged TTL of a century renews
// by the rule's 30 s, and the slot still frees when that has passed.
func TestRenewLeasesCapsTheTTL(t *testing.T) {
	now := scenarioT0
	clock := func() time.Time { return now }
	e := newMemEngine(t, mustParse(t, leaseConfig+`---
domain: other
descriptors:
  - key: batch
    rate_limit: {algorithm: concurrency, requests_per_unit: 1, lease_ttl: 24h}
`), clock)
	ctx := context.Background()
	r := req("d", ent("job", "export"))
	first, _ := e.Decide(ctx, r)
	second, _ := e.Decide(ctx, r)
	if first.Code != CodeOK || second.Code != CodeOK {
		t.Fatalf("codes %s %s, want OK OK", first.Code, second.Code)
	}
	forged := first.Leases()
	forged[0].TTL = 100 * 365 * 24 * time.Hour
	now = now.Add(20 * time.Second)
	if err := e.RenewLeases(ctx, forged); err != nil {
		t.Fatalf("renew: %v", err)
	}
	// At 45 s the second lease has expired and the renewed one holds
	// until 50 s (20 s + 30 s), not for a century nor for the other
	// domain's 24 h.
	now = now.Add(25 * time.Second)
	if got, _ := e.Decide(ctx, r); got.Code != CodeOK {
		t.Fatalf("at 45 s: %s, want OK (one slot free)", got.Code)
	}
	if got, _ := e.Decide(ctx, r); got.Code != CodeOverLimit {
		t.Fatalf("at 45 s, again: %s, want OVER_LIMIT", got.Code)
	}
	now = now.Add(5*time.Second + time.Microsecond)
	if got, _ := e.Decide(ctx, r); got.Code != CodeOK {
		t.Fatalf("at 50 s: %s, want OK: the renewed slot should have expired", got.Code)
	}
}
