package gateway_test

import (
	"strings"
	"testing"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memory"
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

// A route's host written fully qualified, with its final "." (as DNS zone
// files and Kubernetes' FQDNs write it), matches the host as requests
// send it, with or without the ".": it matched neither, so the route's
// requests passed unlimited.
func TestFullyQualifiedRouteHost(t *testing.T) {
	const cfg = `
domain: edge
gateway:
  routes:
    - {host: API.example.com., descriptors: [{entries: [{source: generic_key, value: api}]}]}
    - {host: "*.example.org.", descriptors: [{entries: [{source: generic_key, value: org}]}]}
descriptors:
  - {key: generic_key, value: api, rate_limit: {name: api, unit: minute, requests_per_unit: 10}}
  - {key: generic_key, value: org, rate_limit: {name: org, unit: minute, requests_per_unit: 10}}
`
	e := engine(t, cfg, newClock(t0))
	srv := front(t, e, echo(t).URL, gateway.WithPreserveHost(true))
	for _, s := range []struct{ host, want string }{
		{"api.example.com", `"api";r=9;t=50`},
		{"api.example.com.:8080", `"api";r=8;t=50`},
		{"a.example.org", `"org";r=9;t=50`},
		{"b.a.example.org.", `"org";r=8;t=50`},
		{"example.org", ""},
	} {
		if got := do(t, "GET", srv.URL+"/x", "Host", s.host).h.Get("RateLimit"); got != s.want {
			t.Errorf("Host %s: RateLimit %q, want %q", s.host, got, s.want)
		}
	}
}

// Two domains' routes that match the same requests: the one listed later
// would never apply (its requests limited by the other domain's rules
// alone, silently). New and Check refuse it at its line, as a section
// refuses two routes of its own.
func TestSameRouteInTwoDomains(t *testing.T) {
	cfg, err := policy.Parse("gw.yaml", []byte(`
domain: a
gateway:
  routes: [{path_prefix: /api, descriptors: [{entries: [{source: remote_address}]}]}]
descriptors:
  - key: remote_address
    rate_limit: {name: a, unit: minute, requests_per_unit: 5}
---
domain: b
gateway:
  routes:
    - {path_prefix: /other, descriptors: [{entries: [{source: remote_address}]}]}
    - {path_prefix: /api/, descriptors: [{entries: [{source: remote_address}]}]}
descriptors:
  - key: remote_address
    rate_limit: {name: b, unit: minute, requests_per_unit: 5}
`))
	if err != nil {
		t.Fatal(err)
	}
	const want = "gw.yaml:13: gateway: routes[1]: matches the same requests as routes[0] of domain a"
	if _, err := gateway.Check(cfg); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Check: %v, want %s…", err, want)
	}
	st, _ := memory.New()
	defer st.Close()
	e, err := policy.NewEngine(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gateway.New(cfg, e, "http://127.0.0.1:1"); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("New: %v, want %s…", err, want)
	}
}
