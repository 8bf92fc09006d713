package policy

import (
	"context"
	"slices"
	"testing"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// doubled is a store on which every Take asks each of its requests twice,
// so that each key of the Take is met by two requests: a Take the store
// may refuse as a whole while each request alone would pass (as
// storetest.Reference does when two requests on one key fit one at a time
// but not together). Peek and the rest go to the store as they are.
type doubled struct{ store.Store }

func (d doubled) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	two := append(slices.Clone(reqs), reqs...)
	o := make([]algo.Decision, len(two))
	res, err := d.Store.Take(ctx, two, o)
	copy(out, o[len(reqs):]) // the second asking: the state after both
	return res, err
}

// A Take the store refused charged nothing, even when every request of it
// passed alone: the Engine answers OVER_LIMIT, on the first Take and on
// borrowing's second one, never OK for a request nobody charged. Before,
// the code came from the per-request decisions alone, and such a request
// was admitted free.
func TestStoreRefusalIsOverLimit(t *testing.T) {
	cases := []struct {
		name, yaml string
		entries    []Entry
		want       []Code // the doubled store charges each key twice per request
	}{{
		// global 3: 2 taken, then 2 more do not fit though 1 does.
		name: "hierarchy",
		yaml: `
domain: d
hierarchy: true
rate_limit: {name: global, unit: minute, requests_per_unit: 3}
descriptors:
  - key: tenant
    rate_limit: {name: tenant, unit: minute, requests_per_unit: 100}
`,
		entries: ent("tenant", "a"),
		want:    []Code{CodeOK, CodeOverLimit, CodeOverLimit},
	}, {
		// user's rate 2 is spent by the first request; the second
		// borrows (ceil 5: 2 more, 1 left); the third's second Take, on
		// the ceil, the tenant and its lend pool, is refused as a whole.
		name: "borrowing",
		yaml: `
domain: d
hierarchy: true
descriptors:
  - key: tenant
    rate_limit: {name: tenant, unit: minute, requests_per_unit: 100, lendable: 0.5}
    descriptors:
      - key: user
        rate_limit: {name: user, unit: minute, requests_per_unit: 2, ceil: 5}
`,
		entries: ent("tenant", "a", "user", "u"),
		want:    []Code{CodeOK, CodeOK, CodeOverLimit},
	}}
	for _, ss := range scenarioStores {
		for _, c := range cases {
			t.Run(ss.name+"/"+c.name, func(t *testing.T) {
				clock := frozen(scenarioT0.Add(30e9))
				st, opts := ss.open(t, clock)
				e, err := NewEngine(mustParse(t, c.yaml), doubled{st}, opts...)
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				r := req("d", c.entries)
				before, err := e.Peek(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				for i, want := range c.want {
					resp, err := e.Decide(ctx, r)
					if err != nil {
						t.Fatal(err)
					}
					if resp.Code != want {
						t.Fatalf("request %d: %s (%+v), want %s", i, resp.Code, resp.Statuses[0].Limits, want)
					}
					if want == CodeOK {
						before, _ = e.Peek(ctx, r)
						continue
					}
					if s := resp.Statuses[0]; s.Code != CodeOverLimit || s.Borrowed || resp.Strategy != StrategyReject || resp.Holds() {
						t.Fatalf("request %d: status %+v, strategy %q: want OVER_LIMIT, not borrowed, rejected", i, s, resp.Strategy)
					}
					// Nothing was charged: every limit stands where it was.
					after, _ := e.Peek(ctx, r)
					for j, l := range after.Statuses[0].Limits {
						if b := before.Statuses[0].Limits[j]; l.Decision.Remaining != b.Decision.Remaining {
							t.Fatalf("request %d: %s remaining %d after the refusal, was %d", i, l.Name, l.Decision.Remaining, b.Decision.Remaining)
						}
					}
				}
			})
		}
	}
}
