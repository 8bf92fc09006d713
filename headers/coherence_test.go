package headers

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memory"
)

const coherenceConfig = `
domain: srv
hierarchy: true
rate_limit: {name: global, unit: minute, requests_per_unit: 50}
descriptors:
  - key: tenant
    rate_limit: {name: tenant, unit: minute, requests_per_unit: 10, lendable: 0.5}
    descriptors:
      - key: user
        rate_limit: {name: user, unit: minute, requests_per_unit: 3, ceil: 6}
  - key: sh
    shadow_mode: true
    rate_limit: {name: shadowed, unit: minute, requests_per_unit: 2}
`

// A status tells of one limit: the /v1 body's limit and remaining
// (Status.Decision), Envoy's current_limit (Status.RuleLimit) and
// limit_remaining (Decision.Remaining), and the single-valued header
// fields (Writer) agree. A borrowed admission reports the ceil that
// admitted it, not its rate, which refused (the fields read the rate, 3 and
// 0, while the body read the ceil, 6 and 2, and current_limit the rate); a
// shadow rule's status reports its own limit (its remaining came from the
// global limit, beside its own quota), and the fields the enforced one.
func TestStatusAndFieldsTellOfOneLimit(t *testing.T) {
	now := func() time.Time { return time.Date(2026, 3, 1, 12, 0, 10, 0, time.UTC) }
	st, err := memory.New(memory.WithClock(now))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg, err := policy.Parse("srv.yaml", []byte(coherenceConfig))
	if err != nil {
		t.Fatal(err)
	}
	e, err := policy.NewEngine(cfg, st, policy.WithClock(now))
	if err != nil {
		t.Fatal(err)
	}
	w := NewWriter(Options{})
	decide := func(entries ...string) (policy.Status, http.Header) {
		t.Helper()
		var es []policy.Entry
		for i := 0; i < len(entries); i += 2 {
			es = append(es, policy.Entry{Key: entries[i], Value: entries[i+1]})
		}
		resp, err := e.Decide(context.Background(), policy.Request{Domain: "srv", Descriptors: []policy.Descriptor{{Entries: es}}})
		if err != nil || resp.Code != policy.CodeOK {
			t.Fatalf("%v %v, want OK", resp.Code, err)
		}
		h := http.Header{}
		w.WriteStatuses(h, resp.Statuses)
		return resp.Statuses[0], h
	}
	fields := func(h http.Header) string {
		return h.Get("X-RateLimit-Limit") + "/" + h.Get("X-RateLimit-Remaining")
	}
	// current_limit's quota and the status's: a fixed window's capacity is
	// its requests per unit.
	coherent := func(what string, s policy.Status, limit, remaining int64) {
		t.Helper()
		if s.Decision.Limit != limit || s.Decision.Remaining != remaining {
			t.Errorf("%s: status reports %d/%d, want %d/%d", what, s.Decision.Limit, s.Decision.Remaining, limit, remaining)
		}
		if s.RuleLimit == nil || s.RuleLimit.Params().Limit != s.Decision.Limit {
			t.Errorf("%s: current_limit %v beside a status of limit %d", what, s.RuleLimit, s.Decision.Limit)
		}
	}

	for range 3 {
		decide("tenant", "a", "user", "u")
	}
	s, h := decide("tenant", "a", "user", "u")
	if !s.Borrowed {
		t.Fatalf("4th request: not borrowed (%+v)", s.Limits)
	}
	coherent("borrowed", s, 6, 2)
	if got := fields(h); got != "6/2" {
		t.Errorf("borrowed: X-RateLimit %s, want the ceil's 6/2 as the status", got)
	}
	if got, want := h.Get("RateLimit"), `"user";r=0;t=50, "tenant/lend";r=4;t=50, "user/ceil";r=2;t=50, "tenant";r=6;t=50, "global";r=46;t=50`; got != want {
		t.Errorf("borrowed: RateLimit %s, want every limit: %s", got, want)
	}
	if l := s.Limits[0]; !l.Borrowed || l.Name != "user" {
		t.Errorf("borrowed: first limit %+v, want the user rate marked Borrowed", l)
	}

	for i, want := range []int64{1, 0, 0} {
		s, h := decide("sh", "x")
		coherent("shadow request "+strconv.Itoa(i+1), s, 2, want)
		if s.Limits[0].Decision.Remaining != s.Decision.Remaining || s.Window != s.Limits[0].Window {
			t.Errorf("shadow request %d: status %+v, own limit %+v", i+1, s.Decision, s.Limits[0])
		}
		if got, want := fields(h), "50/"+strconv.Itoa(45-i); got != want {
			t.Errorf("shadow request %d: X-RateLimit %s, want the enforced global's %s", i+1, got, want)
		}
	}
}

// Among refusing policies the fields report the one refusing longest, as
// Status.Decision does (it was the one with the fewest remaining, whose
// reset could come before Retry-After).
func TestTightestRefusalIsTheLongest(t *testing.T) {
	ps := []Policy{
		{Name: "per-second", Quota: 10, Remaining: 0, RetryAfter: time.Second},
		{Name: "per-hour", Quota: 1000, Remaining: 3, RetryAfter: time.Hour},
		{Name: "borrowed-rate", Quota: 5, Remaining: 0, RetryAfter: 2 * time.Hour, Borrowed: true, Allowed: true},
	}
	if tight, ok := Tightest(ps); !ok || tight.Name != "per-hour" {
		t.Fatalf("Tightest = %+v, want per-hour", tight)
	}
	if wait, ok := RetryAfterOf(ps); !ok || wait != time.Hour {
		t.Fatalf("RetryAfterOf = %v, want 1h", wait)
	}
}
