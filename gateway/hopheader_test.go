package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
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
