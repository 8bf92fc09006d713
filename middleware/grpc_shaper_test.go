package middleware_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate/middleware"
)

// A gRPC call a shaper would hold past its grpc-timeout is refused at once
// as a limit's refusal — RESOURCE_EXHAUSTED with the delay as its
// pushback — not UNAVAILABLE (the 503 an HTTP client gets), which retry
// policies retry at once. An HTTP client still gets the 503, with
// Retry-After: when its turn would have come, rounded up.
func TestGRPCShaperTurnPastDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, closeStore := bubbleEngine(t, `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {name: shaped, algorithm: shaper, unit: second, requests_per_unit: 1, burst: 3}
`)
		defer closeStore()
		m, err := middleware.New(e, "web", extractor(t, perIP))
		if err != nil {
			t.Fatal(err)
		}
		h := m.Handler(http.HandlerFunc(ok))
		h.ServeHTTP(httptest.NewRecorder(), grpcRequest("/pkg.Svc/M", "application/grpc")) // passes at once
		r := grpcRequest("/pkg.Svc/M", "application/grpc")
		r.Header.Set("Grpc-Timeout", "200m") // its turn is 1 s away
		w := httptest.NewRecorder()
		begin := time.Now()
		h.ServeHTTP(w, r)
		if got, push, took := w.Header().Get("Grpc-Status"), w.Header().Get("Grpc-Retry-Pushback-Ms"), time.Since(begin); got != "8" || push != "1000" || took != 0 {
			t.Errorf("a call whose turn is 1 s away with 200 ms left: grpc-status %q, pushback %q after %v; want 8, 1000 at once", got, push, took)
		}
		// The same over HTTP with a 200 ms deadline: 503.
		time.Sleep(5 * time.Second)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
		hr := httptest.NewRequest("GET", "/", nil)
		ctx, cancel := context.WithTimeout(hr.Context(), 200*time.Millisecond)
		defer cancel()
		hw := httptest.NewRecorder()
		h.ServeHTTP(hw, hr.WithContext(ctx))
		var p middleware.Problem
		if hw.Code != http.StatusServiceUnavailable || hw.Header().Get("Grpc-Status") != "" || hw.Header().Get("Retry-After") != "1" ||
			json.Unmarshal(hw.Body.Bytes(), &p) != nil || p.RetryAfter == nil || *p.RetryAfter != 1 {
			t.Errorf("an HTTP request whose turn comes after its deadline: %d %v %s, want 503 with Retry-After: 1 (body too), without grpc fields", hw.Code, hw.Header(), hw.Body)
		}
	})
}
