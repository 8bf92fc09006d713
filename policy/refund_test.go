package policy

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// A request a shaper admitted with a delay, whose client gives up during
// the hold, gives its unit back: the next request is delayed as if it had
// never come (0.9 s at 100 ms, not 1.9 s). Before, DecideWait answered its
// error and kept the unit charged.
func TestDecideWaitCancelledHoldRefunds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newMemEngine(t, mustParse(t, `
domain: w
descriptors:
  - key: k
    rate_limit: {algorithm: shaper, unit: second, requests_per_unit: 1, burst: 3}
`), nil)
		r := req("w", ent("k", "x"))
		if first, err := e.Decide(context.Background(), r); err != nil || first.Code != CodeOK || first.Delay != 0 {
			t.Fatalf("first: %v %v delay %v, want OK at once", first.Code, err, first.Delay)
		}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		resp, err := e.DecideWait(ctx, r)
		if !errors.Is(err, context.Canceled) || resp.Code == CodeOK {
			t.Fatalf("cancelled during its hold: %v, %v; want context.Canceled, not OK", resp.Code, err)
		}
		next, err := e.Peek(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		if next.Code != CodeOK || next.Delay != 900*time.Millisecond {
			t.Fatalf("next request: %v delay %v, want OK delayed 900ms (the cancelled request's unit given back)", next.Code, next.Delay)
		}
	})
}

// Refund gives back what a decision took, on every store: the limits a
// borrowed admission took (its ceil, its parent and the parent's lend pool)
// and not the rate it borrowed instead of, which it never charged; twice
// the admissions, twice the refunds, and each limit is back where it was.
func TestRefund(t *testing.T) {
	for _, ss := range scenarioStores {
		t.Run(ss.name, func(t *testing.T) {
			e := lendingEngine(t, ss, "requests_per_unit: 2, ceil: 5")
			ctx := context.Background()
			r := req("d", ent("tenant", "a", "user", "u"))
			r.Hits = 2
			if resp, err := e.Decide(ctx, r); err != nil || resp.Code != CodeOK || resp.Statuses[0].Borrowed {
				t.Fatalf("first: %v %v, want OK on the rate", resp.Code, err)
			}
			r.Hits = 1
			before, err := e.Peek(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			var took []Response
			for range 2 {
				resp, err := e.Decide(ctx, r)
				if err != nil || resp.Code != CodeOK || !resp.Statuses[0].Borrowed {
					t.Fatalf("%v %v borrowed %v, want OK borrowed", resp.Code, err, resp.Statuses[0].Borrowed)
				}
				if got := len(resp.charged); got != 3 {
					t.Fatalf("charged %d store requests (%+v), want 3: ceil, tenant, lend pool", got, resp.charged)
				}
				took = append(took, resp)
			}
			for _, resp := range took {
				if err := e.Refund(ctx, resp); err != nil {
					t.Fatal(err)
				}
			}
			after, err := e.Peek(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := limitsOf(after.Statuses[0]), limitsOf(before.Statuses[0]); got != want {
				t.Fatalf("after the refunds: %s, want %s as before the admissions", got, want)
			}
			// Nothing to refund for a refusal.
			r.Hits = 10
			if resp, err := e.Decide(ctx, r); err != nil || resp.Code != CodeOverLimit || len(resp.charged) != 0 {
				t.Fatalf("refusal: %v %v, charged %d", resp.Code, err, len(resp.charged))
			}
		})
	}
}

// lendingEngine is an Engine on ss's store, on a clock frozen 20 s into
// scenarioT0's minute, over a tenant of 100 per minute lending half of it
// to its users, whose rate_limit is {name: user, unit: minute, user}.
func lendingEngine(t *testing.T, ss scenarioStore, user string) *Engine {
	t.Helper()
	st, opts := ss.open(t, frozen(scenarioT0.Add(20*time.Second)))
	e, err := NewEngine(mustParse(t, `
domain: d
hierarchy: true
descriptors:
  - key: tenant
    rate_limit: {name: tenant, unit: minute, requests_per_unit: 100, lendable: 0.5}
    descriptors:
      - key: user
        rate_limit: {name: user, unit: minute, `+user+`}
`), st, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
