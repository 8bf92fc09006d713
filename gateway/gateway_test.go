package gateway_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/middleware"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memory"
)

type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// t0 is 10 s into a minute: minute windows reset in 50 s.
var t0 = time.Date(2025, 1, 1, 12, 0, 10, 0, time.UTC)

func engine(t testing.TB, yaml string, c *clock) *policy.Engine {
	t.Helper()
	cfg, err := policy.Parse("gw.yaml", []byte(yaml))
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
	var eo []policy.Option
	if c != nil {
		eo = append(eo, policy.WithClock(c.Now))
	}
	e, err := policy.NewEngine(cfg, st, eo...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// echo is the upstream: it tells what it received.
func echo(t testing.TB) *httptest.Server {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Upstream", "yes")
		fmt.Fprintf(w, "%s %s host=%s xff=%s\n", r.Method, r.URL.RequestURI(), r.Host, r.Header.Get("X-Forwarded-For"))
	}))
	t.Cleanup(up.Close)
	return up
}

func front(t testing.TB, e *policy.Engine, upstream string, opts ...gateway.Option) *httptest.Server {
	t.Helper()
	gw, err := gateway.New(e.Config(), e, upstream, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	return srv
}

type result struct {
	status int
	h      http.Header
	body   string
}

func do(t testing.TB, method, url string, hdr ...string) result {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{resp.StatusCode, resp.Header, string(b)}
}

const routesConfig = `
domain: edge
gateway:
  routes:
    - name: search
      host: api.example.com
      path_prefix: /search
      methods: [GET]
      descriptors:
        - entries: [{source: remote_address}, {source: generic_key, value: search}]
    - name: writes
      path_prefix: /api/
      methods: [POST, PUT]
      descriptors:
        - entries: [{source: header:X-API-Key, default: anonymous}]
    - name: health
      path_prefix: /healthz
descriptors:
  - key: remote_address
    descriptors:
      - key: generic_key
        value: search
        rate_limit: {name: search, unit: minute, requests_per_unit: 2}
  - key: X-API-Key
    rate_limit: {name: writes-per-key, unit: minute, requests_per_unit: 1}
`

func TestRoutesAndHeaders(t *testing.T) {
	c := newClock(t0)
	e := engine(t, routesConfig, c)
	up := echo(t)
	srv := front(t, e, up.URL+"/base", gateway.WithPreserveHost(true)) // the search route has a host
	steps := []struct {
		method, path string
		hdr          []string
		status       int
		rateLimit    string
		body         string
	}{
		{"GET", "/search?q=a", []string{"Host", "api.example.com"}, 200, `"search";r=1;t=50`, "GET /base/search?q=a host=api.example.com xff=127.0.0.1\n"},
		{"GET", "/search/more", []string{"Host", "API.example.com:8443"}, 200, `"search";r=0;t=50`, ""},
		{"GET", "/search", []string{"Host", "api.example.com"}, 429, `"search";r=0;t=50`, ""},
		{"GET", "/search", []string{"Host", "other.example.com"}, 200, "", ""},                 // no route: unlimited
		{"GET", "/searchx", []string{"Host", "api.example.com"}, 200, "", ""},                  // not under /search
		{"HEAD", "/search", []string{"Host", "api.example.com"}, 429, `"search";r=0;t=50`, ""}, // GET implies HEAD
		{"DELETE", "/search", []string{"Host", "api.example.com"}, 200, "", ""},                // method not listed
		{"POST", "/api/orders", []string{"X-API-Key", "k1"}, 200, `"writes-per-key";r=0;t=50`, ""},
		{"PUT", "/api/orders/7", []string{"X-API-Key", "k1"}, 429, `"writes-per-key";r=0;t=50`, ""},
		{"POST", "/api/orders", nil, 200, `"writes-per-key";r=0;t=50`, ""},
		{"GET", "/api/orders", nil, 200, "", ""},
		{"GET", "/healthz", nil, 200, "", ""}, // a route without descriptors
	}
	for i, s := range steps {
		r := do(t, s.method, srv.URL+s.path, s.hdr...)
		if r.status != s.status || r.h.Get("RateLimit") != s.rateLimit {
			t.Errorf("step %d %s %s: %d RateLimit %q, want %d %q", i, s.method, s.path, r.status, r.h.Get("RateLimit"), s.status, s.rateLimit)
		}
		if s.body != "" && r.body != s.body {
			t.Errorf("step %d: upstream saw %q, want %q", i, r.body, s.body)
		}
		if s.status == 200 && r.h.Get("X-Upstream") != "yes" {
			t.Errorf("step %d: not proxied", i)
		}
		if s.status == 429 && s.method != "HEAD" {
			var p middleware.Problem
			if err := json.Unmarshal([]byte(r.body), &p); err != nil || p.Type != middleware.TypeQuotaExceeded || r.h.Get("Retry-After") != "50" {
				t.Errorf("step %d: 429 body %s Retry-After %q", i, r.body, r.h.Get("Retry-After"))
			}
		}
	}
}

// The most specific route wins, whatever the order of declaration.
func TestMostSpecificRoute(t *testing.T) {
	const cfg = `
domain: edge
gateway:
  routes:
    - {name: any, descriptors: [{entries: [{source: generic_key, value: any}]}]}
    - {name: api, path_prefix: /api, descriptors: [{entries: [{source: generic_key, value: api}]}]}
    - {name: wild, host: "*.example.com", path_prefix: /api, descriptors: [{entries: [{source: generic_key, value: wild}]}]}
    - {name: exact, host: a.example.com, path_prefix: /api, descriptors: [{entries: [{source: generic_key, value: exact}]}]}
    - {name: get, host: a.example.com, path_prefix: /api, methods: [get], descriptors: [{entries: [{source: generic_key, value: get}]}]}
descriptors:
  - {key: generic_key, value: any, rate_limit: {name: any, unit: minute, requests_per_unit: 10}}
  - {key: generic_key, value: api, rate_limit: {name: api, unit: minute, requests_per_unit: 10}}
  - {key: generic_key, value: wild, rate_limit: {name: wild, unit: minute, requests_per_unit: 10}}
  - {key: generic_key, value: exact, rate_limit: {name: exact, unit: minute, requests_per_unit: 10}}
  - {key: generic_key, value: get, rate_limit: {name: get, unit: minute, requests_per_unit: 10}}
`
	e := engine(t, cfg, newClock(t0))
	srv := front(t, e, echo(t).URL, gateway.WithPreserveHost(true))
	for _, s := range []struct{ method, host, path, want string }{
		{"GET", "x.org", "/", "any"},
		{"GET", "x.org", "/api/v1", "api"},
		{"GET", "b.example.com", "/api", "wild"},
		{"GET", "example.com", "/api", "api"},
		{"POST", "a.example.com", "/api", "exact"},
		{"GET", "a.example.com", "/api/x", "get"},
		{"GET", "a.example.com", "/other", "any"},
	} {
		r := do(t, s.method, srv.URL+s.path, "Host", s.host)
		if got := r.h.Get("RateLimit-Policy"); !strings.HasPrefix(got, `"`+s.want+`"`) {
			t.Errorf("%s %s%s: RateLimit-Policy %q, want route %s", s.method, s.host, s.path, got, s.want)
		}
	}
}

// A client that is not a trusted proxy cannot choose its key, nor pass its
// own X-Forwarded-For to the upstream; a trusted proxy's chain is believed
// and passed on with the proxy appended.
func TestForwardedFor(t *testing.T) {
	for _, tc := range []struct {
		name     string
		trusted  string
		statuses []int
		wantXFF  string
	}{
		{"untrusted peer", "10.0.0.0/8", []int{200, 200, 429}, "127.0.0.1"},
		{"trusted proxy", "127.0.0.0/8", []int{200, 200, 200}, "203.0.113.%d, 127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := `
domain: edge
gateway:
  trusted_proxies: [` + tc.trusted + `]
  routes:
    - descriptors: [{entries: [{source: remote_address}]}]
descriptors:
  - key: remote_address
    rate_limit: {name: per-client, unit: minute, requests_per_unit: 2}
`
			srv := front(t, engine(t, cfg, newClock(t0)), echo(t).URL)
			for i, want := range tc.statuses {
				r := do(t, "GET", srv.URL+"/", "X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i))
				if r.status != want {
					t.Errorf("request %d: %d, want %d", i, r.status, want)
				}
				wantXFF := tc.wantXFF
				if strings.Contains(wantXFF, "%d") {
					wantXFF = fmt.Sprintf(wantXFF, i)
				}
				if want == 200 && !strings.HasSuffix(r.body, "xff="+wantXFF+"\n") {
					t.Errorf("request %d: upstream saw %q, want xff=%s", i, r.body, wantXFF)
				}
			}
		})
	}
}

// IPv6 clients behind a trusted proxy share their /64's budget.
func TestIPv6Collapse(t *testing.T) {
	cfg := `
domain: edge
gateway:
  trusted_proxies: [127.0.0.1]
  routes:
    - descriptors: [{entries: [{source: remote_address}]}]
descriptors:
  - key: remote_address
    rate_limit: {name: per-client, unit: minute, requests_per_unit: 2}
`
	srv := front(t, engine(t, cfg, newClock(t0)), echo(t).URL)
	for i, s := range []struct {
		ip   string
		want int
	}{{"2001:db8:0:1::1", 200}, {"2001:db8:0:1:abcd::2", 200}, {"2001:db8:0:1::3", 429}, {"2001:db8:0:2::1", 200}} {
		if r := do(t, "GET", srv.URL, "X-Forwarded-For", s.ip); r.status != s.want {
			t.Errorf("request %d from %s: %d, want %d", i, s.ip, r.status, s.want)
		}
	}
}

// The gateway's single-valued fields replace the upstream's; the upstream's
// IETF list members stay beside the gateway's.
func TestUpstreamFields(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("RateLimit-Policy", `"origin";q=50;w=1`)
		w.Header().Set("RateLimit", `"origin";r=49;t=1`)
		w.Header().Set("X-RateLimit-Limit", "50")
		w.Header().Set("X-RateLimit-Remaining", "49")
		w.Header().Set("X-RateLimit-Reset", "1")
	}))
	defer up.Close()
	cfg := `
domain: edge
gateway:
  routes: [{descriptors: [{entries: [{source: remote_address}]}]}]
descriptors:
  - key: remote_address
    rate_limit: {name: edge, unit: minute, requests_per_unit: 5}
`
	srv := front(t, engine(t, cfg, newClock(t0)), up.URL)
	r := do(t, "GET", srv.URL)
	for k, want := range map[string][]string{
		"Ratelimit-Policy":      {`"edge";q=5;w=60`, `"origin";q=50;w=1`},
		"Ratelimit":             {`"edge";r=4;t=50`, `"origin";r=49;t=1`},
		"X-Ratelimit-Limit":     {"5"},
		"X-Ratelimit-Remaining": {"4"},
		"X-Ratelimit-Reset":     {"50"},
	} {
		if got := r.h[k]; strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}

// An upstream that does not answer is reported: 502 with a problem body.
func TestUpstreamDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	var logged atomic.Int64
	cfg := `
domain: edge
gateway:
  routes: [{descriptors: [{entries: [{source: remote_address}]}]}]
descriptors:
  - key: remote_address
    rate_limit: {name: edge, unit: minute, requests_per_unit: 5}
`
	e := engine(t, cfg, newClock(t0))
	srv := front(t, e, "http://"+addr, gateway.WithErrorLog(func(*http.Request, error) { logged.Add(1) }))
	r := do(t, "GET", srv.URL+"/x")
	var p middleware.Problem
	// The body tells the client what failed, not where the upstream is
	// or the dial error (the log has them).
	if r.status != 502 || r.h.Get("Content-Type") != "application/problem+json" || json.Unmarshal([]byte(r.body), &p) != nil ||
		p.Detail != "the upstream could not be reached" || strings.Contains(r.body, addr) || strings.Contains(r.body, "refused") {
		t.Errorf("upstream down: %d %s", r.status, r.body)
	}
	if r := do(t, "GET", srv.URL+"/x%20y"); json.Unmarshal([]byte(r.body), &p) != nil || p.Instance != "/x%20y" {
		t.Errorf("instance of /x%%20y: %s, want the path escaped as a URI reference", r.body)
	}
	if r.h.Get("RateLimit") != `"edge";r=4;t=50` {
		t.Errorf("RateLimit %q: the decision's fields are still there", r.h.Get("RateLimit"))
	}
	// The same cause is logged once per gateway.UpstreamLogInterval
	// (TestUpstreamErrorsAreBounded).
	if logged.Load() != 1 {
		t.Errorf("logged %d errors, want 1", logged.Load())
	}
}

// Streaming responses are flushed as they come; a concurrency rule holds
// the slot until the stream ends.
func TestStreamingAndInFlight(t *testing.T) {
	next := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 2 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			<-next
		}
	}))
	defer up.Close()
	cfg := `
domain: edge
gateway:
  routes: [{descriptors: [{entries: [{source: remote_address}]}]}]
descriptors:
  - key: remote_address
    rate_limit: {name: streams, algorithm: concurrency, requests_per_unit: 1, lease_ttl: 1m}
`
	srv := front(t, engine(t, cfg, nil), up.URL)
	resp, err := http.Get(srv.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "data: 0\n" {
		t.Fatalf("first event: %q %v (not flushed through)", line, err)
	}
	if r := do(t, "GET", srv.URL+"/events"); r.status != 429 {
		t.Errorf("second stream while the first is open: %d, want 429", r.status)
	}
	close(next)
	rest, _ := io.ReadAll(br)
	resp.Body.Close()
	if string(rest) != "\ndata: 1\n\n" {
		t.Errorf("rest of the stream: %q", rest)
	}
	// The slot comes back when the stream is over.
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(srv.URL + "/events")
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot not released after the stream ended: %d", resp.StatusCode)
		}
		time.Sleep(10 * time.Millisecond) // the server finishes the handler after the client has the body
	}
}

// A websocket (any protocol upgrade) is spliced through untouched.
func TestUpgradePassesThrough(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "upgrade expected", 400)
			return
		}
		echoUpgraded(w)
	}))
	defer up.Close()
	cfg := `
domain: edge
gateway:
  routes: [{descriptors: [{entries: [{source: remote_address}]}]}]
descriptors:
  - key: remote_address
    rate_limit: {name: sockets, unit: minute, requests_per_unit: 1}
`
	srv := front(t, engine(t, cfg, newClock(t0)), up.URL)
	dial := func() (net.Conn, *bufio.Reader, string) {
		conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		return conn, br, fmt.Sprint(resp.StatusCode, " ", resp.Header.Get("RateLimit"))
	}
	conn, br, status := dial()
	defer conn.Close()
	if status != `101 "sockets";r=0;t=50` {
		t.Fatalf("upgrade: %s", status)
	}
	for _, msg := range []string{"hello\n", "world\n"} {
		io.WriteString(conn, msg)
		got, err := br.ReadString('\n')
		if err != nil || got != "echo "+msg {
			t.Fatalf("through the socket: %q %v", got, err)
		}
	}
	conn2, _, status := dial()
	conn2.Close()
	if !strings.HasPrefix(status, "429") {
		t.Errorf("second upgrade over the limit: %s", status)
	}
}

// The routes follow the engine's configuration reloads; a reload whose
// routes do not build keeps the previous ones.
func TestReload(t *testing.T) {
	c := newClock(t0)
	e := engine(t, routesConfig, c)
	var logs []string
	var mu sync.Mutex
	srv := front(t, e, echo(t).URL, gateway.WithPreserveHost(true), gateway.WithErrorLog(func(_ *http.Request, err error) {
		mu.Lock()
		logs = append(logs, err.Error())
		mu.Unlock()
	}))
	if r := do(t, "GET", srv.URL+"/healthz"); r.h.Get("RateLimit") != "" {
		t.Fatalf("before reload: %v", r.h)
	}
	cfg, err := policy.Parse("gw2.yaml", []byte(`
domain: edge
gateway:
  routes: [{path_prefix: /healthz, descriptors: [{entries: [{source: generic_key, value: h}]}]}]
descriptors:
  - {key: generic_key, rate_limit: {name: health, unit: minute, requests_per_unit: 9}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if r := do(t, "GET", srv.URL+"/healthz"); r.h.Get("RateLimit") != `"health";r=8;t=50` {
		t.Fatalf("after reload: RateLimit %q", r.h.Get("RateLimit"))
	}
	bad, err := policy.Parse("gw3.yaml", []byte(`
domain: edge
gateway:
  routes: [{path_prefix: /x, descriptors: [{entries: [{source: generic_key, value: d}]}]}]
descriptors:
  - {key: generic_key, value: h, rate_limit: {name: health2, unit: minute, requests_per_unit: 9}}
  - {key: generic_key, value: d, rate_limit: {unit: minute, requests_per_unit: 1, strategy: degrade, fallback: missing}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetConfig(bad); err != nil {
		t.Fatal(err)
	}
	// The old routes stay (the new /x route is not there), decided by the
	// engine's new rules, which count on the same key.
	if r := do(t, "GET", srv.URL+"/healthz"); r.h.Get("RateLimit") != `"health2";r=7;t=50` {
		t.Errorf("after a bad reload: /healthz RateLimit %q, want the previous route under the new rules", r.h.Get("RateLimit"))
	}
	if r := do(t, "GET", srv.URL+"/x"); r.h.Get("RateLimit") != "" {
		t.Errorf("after a bad reload: /x RateLimit %q, want no route", r.h.Get("RateLimit"))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(logs) != 1 || !strings.Contains(logs[0], `gw3.yaml:7: rule "generic_key_d": strategy degrade needs the fallback "missing"`) {
		t.Errorf("logs: %q", logs)
	}
}

func TestNewErrors(t *testing.T) {
	e := engine(t, routesConfig, nil)
	noRoutes := engine(t, "domain: x\ndescriptors: [{key: a, rate_limit: {unit: second, requests_per_unit: 1}}]\n", nil)
	userCfg := engine(t, `
domain: edge
gateway:
  routes: [{descriptors: [{entries: [{source: user}]}]}]
`, nil)
	for _, tc := range []struct {
		name     string
		e        *policy.Engine
		upstream string
		want     string
	}{
		{"relative upstream", e, "/path", "want an absolute http://, https:// or h2c:// URL"},
		{"other scheme", e, "ftp://x", "want an absolute http://, https:// or h2c:// URL"},
		{"bad URL", e, "http://a b", "upstream"},
		{"no routes", noRoutes, "http://127.0.0.1:1", "declares no routes"},
		{"user without a source", userCfg, "http://127.0.0.1:1", "user needs user_header or the WithUser option"},
	} {
		if _, err := gateway.New(tc.e.Config(), tc.e, tc.upstream); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := gateway.New(userCfg.Config(), userCfg, "http://127.0.0.1:1",
		gateway.WithUser(func(r *http.Request) string { return r.Header.Get("X-User") })); err != nil {
		t.Errorf("user from WithUser: %v", err)
	}
	if _, err := gateway.New(nil, e, "http://x"); err == nil {
		t.Error("nil config accepted")
	}
}

// 1200 requests at a budget of 1000 through the gateway: exactly 1000 are
// proxied, 200 refused.
func TestArticleScenario(t *testing.T) {
	const cfg = `
domain: edge
gateway:
  routes: [{path_prefix: /ping, descriptors: [{entries: [{source: remote_address}]}]}]
descriptors:
  - key: remote_address
    rate_limit: {name: per-ip, algorithm: token_bucket, unit: hour, requests_per_unit: 1000}
`
	var reached atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1); io.WriteString(w, "pong") }))
	defer up.Close()
	// A stopped clock: the bucket does not refill during the test.
	srv := front(t, engine(t, cfg, newClock(t0)), up.URL)
	ok, limited, other := load(t, srv.URL+"/ping", 1200, 32)
	if ok != 1000 || limited != 200 || other != 0 || reached.Load() != 1000 {
		t.Errorf("200s %d, 429s %d, other %d, upstream reached %d; want 1000, 200, 0, 1000", ok, limited, other, reached.Load())
	}
}

// load sends n GETs from c goroutines and counts the answers.
func load(t testing.TB, url string, n, c int) (ok, limited, other int64) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	var a, b, o, next atomic.Int64
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				resp, err := client.Get(url)
				if err != nil {
					o.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case 200:
					a.Add(1)
				case 429:
					b.Add(1)
				default:
					o.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return a.Load(), b.Load(), o.Load()
}

// upgrade hijacks w's connection and answers 101 Switching Protocols to a
// websocket upgrade, as the test upstreams do; ok is false when w cannot
// be hijacked.
func upgrade(w http.ResponseWriter) (net.Conn, *bufio.ReadWriter, bool) {
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, nil, false
	}
	rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	rw.Flush()
	return conn, rw, true
}

// echoUpgraded upgrades w's connection (upgrade) and answers each line
// the client sends with "echo " and the line, until the client closes.
func echoUpgraded(w http.ResponseWriter) {
	conn, rw, ok := upgrade(w)
	if !ok {
		return
	}
	defer conn.Close()
	for {
		line, err := rw.ReadString('\n')
		if err != nil {
			return
		}
		rw.WriteString("echo " + line)
		rw.Flush()
	}
}

// uploadSlowly POSTs 50 bytes to url in 5 pieces 80 ms apart (real time: a
// slow client's pace) and returns the answer's status and body.
func uploadSlowly(t *testing.T, url string) (int, string) {
	t.Helper()
	pr, pw := io.Pipe()
	go func() {
		for range 5 {
			time.Sleep(80 * time.Millisecond)
			pw.Write([]byte("0123456789"))
		}
		pw.Close()
	}()
	resp, err := http.Post(url, "text/plain", pr)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// Under concurrent load the gateway reuses its connections to the
// upstream: 1000 requests from 50 clients open about as many upstream
// connections as there are clients, not one per request (the default
// transport kept 2 idle connections per host and opened 769).
func TestUpstreamConnectionsReused(t *testing.T) {
	const cfg = `
domain: edge
gateway:
  routes: [{path_prefix: /ping, descriptors: [{entries: [{source: remote_address}]}]}]
descriptors:
  - key: remote_address
    rate_limit: {name: per-ip, unit: hour, requests_per_unit: 100000}
`
	var conns atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "pong") }))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.Start()
	defer up.Close()
	srv := front(t, engine(t, cfg, newClock(t0)), up.URL)
	const clients = 50
	ok, limited, other := load(t, srv.URL+"/ping", 1000, clients)
	if ok != 1000 || limited != 0 || other != 0 {
		t.Fatalf("200s %d, 429s %d, other %d; want 1000 admitted", ok, limited, other)
	}
	if n := conns.Load(); n > 2*clients {
		t.Errorf("%d upstream connections for 1000 requests from %d clients, want at most %d", n, clients, 2*clients)
	}
}
