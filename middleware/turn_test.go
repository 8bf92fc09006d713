package middleware_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate/dimension"
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

// A shaped request whose turn comes after its deadline or WithMaxWait is
// answered 503 with the body of a 503 refusal, not a generic one: the
// temporary-reduced-capacity type, the delaying limit as
// violated-policies, its wait rounded up as retry-after — the value of
// Retry-After and of the fields' t — and a detail saying which bound the
// wait passes. New's and ForLimiter's middlewares answer alike, for the
// shaper and the smooth algorithms.
func TestTurnPastDeadlineProblem(t *testing.T) {
	const prefix = `{"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",` +
		`"title":"Request cannot be satisfied due to temporary server capacity constraints","status":503,"detail":"api: `
	for _, tc := range []struct {
		name, limit string
		retry       string // seconds: Retry-After, t and retry-after
	}{
		{"shaper", "{name: api, algorithm: shaper, unit: second, requests_per_unit: 1, burst: 3}", "1"},
		{"smooth_bursty", "{name: api, algorithm: smooth_bursty, unit: minute, requests_per_unit: 30, max_wait: 10s}", "2"},
		{"smooth_warmup", "{name: api, algorithm: smooth_warmup, unit: second, requests_per_unit: 1, warmup_period: 4s, max_wait: 10s}", "3"},
	} {
		yaml := "domain: web\ndescriptors:\n  - key: remote_address\n    rate_limit: " + tc.limit + "\n"
		for _, bound := range []struct {
			name   string
			opts   []middleware.Option
			ctx    func() (context.Context, context.CancelFunc)
			detail string
		}{
			{"WithMaxWait", []middleware.Option{middleware.WithMaxWait(200 * time.Millisecond)},
				func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
				"the queue's wait passes the longest this server holds a request"},
			{"deadline", nil,
				func() (context.Context, context.CancelFunc) {
					return context.WithTimeout(context.Background(), 200*time.Millisecond)
				},
				"the queue's wait passes the request's deadline"},
		} {
			c := newClock(t0)
			viaEngine, err := middleware.New(engine(t, yaml, c), "web", extractor(t, perIP), bound.opts...)
			if err != nil {
				t.Fatal(err)
			}
			viaLimiter, err := middleware.ForLimiter(newLimiter(t, "api", ruleParams(t, yaml, "api"), c), middleware.ClientIPKey(), bound.opts...)
			if err != nil {
				t.Fatal(err)
			}
			for _, path := range []struct {
				name string
				m    *middleware.Middleware
			}{{"New", viaEngine}, {"ForLimiter", viaLimiter}} {
				step := tc.name + ", " + bound.name + ", " + path.name
				h := path.m.Handler(http.HandlerFunc(ok))
				if w := httptest.NewRecorder(); true {
					h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
					if w.Code != 200 {
						t.Fatalf("%s: first request %d, want 200 at once", step, w.Code)
					}
				}
				ctx, cancel := bound.ctx()
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest("GET", "/s", nil).WithContext(ctx))
				cancel()
				want := prefix + bound.detail + "; retry in " + tc.retry + ` s","instance":"/s","violated-policies":["api"],"retry-after":` + tc.retry + "}\n"
				if w.Code != http.StatusServiceUnavailable || w.Body.String() != want {
					t.Errorf("%s: %d %s\nwant 503 %s", step, w.Code, w.Body, want)
				}
				if rl := w.Header().Get("RateLimit"); !strings.HasSuffix(rl, ";t="+tc.retry) {
					t.Errorf("%s: RateLimit %q, want t=%s", step, rl, tc.retry)
				}
				wantFields(t, step, w.Header(), map[string]string{
					"Retry-After": tc.retry, "X-RateLimit-Reset": tc.retry, "Content-Type": "application/problem+json",
				})
			}
		}
	}
}

// A shadow rule's delay is never held, so it does not refuse a shaped
// request whose turn (by a rule that counts) comes after WithMaxWait:
// violated-policies and the detail name the delaying rule alone, and the
// shadow rule's fields are those of an admission.
func TestTurnPastDeadlineShadowNotViolated(t *testing.T) {
	const yaml = `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {name: real, algorithm: shaper, unit: second, requests_per_unit: 1, burst: 3}
  - key: generic_key
    value: k
    rate_limit: {name: trial, algorithm: shaper, unit: second, requests_per_unit: 2, burst: 3, strategy: shadow}
`
	spec := dimension.Spec{Descriptors: []dimension.DescriptorSpec{
		{Entries: []dimension.EntrySpec{{Source: "remote_address"}}},
		{Entries: []dimension.EntrySpec{{Source: "generic_key", Value: "k"}}},
	}}
	m, err := middleware.New(engine(t, yaml, newClock(t0)), "web", extractor(t, spec), middleware.WithMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(ok))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/s", nil)) // passes at once
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/s", nil)) // real: 1 s away; trial: 0.5 s, not held
	var p middleware.Problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("body %q: %v", w.Body, err)
	}
	const detail = "real: the queue's wait passes the longest this server holds a request; retry in 1 s"
	if w.Code != 503 || len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != "real" || p.Detail != detail {
		t.Errorf("turn past WithMaxWait beside a shadow shaper: %d violated %q detail %q, want 503 [real] %q", w.Code, p.ViolatedPolicies, p.Detail, detail)
	}
	wantFields(t, "beside a shadow shaper", w.Header(), map[string]string{
		"RateLimit": `"real";r=2;t=1, "trial";r=2;t=1`, "Retry-After": "1", "X-RateLimit-Limit": "4", "X-RateLimit-Reset": "1",
	})
}
