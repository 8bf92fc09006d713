package gateway_test

import (
	"strings"
	"testing"

	"github.com/floodgate/floodgate/dimension"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/middleware"
)

// A route descriptor that no rule limits is a warning of Check, not an
// error: the gateway builds and serves the route, its requests unlimited,
// although middleware.New refuses the same descriptor for a library user
// (the gateway builds its middlewares with WithDescriptorCheck(false)).
func TestDeadRouteDescriptorWarnsAndServes(t *testing.T) {
	const cfg = `domain: edge
gateway:
  routes:
    - path_prefix: /typo
      descriptors:
        - entries: [{source: "header:X-Api-Key"}]
    - path_prefix: /ok
      descriptors:
        - entries: [{source: api_key}]
descriptors:
  - key: api_key
    rate_limit: {name: per-key, unit: minute, requests_per_unit: 1}
`
	e := engine(t, cfg, newClock(t0))
	warnings, err := gateway.Check(e.Config())
	if err != nil {
		t.Fatal(err)
	}
	want := `gw.yaml:6: gateway: routes[0].descriptors[0]: no rule of domain edge has the keys [X-Api-Key], so this descriptor limits nothing (route "/typo")`
	if len(warnings) != 1 || warnings[0].String() != want {
		t.Errorf("warnings: %v\nwant: %s", warnings, want)
	}

	x, err := dimension.NewExtractor(dimension.Spec{Descriptors: []dimension.DescriptorSpec{
		{Entries: []dimension.EntrySpec{{Source: "header:X-Api-Key"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := middleware.New(e, "edge", x); err == nil || !strings.Contains(err.Error(), "descriptors[0] [X-Api-Key]: no rule of domain \"edge\"") {
		t.Errorf("middleware.New with the route's descriptor = %v, want it refused", err)
	}

	srv := front(t, e, echo(t).URL)
	for i := range 3 {
		if r := do(t, "GET", srv.URL+"/typo", "X-Api-Key", "k"); r.status != 200 || r.h.Get("RateLimit") != "" {
			t.Errorf("/typo request %d: %d RateLimit %q, want 200 unlimited", i, r.status, r.h.Get("RateLimit"))
		}
	}
	for i, status := range []int{200, 429} {
		if r := do(t, "GET", srv.URL+"/ok", "X-Api-Key", "k"); r.status != status {
			t.Errorf("/ok request %d: %d, want %d", i, r.status, status)
		}
	}
}
