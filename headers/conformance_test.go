package headers

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memory"
)

// conformanceConfig has a rule of every algorithm, a calendar month, a
// hierarchy and a shadow rule, each keyed by its own descriptor.
const conformanceConfig = `
domain: c
descriptors:
  - {key: fixed, rate_limit: {name: fixed, unit: minute, requests_per_unit: 3}}
  - {key: month, rate_limit: {name: month, unit: month, requests_per_unit: 3}}
  - {key: slog, rate_limit: {name: slog, algorithm: sliding_log, unit: minute, requests_per_unit: 3}}
  - {key: swin, rate_limit: {name: swin, algorithm: sliding_window, unit: minute, requests_per_unit: 3}}
  - {key: tb, rate_limit: {name: tb, algorithm: token_bucket, unit: second, requests_per_unit: 1000, burst: 3}}
  - {key: gcra, rate_limit: {name: gcra, algorithm: gcra, unit: minute, requests_per_unit: 3}}
  - {key: shaper, rate_limit: {name: shaper, algorithm: shaper, unit: minute, requests_per_unit: 3, queue_size: 1}}
  - {key: bursty, rate_limit: {name: bursty, algorithm: smooth_bursty, unit: second, requests_per_unit: 3}}
  - {key: warm, rate_limit: {name: warm, algorithm: smooth_warmup, unit: second, requests_per_unit: 3, warmup_period: 10s}}
  - {key: conc, rate_limit: {name: conc, algorithm: concurrency, requests_per_unit: 3}}
  - {key: deny, rate_limit: {name: deny, unit: minute, requests_per_unit: 0}}
  - {key: big, rate_limit: {name: big, unit: second, requests_per_unit: 9000000000000000}}
  - {key: sh, shadow_mode: true, rate_limit: {name: sh, unit: minute, requests_per_unit: 1}}
  - key: "q\"u\\o te"
    rate_limit: {name: "q\"u\\o\u00e9te", unit: minute, requests_per_unit: 3}
`

// Every field the engine's statuses give parses strictly as the
// draft's structured lists (sf_test.go), for every algorithm, a calendar
// month, a zero quota (deny), a quota of 16 digits, a shadow rule and a
// name with a quote, a backslash and a non-ASCII letter, request after
// request up to refusals.
func TestFieldsParseStrictly(t *testing.T) {
	now := time.Date(2026, 2, 10, 12, 0, 10, 0, time.UTC)
	clock := func() time.Time { return now }
	st, err := memory.New(memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg, err := policy.Parse("c.yaml", []byte(conformanceConfig))
	if err != nil {
		t.Fatal(err)
	}
	e, err := policy.NewEngine(cfg, st, policy.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	w := NewWriter(Options{})
	for _, key := range []string{"fixed", "month", "slog", "swin", "tb", "gcra", "shaper", "bursty", "warm", "conc", "deny", "big", "sh", "q\"u\\o te"} {
		for i := range 6 {
			resp, err := e.Decide(context.Background(), policy.Request{Domain: "c", Descriptors: []policy.Descriptor{{Entries: []policy.Entry{{Key: key, Value: "v"}}}}})
			if err != nil {
				t.Fatalf("%s %d: %v", key, i, err)
			}
			h := http.Header{}
			w.WriteStatuses(h, resp.Statuses)
			if _, err := checkPolicyField(h.Get("RateLimit-Policy")); err != nil {
				t.Errorf("%s request %d: RateLimit-Policy %q: %v", key, i, h.Get("RateLimit-Policy"), err)
			}
			if _, err := checkRateLimitField(h.Get("RateLimit")); err != nil {
				t.Errorf("%s request %d: RateLimit %q: %v", key, i, h.Get("RateLimit"), err)
			}
		}
	}
}

// Every case and set of options of the Writer's tests (odd names, never,
// concurrency, shadow, several limits, renamed fields) gives IETF fields
// that parse strictly, under whatever name they are written.
func TestWriterCasesParseStrictly(t *testing.T) {
	for cname, st := range writerCases() {
		for oname, o := range writerOptions {
			h := http.Header{}
			NewWriter(o).WriteStatuses(h, st)
			n := o.Names.WithDefaults()
			if v := h.Get(n.Policy); v != "" {
				if _, err := checkPolicyField(v); err != nil {
					t.Errorf("%s, %s: %s %q: %v", cname, oname, n.Policy, v, err)
				}
			}
			if v := h.Get(n.RateLimit); v != "" {
				if _, err := checkRateLimitField(v); err != nil {
					t.Errorf("%s, %s: %s %q: %v", cname, oname, n.RateLimit, v, err)
				}
			}
		}
	}
}

// A limit two descriptors of one request reach (a hierarchy's parent, by
// its own descriptor and as the ancestor of its child's; the same
// descriptor twice) is charged once and stated once: RateLimit-Policy and
// RateLimit listed tenant-cap twice, `"tenant-cap";q=3;w=60, "user-cap";
// q=10;w=3600, "tenant-cap";q=3;w=60`, one member per status rather than
// per limit.
func TestOneMemberPerLimitAcrossDescriptors(t *testing.T) {
	now := time.Date(2026, 2, 10, 12, 0, 10, 0, time.UTC)
	clock := func() time.Time { return now }
	st, err := memory.New(memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg, err := policy.Parse("web.yaml", []byte(`
domain: web
descriptors:
  - key: X-Tenant
    hierarchy: true
    rate_limit: {name: tenant-cap, unit: minute, requests_per_unit: 3}
    descriptors:
      - key: X-User
        rate_limit: {name: user-cap, unit: hour, requests_per_unit: 10}
`))
	if err != nil {
		t.Fatal(err)
	}
	e, err := policy.NewEngine(cfg, st, policy.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	tenant := policy.Descriptor{Entries: []policy.Entry{{Key: "X-Tenant", Value: "acme"}}}
	user := policy.Descriptor{Entries: []policy.Entry{{Key: "X-Tenant", Value: "acme"}, {Key: "X-User", Value: "bob"}}}
	for _, c := range []struct {
		ds         []policy.Descriptor
		pol, limit string
	}{
		{[]policy.Descriptor{tenant, user}, `"tenant-cap";q=3;w=60, "user-cap";q=10;w=3600`, `"tenant-cap";r=2;t=50, "user-cap";r=9;t=3590`},
		{[]policy.Descriptor{user, tenant, tenant}, `"user-cap";q=10;w=3600, "tenant-cap";q=3;w=60`, `"user-cap";r=8;t=3590, "tenant-cap";r=1;t=50`},
	} {
		resp, err := e.Decide(context.Background(), policy.Request{Domain: "web", Descriptors: c.ds})
		if err != nil {
			t.Fatal(err)
		}
		hw, h := http.Header{}, http.Header{}
		NewWriter(Options{}).WriteStatuses(hw, resp.Statuses)
		Write(h, FromStatuses(resp.Statuses), Options{})
		for name, h := range map[string]http.Header{"Writer": hw, "Write": h} {
			if got, got2 := h.Get("RateLimit-Policy"), h.Get("RateLimit"); got != c.pol || got2 != c.limit {
				t.Errorf("%d descriptors, %s:\nRateLimit-Policy %s\nRateLimit        %s\nwant\n%s\n%s", len(c.ds), name, got, got2, c.pol, c.limit)
			}
		}
	}
}
