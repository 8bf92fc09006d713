package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The upstream's X-RateLimit-Limit, -Remaining and -Reset are replaced by
// the gateway's, and only then: a request the route's limits did not
// apply to (its one descriptor left out: no X-Key header) has no fields
// of the gateway's, and keeps the upstream's rather than none at all.
func TestUpstreamXFieldsKeptWhenGatewaySetsNone(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Limit", "50")
		w.Header().Set("X-RateLimit-Remaining", "49")
		w.Header().Set("X-RateLimit-Reset", "1")
	}))
	defer up.Close()
	cfg := `
domain: edge
gateway:
  routes: [{descriptors: [{entries: [{source: "header:X-Key"}]}]}]
descriptors:
  - key: X-Key
    rate_limit: {name: keyed, unit: minute, requests_per_unit: 5}
`
	srv := front(t, engine(t, cfg, newClock(t0)), up.URL)
	for _, c := range []struct {
		hdr  []string
		want map[string]string
	}{
		{[]string{"X-Key", "k"}, map[string]string{"X-Ratelimit-Limit": "5", "X-Ratelimit-Remaining": "4", "X-Ratelimit-Reset": "50"}},
		{nil, map[string]string{"X-Ratelimit-Limit": "50", "X-Ratelimit-Remaining": "49", "X-Ratelimit-Reset": "1"}},
	} {
		r := do(t, "GET", srv.URL, c.hdr...)
		for k, want := range c.want {
			if got := strings.Join(r.h[k], "|"); got != want {
				t.Errorf("X-Key %v: %s = %q, want %q", c.hdr, k, got, want)
			}
		}
	}
}
