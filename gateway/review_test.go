package gateway_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/middleware"
	"github.com/floodgate/floodgate/policy"
)

// errLog collects the gateway's error log.
type errLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *errLog) add(_ *http.Request, err error) {
	l.mu.Lock()
	l.msgs = append(l.msgs, err.Error())
	l.mu.Unlock()
}

func (l *errLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.msgs, "\n")
}

const timeoutConfig = `
domain: edge
gateway:
  routes: [{descriptors: [{entries: [{source: remote_address}]}]}]
descriptors:
  - key: remote_address
    rate_limit: {name: slots, algorithm: concurrency, requests_per_unit: 1, lease_ttl: 1m}
`

// An upstream that does not answer within --upstream-timeout gets 504 with
// a problem body, and its concurrency slot is free again; a body that
// keeps flowing for longer than the timeout is not cut, one that stalls
// is.
func TestUpstreamTimeout(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case "/flowing": // 6 pieces 60 ms apart: 360 ms in all, > the timeout
			for i := range 6 {
				fmt.Fprintf(w, "piece %d\n", i)
				w.(http.Flusher).Flush()
				time.Sleep(60 * time.Millisecond)
			}
		case "/stalls":
			fmt.Fprintln(w, "first")
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case "/upload": // reads the body, which arrives slowly, then answers
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "got %d bytes", len(b))
		default:
			fmt.Fprintln(w, "fast")
		}
	}))
	defer up.Close()
	var logs errLog
	srv := front(t, engine(t, timeoutConfig, nil), up.URL, gateway.WithUpstreamTimeout(200*time.Millisecond), gateway.WithErrorLog(logs.add))

	start := time.Now()
	r := do(t, "GET", srv.URL+"/slow")
	took := time.Since(start)
	var p middleware.Problem
	if r.status != 504 || json.Unmarshal([]byte(r.body), &p) != nil || p.Detail != "the upstream did not answer in time" {
		t.Errorf("slow upstream: %d %s, want 504 with a problem body", r.status, r.body)
	}
	if took > 3*time.Second {
		t.Errorf("slow upstream held the request %v, want about 200ms", took)
	}
	if !strings.Contains(logs.String(), "no answer within 200ms") {
		t.Errorf("log: %q, want the timeout", logs.String())
	}
	// The slot came back with the 504.
	if r := do(t, "GET", srv.URL+"/fast"); r.status != 200 {
		t.Errorf("after the timeout: %d, want 200 (slot released)", r.status)
	}
	if r := do(t, "GET", srv.URL+"/flowing"); r.status != 200 || strings.Count(r.body, "piece") != 6 {
		t.Errorf("flowing body: %d %q, want all 6 pieces", r.status, r.body)
	}

	resp, err := http.Get(srv.URL + "/stalls")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "first\n" || err == nil {
		t.Errorf("stalled body: %d %q %v, want the first line then a cut", resp.StatusCode, b, err)
	}

	// An upload that keeps coming is progress.
	if code, body := uploadSlowly(t, srv.URL+"/upload"); code != 200 || body != "got 50 bytes" {
		t.Errorf("slow upload: %d %q, want it through", code, body)
	}
}

// A websocket is not bounded by the upstream timeout once upgraded.
func TestUpstreamTimeoutSparesUpgrades(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { echoUpgraded(w) }))
	defer up.Close()
	srv := front(t, engine(t, timeoutConfig, nil), up.URL, gateway.WithUpstreamTimeout(100*time.Millisecond))
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	time.Sleep(300 * time.Millisecond) // idle for 3 timeouts
	io.WriteString(conn, "still there\n")
	if got, err := br.ReadString('\n'); err != nil || got != "echo still there\n" {
		t.Errorf("after idling: %q %v, want the socket open", got, err)
	}
}

// forwardEcho is an upstream that reports the forwarding headers it got.
func forwardEcho(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "xff=%s|fwd=%s", strings.Join(r.Header.Values("X-Forwarded-For"), ", "), strings.Join(r.Header.Values("Forwarded"), ", "))
	}))
	t.Cleanup(up.Close)
	return up
}

// The chain the gateway trusts reaches the upstream the same way on routed
// and unrouted paths: a trusted peer's X-Forwarded-For (and Forwarded, when
// that is the configured header) kept with the peer appended, an untrusted
// peer's replaced by the peer alone.
func TestForwardingHeaders(t *testing.T) {
	host := func(srv *httptest.Server) string { return strings.TrimPrefix(srv.URL, "http://") }
	for _, tc := range []struct {
		name, header, trusted string
		send                  []string
		want                  func(host string) string
	}{
		{"xff trusted", "x-forwarded-for", "127.0.0.0/8", []string{"X-Forwarded-For", "10.1.1.1"},
			func(string) string { return "xff=10.1.1.1, 127.0.0.1|fwd=" }},
		{"xff untrusted", "x-forwarded-for", "10.0.0.0/8", []string{"X-Forwarded-For", "10.1.1.1"},
			func(string) string { return "xff=127.0.0.1|fwd=" }},
		{"forwarded trusted", "forwarded", "127.0.0.0/8", []string{"Forwarded", "for=10.1.1.1;proto=https", "X-Forwarded-For", "10.1.1.1"},
			func(h string) string {
				return `xff=10.1.1.1, 127.0.0.1|fwd=for=10.1.1.1;proto=https, for=127.0.0.1;host="` + h + `";proto=http`
			}},
		{"forwarded untrusted", "forwarded", "10.0.0.0/8", []string{"Forwarded", "for=10.1.1.1", "X-Forwarded-For", "10.1.1.1"},
			func(h string) string { return `xff=127.0.0.1|fwd=for=127.0.0.1;host="` + h + `";proto=http` }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := `
domain: edge
gateway:
  trusted_proxies: [` + tc.trusted + `]
  proxy_header: ` + tc.header + `
  routes:
    - path_prefix: /limited
      descriptors: [{entries: [{source: remote_address}]}]
    - path_prefix: /open
descriptors:
  - key: remote_address
    rate_limit: {name: per-client, unit: minute, requests_per_unit: 100}
`
			srv := front(t, engine(t, cfg, newClock(t0)), forwardEcho(t).URL)
			want := tc.want(host(srv))
			for _, p := range []string{"/limited", "/open", "/unrouted"} {
				if r := do(t, "GET", srv.URL+p, tc.send...); r.body != want {
					t.Errorf("%s: upstream got %q, want %q", p, r.body, want)
				}
			}
		})
	}
}

// GET /json and /v1/decide are the upstream's paths like any other: the
// gateway does not answer them itself.
func TestDecisionPathsAreProxied(t *testing.T) {
	srv := front(t, engine(t, routesConfig, newClock(t0)), echo(t).URL, gateway.WithPreserveHost(true))
	for _, p := range []string{"/json", "/v1/decide", "/healthcheck"} {
		if r := do(t, "POST", srv.URL+p); r.status != 200 || !strings.HasPrefix(r.body, "POST "+p+" ") {
			t.Errorf("POST %s: %d %q, want the upstream's answer", p, r.status, r.body)
		}
	}
}

// SetConfig is all or nothing: routes that do not build leave both the
// rules and the routes in force; routes that build switch together with
// the rules.
func TestSetConfigAllOrNothing(t *testing.T) {
	e := engine(t, routesConfig, newClock(t0))
	gw, err := gateway.New(e.Config(), e, echo(t).URL, gateway.WithPreserveHost(true))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	defer srv.Close()
	before := e.Config()
	bad, err := policy.Parse("bad.yaml", []byte(`
domain: edge
gateway:
  routes:
    - path_prefix: /healthz
      descriptors:
        - entries:
            - source: user
descriptors:
  - {key: user, rate_limit: {unit: minute, requests_per_unit: 1}}
`))
	if err != nil {
		t.Fatal(err)
	}
	installed := false
	err = gw.SetConfig(bad, func(c *policy.Config) error { installed = true; return e.SetConfig(c) })
	var ps policy.Problems
	if !errors.As(err, &ps) || len(ps) != 1 || ps[0].Line != 8 || !strings.Contains(ps[0].Message, "user needs user_header") {
		t.Fatalf("bad routes: %v, want one problem at bad.yaml:8 (the entry)", err)
	}
	if installed || e.Config() != before {
		t.Fatal("the rules were installed although the routes did not build")
	}
	if r := do(t, "GET", srv.URL+"/healthz"); r.status != 200 || r.h.Get("RateLimit") != "" {
		t.Errorf("/healthz after the refused reload: %d %q, want the old unlimited route", r.status, r.h.Get("RateLimit"))
	}
	good, err := policy.Parse("good.yaml", []byte(`
domain: edge
gateway:
  routes: [{path_prefix: /healthz, descriptors: [{entries: [{source: generic_key, value: h}]}]}]
descriptors:
  - {key: generic_key, rate_limit: {name: health, unit: minute, requests_per_unit: 9}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.SetConfig(good, e.SetConfig); err != nil {
		t.Fatal(err)
	}
	if r := do(t, "GET", srv.URL+"/healthz"); r.h.Get("RateLimit") != `"health";r=8;t=50` {
		t.Errorf("after a good reload: RateLimit %q", r.h.Get("RateLimit"))
	}
}

// Check builds the routes as New does and reports problems at the entry's
// or rule's line; routes whose descriptors no rule limits are warnings.
func TestCheck(t *testing.T) {
	cfg, err := policy.Parse("c.yaml", []byte(`domain: edge
gateway:
  routes:
    - path_prefix: /u
      descriptors:
        - entries:
            - source: user
    - path_prefix: /d
      descriptors:
        - entries: [{source: generic_key, value: d}]
    - path_prefix: /typo
      descriptors:
        - entries: [{source: header:X-Api-Key}]
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: generic_key
    value: d
    rate_limit: {name: deg, unit: minute, requests_per_unit: 1, strategy: degrade, fallback: cached}
`))
	if err != nil {
		t.Fatal(err)
	}
	warnings, err := gateway.Check(cfg)
	var ps policy.Problems
	if !errors.As(err, &ps) || len(ps) != 2 ||
		ps[0].String() != `c.yaml:7: gateway: routes[0].descriptors[0].entries[0].source: user needs user_header or the WithUser option (route "/u" of domain edge)` ||
		!strings.HasPrefix(ps[1].String(), `c.yaml:19: rule "deg": strategy degrade needs the fallback "cached"`) {
		t.Errorf("problems:\n%v", err)
	}
	if len(warnings) != 1 || !strings.HasPrefix(warnings[0].String(), "c.yaml:13: gateway: routes[2].descriptors[0]: no rule of domain edge has the keys [X-Api-Key]") {
		t.Errorf("warnings: %v", warnings)
	}
	// With the options an embedding program would give, it builds.
	if w, err := gateway.Check(cfg, gateway.WithUser(func(*http.Request) string { return "" }),
		gateway.WithMiddleware(middleware.WithFallback("cached", http.NotFoundHandler()))); err != nil || len(w) != 1 {
		t.Errorf("with WithUser and the fallback: %v %v", w, err)
	}
	// New reports the same problems at the same lines.
	if _, err := gateway.New(cfg, engineOf(t, cfg), "http://127.0.0.1:1"); !errors.As(err, &ps) || ps[0].Line != 7 {
		t.Errorf("New: %v, want the problems at their lines", err)
	}
}

func engineOf(t *testing.T, cfg *policy.Config) *policy.Engine {
	t.Helper()
	e := engine(t, "domain: x\n", nil)
	if err := e.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	return e
}

// A constant generic_key value of a route is checked against the rules'
// values as the engine matches them: wildcards anywhere in the value
// (envoyproxy/ratelimit's "/api*v1"), not only a trailing '*'.
func TestCheckWildcardValues(t *testing.T) {
	cfg, err := policy.Parse("w.yaml", []byte(`domain: edge
gateway:
  routes:
    - path_prefix: /a
      descriptors:
        - entries: [{source: generic_key, value: /api/v1}]
    - path_prefix: /b
      descriptors:
        - entries: [{source: generic_key, value: /web/v1}]
descriptors:
  - key: generic_key
    value: "/api*v1"
    rate_limit: {unit: minute, requests_per_unit: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	warnings, err := gateway.Check(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0].String(), `routes[1].descriptors[0]: no rule of domain edge`) {
		t.Errorf("warnings: %v, want one, for /web/v1 only", warnings)
	}
}

// A trusted_proxies network that holds every address makes every peer a
// proxy, so any client picks the address it is limited by: Check warns,
// naming the header a client would forge; listing real proxies does not.
func TestCheckWarnsOfTrustingEveryPeer(t *testing.T) {
	for _, tc := range []struct {
		proxies string
		warn    bool
	}{
		{"[0.0.0.0/0]", true},
		{"[10.0.0.0/8, '::/0']", true},
		{"['::ffff:0:0/96']", true},
		{"[10.0.0.0/8, 192.168.0.0/16]", false},
		{"[]", false},
	} {
		cfg, err := policy.Parse("p.yaml", []byte(`domain: edge
gateway:
  trusted_proxies: `+tc.proxies+`
  routes:
    - descriptors:
        - entries: [{source: remote_address}]
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1}
`))
		if err != nil {
			t.Fatal(err)
		}
		warnings, err := gateway.Check(cfg)
		if err != nil {
			t.Fatal(err)
		}
		got := len(warnings) == 1 && strings.HasPrefix(warnings[0].String(),
			"p.yaml:1: gateway: trusted_proxies of domain edge holds every address") &&
			strings.Contains(warnings[0].String(), "X-Forwarded-For")
		if got != tc.warn || len(warnings) > 1 {
			t.Errorf("trusted_proxies %s: warnings %v, want a warning: %v", tc.proxies, warnings, tc.warn)
		}
	}
}
