package middleware_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/dimension"
	"github.com/floodgate/floodgate/middleware"
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
