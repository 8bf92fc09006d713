package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/gateway"
)

// A header the client names in Connection is hop-by-hop (RFC 9110
// §7.6.1): the proxy drops it, and the upstream never sees it. The
// limits key on the request as the upstream gets it: a client sending a
// fresh X-API-Key each time, named in Connection, was limited under each
// key while the upstream served it as a client without one, beyond the
// anonymous quota.
func TestKeyedHeaderNamedInConnection(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("X-Api-Key"))
		mu.Unlock()
	}))
	defer up.Close()
	cfg := `
domain: edge
gateway:
  routes: [{descriptors: [{entries: [{source: "header:X-API-Key", default: anonymous}]}]}]
descriptors:
  - key: X-API-Key
    rate_limit: {name: per-key, unit: minute, requests_per_unit: 1}
`
	srv := front(t, engine(t, cfg, newClock(t0)), up.URL)
	var codes []int
	for i := range 3 {
		codes = append(codes, do(t, "GET", srv.URL, "X-API-Key", fmt.Sprint("k", i), "Connection", "keep-alive, x-api-key").status)
	}
	codes = append(codes, do(t, "GET", srv.URL, "X-API-Key", "k9", "Connection", "keep-alive").status)
	if want := []int{200, 429, 429, 200}; !slices.Equal(codes, want) {
		t.Errorf("statuses %v, want %v (the first three limited as the anonymous client the upstream sees)", codes, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"", "k9"}; !slices.Equal(seen, want) {
		t.Errorf("the upstream saw the keys %q, want %q", seen, want)
	}
}

// A route keyed on an address field a client may write (True-Client-IP,
// X-Real-IP, X-Forwarded-For) reads it as the upstream gets it: from a
// trusted proxy as sent, from anyone else as rewrite leaves it (dropped,
// or the peer). It was read as the client sent it, which the upstream
// never saw: a client choosing a fresh address each time passed every
// request.
func TestAddressHeaderKeyAsForwarded(t *testing.T) {
	for _, tc := range []struct {
		name, trusted, header string
		want                  []int
	}{
		{"True-Client-IP, untrusted", "10.0.0.0/8", "True-Client-IP", []int{200, 429, 429}},
		{"X-Real-IP, untrusted", "10.0.0.0/8", "X-Real-IP", []int{200, 429, 429}},
		{"X-Forwarded-For, untrusted", "10.0.0.0/8", "X-Forwarded-For", []int{200, 429, 429}},
		{"True-Client-IP, trusted", "127.0.0.0/8", "True-Client-IP", []int{200, 200, 200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := `
domain: edge
gateway:
  trusted_proxies: [` + tc.trusted + `]
  routes: [{descriptors: [{entries: [{source: "header:` + tc.header + `", default: none}]}]}]
descriptors:
  - key: ` + tc.header + `
    rate_limit: {name: per-ip, unit: minute, requests_per_unit: 1}
`
			srv := front(t, engine(t, cfg, newClock(t0)), echo(t).URL)
			var codes []int
			for _, ip := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"} {
				codes = append(codes, do(t, "GET", srv.URL, tc.header, ip).status)
			}
			if !slices.Equal(codes, tc.want) {
				t.Errorf("statuses %v, want %v", codes, tc.want)
			}
		})
	}
}

// A client that leaves the address field out is read as the upstream
// gets it too: from a peer not trusted as a proxy, rewrite sends the
// peer as X-Real-IP and X-Forwarded-For whether or not the client wrote
// them, and the gateway's own X-Forwarded-Host. Read as absent, a route
// keyed on the field (without a default) left its descriptor out and
// passed every request of a client that simply did not send it.
func TestAbsentAddressHeaderKeyAsForwarded(t *testing.T) {
	for _, header := range []string{"X-Real-IP", "X-Forwarded-For", "X-Forwarded-Host"} {
		t.Run(header, func(t *testing.T) {
			var mu sync.Mutex
			var seen []string
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				seen = append(seen, r.Header.Get(header))
				mu.Unlock()
			}))
			defer up.Close()
			cfg := `
domain: edge
gateway:
  trusted_proxies: [10.0.0.0/8]
  routes: [{descriptors: [{entries: [{source: "header:` + header + `"}]}]}]
descriptors:
  - key: ` + header + `
    rate_limit: {name: per-ip, unit: minute, requests_per_unit: 1}
`
			srv := front(t, engine(t, cfg, newClock(t0)), up.URL)
			var codes []int
			for range 3 {
				codes = append(codes, do(t, "GET", srv.URL).status)
			}
			if want := []int{200, 429, 429}; !slices.Equal(codes, want) {
				t.Errorf("statuses %v, want %v", codes, want)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != 1 || seen[0] == "" {
				t.Errorf("the upstream got %s %q, want one request with it set by the gateway", header, seen)
			}
		})
	}
}

// A route that reads no address field decides a request from a peer not
// trusted as a proxy without copying its header, whatever forwarding
// fields it holds (a load balancer in front that the section does not
// trust sends X-Forwarded-For on every request): as many allocations as
// without them.
func TestForwardingFieldsCostNothingUnread(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts do not hold under the race detector (sync.Pool)")
	}
	cfg := `
domain: edge
gateway:
  trusted_proxies: [10.0.0.0/8]
  routes: [{descriptors: [{entries: [{source: "header:X-API-Key", default: anonymous}]}]}]
descriptors:
  - key: X-API-Key
    rate_limit: {name: per-key, unit: minute, requests_per_unit: 1000000000}
`
	e := engine(t, cfg, newClock(t0))
	gw, err := gateway.New(e.Config(), e, "http://upstream.invalid", gateway.WithTransport(stubUpstream{}),
		gateway.WithClientTimeout(0), gateway.WithUpstreamTimeout(0))
	if err != nil {
		t.Fatal(err)
	}
	allocs := func(hdr ...string) float64 {
		r := httptest.NewRequest("GET", "/x", nil)
		for i := 0; i < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		w := &discardWriter{h: http.Header{}}
		gw.ServeHTTP(w, r)
		return testing.AllocsPerRun(200, func() { clear(w.h); gw.ServeHTTP(w, r) })
	}
	plain := allocs("X-API-Key", "k", "Connection", "keep-alive")
	fwd := allocs("X-API-Key", "k", "Connection", "keep-alive", "X-Forwarded-For", "203.0.113.7",
		"X-Forwarded-Proto", "https", "X-Real-IP", "203.0.113.7")
	if fwd != plain {
		t.Errorf("%v allocations per request with forwarding fields the route does not read, %v without", fwd, plain)
	}
}

// From a trusted proxy, X-Forwarded-For named in Connection still
// reaches the upstream: rewrite passes the proxy's chain on from the
// request, with the peer appended. The limits read it as sent, as
// without Connection; read as absent, every client behind the proxy
// took the default key, one limit for all of them.
func TestTrustedForwardedForNamedInConnection(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("X-Forwarded-For"))
		mu.Unlock()
	}))
	defer up.Close()
	cfg := `
domain: edge
gateway:
  trusted_proxies: [127.0.0.0/8]
  routes: [{descriptors: [{entries: [{source: "header:X-Forwarded-For", default: none}]}]}]
descriptors:
  - key: X-Forwarded-For
    rate_limit: {name: per-chain, unit: minute, requests_per_unit: 1}
`
	srv := front(t, engine(t, cfg, newClock(t0)), up.URL)
	var codes []int
	for _, ip := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"} {
		codes = append(codes, do(t, "GET", srv.URL, "X-Forwarded-For", ip, "Connection", "keep-alive, X-Forwarded-For").status)
	}
	if want := []int{200, 200, 200}; !slices.Equal(codes, want) {
		t.Errorf("statuses %v, want %v (each client its own key)", codes, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"192.0.2.1, 127.0.0.1", "192.0.2.2, 127.0.0.1", "192.0.2.3, 127.0.0.1"}; !slices.Equal(seen, want) {
		t.Errorf("the upstream got X-Forwarded-For %q, want %q", seen, want)
	}
}

// The fields a Connection field names are looked for among those the
// route reads, not compared with every field of the request: a request
// within net/http's 1 MB header limit, 200,000 tokens beside 40,000
// short fields, took four minutes of a core to decide when each token
// was compared with each field; 20,000 of each, seconds. It now takes as
// long as any request of its size.
func TestManyConnectionTokensAndFields(t *testing.T) {
	cfg := `
domain: edge
gateway:
  routes: [{descriptors: [{entries: [{source: "header:X-API-Key", default: anonymous}]}]}]
descriptors:
  - key: X-API-Key
    rate_limit: {name: per-key, unit: minute, requests_per_unit: 1000}
`
	e := engine(t, cfg, newClock(t0))
	for _, withUser := range []bool{false, true} {
		opts := []gateway.Option{gateway.WithTransport(stubUpstream{}), gateway.WithClientTimeout(0), gateway.WithUpstreamTimeout(0)}
		if withUser {
			opts = append(opts, gateway.WithUser(func(r *http.Request) string { return r.Header.Get("X-User") }))
		}
		gw, err := gateway.New(e.Config(), e, "http://upstream.invalid", opts...)
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest("GET", "/x", nil)
		r.Header.Set("Connection", strings.Repeat("b,", 20000)+"x-api-key")
		for i := range 20000 {
			r.Header.Set(fmt.Sprint("H", i), "v")
		}
		r.Header.Set("X-API-Key", "k")
		w := &discardWriter{h: http.Header{}}
		start := time.Now()
		gw.ServeHTTP(w, r)
		// Generous: the request is decided in milliseconds; comparing
		// every token with every field took seconds without -race.
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("WithUser %v: one request with 20,000 Connection tokens and 20,000 fields took %v", withUser, d)
		}
	}
}

// A route keyed by a WithUser function, which may read any field, is
// decided without copying the header of a request that holds no
// forwarding field: as many allocations as a route keyed on a header.
func TestUserFunctionRouteCopiesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts do not hold under the race detector (sync.Pool)")
	}
	allocs := func(source string, opts ...gateway.Option) float64 {
		cfg := `
domain: edge
gateway:
  trusted_proxies: [10.0.0.0/8]
  routes: [{descriptors: [{entries: [{source: "` + source + `", key: k}]}]}]
descriptors:
  - key: k
    rate_limit: {name: per-key, unit: minute, requests_per_unit: 1000000000}
`
		e := engine(t, cfg, newClock(t0))
		gw, err := gateway.New(e.Config(), e, "http://upstream.invalid", append(opts, gateway.WithTransport(stubUpstream{}),
			gateway.WithClientTimeout(0), gateway.WithUpstreamTimeout(0))...)
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest("GET", "/x", nil)
		r.Header.Set("X-User", "u")
		w := &discardWriter{h: http.Header{}}
		gw.ServeHTTP(w, r)
		return testing.AllocsPerRun(200, func() { clear(w.h); gw.ServeHTTP(w, r) })
	}
	header := allocs("header:X-User")
	user := allocs("user", gateway.WithUser(func(r *http.Request) string { return r.Header.Get("X-User") }))
	if user != header {
		t.Errorf("%v allocations per request keyed by a WithUser function, %v keyed on the header", user, header)
	}
}
