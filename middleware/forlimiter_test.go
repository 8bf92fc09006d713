package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/dimension"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/middleware"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
)

// newLimiter makes a limiter named name over a fresh memory store on
// clock c.
func newLimiter(t testing.TB, name string, p algo.Params, c *clock) *limiter.Limiter {
	t.Helper()
	st, err := memory.New(memory.WithClock(c.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	lim, err := limiter.New(st, name, p)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// ruleParams returns the parameters of the rule named name in domain
// web of yaml, as the Engine compiles them.
func ruleParams(t *testing.T, yaml, name string) algo.Params {
	t.Helper()
	cfg, err := policy.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range cfg.Domain("web").Rules() {
		if r.Name == name {
			return r.Params
		}
	}
	t.Fatalf("no rule %q", name)
	return algo.Params{}
}

// TestForLimiterFieldsMatchEngine: for every algorithm, a ForLimiter
// middleware answers each request of a sequence — admissions, refusals,
// a shaper's or smooth limit's delay past WithMaxWait, a clock step — with
// the same status, header fields and body as New's over an Engine whose
// rule has the same name and parameters: a bucket's window is the time
// its burst takes to refill, not the period (q=10;w=10 for 10 at 60 a
// minute), a smooth warm-up's its stable rate, a calendar month's the
// month's length, a concurrency limit's none.
func TestForLimiterFieldsMatchEngine(t *testing.T) {
	for _, tc := range []struct {
		name, limit string
		n           int // requests before the clock steps
		step        time.Duration
	}{
		{"fixed_window", "{name: api, unit: minute, requests_per_unit: 3}", 5, 20 * time.Second},
		{"calendar_month", "{name: api, unit: month, requests_per_unit: 2}", 3, 24 * time.Hour},
		{"sliding_log", "{name: api, algorithm: sliding_log, unit: minute, requests_per_unit: 3}", 5, 20 * time.Second},
		{"sliding_window", "{name: api, algorithm: sliding_window, unit: minute, requests_per_unit: 3}", 5, 30 * time.Second},
		{"token_bucket", "{name: api, algorithm: token_bucket, unit: minute, requests_per_unit: 60, burst: 10}", 12, 1500 * time.Millisecond},
		{"token_bucket_subsecond", "{name: api, algorithm: token_bucket, unit: second, requests_per_unit: 1000, burst: 3}", 5, 2 * time.Millisecond},
		{"gcra", "{name: api, algorithm: gcra, unit: minute, requests_per_unit: 30, burst: 4}", 6, 3 * time.Second},
		{"shaper", "{name: api, algorithm: shaper, unit: second, requests_per_unit: 2, burst: 3, delay: 1}", 6, time.Second},
		{"smooth_bursty", "{name: api, algorithm: smooth_bursty, unit: second, requests_per_unit: 2, max_burst_seconds: 2}", 6, time.Second},
		{"smooth_warmup", "{name: api, algorithm: smooth_warmup, unit: second, requests_per_unit: 10, warmup_period: 2s, max_wait: 1s}", 4, time.Second},
		{"concurrency", "{name: api, algorithm: concurrency, requests_per_unit: 2}", 4, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			yaml := "domain: web\ndescriptors:\n  - key: remote_address\n    rate_limit: " + tc.limit + "\n"
			c := newClock(t0)
			// A delay is over WithMaxWait at once: no request is held,
			// and both answer the turn past the deadline.
			opts := []middleware.Option{middleware.WithMaxWait(time.Nanosecond), middleware.WithClock(c.Now)}
			viaEngine, err := middleware.New(engine(t, yaml, c), "web", extractor(t, perIP), opts...)
			if err != nil {
				t.Fatal(err)
			}
			viaLimiter, err := middleware.ForLimiter(newLimiter(t, "api", ruleParams(t, yaml, "api"), c), middleware.ClientIPKey(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			var dones []func()
			for i := range tc.n + 1 {
				if i == tc.n {
					c.Advance(tc.step)
				}
				var got [2]*httptest.ResponseRecorder
				for j, m := range []*middleware.Middleware{viaEngine, viaLimiter} {
					w := httptest.NewRecorder()
					r := httptest.NewRequest("GET", "/x", nil)
					r.RemoteAddr = "192.0.2.7:1234"
					done, pass := m.Check(w, r)
					if pass {
						dones = append(dones, done) // concurrency slots stay held
					}
					got[j] = w
				}
				step := fmt.Sprintf("request %d", i+1)
				if got[0].Code != got[1].Code || got[0].Body.String() != got[1].Body.String() {
					t.Errorf("%s: ForLimiter %d %q, engine %d %q", step, got[1].Code, got[1].Body, got[0].Code, got[0].Body)
				}
				if g, w := fmt.Sprint(got[1].Header()), fmt.Sprint(got[0].Header()); g != w {
					t.Errorf("%s: ForLimiter's fields\n%s\nengine's\n%s", step, g, w)
				}
				if got[1].Header().Get("RateLimit-Policy") == "" {
					t.Errorf("%s: no RateLimit-Policy", step)
				}
			}
			for _, d := range dones {
				d()
			}
		})
	}
}

// TestForLimiterWindowStated: the policy's w for the buckets is the time
// the burst takes to refill (the engine's, which the test above compares
// with), written out for one of each, so that both paths cannot drift
// together to the period.
func TestForLimiterWindowStated(t *testing.T) {
	for _, tc := range []struct {
		p    algo.Params
		want string
	}{
		{algo.Params{Algorithm: algo.TokenBucket, Limit: 60, Period: time.Minute, Burst: 10}, `"api";q=10;w=10`},
		{algo.Params{Algorithm: algo.GCRA, Limit: 30, Period: time.Minute, Burst: 4}, `"api";q=4;w=8`},
		{algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Period: time.Hour}, `"api";q=100;w=3600`},
		{algo.Params{Algorithm: algo.SmoothWarmup, Limit: 10, Period: time.Second, WarmupPeriod: 2 * time.Second}, `"api";q=10;w=1`},
		{algo.Params{Algorithm: algo.Concurrency, Limit: 5}, `"api";q=5;qu="concurrent-requests"`},
	} {
		m, err := middleware.ForLimiter(newLimiter(t, "api", tc.p, newClock(t0)), middleware.ClientIPKey())
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		m.Handler(http.HandlerFunc(ok)).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if got := w.Header().Get("RateLimit-Policy"); got != tc.want {
			t.Errorf("%s: RateLimit-Policy %q, want %q", tc.p.Algorithm, got, tc.want)
		}
	}
}

// forLimiterRefusal is the body of the third request to a limit of two
// per minute named per-ip, 50 s before the window ends.
const forLimiterRefusal = `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",` +
	`"title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,` +
	`"detail":"per-ip: rate limit exceeded; retry in 50 s","instance":"/hello","violated-policies":["per-ip"],"retry-after":50}` + "\n"

// TestForLimiterMux: with net/http's ServeMux behind a real server, by
// client IP: exact fields on admission and refusal, and New's problem
// body.
func TestForLimiterMux(t *testing.T) {
	c := newClock(t0)
	lim := newLimiter(t, "per-ip", algo.Params{Algorithm: algo.FixedWindow, Limit: 2, Period: time.Minute}, c)
	limit, err := middleware.ForLimiter(lim, middleware.ClientIPKey())
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", ok)
	srv := httptest.NewServer(limit.Handler(mux))
	t.Cleanup(srv.Close)
	for i, want := range []map[string]string{
		{"RateLimit-Policy": `"per-ip";q=2;w=60`, "RateLimit": `"per-ip";r=1;t=50`, "X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "50", "Retry-After": ""},
		{"RateLimit-Policy": `"per-ip";q=2;w=60`, "RateLimit": `"per-ip";r=0;t=50`, "X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "50", "Retry-After": ""},
		{"RateLimit-Policy": `"per-ip";q=2;w=60`, "RateLimit": `"per-ip";r=0;t=50`, "X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "50", "Retry-After": "50",
			"Content-Type": "application/problem+json"},
	} {
		res := get(t, srv.URL+"/hello")
		wantStatus, wantBody := 200, "ok\n"
		if i == 2 {
			wantStatus, wantBody = 429, forLimiterRefusal
		}
		if res.status != wantStatus || res.body != wantBody {
			t.Errorf("request %d: %d %q, want %d %q", i+1, res.status, res.body, wantStatus, wantBody)
		}
		wantFields(t, fmt.Sprintf("request %d", i+1), res.h, want)
	}
}

// TestForLimiterChi: the middleware is chi middleware (Use), keyed here by
// a header through KeyFunc; each key has its own budget.
func TestForLimiterChi(t *testing.T) {
	c := newClock(t0)
	lim := newLimiter(t, "per-user", algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Second, Burst: 2}, c)
	limit, err := middleware.ForLimiter(lim, middleware.KeyFunc(func(r *http.Request) string { return r.Header.Get("X-User") }))
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(limit.Handler)
	r.Get("/items", ok)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	for i, tc := range []struct {
		user      string
		status    int
		rateLimit string
		retry     string
	}{
		{"ana", 200, `"per-user";r=1;t=1`, ""},
		{"ana", 200, `"per-user";r=0;t=2`, ""},
		{"ana", 429, `"per-user";r=0;t=1`, "1"},
		{"bo", 200, `"per-user";r=1;t=1`, ""},
	} {
		res := get(t, srv.URL+"/items", "X-User", tc.user)
		if res.status != tc.status {
			t.Errorf("request %d (%s): status %d, want %d", i+1, tc.user, res.status, tc.status)
		}
		wantFields(t, fmt.Sprintf("request %d (%s)", i+1, tc.user), res.h, map[string]string{
			"RateLimit-Policy": `"per-user";q=2;w=2`, "RateLimit": tc.rateLimit, "Retry-After": tc.retry})
	}
}

// TestForLimiterEmptyKeyPasses: a request for which the key function
// returns "" passes untouched — no header field, no store call (its key,
// "", keeps its whole budget) — however many come.
func TestForLimiterEmptyKeyPasses(t *testing.T) {
	lim := newLimiter(t, "per-user", algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Minute}, newClock(t0))
	limit, err := middleware.ForLimiter(lim, middleware.KeyFunc(func(r *http.Request) string { return r.Header.Get("X-User") }))
	if err != nil {
		t.Fatal(err)
	}
	h := limit.Handler(http.HandlerFunc(ok))
	for i := range 3 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != 200 || w.Body.String() != "ok\n" {
			t.Errorf("request %d without a key: %d %q, want 200 ok", i+1, w.Code, w.Body)
		}
		for _, f := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"} {
			if v := w.Header().Get(f); v != "" {
				t.Errorf("request %d without a key: %s: %s, want none", i+1, f, v)
			}
		}
	}
	d, err := lim.Peek(context.Background(), "", 1)
	if err != nil || !d.Allowed {
		t.Errorf("key \"\": %+v (%v), want its one unit left: a keyless request was charged", d, err)
	}
}

// TestForLimiterKeyErrors: a key that cannot be read is answered as New
// answers an extractor's error: 500 with no client address (a Unix socket
// peer), 400 for a key over 1024 bytes; each logged, naming the limiter.
func TestForLimiterKeyErrors(t *testing.T) {
	lim := newLimiter(t, "api", algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Minute}, newClock(t0))
	for _, tc := range []struct {
		key        middleware.Key
		remoteAddr string
		status     int
		detail     string
	}{
		{middleware.ClientIPKey(), "@", 500, `middleware: the key of limiter \"api\": no client IP: RemoteAddr \"@\" is not an IP address`},
		{middleware.KeyFunc(func(*http.Request) string { return strings.Repeat("k", 1025) }), "192.0.2.1:1", 400,
			`middleware: the key of limiter \"api\": value too long: 1025 bytes, at most 1024`},
	} {
		var logged error
		limit, err := middleware.ForLimiter(lim, tc.key, middleware.WithErrorLog(func(_ *http.Request, err error) { logged = err }))
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/k", nil)
		r.RemoteAddr = tc.remoteAddr
		limit.Handler(http.HandlerFunc(ok)).ServeHTTP(w, r)
		want := fmt.Sprintf(`{"type":"about:blank","title":%q,"status":%d,"detail":"%s","instance":"/k"}`+"\n", http.StatusText(tc.status), tc.status, tc.detail)
		if w.Code != tc.status || w.Body.String() != want {
			t.Errorf("%d %q\nwant %d %q", w.Code, w.Body, tc.status, want)
		}
		if logged == nil {
			t.Errorf("status %d: nothing logged", tc.status)
		}
	}
}

// TestForLimiterStoreError: a store that fails (here closed) is answered
// as New answers a Decider's failure: 503 with a problem body that says
// what kind of failure, not the store's message; with WithFailOpen the
// request passes, without fields.
func TestForLimiterStoreError(t *testing.T) {
	st, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	lim, err := limiter.New(st, "api", algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	closed, err := middleware.ForLimiter(lim, middleware.ClientIPKey())
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	closed.Handler(http.HandlerFunc(ok)).ServeHTTP(w, httptest.NewRequest("GET", "/s", nil))
	const want = `{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"the rate limiter could not decide: the store is unavailable","instance":"/s"}` + "\n"
	if w.Code != 503 || w.Body.String() != want || w.Header().Get("RateLimit") != "" {
		t.Errorf("closed store: %d %q %v\nwant 503 %q, no fields", w.Code, w.Body, w.Header(), want)
	}
	open, err := middleware.ForLimiter(lim, middleware.ClientIPKey(), middleware.WithFailOpen(true))
	if err != nil {
		t.Fatal(err)
	}
	w = httptest.NewRecorder()
	open.Handler(http.HandlerFunc(ok)).ServeHTTP(w, httptest.NewRequest("GET", "/s", nil))
	if w.Code != 200 || w.Header().Get("RateLimit") != "" {
		t.Errorf("closed store, fail open: %d %v, want 200 without fields", w.Code, w.Header())
	}
}

// TestForLimiterRetryAfterHonoured: a client that waits each Retry-After
// (on the store's clock, moved instead of slept) is admitted at its next
// try, for every algorithm that states one; the wait never reads 0.
func TestForLimiterRetryAfterHonoured(t *testing.T) {
	for _, p := range []algo.Params{
		{Algorithm: algo.FixedWindow, Limit: 3, Period: time.Minute},
		{Algorithm: algo.SlidingLog, Limit: 3, Period: 10 * time.Second},
		{Algorithm: algo.SlidingWindow, Limit: 3, Period: 10 * time.Second},
		{Algorithm: algo.TokenBucket, Limit: 3, Period: 2500 * time.Millisecond, Burst: 2},
		{Algorithm: algo.GCRA, Limit: 7, Period: 10 * time.Second, Burst: 3},
	} {
		c := newClock(t0.Add(123 * time.Millisecond))
		limit, err := middleware.ForLimiter(newLimiter(t, "api", p, c), middleware.ClientIPKey())
		if err != nil {
			t.Fatal(err)
		}
		h := limit.Handler(http.HandlerFunc(ok))
		refusals := 0
		for i := range 40 { // 40 tries: a budget spent and retried about ten times
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
			if w.Code == 200 {
				continue
			}
			refusals++
			secs, err := strconv.Atoi(w.Header().Get("Retry-After"))
			if w.Code != 429 || err != nil || secs < 1 {
				t.Fatalf("%s, try %d: %d Retry-After %q, want 429 and at least 1 s", p.Algorithm, i+1, w.Code, w.Header().Get("Retry-After"))
			}
			c.Advance(time.Duration(secs) * time.Second)
			w = httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
			if w.Code != 200 {
				t.Fatalf("%s, try %d: refused again (%d) after waiting Retry-After %d s", p.Algorithm, i+1, w.Code, secs)
			}
		}
		if refusals < 5 {
			t.Errorf("%s: %d refusals in 40 tries, want the budget spent repeatedly", p.Algorithm, refusals)
		}
	}
}

// TestForLimiterConcurrencySlot: on a Concurrency limit a request holds its
// slot until its handler returns: a third request while two are in flight
// is refused 429, without Retry-After (no time can be promised), and
// admitted once one of them completes.
func TestForLimiterConcurrencySlot(t *testing.T) {
	lim := newLimiter(t, "in-flight", algo.Params{Algorithm: algo.Concurrency, Limit: 2}, newClock(t0))
	limit, err := middleware.ForLimiter(lim, middleware.ClientIPKey())
	if err != nil {
		t.Fatal(err)
	}
	check := func() (*httptest.ResponseRecorder, func(), bool) {
		w := httptest.NewRecorder()
		done, pass := limit.Check(w, httptest.NewRequest("GET", "/c", nil))
		return w, done, pass
	}
	_, done1, pass1 := check()
	_, done2, pass2 := check()
	if !pass1 || !pass2 {
		t.Fatal("two requests on two slots: refused")
	}
	w, _, pass := check()
	const body = `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",` +
		`"title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,` +
		`"detail":"in-flight: too many requests in flight; retry when one of them completes","instance":"/c","violated-policies":["in-flight"]}` + "\n"
	if pass || w.Code != 429 || w.Body.String() != body || w.Header().Get("Retry-After") != "" ||
		w.Header().Get("RateLimit") != `"in-flight";r=0` {
		t.Errorf("third in flight: %v %d %v %q", pass, w.Code, w.Header(), w.Body)
	}
	done1()
	done1() // a second call gives back nothing more
	if w, _, pass := check(); !pass || w.Header().Get("RateLimit") != `"in-flight";r=0` {
		t.Errorf("after one completed: pass %v RateLimit %q, want admitted, r=0", pass, w.Header().Get("RateLimit"))
	}
	done2()
}

// TestForLimiterRefuseStatusAndCost: New's options apply — the refusal's
// status (503, temporary-reduced-capacity), the cost and its unit.
func TestForLimiterRefuseStatusAndCost(t *testing.T) {
	lim := newLimiter(t, "upload", algo.Params{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Minute}, newClock(t0))
	limit, err := middleware.ForLimiter(lim, middleware.ClientIPKey(),
		middleware.WithRefuseStatus(503),
		middleware.WithCost(func(r *http.Request) int64 { return r.ContentLength }),
		middleware.WithCostUnit("content-bytes"))
	if err != nil {
		t.Fatal(err)
	}
	h := limit.Handler(http.HandlerFunc(ok))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("POST", "/up", strings.NewReader(strings.Repeat("x", 600))))
	wantFields(t, "600 bytes", w.Header(), map[string]string{"RateLimit-Policy": `"upload";q=1000;qu="content-bytes";w=60`, "RateLimit": `"upload";r=400;t=50`})
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("POST", "/up", strings.NewReader(strings.Repeat("x", 600))))
	const body = `{"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",` +
		`"title":"Request cannot be satisfied due to temporary server capacity constraints","status":503,` +
		`"detail":"upload: over the server's capacity; retry in 50 s","instance":"/up","violated-policies":["upload"],"retry-after":50}` + "\n"
	if w.Code != 503 || w.Body.String() != body || w.Header().Get("Retry-After") != "50" {
		t.Errorf("600 more bytes: %d %v %q", w.Code, w.Header(), w.Body)
	}
}

// TestForLimiterChecked: ForLimiter refuses what it cannot honour, saying
// what.
func TestForLimiterChecked(t *testing.T) {
	lim := newLimiter(t, "api", algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Minute}, newClock(t0))
	two := dimension.Spec{Descriptors: []dimension.DescriptorSpec{
		{Entries: []dimension.EntrySpec{{Source: "remote_address"}}},
		{Entries: []dimension.EntrySpec{{Source: "method"}}},
	}}
	for _, tc := range []struct {
		lim  *limiter.Limiter
		key  middleware.Key
		opts []middleware.Option
		want string
	}{
		{nil, middleware.ClientIPKey(), nil, "middleware: ForLimiter: nil Limiter, or not made by limiter.New"},
		{&limiter.Limiter{}, middleware.ClientIPKey(), nil, "middleware: ForLimiter: nil Limiter, or not made by limiter.New"},
		{lim, middleware.Key{}, nil, `middleware: ForLimiter("api"): the zero Key: use KeyFunc, ClientIPKey or KeyOf`},
		{lim, middleware.KeyFunc(nil), nil, `middleware: ForLimiter("api"): KeyFunc: nil function`},
		{lim, middleware.ClientIPKey("10.0.0.0/33"), nil, `middleware: ForLimiter("api"): ClientIPKey: `},
		{lim, middleware.KeyOf(two), nil, `middleware: ForLimiter("api"): KeyOf: the Spec has 2 descriptors, want one of one entry (the key)`},
		{lim, middleware.ClientIPKey(), []middleware.Option{middleware.WithFallback("x", http.HandlerFunc(ok))}, `middleware: ForLimiter("api"): WithFallback: a Limiter has no degrade strategy`},
		{lim, middleware.ClientIPKey(), []middleware.Option{middleware.WithPriority(func(*http.Request) string { return "" })}, `middleware: ForLimiter("api"): WithPriority: a Limiter has no priority classes`},
		{lim, middleware.ClientIPKey(), []middleware.Option{middleware.WithRefuseStatus(418)}, "middleware: WithRefuseStatus(418)"},
	} {
		_, err := middleware.ForLimiter(tc.lim, tc.key, tc.opts...)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("error %v, want it to start %q", err, tc.want)
		}
	}
}

// TestForLimiterKeyOf: KeyOf keys by any one entry, here the client
// address through a trusted proxy's Forwarded field, collapsed to its /24.
func TestForLimiterKeyOf(t *testing.T) {
	lim := newLimiter(t, "per-net", algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Minute}, newClock(t0))
	limit, err := middleware.ForLimiter(lim, middleware.KeyOf(dimension.Spec{
		TrustedProxies: []string{"10.0.0.0/8"}, ProxyHeader: "forwarded", IPv4Prefix: 24,
		Descriptors: []dimension.DescriptorSpec{{Entries: []dimension.EntrySpec{{Source: "remote_address"}}}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	h := limit.Handler(http.HandlerFunc(ok))
	for i, tc := range []struct {
		client string
		status int
	}{{"198.51.100.1", 200}, {"198.51.100.2", 429}, {"203.0.113.1", 200}} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "10.1.2.3:4000"
		r.Header.Set("Forwarded", "for="+tc.client)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.status {
			t.Errorf("request %d from %s: %d, want %d", i+1, tc.client, w.Code, tc.status)
		}
	}
	d, err := lim.Peek(context.Background(), "198.51.100.0/24", 1)
	if err != nil || d.Allowed {
		t.Errorf("key 198.51.100.0/24: %+v %v, want it spent", d, err)
	}
}

// TestForLimiterGRPC: a gRPC call refused by the Limiter gets New's gRPC
// answer, from the same refusal writer: RESOURCE_EXHAUSTED with the
// reason, the fields, Retry-After and the pushback in milliseconds.
func TestForLimiterGRPC(t *testing.T) {
	c := newClock(t0)
	lim := newLimiter(t, "per-ip", algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Minute}, c)
	limit, err := middleware.ForLimiter(lim, middleware.ClientIPKey())
	if err != nil {
		t.Fatal(err)
	}
	h := limit.Handler(http.HandlerFunc(ok))
	h.ServeHTTP(httptest.NewRecorder(), grpcRequest("/pkg.Svc/M", "application/grpc"))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, grpcRequest("/pkg.Svc/M", "application/grpc"))
	wantFields(t, "second call", w.Header(), map[string]string{
		"Grpc-Status": "8", "Grpc-Message": "per-ip: rate limit exceeded; retry in 50 s", "Grpc-Retry-Pushback-Ms": "50000",
		"Retry-After": "50", "RateLimit": `"per-ip";r=0;t=50`, "RateLimit-Policy": `"per-ip";q=1;w=60`})
	if w.Code != 200 || w.Body.Len() != 0 {
		t.Errorf("second call: HTTP %d, body %q; want a trailers-only 200", w.Code, w.Body)
	}
}

// TestForLimiterRenewsTheSlot: a request on a Concurrency limit whose
// handler runs past the limit's lease TTL keeps its slot (its lease is
// renewed every third of the TTL), so another request is still refused
// 10 s into a 3 s lease; once the handler returns the slot is free.
func TestForLimiterRenewsTheSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, err := memory.New(memory.WithSweepInterval(0)) // the bubble's clock
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		lim, err := limiter.New(st, "streams", algo.Params{Algorithm: algo.Concurrency, Limit: 1, LeaseTTL: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		limit, err := middleware.ForLimiter(lim, middleware.ClientIPKey())
		if err != nil {
			t.Fatal(err)
		}
		check := func() (int, func(), bool) {
			w := httptest.NewRecorder()
			done, pass := limit.Check(w, httptest.NewRequest("GET", "/s", nil))
			return w.Code, done, pass
		}
		_, done, pass := check()
		if !pass {
			t.Fatal("the first request: refused")
		}
		time.Sleep(10 * time.Second) // the handler runs on
		synctest.Wait()
		if code, _, pass := check(); pass || code != 429 {
			t.Errorf("10 s into a 3 s lease, the first still in flight: pass %v, %d; want refused 429", pass, code)
		}
		done()
		code, done2, pass := check()
		if !pass {
			t.Errorf("after the first completed: %d, want admitted", code)
		}
		done2()
		synctest.Wait()
	})
}

// noRenewer is a store that cannot renew leases (no store.Renewer).
type noRenewer struct{ store.Store }

// TestForLimiterUnrenewableSaidOnce: on a store that cannot renew leases,
// ForLimiter's slots are not renewed and the error log says so once, not
// per request or per tick.
func TestForLimiterUnrenewableSaidOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, err := memory.New(memory.WithSweepInterval(0))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		lim, err := limiter.New(noRenewer{st}, "streams", algo.Params{Algorithm: algo.Concurrency, Limit: 2, LeaseTTL: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		var logged []error
		limit, err := middleware.ForLimiter(lim, middleware.ClientIPKey(),
			middleware.WithErrorLog(func(_ *http.Request, err error) { logged = append(logged, err) }))
		if err != nil {
			t.Fatal(err)
		}
		var dones []func()
		for range 2 {
			done, pass := limit.Check(httptest.NewRecorder(), httptest.NewRequest("GET", "/s", nil))
			if !pass {
				t.Fatal("refused")
			}
			dones = append(dones, done)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		for _, done := range dones {
			done()
		}
		if len(logged) != 1 || !errors.Is(logged[0], errors.ErrUnsupported) {
			t.Errorf("logged %v, want one error matching ErrUnsupported", logged)
		}
	})
}
