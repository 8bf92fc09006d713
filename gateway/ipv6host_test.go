package gateway_test

import (
	"strings"
	"testing"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/policy"
)

// TestIPv6HostRoute: a route for an IPv6 literal matches the address in
// any spelling of the request's Host (non-canonical, with a port or a
// zone, an IPv4-mapped address for an IPv4 route) and the route's own
// spelling does not matter either, as dimension's host source
// canonicalises it; other addresses fall to the catch-all route.
func TestIPv6HostRoute(t *testing.T) {
	const cfg = `
domain: edge
gateway:
  routes:
    - {name: any, descriptors: [{entries: [{source: generic_key, value: any}]}]}
    - {name: loop, host: "::1", descriptors: [{entries: [{source: generic_key, value: loop}]}]}
    - {name: doc, host: "[2001:DB8:0:0::1]", descriptors: [{entries: [{source: generic_key, value: doc}]}]}
    - {name: v4, host: 192.0.2.1, descriptors: [{entries: [{source: generic_key, value: v4}]}]}
descriptors:
  - {key: generic_key, value: any, rate_limit: {name: any, unit: minute, requests_per_unit: 100}}
  - {key: generic_key, value: loop, rate_limit: {name: loop, unit: minute, requests_per_unit: 100}}
  - {key: generic_key, value: doc, rate_limit: {name: doc, unit: minute, requests_per_unit: 100}}
  - {key: generic_key, value: v4, rate_limit: {name: v4, unit: minute, requests_per_unit: 100}}
`
	e := engine(t, cfg, newClock(t0))
	srv := front(t, e, echo(t).URL, gateway.WithPreserveHost(true))
	for _, s := range []struct{ host, want string }{
		{"[::1]", "loop"},
		{"[::1]:8080", "loop"},
		{"[0:0::1]", "loop"},
		{"[0:0:0:0:0:0:0:1]:80", "loop"},
		{"[::1%25eth0]:80", "loop"},
		{"[2001:db8::1]", "doc"},
		{"[2001:0DB8:0000::0001]:443", "doc"},
		{"[::ffff:192.0.2.1]", "v4"},
		{"192.0.2.1:80", "v4"},
		{"[::2]", "any"},
		{"example.com", "any"},
	} {
		r := do(t, "GET", srv.URL+"/", "Host", s.host)
		if got := r.h.Get("RateLimit-Policy"); !strings.HasPrefix(got, `"`+s.want+`"`) {
			t.Errorf("Host %s: RateLimit-Policy %q, want route %s", s.host, got, s.want)
		}
	}
}

// TestIPv6HostRouteSpelling: two routes for one IPv6 address spelled
// differently match the same requests, which the section refuses as it
// refuses any two such routes; an address with a port, or under "*.", is
// still not a host.
func TestIPv6HostRouteSpelling(t *testing.T) {
	head := "domain: edge\ngateway:\n  routes:\n"
	for _, tc := range []struct{ name, body, want string }{
		{"same address", "    - {host: \"::1\"}\n    - {host: \"[0:0::1]\"}\n",
			"gw.yaml:5: gateway: routes[1]: matches the same requests as routes[0]"},
		{"with a port", "    - {host: \"[::1]:8080\"}\n",
			`gw.yaml:4: gateway: routes[0].host: "[::1]:8080" is not a host name`},
		{"wildcard", "    - {host: \"*.::1\"}\n",
			`gw.yaml:4: gateway: routes[0].host: "*.::1" is not a host name`},
	} {
		_, err := policy.Parse("gw.yaml", []byte(head+tc.body))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s:\n got %v\nwant %s", tc.name, err, tc.want)
		}
	}
}
