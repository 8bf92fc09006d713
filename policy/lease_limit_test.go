package policy

import (
	"context"
	"testing"

	"github.com/floodgate/floodgate/algo"
)

// TestLeaseLimitIsTheRules: leases released or renewed through
// ReleaseLeases and RenewLeases (the server's API) reuse the rule's
// compiled limit while the rule is in force, so stores that cache per
// *algo.Limit (store/redis) see one limit, not one per lease; a lease
// whose rule a reload removed still gets a limit of its own and releases.
func TestLeaseLimitIsTheRules(t *testing.T) {
	e := newMemEngine(t, mustParse(t, leaseConfig), frozen(scenarioT0))
	ctx := context.Background()
	var rule *algo.Limit
	snap := e.snap.Load()
	for _, r := range snap.cfg.rules {
		if l := snap.limits[r.index].rate; l != nil && l.Algorithm() == algo.Concurrency {
			rule = l
		}
	}
	if rule == nil {
		t.Fatal("no concurrency rule in leaseConfig")
	}
	r := req("d", ent("job", "export"))
	var last []Lease
	for i := range 100 {
		resp, err := e.Decide(ctx, r)
		if err != nil || resp.Code != CodeOK {
			t.Fatalf("decision %d: %v %v, want OK", i, resp.Code, err)
		}
		ls := resp.Leases()
		reqs, err := e.leaseRequests(ls)
		if err != nil {
			t.Fatalf("lease %d: %v", i, err)
		}
		if reqs[0].Limit != rule {
			t.Fatalf("lease %d: limit %p (%v), want the rule's %p (%v)", i, reqs[0].Limit, reqs[0].Limit, rule, rule)
		}
		if err := e.RenewLeases(ctx, ls); err != nil {
			t.Fatalf("renew %d: %v", i, err)
		}
		if err := e.ReleaseLeases(ctx, ls); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
		last = ls
	}
	held, _ := e.Decide(ctx, r)
	if held.Code != CodeOK {
		t.Fatalf("after the releases: %s, want OK", held.Code)
	}
	last = held.Leases()

	// The reload removes the rule: the lease's limit is compiled for it.
	if err := e.SetConfig(mustParse(t, "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")); err != nil {
		t.Fatal(err)
	}
	reqs, err := e.leaseRequests(last)
	if err != nil {
		t.Fatalf("lease of a removed rule: %v", err)
	}
	if got := reqs[0].Limit; got == rule || got.Algorithm() != algo.Concurrency || got.Params().Limit != 2 || got.Window(0) != last[0].TTL {
		t.Fatalf("lease of a removed rule: limit %v, want a new concurrency 2 with TTL %v", got, last[0].TTL)
	}
	if err := e.ReleaseLeases(ctx, last); err != nil {
		t.Fatalf("release of a removed rule's lease: %v", err)
	}
}
