package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/floodgate/floodgate/middleware"
)

func TestIsGRPC(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/grpc":                true,
		"application/grpc+proto":          true,
		"application/grpc+json":           true,
		"Application/GRPC":                true,
		"application/grpc; charset=utf-8": true,
		"application/grpc-web":            false,
		"application/grpc-web+proto":      false,
		"application/grpcx":               false,
		"application/json":                false,
		"":                                false,
	} {
		r := httptest.NewRequest("POST", "/pkg.Svc/M", nil)
		r.Header.Set("Content-Type", ct)
		if got := middleware.IsGRPC(r); got != want {
			t.Errorf("IsGRPC(Content-Type %q) = %v, want %v", ct, got, want)
		}
	}
}

func TestGRPCCode(t *testing.T) {
	for status, want := range map[int]int{400: 3, 408: 4, 413: 8, 429: 8, 500: 13, 502: 14, 503: 14, 504: 14, 418: 2} {
		if got := middleware.GRPCCode(status); got != want {
			t.Errorf("GRPCCode(%d) = %d, want %d", status, got, want)
		}
	}
}

// A gRPC call gets a trailers-only gRPC error: HTTP 200, no body, the
// code and the percent-encoded message, the fields set before kept; any
// other request gets the problem body.
func TestWriteProblemFor(t *testing.T) {
	p := middleware.Problem{Status: 503, Detail: "the store timed out: 100% é\n"}
	r := httptest.NewRequest("POST", "/pkg.Svc/M", nil)
	r.Header.Set("Content-Type", "application/grpc+proto")
	w := httptest.NewRecorder()
	w.Header().Set("Retry-After", "7")
	w.Header().Set("Content-Length", "99")
	middleware.WriteProblemFor(w, r, p)
	h := w.Result().Header
	if w.Code != 200 || w.Body.Len() != 0 || h.Get("Content-Type") != "application/grpc" || h.Get("Grpc-Status") != "14" ||
		h.Get("Grpc-Message") != "the store timed out: 100%25 %C3%A9%0A" || h.Get("Retry-After") != "7" || h.Get("Content-Length") != "" {
		t.Errorf("gRPC: %d %v %q; want 200, UNAVAILABLE, the message percent-encoded, Retry-After kept", w.Code, h, w.Body)
	}

	r.Header.Set("Content-Type", "application/json")
	w = httptest.NewRecorder()
	middleware.WriteProblemFor(w, r, p)
	if w.Code != 503 || w.Header().Get("Content-Type") != "application/problem+json" || w.Header().Get("Grpc-Status") != "" {
		t.Errorf("HTTP: %d %v, want the 503 problem body", w.Code, w.Header())
	}
}

// The middleware admits 3 gRPC calls (HTTP 200, no grpc-status of its
// own) and refuses the fourth, over the limit, with
// RESOURCE_EXHAUSTED, saying why, with the limit's fields and Retry-After.
func TestRejectGRPC(t *testing.T) {
	m, err := middleware.New(engine(t, perIPConfig, newClock(t0)), "web", extractor(t, perIP))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(ok))
	for i := range 4 {
		r := httptest.NewRequest("POST", "/pkg.Svc/M", nil)
		r.Header.Set("Content-Type", "application/grpc")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		grpcStatus := w.Header().Get("Grpc-Status")
		if w.Code != 200 || (i < 3) != (grpcStatus == "") {
			t.Errorf("call %d: %d grpc-status %q", i+1, w.Code, grpcStatus)
		}
		if i == 3 && (grpcStatus != "8" || w.Header().Get("Grpc-Message") != "per-ip: rate limit exceeded; retry in 50 s" ||
			w.Header().Get("Retry-After") != "50" || w.Header().Get("X-RateLimit-Remaining") != "0" || w.Body.Len() != 0) {
			t.Errorf("call 4: %v %q; want RESOURCE_EXHAUSTED, its message, Retry-After and the fields, no body", w.Header(), w.Body)
		}
	}
}
