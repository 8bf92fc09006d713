package middleware_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/dimension"
	"github.com/floodgate/floodgate/headers"
	"github.com/floodgate/floodgate/middleware"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memory"
)

// clock is a settable time for the memory store; the tests move it instead
// of sleeping.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// t0 is 10 s into a minute, so a minute window resets in 50 s.
var t0 = time.Date(2025, 1, 1, 12, 0, 10, 0, time.UTC)

// engine compiles yaml (one domain) on a memory store with clock c.
func engine(t testing.TB, yaml string, c *clock) *policy.Engine {
	t.Helper()
	cfg, err := policy.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	var opts []memory.Option
	if c != nil {
		opts = append(opts, memory.WithClock(c.Now))
	}
	st, err := memory.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var eopts []policy.Option
	if c != nil {
		eopts = append(eopts, policy.WithClock(c.Now))
	}
	e, err := policy.NewEngine(cfg, st, eopts...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func extractor(t testing.TB, spec dimension.Spec, opts ...dimension.Option) *dimension.Extractor {
	t.Helper()
	x, err := dimension.NewExtractor(spec, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

var perIP = dimension.Spec{Descriptors: []dimension.DescriptorSpec{{Entries: []dimension.EntrySpec{{Source: "remote_address"}}}}}

const perIPConfig = `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {name: per-ip, unit: minute, requests_per_unit: 3}
`

func ok(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") }

func serve(t testing.TB, m *middleware.Middleware, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(m.Handler(h))
	t.Cleanup(srv.Close)
	return srv
}

type result struct {
	status int
	h      http.Header
	body   string
}

func get(t testing.TB, url string, hdr ...string) result {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{resp.StatusCode, resp.Header, string(b)}
}

func wantFields(t *testing.T, step string, h http.Header, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s: %s = %q, want %q", step, k, got, v)
		}
	}
}

func TestHeadersAndRejection(t *testing.T) {
	c := newClock(t0)
	m, err := middleware.New(engine(t, perIPConfig, c), "web", extractor(t, perIP))
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, m, ok)
	for i, remaining := range []string{"2", "1", "0"} {
		r := get(t, srv.URL+"/a")
		if r.status != 200 || r.body != "ok\n" {
			t.Fatalf("request %d: %d %q, want 200 ok", i+1, r.status, r.body)
		}
		wantFields(t, fmt.Sprintf("request %d", i+1), r.h, map[string]string{
			"RateLimit-Policy":      `"per-ip";q=3;w=60`,
			"RateLimit":             `"per-ip";r=` + remaining + `;t=50`,
			"X-RateLimit-Limit":     "3",
			"X-RateLimit-Remaining": remaining,
			"X-RateLimit-Reset":     "50",
			"Retry-After":           "",
		})
	}
	c.Advance(3 * time.Second)
	r := get(t, srv.URL+"/a")
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("4th request: status %d, want 429", r.status)
	}
	wantFields(t, "4th request", r.h, map[string]string{
		"Content-Type":          "application/problem+json",
		"RateLimit-Policy":      `"per-ip";q=3;w=60`,
		"RateLimit":             `"per-ip";r=0;t=47`,
		"X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset":     "47",
		"Retry-After":           "47",
	})
	want := `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",` +
		`"title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,` +
		`"detail":"per-ip: rate limit exceeded; retry in 47 s","instance":"/a",` +
		`"violated-policies":["per-ip"],"retry-after":47}` + "\n"
	if r.body != want {
		t.Errorf("429 body:\n got %s\nwant %s", r.body, want)
	}
	// The instance is a URI reference: a space in the path stays escaped.
	if r := get(t, srv.URL+"/x%20y"); r.status != http.StatusTooManyRequests || !strings.Contains(r.body, `"instance":"/x%20y"`) {
		t.Errorf("429 on /x%%20y: %d %s, want the instance escaped", r.status, r.body)
	}
}

// A client that waits Retry-After and retries is admitted, even when the
// limit's retry is a fraction of a second: the field rounds up.
func TestRetryAfterHonoured(t *testing.T) {
	c := newClock(t0)
	const cfg = `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {name: bucket, algorithm: token_bucket, period: 3s, requests_per_unit: 2}
`
	m, err := middleware.New(engine(t, cfg, c), "web", extractor(t, perIP))
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, m, ok)
	for i := 0; i < 2; i++ {
		if r := get(t, srv.URL); r.status != 200 {
			t.Fatalf("request %d: %d", i+1, r.status)
		}
	}
	for round := 0; round < 5; round++ {
		r := get(t, srv.URL)
		if r.status != 429 {
			t.Fatalf("round %d: status %d, want 429", round, r.status)
		}
		secs, err := strconv.Atoi(r.h.Get("Retry-After"))
		if err != nil || secs < 1 {
			t.Fatalf("round %d: Retry-After %q", round, r.h.Get("Retry-After"))
		}
		// From empty, one refill takes 1.5 s: the client is told 2 s, and
		// 1 s is too soon. Waiting 2 s leaves a third of a token, so the
		// next round waits 1 s (and 0 s is too soon), which empties the
		// bucket again.
		want := 2 - round%2
		if secs != want {
			t.Errorf("round %d: Retry-After %d, want %d", round, secs, want)
		}
		c.Advance(time.Duration(secs)*time.Second - time.Second)
		if r := get(t, srv.URL); r.status != 429 {
			t.Fatalf("round %d: %d s early: status %d, want 429", round, 1, r.status)
		}
		c.Advance(time.Second)
		if r := get(t, srv.URL); r.status != 200 {
			t.Fatalf("round %d: after Retry-After: status %d, want 200", round, r.status)
		}
	}
}

// A client that is not a trusted proxy cannot change its key with
// X-Forwarded-For; a trusted proxy's header is believed.
func TestSpoofedForwardedFor(t *testing.T) {
	for _, tc := range []struct {
		name    string
		trusted []string
		want    []int
	}{
		{"untrusted peer", []string{"10.0.0.0/8"}, []int{200, 200, 200, 429, 429}},
		{"trusted proxy", []string{"127.0.0.1/32"}, []int{200, 200, 200, 200, 200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClock(t0)
			spec := perIP
			spec.TrustedProxies = tc.trusted
			m, err := middleware.New(engine(t, perIPConfig, c), "web", extractor(t, spec))
			if err != nil {
				t.Fatal(err)
			}
			srv := serve(t, m, ok)
			for i, want := range tc.want {
				xff := fmt.Sprintf("203.0.113.%d", i+1)
				if r := get(t, srv.URL, "X-Forwarded-For", xff); r.status != want {
					t.Errorf("request %d (X-Forwarded-For %s): %d, want %d", i+1, xff, r.status, want)
				}
			}
		})
	}
}

// IPv6 clients share their /64's budget.
func TestIPv6Collapse(t *testing.T) {
	c := newClock(t0)
	spec := perIP
	spec.TrustedProxies = []string{"127.0.0.1/32"}
	m, err := middleware.New(engine(t, perIPConfig, c), "web", extractor(t, spec))
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, m, ok)
	steps := []struct {
		client    string
		status    int
		remaining string
	}{
		{"2001:db8:1:2::a", 200, "2"},
		{"2001:db8:1:2:ffff:ffff:ffff:fffe", 200, "1"},
		{"2001:db8:1:2:1::1", 200, "0"},
		{"2001:db8:1:2::b", 429, "0"},
		{"2001:db8:1:3::a", 200, "2"},  // the next /64
		{"::ffff:192.0.2.1", 200, "2"}, // IPv4-mapped: an IPv4 client
		{"192.0.2.1", 200, "1"},
	}
	for i, s := range steps {
		r := get(t, srv.URL, "X-Forwarded-For", s.client)
		if r.status != s.status || r.h.Get("X-RateLimit-Remaining") != s.remaining {
			t.Errorf("step %d (%s): %d remaining %q, want %d remaining %s", i, s.client, r.status,
				r.h.Get("X-RateLimit-Remaining"), s.status, s.remaining)
		}
	}
}

// Requests that produce no descriptor, or whose descriptors match no rule,
// pass without header fields.
func TestUnlimitedRequestsPassUntouched(t *testing.T) {
	const cfg = `
domain: web
descriptors:
  - key: api_key
    value: free
    rate_limit: {unit: minute, requests_per_unit: 1}
`
	spec := dimension.Spec{Descriptors: []dimension.DescriptorSpec{{Entries: []dimension.EntrySpec{{Source: "api_key"}}}}}
	m, err := middleware.New(engine(t, cfg, newClock(t0)), "web", extractor(t, spec))
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, m, ok)
	for i := 0; i < 3; i++ {
		for _, key := range []string{"", "paid"} {
			r := get(t, srv.URL, "X-API-Key", key)
			if r.status != 200 || r.h.Get("RateLimit") != "" || r.h.Get("X-RateLimit-Limit") != "" {
				t.Errorf("key %q: %d %v, want 200 without fields", key, r.status, r.h)
			}
		}
	}
	r := get(t, srv.URL, "X-API-Key", "free")
	if r.status != 200 || r.h.Get("RateLimit") != `"api_key_free";r=0;t=50` {
		t.Errorf("free key: %d RateLimit %q", r.status, r.h.Get("RateLimit"))
	}
}

// Header sets are selectable and renameable.
func TestHeaderSelection(t *testing.T) {
	c := newClock(t0)
	m, err := middleware.New(engine(t, perIPConfig, c), "web", extractor(t, perIP),
		middleware.WithHeaders(headers.Options{Set: headers.XRateLimit | headers.RetryAfter,
			Names: headers.Names{Limit: "X-Quota-Limit", Remaining: "X-Quota-Left"}}))
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, m, ok)
	r := get(t, srv.URL)
	wantFields(t, "renamed", r.h, map[string]string{
		"X-Quota-Limit":         "3",
		"X-Quota-Left":          "2",
		"X-RateLimit-Reset":     "50",
		"X-RateLimit-Limit":     "",
		"RateLimit":             "",
		"RateLimit-Policy":      "",
		"X-RateLimit-Remaining": "",
	})
}

const strategiesConfig = `
domain: web
descriptors:
  - key: path
    value: /degrade
    rate_limit: {name: search, unit: minute, requests_per_unit: 1, strategy: degrade, fallback: cached}
  - key: path
    value: /shadow
    rate_limit: {name: trial, unit: minute, requests_per_unit: 1, strategy: shadow}
  - key: path
    value: /unregistered
    rate_limit: {name: lost, unit: minute, requests_per_unit: 1, strategy: degrade, fallback: nowhere}
`

var perPath = dimension.Spec{Descriptors: []dimension.DescriptorSpec{{Entries: []dimension.EntrySpec{{Source: "path"}}}}}

func TestDegradeAndShadow(t *testing.T) {
	c := newClock(t0)
	e := engine(t, strategiesConfig, c)
	cached := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Served-By", "fallback")
		io.WriteString(w, "cached results\n")
	})
	_, err := middleware.New(e, "web", extractor(t, perPath), middleware.WithFallback("cached", cached))
	if err == nil || !strings.Contains(err.Error(), `test.yaml:12: rule "lost" degrades to fallback "nowhere", which is not registered`) {
		t.Fatalf("New without a fallback: %v", err)
	}
	// The rules are there for a caller that reports each at its line.
	if mf, ok := errors.AsType[*middleware.MissingFallbackError](err); !ok || len(mf.Rules) != 1 || mf.Rules[0].Name != "lost" || mf.Rules[0].Pos.Line != 12 {
		t.Fatalf("New without a fallback: %#v, want a MissingFallbackError naming rule lost at line 12", err)
	}
	var logged []error
	var mu sync.Mutex
	// A Decider without Config (a remote one) is not checked up front: the
	// missing fallback shows at request time.
	m, err := middleware.New(struct{ policy.Decider }{e}, "web", extractor(t, perPath),
		middleware.WithFallback("cached", cached),
		middleware.WithErrorLog(func(_ *http.Request, err error) { mu.Lock(); logged = append(logged, err); mu.Unlock() }))
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, m, ok)

	if r := get(t, srv.URL+"/degrade"); r.status != 200 || r.body != "ok\n" {
		t.Fatalf("degrade, first: %d %q", r.status, r.body)
	}
	r := get(t, srv.URL+"/degrade")
	if r.status != 200 || r.body != "cached results\n" || r.h.Get("X-Served-By") != "fallback" {
		t.Fatalf("degrade, over the limit: %d %q, want the fallback", r.status, r.body)
	}
	wantFields(t, "degraded", r.h, map[string]string{"RateLimit": `"search";r=0;t=50`, "Retry-After": "50"})

	for i := 0; i < 3; i++ {
		r := get(t, srv.URL+"/shadow")
		if r.status != 200 || r.body != "ok\n" {
			t.Fatalf("shadow %d: %d %q, want 200", i, r.status, r.body)
		}
		if i > 0 {
			// The IETF fields tell the truth; X-RateLimit-* never show a
			// dry-run limit.
			wantFields(t, "shadow", r.h, map[string]string{"RateLimit": `"trial";r=0;t=50`, "X-RateLimit-Remaining": ""})
		}
	}

	get(t, srv.URL+"/unregistered")
	if r := get(t, srv.URL+"/unregistered"); r.status != 429 {
		t.Fatalf("missing fallback: %d, want 429", r.status)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(logged) != 1 || !strings.Contains(logged[0].Error(), `fallback "nowhere" is not registered`) {
		t.Errorf("error log: %v", logged)
	}
}

// Concurrency limits hold a slot while the handler runs and give it back
// when it returns.
func TestInFlightLimit(t *testing.T) {
	const cfg = `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {name: in-flight, algorithm: concurrency, requests_per_unit: 2, lease_ttl: 1m}
`
	m, err := middleware.New(engine(t, cfg, nil), "web", extractor(t, perIP))
	if err != nil {
		t.Fatal(err)
	}
	entered := make(chan struct{})
	release := make(chan struct{})
	srv := serve(t, m, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok\n")
	})
	var wg sync.WaitGroup
	statuses := make([]int, 2)
	for i := range 2 {
		wg.Go(func() { statuses[i] = get(t, srv.URL+"/slow").status })
		<-entered
	}
	r := get(t, srv.URL+"/fast")
	if r.status != 429 {
		t.Errorf("third in flight: %d, want 429", r.status)
	}
	if r.h.Get("RateLimit-Policy") != `"in-flight";q=2;qu="concurrent-requests"` {
		t.Errorf("RateLimit-Policy %q", r.h.Get("RateLimit-Policy"))
	}
	// A slot frees when a request completes: no Retry-After (the lease's
	// minute would be the only bound to give).
	if ra := r.h.Get("Retry-After"); ra != "" {
		t.Errorf("Retry-After %q on a concurrency refusal, want none", ra)
	}
	// Nor may the body tell the client it can never pass.
	if !strings.Contains(r.body, "in flight") || strings.Contains(r.body, "never") {
		t.Errorf("429 body %s: want it to say a slot frees when a request in flight completes", r.body)
	}
	close(release)
	wg.Wait()
	if statuses[0] != 200 || statuses[1] != 200 {
		t.Errorf("slow requests: %v", statuses)
	}
	for i := range 5 {
		if r := get(t, srv.URL+"/fast"); r.status != 200 {
			t.Fatalf("after release, request %d: %d, want 200 (slots not given back)", i, r.status)
		}
	}
}

// A budget of 1000 admits exactly 1000 of 1200 concurrent requests. The
// clock stands still: on the real one an hour's end during the second or
// so of requests would start a fresh budget.
func TestExactUnderConcurrency(t *testing.T) {
	const cfg = `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 1000}
`
	m, err := middleware.New(engine(t, cfg, newClock(t0)), "web", extractor(t, perIP))
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, m, ok)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	var admitted, refused, other atomic.Int64
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for next.Add(1) <= 1200 {
				resp, err := client.Get(srv.URL)
				if err != nil {
					other.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case 200:
					admitted.Add(1)
				case 429:
					refused.Add(1)
				default:
					other.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 1000 || refused.Load() != 200 || other.Load() != 0 {
		t.Errorf("admitted %d, refused %d, other %d; want 1000, 200, 0", admitted.Load(), refused.Load(), other.Load())
	}
}

func TestBadRequestsAndFailures(t *testing.T) {
	c := newClock(t0)
	spec := dimension.Spec{Descriptors: []dimension.DescriptorSpec{{Entries: []dimension.EntrySpec{{Source: "header:X-Tenant"}}}}}
	const cfg = `
domain: web
descriptors:
  - key: X-Tenant
    rate_limit: {unit: minute, requests_per_unit: 5}
`
	m, err := middleware.New(engine(t, cfg, c), "web", extractor(t, spec, dimension.WithMaxValueLen(8)))
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, m, ok)
	r := get(t, srv.URL+"/x", "X-Tenant", "much-too-long-a-tenant")
	if r.status != 400 || r.h.Get("Content-Type") != "application/problem+json" ||
		!strings.Contains(r.body, `value too long`) || !strings.Contains(r.body, `descriptors[0].entries[0] (header:X-Tenant)`) {
		t.Errorf("long value: %d %s", r.status, r.body)
	}

	// A store that fails: 503, or a pass with WithFailOpen.
	cfgParsed, err := policy.Parse("t.yaml", []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := memory.New()
	st.Close()
	e, err := policy.NewEngine(cfgParsed, st)
	if err != nil {
		t.Fatal(err)
	}
	for _, open := range []bool{false, true} {
		m, err := middleware.New(e, "web", extractor(t, spec), middleware.WithFailOpen(open))
		if err != nil {
			t.Fatal(err)
		}
		srv := serve(t, m, ok)
		r := get(t, srv.URL, "X-Tenant", "acme")
		var p middleware.Problem
		switch {
		case open && r.status != 200:
			t.Errorf("fail open: %d %s", r.status, r.body)
		case !open && (r.status != 503 || json.Unmarshal([]byte(r.body), &p) != nil ||
			p.Detail != "the rate limiter could not decide: the store is unavailable"):
			t.Errorf("fail closed: %d %s", r.status, r.body)
		}
	}

	// A cost function's bad value is the application's bug: 500, never
	// failed open, saying what is wrong.
	for _, open := range []bool{false, true} {
		m, err := middleware.New(engine(t, cfg, nil), "web", extractor(t, spec), middleware.WithFailOpen(open),
			middleware.WithCost(func(*http.Request) int64 { return -1 }))
		if err != nil {
			t.Fatal(err)
		}
		r := get(t, serve(t, m, ok).URL, "X-Tenant", "acme")
		if r.status != 500 || !strings.Contains(r.body, "negative") {
			t.Errorf("negative cost (fail open %v): %d %s, want 500 saying the cost is negative", open, r.status, r.body)
		}
	}

	for _, tc := range []struct {
		name string
		fn   func() (*middleware.Middleware, error)
		want string
	}{
		{"nil decider", func() (*middleware.Middleware, error) { return middleware.New(nil, "web", extractor(t, spec)) }, "nil Decider"},
		{"no domain", func() (*middleware.Middleware, error) { return middleware.New(e, "", extractor(t, spec)) }, "empty domain"},
		{"no extractor", func() (*middleware.Middleware, error) { return middleware.New(e, "web", nil) }, "nil Extractor"},
		{"nil fallback", func() (*middleware.Middleware, error) {
			return middleware.New(e, "web", extractor(t, spec), middleware.WithFallback("x", nil))
		}, `WithFallback("x"): nil handler`},
		{"negative wait", func() (*middleware.Middleware, error) {
			return middleware.New(e, "web", extractor(t, spec), middleware.WithMaxWait(-time.Second))
		}, "must not be negative"},
	} {
		if _, err := tc.fn(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}

// errDecider fails every decision, as a remote Decider whose service is
// down does.
type errDecider struct{}

func (errDecider) Decide(context.Context, policy.Request) (policy.Response, error) {
	return policy.Response{}, errors.New("connection refused")
}
func (errDecider) Peek(context.Context, policy.Request) (policy.Response, error) {
	return policy.Response{}, errors.New("connection refused")
}

func TestDeciderErrorIsLogged(t *testing.T) {
	var got error
	m, err := middleware.New(errDecider{}, "web", extractor(t, perIP),
		middleware.WithErrorLog(func(_ *http.Request, err error) { got = err }))
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	m.Handler(http.HandlerFunc(ok)).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if w.Code != 503 || got == nil || got.Error() != "connection refused" {
		t.Errorf("status %d, logged %v", w.Code, got)
	}
}

// TestUnknownDomainIsAnError: a middleware for a domain its engine's
// configuration does not have would pass every request unlimited, so New
// refuses it, naming the domains there are; an engine whose configuration
// never loaded (nil) has none.
func TestUnknownDomainIsAnError(t *testing.T) {
	e := engine(t, perIPConfig, nil)
	_, err := middleware.New(e, "wbe", extractor(t, perIP))
	if err == nil || !strings.Contains(err.Error(), `domain "wbe" is not in the configuration (it has "web")`) {
		t.Fatalf("misspelt domain: %v", err)
	}
	st, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	empty, err := policy.NewEngine(nil, st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := middleware.New(empty, "web", extractor(t, perIP)); err == nil || !strings.Contains(err.Error(), "it has no domains") {
		t.Fatalf("engine without a configuration: %v", err)
	}
}

// TestHierarchyOneMemberPerLimit: a request measured against a hierarchy
// gets one RateLimit-Policy and RateLimit member per limit, each under its
// own name with its own quota, window and remaining; X-RateLimit-* show
// the tightest; the 429's Retry-After and problem body name the limit
// that refused.
func TestHierarchyOneMemberPerLimit(t *testing.T) {
	c := newClock(t0)
	const cfg = `
domain: web
descriptors:
  - key: X-Tenant
    hierarchy: true
    rate_limit: {name: tenant-cap, unit: minute, requests_per_unit: 3}
    descriptors:
      - key: X-User
        rate_limit: {name: user-cap, unit: hour, requests_per_unit: 10}
`
	spec := dimension.Spec{Descriptors: []dimension.DescriptorSpec{{Entries: []dimension.EntrySpec{
		{Source: "header:X-Tenant"}, {Source: "header:X-User"}}}}}
	m, err := middleware.New(engine(t, cfg, c), "web", extractor(t, spec))
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, m, ok)
	call := func() result { return get(t, srv.URL+"/x", "X-Tenant", "acme", "X-User", "bob") }
	call()
	r := call()
	wantFields(t, "second request", r.h, map[string]string{
		"RateLimit-Policy":      `"user-cap";q=10;w=3600, "tenant-cap";q=3;w=60`,
		"RateLimit":             `"user-cap";r=8;t=3590, "tenant-cap";r=1;t=50`, // t0 is 10 s into the windows
		"X-RateLimit-Limit":     "3",
		"X-RateLimit-Remaining": "1",
		"Retry-After":           "",
	})
	call()
	r = call() // the tenant's fourth in a minute
	if r.status != 429 {
		t.Fatalf("fourth request: %d, want 429", r.status)
	}
	wantFields(t, "refused request", r.h, map[string]string{
		"RateLimit-Policy":      `"user-cap";q=10;w=3600, "tenant-cap";q=3;w=60`,
		"RateLimit":             `"user-cap";r=7;t=3590, "tenant-cap";r=0;t=50`,
		"X-RateLimit-Limit":     "3",
		"X-RateLimit-Remaining": "0",
		"Retry-After":           "50",
	})
	if !strings.Contains(r.body, `"violated-policies":["tenant-cap"]`) {
		t.Errorf("problem body %s, want tenant-cap as the violated policy", r.body)
	}
}

// TestEnforcedChildUnderShadowParent: a rule enforced under a hierarchy
// parent in shadow mode shows its own numbers in X-RateLimit-* once the
// parent is over its quota, not the dry-run parent's r=0, which the
// RateLimit field still states.
func TestEnforcedChildUnderShadowParent(t *testing.T) {
	c := newClock(t0)
	const cfg = `
domain: web
hierarchy: true
descriptors:
  - key: remote_address
    shadow_mode: true
    rate_limit: {name: shadowed, unit: minute, requests_per_unit: 2}
    descriptors:
      - key: path
        shadow_mode: false
        rate_limit: {name: enforced-child, unit: minute, requests_per_unit: 5}
`
	spec := dimension.Spec{Descriptors: []dimension.DescriptorSpec{{Entries: []dimension.EntrySpec{{Source: "remote_address"}, {Source: "path"}}}}}
	m, err := middleware.New(engine(t, cfg, c), "web", extractor(t, spec))
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, m, ok)
	for i := 1; i <= 4; i++ {
		r := get(t, srv.URL+"/x")
		if r.status != 200 {
			t.Fatalf("request %d: %d, want 200", i, r.status)
		}
		if i < 3 {
			continue
		}
		wantFields(t, fmt.Sprintf("request %d", i), r.h, map[string]string{
			"RateLimit":             fmt.Sprintf(`"enforced-child";r=%d;t=50, "shadowed";r=0;t=50`, 5-i),
			"X-RateLimit-Limit":     "5",
			"X-RateLimit-Remaining": strconv.Itoa(5 - i),
			"Retry-After":           "",
		})
	}
}

// TestShadowRefusalHasNoRetryAfter: a shadow rule over its limit passes
// the request (200) and says so in the RateLimit fields (r=0), but sends
// no Retry-After: a client that honours it would back off for nothing.
func TestShadowRefusalHasNoRetryAfter(t *testing.T) {
	c := newClock(t0)
	const cfg = `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {name: soft, unit: minute, requests_per_unit: 1, strategy: shadow}
`
	m, err := middleware.New(engine(t, cfg, c), "web", extractor(t, perIP))
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, m, ok)
	get(t, srv.URL+"/x")
	r := get(t, srv.URL+"/x")
	if r.status != 200 {
		t.Fatalf("over a shadow limit: %d, want 200", r.status)
	}
	wantFields(t, "over the shadow limit", r.h, map[string]string{
		"RateLimit":             `"soft";r=0;t=50`,
		"Retry-After":           "",
		"X-RateLimit-Remaining": "",
	})
}

// The violated-policies of a problem body name the policies as the
// RateLimit fields do, a name with non-ASCII bytes included: the fields
// dropped those bytes ("caf") while the body kept them ("café"), so a
// client could not find the violated policy in RateLimit-Policy.
func TestViolatedPoliciesMatchFields(t *testing.T) {
	m, err := middleware.New(engine(t, `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {name: "café", unit: minute, requests_per_unit: 1}
`, newClock(t0)), "web", extractor(t, perIP))
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, m, ok)
	get(t, srv.URL)
	r := get(t, srv.URL)
	if r.status != 429 {
		t.Fatalf("second request: %d, want 429", r.status)
	}
	wantFields(t, "refused", r.h, map[string]string{
		"RateLimit-Policy": `"caf%c3%a9";q=1;w=60`,
		"RateLimit":        `"caf%c3%a9";r=0;t=50`,
	})
	if !strings.Contains(r.body, `"violated-policies":["caf%c3%a9"]`) {
		t.Errorf("problem body %s, want violated-policies [\"caf%%c3%%a9\"] as in the fields", r.body)
	}
}

// New refuses field names a response cannot carry or that clash: net/http
// drops a field whose name is not a token ("Rate Limit") without a word,
// and two fields of one name ("X-Quota" for the limit and the remaining)
// leave one value, the other's, under it. A name the field set does not
// write is not checked.
func TestHeaderNamesChecked(t *testing.T) {
	c := newClock(t0)
	for _, tc := range []struct {
		o    headers.Options
		want string // "" for none
	}{
		{headers.Options{Names: headers.Names{RateLimit: "Rate Limit"}}, `middleware: WithHeaders: Names.RateLimit "Rate Limit" is not a header field name`},
		{headers.Options{Names: headers.Names{Policy: "RateLimit-Policy:"}}, `middleware: WithHeaders: Names.Policy "RateLimit-Policy:" is not a header field name`},
		{headers.Options{Names: headers.Names{Reset: "X-Reset\n"}}, `middleware: WithHeaders: Names.Reset "X-Reset\n" is not a header field name`},
		{headers.Options{Names: headers.Names{Limit: "X-Quota", Remaining: "x-quota"}}, `middleware: WithHeaders: Names.Limit "X-Quota" and Names.Remaining "x-quota" are one header field`},
		{headers.Options{Names: headers.Names{RetryAfter: "RateLimit"}}, `middleware: WithHeaders: Names.RateLimit "RateLimit" and Names.RetryAfter "RateLimit" are one header field`},
		{headers.Options{Set: headers.XRateLimit, Names: headers.Names{RateLimit: "Rate Limit", RetryAfter: "X-RateLimit-Limit"}}, ""},
		{headers.Options{Names: headers.Names{Limit: "X-Quota-Limit", Remaining: "X-Quota-Left", Policy: "quota-policy"}}, ""},
	} {
		_, err := middleware.New(engine(t, perIPConfig, c), "web", extractor(t, perIP), middleware.WithHeaders(tc.o))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)) {
			t.Errorf("%+v: New: %v, want %q", tc.o, err, tc.want)
		}
	}
}
