package middleware_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/dimension"
	"github.com/floodgate/floodgate/headers"
	"github.com/floodgate/floodgate/middleware"
	"github.com/floodgate/floodgate/policy"
)

var perKey = dimension.Spec{Descriptors: []dimension.DescriptorSpec{{Entries: []dimension.EntrySpec{{Source: "generic_key", Value: "k"}}}}}

const oneAMinute = `
domain: web
descriptors:
  - key: generic_key
    value: k
    rate_limit: {name: per-key, unit: minute, requests_per_unit: 1}
`

// refuse runs two requests through a middleware on oneAMinute with opts
// and returns the recorder of the second, refused one.
func refuse(t *testing.T, r *http.Request, opts ...middleware.Option) *httptest.ResponseRecorder {
	t.Helper()
	m, err := middleware.New(engine(t, oneAMinute, newClock(t0)), "web", extractor(t, perKey), opts...)
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(ok))
	h.ServeHTTP(httptest.NewRecorder(), r.Clone(r.Context()))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// A refusal is answered with the status WithRefuseStatus sets and the
// problem type the draft gives it: 429 (the default) is the client's quota,
// quota-exceeded (-10 §5.1); 503 is the server shedding load,
// temporary-reduced-capacity (§5.2), its title, status and detail saying
// so. The fields, Retry-After and violated-policies are the same either
// way, and a gRPC client hears the same whatever the status:
// RESOURCE_EXHAUSTED, gRPC's code for a quota, with its pushback.
func TestRefuseStatus(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []middleware.Option
		status int
		typ    string
		title  string
		detail string
	}{
		{"default", nil, 429, middleware.TypeQuotaExceeded,
			"Request cannot be satisfied as assigned quota has been exceeded", "per-key: rate limit exceeded; retry in 50 s"},
		{"429", []middleware.Option{middleware.WithRefuseStatus(429)}, 429, middleware.TypeQuotaExceeded,
			"Request cannot be satisfied as assigned quota has been exceeded", "per-key: rate limit exceeded; retry in 50 s"},
		{"503", []middleware.Option{middleware.WithRefuseStatus(503)}, 503,
			"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",
			"Request cannot be satisfied due to temporary server capacity constraints", "per-key: over the server's capacity; retry in 50 s"},
	} {
		w := refuse(t, httptest.NewRequest("GET", "/a", nil), tc.opts...)
		var p struct {
			Type       string   `json:"type"`
			Title      string   `json:"title"`
			Status     int      `json:"status"`
			Detail     string   `json:"detail"`
			Violated   []string `json:"violated-policies"`
			RetryAfter int64    `json:"retry-after"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
			t.Fatalf("%s: body %q: %v", tc.name, w.Body, err)
		}
		if w.Code != tc.status || p.Status != tc.status || p.Type != tc.typ || p.Title != tc.title || p.Detail != tc.detail ||
			len(p.Violated) != 1 || p.Violated[0] != "per-key" || p.RetryAfter != 50 {
			t.Errorf("%s: %d %s\nwant %d, type %s, title %q, detail %q, violated [per-key], retry-after 50", tc.name, w.Code, w.Body, tc.status, tc.typ, tc.title, tc.detail)
		}
		wantFields(t, tc.name, w.Result().Header, map[string]string{
			"Content-Type": "application/problem+json", "Retry-After": "50",
			"RateLimit-Policy": `"per-key";q=1;w=60`, "RateLimit": `"per-key";r=0;t=50`,
		})

		w = refuse(t, grpcRequest("/pkg.Svc/M", "application/grpc"), tc.opts...)
		wantFields(t, tc.name+", gRPC", w.Result().Header, map[string]string{
			"Grpc-Status": "8", "Grpc-Message": "per-key: rate limit exceeded; retry in 50 s", "Grpc-Retry-Pushback-Ms": "50000",
			"Retry-After": "50", "RateLimit": `"per-key";r=0;t=50`,
		})
		if w.Code != 200 {
			t.Errorf("%s, gRPC: HTTP %d, want 200 (trailers-only)", tc.name, w.Code)
		}
	}
}

// New refuses a refusal status other than 429 or 503, saying which.
func TestRefuseStatusChecked(t *testing.T) {
	for _, status := range []int{200, 403, 500, 502} {
		_, err := middleware.New(engine(t, oneAMinute, nil), "web", extractor(t, perKey), middleware.WithRefuseStatus(status))
		if err == nil || !strings.Contains(err.Error(), "WithRefuseStatus("+strconv.Itoa(status)+")") {
			t.Errorf("WithRefuseStatus(%d): New = %v, want an error naming it", status, err)
		}
	}
}

// A refusal no limit explains (the store refused a Take as a whole while
// each of its limits alone passed: the policy Engine marks the statuses
// OVER_LIMIT with admitting decisions) names no time, having none, but
// does not say that requests in flight held it: its detail said "too many
// requests in flight; retry when one of them completes" for a rate limit,
// a reason a concurrency limit's refusal alone has.
func TestUnexplainedRefusalBlamesNoSlots(t *testing.T) {
	d := algo.Decision{Allowed: true, Limit: 10, Remaining: 5, ResetAfter: 40 * time.Second}
	for _, tc := range []struct {
		unit, want string
	}{
		{"", "per-route: rate limit exceeded"},
		{policy.ConcurrentRequests, "per-route: rate limit exceeded"},
	} {
		resp := policy.Response{Code: policy.CodeOverLimit, Strategy: policy.StrategyReject, Statuses: []policy.Status{{
			Code: policy.CodeOverLimit, Matched: true, Rule: "per-route", Decision: d, Window: time.Minute, QuotaUnit: tc.unit,
			Limits: []policy.LimitStatus{{Name: "per-route", Decision: d, Window: time.Minute, QuotaUnit: tc.unit}}}}}
		w := httptest.NewRecorder()
		middleware.Reject(w, httptest.NewRequest("GET", "/r", nil), resp, headers.FromStatuses(resp.Statuses))
		var p middleware.Problem
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		if p.Detail != tc.want || p.RetryAfter != nil || w.Header().Get("Retry-After") != "" {
			t.Errorf("unit %q: detail %q, retry-after %v, Retry-After %q; want %q and no time", tc.unit, p.Detail, p.RetryAfter, w.Header().Get("Retry-After"), tc.want)
		}
	}
	// A concurrency limit that refused still says why.
	slots := algo.Decision{Limit: 1, RetryAfter: time.Minute, ResetAfter: time.Minute}
	resp := policy.Response{Code: policy.CodeOverLimit, Strategy: policy.StrategyReject, Statuses: []policy.Status{{
		Code: policy.CodeOverLimit, Matched: true, Rule: "in-flight", Decision: slots, QuotaUnit: policy.ConcurrentRequests}}}
	w := httptest.NewRecorder()
	middleware.Reject(w, httptest.NewRequest("GET", "/r", nil), resp, headers.FromStatuses(resp.Statuses))
	if want := `"detail":"in-flight: too many requests in flight; retry when one of them completes"`; !strings.Contains(w.Body.String(), want) {
		t.Errorf("concurrency refusal: body %s, want %s", w.Body.String(), want)
	}
}
