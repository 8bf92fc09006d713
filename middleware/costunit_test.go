package middleware_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
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

// A negative cost from WithCost — r.ContentLength of a chunked body, -1 —
// is answered 500 by New's and ForLimiter's middlewares alike, with or
// without WithFailOpen: the request is not admitted, nothing is charged
// (the next request of a known length finds the whole quota), and the
// error log names WithCost and the value, with the ContentLength hint. A
// gRPC call hears INTERNAL.
func TestNegativeCost(t *testing.T) {
	byLength := middleware.WithCost(func(r *http.Request) int64 { return r.ContentLength })
	for _, open := range []bool{false, true} {
		c := newClock(t0)
		var logged []string
		opts := []middleware.Option{byLength, middleware.WithCostUnit(headers.ContentBytes), middleware.WithFailOpen(open),
			middleware.WithErrorLog(func(_ *http.Request, err error) { logged = append(logged, err.Error()) })}
		viaEngine, err := middleware.New(engine(t, bytesAMinute, c), "web", extractor(t, perKey), opts...)
		if err != nil {
			t.Fatal(err)
		}
		viaLimiter, err := middleware.ForLimiter(newLimiter(t, "upload", algo.Params{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Minute}, c),
			middleware.KeyFunc(func(*http.Request) string { return "k" }), opts...)
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range []struct {
			name string
			m    *middleware.Middleware
		}{{"New", viaEngine}, {"ForLimiter", viaLimiter}} {
			step := fmt.Sprintf("%s, fail open %v", path.name, open)
			logged = nil
			h := path.m.Handler(http.HandlerFunc(ok))
			chunked := httptest.NewRequest("POST", "/up", strings.NewReader(strings.Repeat("x", 600)))
			chunked.ContentLength = -1 // as net/http sets it for Transfer-Encoding: chunked
			w := httptest.NewRecorder()
			h.ServeHTTP(w, chunked)
			const body = `{"type":"about:blank","title":"Internal Server Error","status":500,` +
				`"detail":"the rate limiter cannot decide this request: the server gave it a negative cost (-1)","instance":"/up"}` + "\n"
			if w.Code != 500 || w.Body.String() != body {
				t.Errorf("%s: a chunked body: %d %q, want 500 %q", step, w.Code, w.Body, body)
			}
			const log = "middleware: WithCost returned -1 for POST /up: a cost must not be negative " +
				"(r.ContentLength is -1 when the body's length is unknown, e.g. chunked: see WithCost); answered 500"
			if len(logged) != 1 || logged[0] != log {
				t.Errorf("%s: logged %q, want [%q]", step, logged, log)
			}
			w = httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("POST", "/up", strings.NewReader(strings.Repeat("x", 300))))
			if got := w.Header().Get("RateLimit"); w.Code != 200 || !strings.HasPrefix(got, `"upload";r=700;`) {
				t.Errorf("%s: 300 bytes after the refused chunked body: %d RateLimit %q, want 200 r=700 (nothing charged before)", step, w.Code, got)
			}

			g := grpcRequest("/pkg.Svc/Up", "application/grpc")
			g.ContentLength = -1
			w = httptest.NewRecorder()
			h.ServeHTTP(w, g)
			if got := w.Header().Get("Grpc-Status"); got != "13" {
				t.Errorf("%s: a gRPC call of unknown length: grpc-status %q, want 13 (INTERNAL)", step, got)
			}
		}
	}
}
