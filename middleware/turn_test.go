package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate/middleware"
)

// A request a shaper would hold longer than WithMaxWait is refused (503)
// with the rate limit fields, as every limited response is: before, it
// carried Retry-After alone. t and X-RateLimit-Reset are its turn, as
// Retry-After is, not the later time the shaper's queue drains.
func TestTurnPastMaxWaitHasFields(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, closeStore := bubbleEngine(t, `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {name: shaped, algorithm: shaper, unit: second, requests_per_unit: 1, burst: 3}
`)
		defer closeStore()
		m, err := middleware.New(e, "web", extractor(t, perIP), middleware.WithMaxWait(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		h := m.Handler(http.HandlerFunc(ok))
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)) // passes at once
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)) // 1 s away: refused
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != http.StatusServiceUnavailable {
			t.Fatalf("a request whose turn is past WithMaxWait: %d, want 503", w.Code)
		}
		wantFields(t, "turn past max wait", w.Header(), map[string]string{
			"RateLimit-Policy":      `"shaped";q=4;w=4`,
			"RateLimit":             `"shaped";r=2;t=1`,
			"X-RateLimit-Limit":     "4",
			"X-RateLimit-Remaining": "2",
			"X-RateLimit-Reset":     "1",
			"Retry-After":           "1",
		})
	})
}
