package policy

import (
	"context"
	"errors"
	"strings"
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
