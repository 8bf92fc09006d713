package gateway_test

import (
	"strings"
	"testing"

	"github.com/floodgate/floodgate/gateway"
)

// A trailing / of a path prefix changes nothing about the paths a route
// covers ("/api" and "/api/" both cover "/api" and "/api/x"), so nothing
// about its precedence either: an exact host, then listed methods, still
// win over a route that differs only by writing its prefix with a "/".
// The routes were ranked by the prefix's length as written, so "/api/"
// for any host took a.example.com's requests from its "/api" route.
func TestTrailingSlashIsNotMoreSpecific(t *testing.T) {
	const cfg = `
domain: edge
gateway:
  routes:
    - {name: any-host, path_prefix: /api/, descriptors: [{entries: [{source: generic_key, value: any-host}]}]}
    - {name: exact, host: a.example.com, path_prefix: /api, descriptors: [{entries: [{source: generic_key, value: exact}]}]}
    - {name: any-method, path_prefix: /v1/, descriptors: [{entries: [{source: generic_key, value: any-method}]}]}
    - {name: posts, path_prefix: /v1, methods: [POST], descriptors: [{entries: [{source: generic_key, value: posts}]}]}
descriptors:
  - {key: generic_key, value: any-host, rate_limit: {name: any-host, unit: minute, requests_per_unit: 10}}
  - {key: generic_key, value: exact, rate_limit: {name: exact, unit: minute, requests_per_unit: 10}}
  - {key: generic_key, value: any-method, rate_limit: {name: any-method, unit: minute, requests_per_unit: 10}}
  - {key: generic_key, value: posts, rate_limit: {name: posts, unit: minute, requests_per_unit: 10}}
`
	e := engine(t, cfg, newClock(t0))
	srv := front(t, e, echo(t).URL, gateway.WithPreserveHost(true))
	for _, s := range []struct{ method, host, path, want string }{
		{"GET", "a.example.com", "/api/x", "exact"},
		{"GET", "a.example.com", "/api", "exact"},
		{"GET", "b.example.com", "/api/x", "any-host"},
		{"POST", "x.org", "/v1/x", "posts"},
		{"GET", "x.org", "/v1/x", "any-method"},
	} {
		r := do(t, s.method, srv.URL+s.path, "Host", s.host)
		if got := r.h.Get("RateLimit-Policy"); !strings.HasPrefix(got, `"`+s.want+`"`) {
			t.Errorf("%s %s%s: RateLimit-Policy %q, want route %s", s.method, s.host, s.path, got, s.want)
		}
	}
}
