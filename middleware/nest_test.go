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

// Two Floodgate middlewares nested — a per-IP limit (ForLimiter) around
// a per-route one (New over rules) — state both limits: the inner one
// adds its members to the outer one's RateLimit-Policy and RateLimit
// lists, where before its write replaced them; X-RateLimit-* are the
// tighter set's (fewer remaining, then the later reset), whichever
// middleware wrote it, and Retry-After the longer. A field the outer
// middleware did not write (Retry-After on an admission) is the inner
// one's alone. When the outer one refuses, the inner one never runs: the
// fields are the outer one's alone.
func TestNestedMiddlewaresListBothLimits(t *testing.T) {
	const inner = "domain: web\ndescriptors:\n  - key: remote_address\n    rate_limit: {name: per-route, unit: minute, requests_per_unit: %d}\n"
	for _, tc := range []struct {
		name         string
		outer, inner int64 // the limits per minute
		requests     int
		status       int
		want         map[string]string
	}{
		{"inner tighter", 100, 10, 1, 200, map[string]string{
			"RateLimit-Policy":      `"per-ip";q=100;w=60, "per-route";q=10;w=60`,
			"RateLimit":             `"per-ip";r=99;t=50, "per-route";r=9;t=50`,
			"X-RateLimit-Limit":     "10",
			"X-RateLimit-Remaining": "9",
			"X-RateLimit-Reset":     "50",
			"Retry-After":           "",
		}},
		{"outer tighter", 2, 10, 2, 200, map[string]string{
			"RateLimit-Policy":      `"per-ip";q=2;w=60, "per-route";q=10;w=60`,
			"RateLimit":             `"per-ip";r=0;t=50, "per-route";r=8;t=50`,
			"X-RateLimit-Limit":     "2",
			"X-RateLimit-Remaining": "0",
			"X-RateLimit-Reset":     "50",
			"Retry-After":           "",
		}},
		{"outer refuses", 1, 10, 2, 429, map[string]string{ // the inner never runs
			"RateLimit-Policy":      `"per-ip";q=1;w=60`,
			"RateLimit":             `"per-ip";r=0;t=50`,
			"X-RateLimit-Limit":     "1",
			"X-RateLimit-Remaining": "0",
			"X-RateLimit-Reset":     "50",
			"Retry-After":           "50",
		}},
		{"inner refuses", 100, 1, 2, 429, map[string]string{
			"RateLimit-Policy":      `"per-ip";q=100;w=60, "per-route";q=1;w=60`,
			"RateLimit":             `"per-ip";r=98;t=50, "per-route";r=0;t=50`,
			"X-RateLimit-Limit":     "1",
			"X-RateLimit-Remaining": "0",
			"X-RateLimit-Reset":     "50",
			"Retry-After":           "50",
		}},
	} {
		c := newClock(t0)
		in, err := middleware.New(engine(t, fmt.Sprintf(inner, tc.inner), c), "web", extractor(t, perIP))
		if err != nil {
			t.Fatal(err)
		}
		out, err := middleware.ForLimiter(newLimiter(t, "per-ip", algo.Params{Algorithm: algo.FixedWindow, Limit: tc.outer, Period: time.Minute}, c),
			middleware.ClientIPKey())
		if err != nil {
			t.Fatal(err)
		}
		h := out.Handler(in.Handler(http.HandlerFunc(ok)))
		var w *httptest.ResponseRecorder
		for range tc.requests {
			w = httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		}
		if w.Code != tc.status {
			t.Errorf("%s: status %d, want %d", tc.name, w.Code, tc.status)
		}
		wantFields(t, tc.name, w.Header(), tc.want)
		if n := len(w.Header().Values("RateLimit")); n != 1 {
			t.Errorf("%s: %d RateLimit field lines, want 1", tc.name, n)
		}
	}
}

// A Retry-After already on the response (a handler around the
// middleware set it) stays when it is longer than the inner refusal's:
// after it, both admit again; a shorter one gives way.
func TestNestedRetryAfterLongest(t *testing.T) {
	m, err := middleware.New(engine(t, perIPConfig, newClock(t0)), "web", extractor(t, perIP))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ outer, want string }{{"120", "120"}, {"5", "50"}} {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", tc.outer)
			m.Handler(http.HandlerFunc(ok)).ServeHTTP(w, r)
		})
		var w *httptest.ResponseRecorder
		for range 4 { // the 4th is refused, retry in 50 s
			w = httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		}
		if w.Code != 429 || w.Header().Get("Retry-After") != tc.want {
			t.Errorf("outer Retry-After %s: %d Retry-After %q, want 429 and %s", tc.outer, w.Code, w.Header().Get("Retry-After"), tc.want)
		}
	}
}

// nestedUnder runs one request through m inside a handler that sets the
// fields of outer first, as code around the middleware may, and returns
// the response's header.
func nestedUnder(t *testing.T, m *middleware.Middleware, outer map[string]string) http.Header {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range outer {
			w.Header().Set(k, v)
		}
		m.Handler(http.HandlerFunc(ok)).ServeHTTP(w, r)
	})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	return w.Header()
}

// A RateLimit or RateLimit-Policy value already on the response that is
// not a list of the draft's members (Strings with parameters) — an
// older draft's dictionary or unnamed quotas, set by other code — is
// replaced by the middleware's, as before nesting: appended to, the
// field was malformed and a client drops it whole, the middleware's
// member too. A list of the draft's members is still added to, a name
// holding a comma and a String parameter included.
func TestNestedNonListFieldReplaced(t *testing.T) {
	for _, tc := range []struct {
		name        string
		outer, want map[string]string
	}{
		{"older drafts", map[string]string{
			"RateLimit":        "limit=100, remaining=50, reset=30",
			"RateLimit-Policy": "100;w=60",
		}, map[string]string{
			"RateLimit":        `"per-ip";r=2;t=50`,
			"RateLimit-Policy": `"per-ip";q=3;w=60`,
		}},
		{"empty and a trailing comma", map[string]string{
			"RateLimit":        " ",
			"RateLimit-Policy": `"a";q=1;w=1,`,
		}, map[string]string{
			"RateLimit":        `"per-ip";r=2;t=50`,
			"RateLimit-Policy": `"per-ip";q=3;w=60`,
		}},
		{"a String left open", map[string]string{
			"RateLimit-Policy": `"a;q=1;w=1`,
		}, map[string]string{
			"RateLimit-Policy": `"per-ip";q=3;w=60`,
		}},
		{"the draft's members", map[string]string{
			"RateLimit":        `"a,b";r=4;t=9`,
			"RateLimit-Policy": `"a,b";q=5;w=10;qu="content-bytes", "c";q=1`,
		}, map[string]string{
			"RateLimit":        `"a,b";r=4;t=9, "per-ip";r=2;t=50`,
			"RateLimit-Policy": `"a,b";q=5;w=10;qu="content-bytes", "c";q=1, "per-ip";q=3;w=60`,
		}},
	} {
		m, err := middleware.New(engine(t, perIPConfig, newClock(t0)), "web", extractor(t, perIP))
		if err != nil {
			t.Fatal(err)
		}
		wantFields(t, tc.name, nestedUnder(t, m, tc.outer), tc.want)
	}
}

// X-RateLimit-Limit, -Remaining and -Reset already on the response are
// kept, when they are the tighter set, only if all three are there:
// else the client would read one limit's remaining with another's limit
// or reset (an outer Remaining 1 beside the middleware's Limit 3 and
// Reset 50). A whole set is kept as before.
func TestNestedXRateLimitSetWhole(t *testing.T) {
	for _, tc := range []struct {
		name        string
		outer, want map[string]string
	}{
		{"remaining alone", map[string]string{"X-RateLimit-Remaining": "1"},
			map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "50"}},
		{"no reset", map[string]string{"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "1"},
			map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "50"}},
		{"no limit", map[string]string{"X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "7"},
			map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "50"}},
		{"whole", map[string]string{"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "7"},
			map[string]string{"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "7"}},
	} {
		m, err := middleware.New(engine(t, perIPConfig, newClock(t0)), "web", extractor(t, perIP))
		if err != nil {
			t.Fatal(err)
		}
		wantFields(t, tc.name, nestedUnder(t, m, tc.outer), tc.want)
	}
}

// X-RateLimit-* describe one limit, so a nested middleware takes the
// outer set for the tighter one only when both count in the same quota
// unit: remaining bytes (WithCostUnit) or free concurrency slots are not
// fewer than remaining requests. Before, the set with fewer remaining
// won whatever its unit: a per-IP limit's 99 requests replaced an upload
// limit's 700 bytes, and a concurrency limit's 4 free slots a rate's 99
// requests. Two limits in bytes are still compared.
func TestNestedXRateLimitLikeWithLike(t *testing.T) {
	byLength := middleware.WithCost(func(r *http.Request) int64 { return r.ContentLength })
	inBytes := []middleware.Option{byLength, middleware.WithCostUnit(headers.ContentBytes)}
	key := middleware.KeyFunc(func(*http.Request) string { return "k" })
	requests := algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Period: time.Minute}
	for _, tc := range []struct {
		name string
		// outer and inner make the two middlewares on one clock.
		outer, inner func(*clock) (*middleware.Middleware, error)
		want         map[string]string
	}{
		{"bytes inside requests", func(c *clock) (*middleware.Middleware, error) {
			return middleware.ForLimiter(newLimiter(t, "per-ip", requests, c), middleware.ClientIPKey())
		}, func(c *clock) (*middleware.Middleware, error) {
			return middleware.New(engine(t, bytesAMinute, c), "web", extractor(t, perKey), inBytes...)
		}, map[string]string{
			"RateLimit-Policy":  `"per-ip";q=100;w=60, "upload";q=1000;qu="content-bytes";w=60`,
			"X-RateLimit-Limit": "1000", "X-RateLimit-Remaining": "700", "X-RateLimit-Reset": "50",
		}},
		{"requests inside bytes", func(c *clock) (*middleware.Middleware, error) {
			return middleware.New(engine(t, bytesAMinute, c), "web", extractor(t, perKey), inBytes...)
		}, func(c *clock) (*middleware.Middleware, error) {
			return middleware.ForLimiter(newLimiter(t, "per-ip", algo.Params{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Minute}, c), key)
		}, map[string]string{
			"RateLimit-Policy":  `"upload";q=1000;qu="content-bytes";w=60, "per-ip";q=1000;w=60`,
			"X-RateLimit-Limit": "1000", "X-RateLimit-Remaining": "999", "X-RateLimit-Reset": "50",
		}},
		{"a rate inside a concurrency limit", func(c *clock) (*middleware.Middleware, error) {
			return middleware.ForLimiter(newLimiter(t, "in-flight", algo.Params{Algorithm: algo.Concurrency, Limit: 5, LeaseTTL: time.Minute}, c), key)
		}, func(c *clock) (*middleware.Middleware, error) {
			return middleware.ForLimiter(newLimiter(t, "per-ip", requests, c), key)
		}, map[string]string{
			"RateLimit-Policy":  `"in-flight";q=5;qu="concurrent-requests", "per-ip";q=100;w=60`,
			"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "99", "X-RateLimit-Reset": "50",
		}},
		{"bytes inside bytes", func(c *clock) (*middleware.Middleware, error) {
			return middleware.ForLimiter(newLimiter(t, "per-ip", algo.Params{Algorithm: algo.FixedWindow, Limit: 500, Period: time.Minute}, c),
				middleware.ClientIPKey(), inBytes...)
		}, func(c *clock) (*middleware.Middleware, error) {
			return middleware.New(engine(t, bytesAMinute, c), "web", extractor(t, perKey), inBytes...)
		}, map[string]string{
			"RateLimit-Policy":  `"per-ip";q=500;qu="content-bytes";w=60, "upload";q=1000;qu="content-bytes";w=60`,
			"X-RateLimit-Limit": "500", "X-RateLimit-Remaining": "200", "X-RateLimit-Reset": "50",
		}},
	} {
		c := newClock(t0)
		out, err := tc.outer(c)
		if err != nil {
			t.Fatal(err)
		}
		in, err := tc.inner(c)
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		out.Handler(in.Handler(http.HandlerFunc(ok))).ServeHTTP(w, httptest.NewRequest("POST", "/up", strings.NewReader(strings.Repeat("x", 300))))
		if w.Code != 200 {
			t.Errorf("%s: status %d, want 200", tc.name, w.Code)
		}
		wantFields(t, tc.name, w.Header(), tc.want)
	}
}

// When the inner middleware refuses a request the outer one admitted,
// X-RateLimit-* are the refusing limit's, as headers.Tightest picks a
// refusing limit first: before, the outer limit's set won on fewer
// remaining, and the 429 said X-RateLimit-Remaining: 8 of a limit that
// had admitted it. Retry-After is the refusing limit's (the outer one
// wrote none).
func TestNestedRefusalStatesTheRefusingLimit(t *testing.T) {
	c := newClock(t0)
	key := middleware.KeyFunc(func(*http.Request) string { return "k" })
	out, err := middleware.ForLimiter(newLimiter(t, "per-ip", algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Minute}, c), key)
	if err != nil {
		t.Fatal(err)
	}
	in, err := middleware.ForLimiter(newLimiter(t, "per-route", algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Period: time.Minute}, c), key,
		middleware.WithCost(func(*http.Request) int64 { return 60 }))
	if err != nil {
		t.Fatal(err)
	}
	h := out.Handler(in.Handler(http.HandlerFunc(ok)))
	for _, step := range []struct {
		status int
		want   map[string]string
	}{
		{200, map[string]string{ // both admit: the outer one is tighter
			"RateLimit":         `"per-ip";r=9;t=50, "per-route";r=40;t=50`,
			"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "9", "X-RateLimit-Reset": "50", "Retry-After": "",
		}},
		{429, map[string]string{ // 60 over the 40 left: the inner one refuses
			"RateLimit":         `"per-ip";r=8;t=50, "per-route";r=40;t=50`,
			"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "40", "X-RateLimit-Reset": "50", "Retry-After": "50",
		}},
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != step.status {
			t.Errorf("status %d, want %d", w.Code, step.status)
		}
		wantFields(t, fmt.Sprint(step.status), w.Header(), step.want)
	}
}

// The unit of X-RateLimit-* already on the response is read from the
// RateLimit-Policy and RateLimit lists there: the qu of the policy whose
// RateLimit member has the set's remaining. A set of another unit than
// the middleware's (requests), or whose unit cannot be told (two
// policies of different units with that remaining, a RateLimit-Policy
// that is not a list of the draft's members) leaves the middleware's
// set; qu="requests", or no RateLimit-Policy at all, is requests.
func TestNestedXRateLimitUnitFromLists(t *testing.T) {
	const policies = `"b";q=100;w=60, "a";q=10;qu="concurrent-requests"`
	own := map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "50"}
	for _, tc := range []struct {
		name        string
		outer, want map[string]string
	}{
		{"a rate's, tighter", map[string]string{"RateLimit-Policy": policies, "RateLimit": `"b";r=1;t=7, "a";r=5`,
			"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "7"},
			map[string]string{"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "7"}},
		{"a concurrency limit's", map[string]string{"RateLimit-Policy": policies, "RateLimit": `"b";r=50;t=7, "a";r=1`,
			"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "60"}, own},
		{"an escaped name", map[string]string{"RateLimit-Policy": `"b\\\"c";q=100;w=60, "a";q=10;qu="concurrent-requests"`,
			"RateLimit": `"b\\\"c";r=1;t=7, "a";r=5`, "X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "7"},
			map[string]string{"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "7"}},
		{"either", map[string]string{"RateLimit-Policy": policies, "RateLimit": `"b";r=1;t=7, "a";r=1`,
			"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "7"}, own},
		{"qu=requests", map[string]string{"RateLimit-Policy": `"b";q=100;qu="requests";w=60`, "RateLimit": `"b";r=1;t=7`,
			"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "7"},
			map[string]string{"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "7"}},
		{"an older draft's policy", map[string]string{"RateLimit-Policy": "100;w=60",
			"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "7"}, own},
		{"no policy", map[string]string{"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "7"},
			map[string]string{"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "7"}},
	} {
		m, err := middleware.New(engine(t, perIPConfig, newClock(t0)), "web", extractor(t, perIP))
		if err != nil {
			t.Fatal(err)
		}
		wantFields(t, tc.name, nestedUnder(t, m, tc.outer), tc.want)
	}
}

// With a header set without the IETF fields (WithHeaders, Set
// XRateLimit|RetryAfter), no middleware writes a RateLimit-Policy list,
// so its absence says nothing of the outer set's unit: the middleware's
// own set stays. Before, the absence read as requests, and a concurrency
// limit's free slots (Limit 5, Remaining 4) replaced a rate's 100 and 99
// requests, as 528fc85 meant to stop. Two rates are no longer compared
// then either: the inner one's set is stated, a limit that applies in
// the unit its numbers count.
func TestNestedXRateLimitUnitWithoutLists(t *testing.T) {
	xOnly := middleware.WithHeaders(headers.Options{Set: headers.XRateLimit | headers.RetryAfter})
	key := middleware.KeyFunc(func(*http.Request) string { return "k" })
	rate := algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Period: time.Minute}
	for _, tc := range []struct {
		name  string
		outer algo.Params
	}{
		{"a rate inside a concurrency limit", algo.Params{Algorithm: algo.Concurrency, Limit: 5, LeaseTTL: time.Minute}},
		{"a rate inside a tighter rate", algo.Params{Algorithm: algo.FixedWindow, Limit: 5, Period: time.Minute}},
	} {
		c := newClock(t0)
		out, err := middleware.ForLimiter(newLimiter(t, "outer", tc.outer, c), key, xOnly)
		if err != nil {
			t.Fatal(err)
		}
		in, err := middleware.ForLimiter(newLimiter(t, "per-ip", rate, c), key, xOnly)
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		out.Handler(in.Handler(http.HandlerFunc(ok))).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != 200 {
			t.Errorf("%s: status %d, want 200", tc.name, w.Code)
		}
		wantFields(t, tc.name, w.Header(), map[string]string{
			"RateLimit-Policy": "", "RateLimit": "",
			"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "99", "X-RateLimit-Reset": "50",
		})
	}
}
