package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/middleware"
)

// An admitted request on the memory store costs the middleware three
// allocations: the client address's text (dimension), the string its
// header values are cut from and their []string backing (headers.Writer).
// The descriptors and the Engine's statuses cost none.
func TestAdmittedAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts do not hold under the race detector (sync.Pool)")
	}
	m, err := middleware.New(engine(t, `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {name: per-ip, algorithm: token_bucket, unit: second, requests_per_unit: 1, burst: 1000000000}
`, nil), "web", extractor(t, perIP))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "198.18.0.1:1234"
	w := &discard{h: http.Header{}}
	h.ServeHTTP(w, r)
	if w.h.Get("RateLimit") == "" {
		t.Fatal("no RateLimit field: the middleware did not limit")
	}
	if n := testing.AllocsPerRun(200, func() { clear(w.h); h.ServeHTTP(w, r) }); n > 3 {
		t.Errorf("%v allocations per admitted request, want at most 3", n)
	}
}

// An admitted request through ForLimiter on the memory store costs what
// one through New does: the client address's text and the header
// values' string and backing. The decision and its status cost none.
func TestForLimiterAdmittedAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts do not hold under the race detector (sync.Pool)")
	}
	lim := newLimiter(t, "per-ip", algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Second, Burst: 1000000000}, newClock(t0))
	m, err := middleware.ForLimiter(lim, middleware.ClientIPKey())
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "198.18.0.1:1234"
	w := &discard{h: http.Header{}}
	h.ServeHTTP(w, r)
	if w.h.Get("RateLimit") == "" {
		t.Fatal("no RateLimit field: the middleware did not limit")
	}
	if n := testing.AllocsPerRun(200, func() { clear(w.h); h.ServeHTTP(w, r) }); n > 3 {
		t.Errorf("%v allocations per admitted request, want at most 3", n)
	}
}
