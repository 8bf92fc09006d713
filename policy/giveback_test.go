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
// fail refused with errInjected (nothing taken), after calling cancel
// when it is set (the caller gave up as the store failed); every other
// call, and every state the test reads, is the memory store's own. takes
// counts the Takes it passed on.
type failingTake struct {
	*memory.Store
	fail   string
	cancel context.CancelFunc
	takes  int
}

func (s *failingTake) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	for _, q := range reqs {
		if strings.Contains(q.Key, s.fail) {
			if s.cancel != nil {
				s.cancel()
			}
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
// shadow Take then fails on the store, answers the error and leaves
// nothing charged: its caller has no Response to refund, so the Engine
// gives back the units and releases the slots itself (giveBackTaken).
// Without it, the enforced units stay spent until their window passes and
// the slots stay held until their lease TTL. A caller whose context ends
// as the store fails gets the same: the giving back does not run under its
// cancelled context.
func TestFailedShadowTakeGivesBackWhatWasTaken(t *testing.T) {
	for _, cancelled := range []bool{false, true} {
		name := "store error"
		if cancelled {
			name = "caller cancelled"
		}
		t.Run(name, func(t *testing.T) { testFailedShadowTake(t, cancelled) })
	}
}

func testFailedShadowTake(t *testing.T, cancelled bool) {
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
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if cancelled {
		st.cancel = cancel
	}
	r := req("d", ent("rate", "a"), ent("slot", "a"), ent("dryrate", "a"), ent("dryslot", "a"), ent("broken", "a"))
	// Peek answers what Decide would: every limit untouched leaves its
	// size less this request's 1.
	want := []int64{2, 0, 4, 0, 6}
	remaining := func(when string) {
		t.Helper()
		resp, err := e.Peek(ctx, r)
		if err != nil {
			t.Fatalf("Peek %s: %v", when, err)
		}
		for i, s := range resp.Statuses {
			if !s.Matched || !s.Decision.Allowed || s.Decision.Remaining != want[i] {
				t.Errorf("%s: %s allowed %v remaining %d (matched %v), want allowed, %d",
					when, r.Descriptors[i].Entries[0].Key, s.Decision.Allowed, s.Decision.Remaining, s.Matched, want[i])
			}
		}
	}
	remaining("before")

	resp, err := e.Decide(dctx, r)
	if !errors.Is(err, errInjected) || (dctx.Err() != nil) != cancelled {
		t.Fatalf("Decide: %v %v, want the injected error", resp.Code, err)
	}
	if st.takes != 3 {
		t.Fatalf("%d Takes went through before the failing one, want 3 (enforced, dryrate, dryslot)", st.takes)
	}
	remaining("after the failed decision")

	// The slots are free on the store itself: each admits a holder again,
	// and the rate still admits its full 3.
	st.fail = "\x00" // no key fails from here on
	r = req("d", ent("rate", "a"), ent("slot", "a"), ent("dryslot", "a"))
	again, err := e.Decide(ctx, r)
	if err != nil || again.Code != CodeOK {
		t.Fatalf("after the failed decision: %v %v, want OK (its slot released)", again.Code, err)
	}
	for i, s := range again.Statuses {
		if !s.Decision.Allowed || s.Decision.Remaining != []int64{2, 0, 0}[i] {
			t.Errorf("after the failed decision, %s: allowed %v remaining %d, want allowed, %d",
				r.Descriptors[i].Entries[0].Key, s.Decision.Allowed, s.Decision.Remaining, []int64{2, 0, 0}[i])
		}
	}
}
