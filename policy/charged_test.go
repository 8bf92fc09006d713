package policy

import (
	"context"
	"maps"
	"testing"
)

// LimitStatus.Charged says what the request took from each limit's key,
// so that a check (a descriptor of cost 0, Envoy's hits_addend 0) whose
// parent's last unit its own sibling took can be told from one whose
// parent was spent before the request: both read 0 remaining. Tenant acme
// has 2 an hour, each user 10. After one request, a request charging user
// a and checking user b leaves the tenant at 0: b's tenant limit says its
// request took 1 there, its own limit nothing; a check alone then finds
// the tenant spent with nothing charged, as do a refused request and a
// Peek. An identical check beside a charge reads the charge on every
// limit (one key, charged once).
func TestLimitStatusCharged(t *testing.T) {
	e := newMemEngine(t, mustParse(t, `domain: d
hierarchy: true
descriptors:
  - key: tenant
    rate_limit: {name: tenant, unit: hour, requests_per_unit: 2}
    descriptors:
      - key: user
        rate_limit: {name: user, unit: hour, requests_per_unit: 10}
`), nil)
	ctx := context.Background()
	user := func(tenant, u string) []Entry { return ent("tenant", tenant, "user", u) }
	check := func(r *Request, i int) { r.Descriptors[i].Hits, r.Descriptors[i].HitsSet = 0, true }
	type lim struct {
		name      string
		remaining int64
		charged   int64
	}
	expect := func(what string, resp Response, want ...[]lim) {
		t.Helper()
		for i, w := range want {
			ls := resp.Statuses[i].Limits
			if len(ls) != len(w) {
				t.Errorf("%s: descriptor %d: %d limits, want %d", what, i, len(ls), len(w))
				continue
			}
			for j, l := range ls {
				if got := (lim{l.Name, int64(l.Decision.Remaining), l.Charged}); got != w[j] {
					t.Errorf("%s: descriptor %d: limit %+v, want %+v", what, i, got, w[j])
				}
			}
		}
	}
	if resp, err := e.Decide(ctx, req("d", user("acme", "z"))); err != nil || resp.Code != CodeOK {
		t.Fatalf("first request: %v %v", resp.Code, err)
	}
	r := req("d", user("acme", "a"), user("acme", "b"))
	check(&r, 1)
	resp, err := e.Decide(ctx, r)
	if err != nil || resp.Code != CodeOK {
		t.Fatalf("a charged, b checked: %v %v, want OK", resp.Code, err)
	}
	expect("a charged, b checked", resp,
		[]lim{{"user", 9, 1}, {"tenant", 0, 1}},
		[]lim{{"user", 10, 0}, {"tenant", 0, 1}})

	r = req("d", user("acme", "c"))
	check(&r, 0)
	resp, err = e.Decide(ctx, r)
	if err != nil || resp.Code != CodeOK {
		t.Fatalf("c checked alone: %v %v, want OK", resp.Code, err)
	}
	expect("c checked alone", resp, []lim{{"user", 10, 0}, {"tenant", 0, 0}})

	resp, err = e.Decide(ctx, req("d", user("acme", "d")))
	if err != nil || resp.Code != CodeOverLimit {
		t.Fatalf("d charged on a spent tenant: %v %v, want OVER_LIMIT", resp.Code, err)
	}
	expect("d refused", resp, []lim{{"user", 10, 0}, {"tenant", 0, 0}})

	resp, err = e.Peek(ctx, req("d", user("beta", "e")))
	if err != nil || resp.Code != CodeOK {
		t.Fatalf("peek: %v %v", resp.Code, err)
	}
	expect("peek", resp, []lim{{"user", 9, 0}, {"tenant", 1, 0}})

	r = req("d", user("beta", "e"), user("beta", "e"))
	check(&r, 1)
	resp, err = e.Decide(ctx, r)
	if err != nil || resp.Code != CodeOK {
		t.Fatalf("e charged and checked: %v %v, want OK", resp.Code, err)
	}
	expect("e charged and checked", resp,
		[]lim{{"user", 9, 1}, {"tenant", 1, 1}},
		[]lim{{"user", 9, 1}, {"tenant", 1, 1}})
}

// A borrowing request's Charged: its refusing rate took nothing, its ceil,
// the parent's lend pool and the parent one unit each.
func TestLimitStatusChargedBorrowing(t *testing.T) {
	e := newMemEngine(t, mustParse(t, `domain: d
hierarchy: true
descriptors:
  - key: tenant
    rate_limit: {name: tenant, unit: hour, requests_per_unit: 10, lendable: 0.5}
    descriptors:
      - key: user
        rate_limit: {name: user, unit: hour, requests_per_unit: 1, ceil: 5}
`), nil)
	ctx := context.Background()
	r := req("d", ent("tenant", "acme", "user", "a"))
	for i, want := range []map[string]int64{
		{"user": 1, "user/ceil": 1, "tenant": 1},
		{"user": 0, "user/ceil": 1, "tenant/lend": 1, "tenant": 1},
	} {
		resp, err := e.Decide(ctx, r)
		if err != nil || resp.Code != CodeOK {
			t.Fatalf("request %d: %v %v, want OK", i+1, resp.Code, err)
		}
		got := map[string]int64{}
		for _, l := range resp.Statuses[0].Limits {
			got[l.Name] = l.Charged
		}
		if !maps.Equal(got, want) {
			t.Errorf("request %d: charged %v, want %v", i+1, got, want)
		}
	}
}
