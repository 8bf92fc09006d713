package policy

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store/memcached"
)

// TestShadowPartialRefusalReported: on a bare memcached store (no
// store/resilient around it), a shadow rule's Take that memcached refused
// and whose decr giving the refused window increment back then fails (the
// connection cut by a proxy) returns the refusal with the failure and
// Result.Partial. The shadow rule's status reports that refusal (its
// decision refused, limit 1, the response's strategy shadow), as an
// enforced rule's Partial refusal stands; the request is admitted, as a
// shadow rule's refusal is. Before, the Take was taken for a failure: the
// status was left undecided and the dry run's refusal went unreported.
func TestShadowPartialRefusalReported(t *testing.T) {
	proxy := testserver.NewCutProxy(t, testserver.Memcached(t))
	clock := frozen(scenarioT0)
	st, err := memcached.Open("memcached://"+proxy.Addr(), memcached.WithClock(clock), memcached.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := mustParse(t, `
domain: d
descriptors:
  - key: dry
    shadow_mode: true
    rate_limit: {name: dry, unit: hour, requests_per_unit: 1}
`)
	e, err := NewEngine(cfg, st, redisPrefix(), WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	r := req("d", ent("dry", "x"))
	if resp, err := e.Decide(t.Context(), r); err != nil || resp.Code != CodeOK || !resp.Statuses[0].Decision.Allowed {
		t.Fatalf("first request: %+v, %v; want admitted, the shadow rule's count 1", resp, err)
	}
	proxy.CutOn("decr ")
	cuts := proxy.Cuts()
	resp, err := e.Decide(t.Context(), r)
	proxy.CutOn("")
	if proxy.Cuts() == cuts {
		t.Fatal("no decr was sent: the shadow rule's Take was not refused by memcached")
	}
	if err != nil || resp.Code != CodeOK {
		t.Fatalf("second request: %+v, %v; want OK (a shadow rule refuses nothing)", resp, err)
	}
	s := resp.Statuses[0]
	if !s.Shadow || s.Decision.Allowed || s.Decision.Limit != 1 || resp.Strategy != StrategyShadow {
		t.Errorf("second request: status %+v, strategy %q; want the shadow rule's refusal (limit 1) reported, strategy %q",
			s, resp.Strategy, StrategyShadow)
	}
}
