package policy

import (
	"context"
	"fmt"
	"testing"
	"time"
)

const reqLimitHierarchy = `
domain: d
hierarchy: true
rate_limit: {name: global, unit: minute, requests_per_unit: 3}
descriptors:
  - key: tenant
    rate_limit: {name: tenant, unit: minute, requests_per_unit: 3}
    descriptors:
      - key: user
        rate_limit: {name: user, unit: minute, requests_per_unit: 10}
      - key: dry
        shadow_mode: true
        rate_limit: {name: dry, unit: minute, requests_per_unit: 10}
`

// A descriptor's own limit (Envoy's RateLimitDescriptor.limit) replaces
// its rule's limit and nothing else: the tenant and global limits above it
// are still taken, all or nothing; a shadow rule's request-level limit is
// enforced, as envoyproxy/ratelimit builds it. Before, the request's limit
// stood alone, and a request carrying 100 per minute went through limits
// of 3.
func TestRequestLimitKeepsTheHierarchy(t *testing.T) {
	for _, ss := range scenarioStores {
		t.Run(ss.name, func(t *testing.T) {
			clock := frozen(scenarioT0.Add(10 * time.Second))
			st, opts := ss.open(t, clock)
			e, err := NewEngine(mustParse(t, reqLimitHierarchy), st, append(opts, WithClock(clock))...)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			r := Request{Domain: "d", Descriptors: []Descriptor{{Entries: ent("tenant", "a", "user", "u"),
				Limit: &LimitOverride{RequestsPerUnit: 100, Unit: time.Minute}}}}
			for i, want := range []Code{CodeOK, CodeOK, CodeOK, CodeOverLimit} {
				resp, err := e.Decide(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				s := resp.Statuses[0]
				if resp.Code != want {
					t.Fatalf("request %d: %s (%s), want %s", i+1, resp.Code, limitsOf(s), want)
				}
				if got, want := limitsOf(s), fmt.Sprintf("tenant_a.user_u=%d tenant=%d global=%d", 100-min(i+1, 3), 3-min(i+1, 3), 3-min(i+1, 3)); got != want {
					t.Fatalf("request %d: limits %s, want %s", i+1, got, want)
				}
				if s.Rule != "tenant_a.user_u" || s.Limits[0].lim == nil || s.Limits[0].lim.Params().Limit != 100 || s.Limits[0].cname != "" {
					t.Fatalf("request %d: rule %q, own limit %v named %q: want the request's limit of 100, unnamed, named after its path", i+1, s.Rule, s.Limits[0].lim, s.Limits[0].cname)
				}
				// The tenant's 3, tighter than the request's 100, is the
				// limit in force: current_limit and remaining agree.
				if s.RuleLimit == nil || s.RuleLimit.Params().Limit != 3 || s.ConfiguredName != "tenant" || s.Decision.Remaining != 3-int64(min(i+1, 3)) {
					t.Fatalf("request %d: rule limit %v named %q, remaining %d: want the tenant's 3", i+1, s.RuleLimit, s.ConfiguredName, s.Decision.Remaining)
				}
			}
			// The configured rule's own counter was not touched; the
			// tenant's and the global one were.
			if resp, _ := e.Peek(ctx, req("d", ent("tenant", "a", "user", "u"))); limitsOf(resp.Statuses[0]) != "user=9 tenant=0 global=0" {
				t.Fatalf("configured rule after the requests: %s, want user=9 tenant=0 global=0 (peeked at cost 1)", limitsOf(resp.Statuses[0]))
			}

			// A shadow rule's request-level limit is enforced (its
			// shadow_mode does not carry over, as upstream's does not).
			st2, opts2 := ss.open(t, clock)
			e, err = NewEngine(mustParse(t, reqLimitHierarchy), st2, append(opts2, WithClock(clock))...)
			if err != nil {
				t.Fatal(err)
			}
			r.Descriptors[0].Entries = ent("tenant", "b", "dry", "x")
			r.Descriptors[0].Limit = &LimitOverride{RequestsPerUnit: 1, Unit: time.Minute}
			for i, want := range []string{"OK", "OVER_LIMIT strategy=reject", "OVER_LIMIT strategy=reject"} {
				resp, err := e.Decide(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				got := resp.Code.String()
				if resp.Strategy != "" {
					got += " strategy=" + resp.Strategy
				}
				if got != want || resp.Statuses[0].Shadow {
					t.Fatalf("shadow rule's request %d: %s, shadow %v (%s), want %s, enforced", i+1, got, resp.Statuses[0].Shadow, limitsOf(resp.Statuses[0]), want)
				}
			}
		})
	}
}

// limitsOf renders a status's limits as "name=remaining ...".
func limitsOf(s Status) string {
	out := ""
	for i, l := range s.Limits {
		if i > 0 {
			out += " "
		}
		out += fmt.Sprintf("%s=%d", l.Name, l.Decision.Remaining)
	}
	return out
}
