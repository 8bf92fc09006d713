package headers

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memory"
)

// undecidedStatuses returns the statuses of a request that a deny rule
// (ban) refuses while the store, closed, fails the look the refusal takes
// at the other keys: the user and shadowed rules' statuses are undecided.
func undecidedStatuses(t *testing.T) []policy.Status {
	t.Helper()
	now := func() time.Time { return time.Date(2026, 3, 1, 12, 0, 10, 0, time.UTC) }
	st, err := memory.New(memory.WithClock(now), memory.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := policy.Parse("u.yaml", []byte(`
domain: u
descriptors:
  - key: ban
    rate_limit: {name: ban, unit: minute, requests_per_unit: 0}
  - key: user
    rate_limit: {name: user, unit: minute, requests_per_unit: 10}
  - key: sh
    shadow_mode: true
    rate_limit: {name: shadowed, unit: minute, requests_per_unit: 5}
`))
	if err != nil {
		t.Fatal(err)
	}
	e, err := policy.NewEngine(cfg, st, policy.WithClock(now))
	if err != nil {
		t.Fatal(err)
	}
	st.Close() // every look now fails: store.ErrClosed
	d := func(k, v string) policy.Descriptor {
		return policy.Descriptor{Entries: []policy.Entry{{Key: k, Value: v}}}
	}
	resp, err := e.Decide(context.Background(), policy.Request{Domain: "u", Descriptors: []policy.Descriptor{d("ban", "x"), d("user", "y"), d("sh", "z")}})
	if err != nil || resp.Code != policy.CodeOverLimit {
		t.Fatalf("Decide: %v, %v; want OVER_LIMIT (the deny rule's)", resp.Code, err)
	}
	for _, s := range resp.Statuses[1:] {
		if !s.Matched || len(s.Limits) != 0 || s.Decision.Limit != 0 {
			t.Fatalf("status of %s: %+v; want undecided (matched, no limits, limit 0)", s.Rule, s)
		}
	}
	return resp.Statuses
}

// TestUndecidedStatusHasNoFields: a status the Engine could not decide
// has no RateLimit-Policy or RateLimit member (it had stated q=0 and r=0,
// a quota the rule does not have), and the fields are those of the
// refusing deny rule alone, as if the undecided statuses were not there;
// its shadow status too, once Allowed is set on it (as server's visible
// does for a shadow status).
func TestUndecidedStatusHasNoFields(t *testing.T) {
	sts := undecidedStatuses(t)
	if ps := FromStatuses(sts); len(ps) != 1 || ps[0].Name != "ban" {
		t.Errorf("FromStatuses = %+v; want the ban rule's policy alone", ps)
	}
	shown := append([]policy.Status(nil), sts...)
	shown[2].Decision.Allowed = true
	w := NewWriter(Options{})
	for _, st := range [][]policy.Status{sts, shown} {
		got, want := http.Header{}, http.Header{}
		w.WriteStatuses(got, st)
		w.WriteStatuses(want, st[:1])
		if !reflect.DeepEqual(got, want) {
			t.Errorf("WriteStatuses = %v; want the ban rule's fields alone, %v", got, want)
		}
		var listed []string
		w.StatusFields(st, func(name, value string) { listed = append(listed, name+": "+value) })
		for _, f := range listed {
			if strings.Contains(f, "user") || strings.Contains(f, "shadowed") {
				t.Errorf("StatusFields: %q names an undecided rule", f)
			}
		}
		fields := http.Header{}
		Write(fields, FromStatuses(st), Options{})
		if !reflect.DeepEqual(fields, want) {
			t.Errorf("Write(FromStatuses) = %v; want %v", fields, want)
		}
	}
}
