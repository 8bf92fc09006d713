package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/headers"
	"github.com/floodgate/floodgate/middleware"
)

const bytesAMinute = `
domain: web
descriptors:
  - key: generic_key
    value: k
    rate_limit: {name: upload, unit: minute, requests_per_unit: 1000}
`

// A cost in bytes (WithCost with WithCostUnit(headers.ContentBytes)) is
// stated in bytes: RateLimit-Policy carries qu="content-bytes" (draft -10
// §3.1.2), so that a client reads q=1000 and r=700 as bytes, on an
// admission and on a refusal. Without WithCostUnit, or with
// headers.Requests, the fields are exactly what they were.
func TestCostUnitContentBytes(t *testing.T) {
	byLength := middleware.WithCost(func(r *http.Request) int64 { return r.ContentLength })
	for _, tc := range []struct {
		name   string
		opts   []middleware.Option
		policy string
	}{
		{"content-bytes", []middleware.Option{byLength, middleware.WithCostUnit(headers.ContentBytes)}, `"upload";q=1000;qu="content-bytes";w=60`},
		{"unit before cost, under WithHeaders", []middleware.Option{middleware.WithCostUnit(headers.ContentBytes), byLength,
			middleware.WithHeaders(headers.Options{Set: headers.IETF})}, `"upload";q=1000;qu="content-bytes";w=60`},
		{"no unit", []middleware.Option{byLength}, `"upload";q=1000;w=60`},
		{"requests", []middleware.Option{byLength, middleware.WithCostUnit(headers.Requests)}, `"upload";q=1000;w=60`},
	} {
		m, err := middleware.New(engine(t, bytesAMinute, newClock(t0)), "web", extractor(t, perKey), tc.opts...)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		h := m.Handler(http.HandlerFunc(ok))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/up", strings.NewReader(strings.Repeat("x", 300))))
		wantFields(t, tc.name+", 300 bytes", w.Result().Header, map[string]string{"RateLimit-Policy": tc.policy, "RateLimit": `"upload";r=700;t=50`})
		if w.Code != 200 {
			t.Errorf("%s, 300 bytes: %d, want 200", tc.name, w.Code)
		}
		w = httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/up", strings.NewReader(strings.Repeat("x", 800))))
		wantFields(t, tc.name+", 800 bytes", w.Result().Header, map[string]string{"RateLimit-Policy": tc.policy, "RateLimit": `"upload";r=700;t=50`})
		if w.Code != 429 {
			t.Errorf("%s, 800 bytes: %d, want 429", tc.name, w.Code)
		}
	}
}

// New refuses a cost unit the draft does not register for a cost, and
// content-bytes without a cost function (every request would cost one
// byte), each naming the unit.
func TestCostUnitChecked(t *testing.T) {
	byLength := middleware.WithCost(func(r *http.Request) int64 { return r.ContentLength })
	for _, tc := range []struct {
		name string
		opts []middleware.Option
		want string
	}{
		{"unregistered", []middleware.Option{byLength, middleware.WithCostUnit("bytes")}, `cost unit "bytes"`},
		{"concurrency's", []middleware.Option{byLength, middleware.WithCostUnit(headers.ConcurrentRequests)}, `cost unit "concurrent-requests"`},
		{"through WithHeaders", []middleware.Option{byLength, middleware.WithHeaders(headers.Options{CostUnit: "octets"})}, `cost unit "octets"`},
		{"without WithCost", []middleware.Option{middleware.WithCostUnit(headers.ContentBytes)}, `cost unit "content-bytes" without WithCost`},
	} {
		_, err := middleware.New(engine(t, bytesAMinute, nil), "web", extractor(t, perKey), tc.opts...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}
