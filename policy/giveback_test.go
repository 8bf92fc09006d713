package policy

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
)

// errInjected is failingTake's error for the Take it fails.
var errInjected = errors.New("injected store error")

// failingTake is the memory store with every Take on a key containing
// fail refused with errInjected (nothing taken); every other call, and
// every state the test reads, is the memory store's own. takes counts the
// Takes it passed on.
type failingTake struct {
	*memory.Store
	fail  string
	takes int
}

func (s *failingTake) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	for _, q := range reqs {
		if strings.Contains(q.Key, s.fail) {
			return store.Result{}, errInjected
		}
	}
	s.takes++
	return s.Store.Take(ctx, reqs, out)
}

const giveBackConfig = `
domain: d
descriptors:
  - key: rate
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: slot
    rate_limit: {algorithm: concurrency, requests_per_unit: 1, lease_ttl: 1h}
  - key: dryrate
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: dryslot
    shadow_mode: true
    rate_limit: {algorithm: concurrency, requests_per_unit: 1, lease_ttl: 1h}
  - key: broken
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 7}
`

// A decision whose enforced Take (a rate and a concurrency slot) and first
// shadow Takes (another rate, another slot) went through, and whose last
// shadow Take then fails on the store, stands: a shadow rule is a dry run,
// and its store error neither fails nor undoes the request (under
// --on-store-error unavailable it failed it, and a caller failing closed
// refused traffic for a dry run). The failed shadow limit is left out of
// its status; what the request took stays taken, its slots held until
// Release.
func TestFailedShadowTakeLeavesTheDecision(t *testing.T) {
	mem, err := memory.New(memory.WithClock(frozen(scenarioT0.Add(10*time.Second))), memory.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	st := &failingTake{Store: mem, fail: "broken="}
	e, err := NewEngine(mustParse(t, giveBackConfig), st)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := req("d", ent("rate", "a"), ent("slot", "a"), ent("dryrate", "a"), ent("dryslot", "a"), ent("broken", "a"))
	resp, err := e.Decide(ctx, r)
	if err != nil || resp.Code != CodeOK {
		t.Fatalf("Decide: %v %v, want OK", resp.Code, err)
	}
	if st.takes != 3 {
		t.Fatalf("%d Takes went through, want 3 (enforced, dryrate, dryslot)", st.takes)
	}
	for i, want := range []int64{2, 0, 4, 0} {
		if s := resp.Statuses[i]; !s.Decision.Allowed || s.Decision.Remaining != want || len(s.Limits) != 1 {
			t.Errorf("%s: allowed %v remaining %d limits %d, want allowed, %d, one limit",
				r.Descriptors[i].Entries[0].Key, s.Decision.Allowed, s.Decision.Remaining, len(s.Limits), want)
		}
	}
	if s := resp.Statuses[4]; s.Code != CodeOK || len(s.Limits) != 0 {
		t.Errorf("the failed shadow limit: code %v limits %+v, want OK and left out", s.Code, s.Limits)
	}
	// What the decision took stays taken: the slot is held.
	peek, err := e.Peek(ctx, req("d", ent("rate", "a"), ent("slot", "a")))
	if err != nil {
		t.Fatal(err)
	}
	if peek.Statuses[0].Decision.Remaining != 1 || peek.Statuses[1].Decision.Allowed {
		t.Errorf("after the decision: rate remaining %d (want 1), slot allowed %v (want held)",
			peek.Statuses[0].Decision.Remaining, peek.Statuses[1].Decision.Allowed)
	}
	if err := e.Release(ctx, resp); err != nil {
		t.Fatal(err)
	}
}

// failingPeek is the memory store with every Peek failing with errInjected.
type failingPeek struct{ *memory.Store }

func (s failingPeek) Peek(context.Context, []store.Request, []algo.Decision) error {
	return errInjected
}

// A refusal — by a deny rule, or by an enforced limit beside a shadow one —
// stands when the store fails the look the Engine then takes at the other
// keys for their statuses: failing the request instead would let a caller
// that admits on errors (Envoy's failure_mode_deny: false, a middleware
// WithFailOpen) pass what was refused.
func TestRefusalStandsWhenTheStatusPeekFails(t *testing.T) {
	mem, err := memory.New(memory.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	e, err := NewEngine(mustParse(t, `
domain: d
descriptors:
  - key: blocked
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: rate
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: dry
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 5}
`), failingPeek{mem})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		r    Request
	}{
		{"deny rule", req("d", ent("blocked", "x"), ent("rate", "b"))},
		{"refused beside a shadow rule", req("d", ent("rate", "a"), ent("dry", "a"))},
	} {
		if tc.name == "refused beside a shadow rule" {
			if resp, err := e.Decide(ctx, req("d", ent("rate", "a"))); err != nil || resp.Code != CodeOK {
				t.Fatalf("spending rate a: %v %v", resp.Code, err)
			}
		}
		resp, err := e.Decide(ctx, tc.r)
		if err != nil || resp.Code != CodeOverLimit {
			t.Errorf("%s: %v %v, want OVER_LIMIT", tc.name, resp.Code, err)
		}
	}
}
