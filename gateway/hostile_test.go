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
	"testing"
	"time"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/middleware"
	"github.com/floodgate/floodgate/policy"
)

// slowClients is an upstream for clients that stall: /big is a 32 MB body,
// /upload reads its body, /ws upgrades and floods the socket on "flood",
// anything else answers at once.
func slowClients(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Content-Length", fmt.Sprint(32<<20))
			chunk := make([]byte, 32<<10)
			for range 1024 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case "/upload":
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "got %d bytes", len(b))
		case "/ws":
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
				if line != "flood\n" {
					rw.WriteString("echo " + line)
					rw.Flush()
					continue
				}
				chunk := make([]byte, 32<<10)
				for range 1024 {
					if _, err := conn.Write(chunk); err != nil {
						return
					}
				}
			}
		default:
			io.WriteString(w, "fast")
		}
	}))
	t.Cleanup(up.Close)
	return up
}

// dialStalled opens a connection with a small receive buffer and sends
// request on it; the caller reads nothing, or what it chooses.
func dialStalled(t *testing.T, srv *httptest.Server, request string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.(*net.TCPConn).SetReadBuffer(4096); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	return conn
}

// slotFreed polls the single concurrency slot of timeoutConfig until a
// request is admitted, and reports how long that took (false: not within
// 10 s).
func slotFreed(t *testing.T, srv *httptest.Server) (time.Duration, bool) {
	t.Helper()
	start := time.Now()
	for time.Since(start) < 10*time.Second {
		if r := do(t, "GET", srv.URL+"/fast"); r.status == 200 {
			return time.Since(start), true
		}
		time.Sleep(20 * time.Millisecond) // polling a real server's connection
	}
	return 0, false
}

// A client that stops reading a large response gives its concurrency slot
// back after the client timeout: the write that made no progress fails, the
// response is aborted. (It kept the slot forever: the upstream timer pauses
// while the proxy writes to the client, and the lease is renewed.)
func TestClientThatStopsReadingLosesItsSlot(t *testing.T) {
	var logs errLog
	// The upstream says when /big reaches it: the stalled request holds
	// the slot from then on (a fixed 50 ms sleep let a loaded machine send
	// /fast first, which took the slot itself).
	slow := slowClients(t)
	bigAt := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			select {
			case bigAt <- struct{}{}:
			default:
			}
		}
		slow.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)
	srv := front(t, engine(t, timeoutConfig, nil), up.URL, gateway.WithUpstreamTimeout(time.Minute),
		gateway.WithClientTimeout(200*time.Millisecond), gateway.WithErrorLog(logs.add))
	dialStalled(t, srv, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case <-bigAt:
	case <-time.After(10 * time.Second):
		t.Fatal("the stalled request did not reach the upstream within 10s")
	}
	if r := do(t, "GET", srv.URL+"/fast"); r.status != http.StatusTooManyRequests {
		t.Fatalf("while the 32 MB response is being written: %d, want 429 (the slot taken)", r.status)
	}
	took, ok := slotFreed(t, srv)
	if !ok {
		t.Fatal("the slot of a client that reads nothing was still held after 10s")
	}
	t.Logf("slot free after %v", took)
	if !strings.Contains(logs.String(), "the client took nothing of the response for 200ms") {
		t.Errorf("log %q, want the stalled client", logs.String())
	}
}

// A client that stops sending its request body gets 408 after the client
// timeout, even when the upstream timeout is longer, and its slot is free.
func TestClientThatStopsSendingGets408(t *testing.T) {
	var logs errLog
	srv := front(t, engine(t, timeoutConfig, nil), slowClients(t).URL, gateway.WithUpstreamTimeout(time.Minute),
		gateway.WithClientTimeout(200*time.Millisecond), gateway.WithErrorLog(logs.add))
	conn := dialStalled(t, srv, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to the stalled upload: %v", err)
	}
	took := time.Since(start)
	b, _ := io.ReadAll(resp.Body)
	var p middleware.Problem
	if resp.StatusCode != http.StatusRequestTimeout || json.Unmarshal(b, &p) != nil || p.Detail != "the request body did not arrive in time" {
		t.Errorf("stalled upload: %d %s, want 408 with a problem body", resp.StatusCode, b)
	}
	if took > 5*time.Second {
		t.Errorf("answered after %v, want about 200ms", took)
	}
	if r := do(t, "GET", srv.URL+"/fast"); r.status != 200 {
		t.Errorf("after the 408: %d, want 200 (slot released)", r.status)
	}
	if !strings.Contains(logs.String(), "nothing of the request body for 200ms") {
		t.Errorf("log %q, want the stalled body", logs.String())
	}
	// A body that keeps coming, more slowly than the timeout in all, passes.
	if code, body := uploadSlowly(t, srv.URL+"/upload"); code != 200 || body != "got 50 bytes" {
		t.Errorf("slow but steady upload: %d %q, want it through", code, body)
	}
}

// After an upgrade the client timeout bounds writes to the client, not
// idleness: a websocket idle for three timeouts stays open with its slot;
// one whose client stops reading what the upstream sends is closed and its
// slot freed.
func TestClientTimeoutOnWebsockets(t *testing.T) {
	srv := front(t, engine(t, timeoutConfig, nil), slowClients(t).URL, gateway.WithClientTimeout(100*time.Millisecond))
	conn := dialStalled(t, srv, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	time.Sleep(300 * time.Millisecond) // idle for 3 timeouts
	io.WriteString(conn, "still there\n")
	if got, err := br.ReadString('\n'); err != nil || got != "echo still there\n" {
		t.Fatalf("after idling: %q %v, want the socket open", got, err)
	}
	if r := do(t, "GET", srv.URL+"/fast"); r.status != http.StatusTooManyRequests {
		t.Fatalf("while the websocket is open: %d, want 429", r.status)
	}
	io.WriteString(conn, "flood\n") // and read none of it
	if _, ok := slotFreed(t, srv); !ok {
		t.Fatal("the slot of a websocket whose client reads nothing was still held after 10s")
	}
}

// Routes are picked by the Host the client sends; the upstream sees the
// upstream URL's host unless the Host is preserved. A host route without
// WithPreserveHost would be skipped by any other Host while the upstream
// serves the same path, so New and Check refuse it at its line.
func TestHostRouteNeedsPreserveHost(t *testing.T) {
	const yaml = `domain: edge
gateway:
  routes:
    - path_prefix: /slow
      host: api.example.com
      descriptors: [{entries: [{source: remote_address}]}]
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1}
`
	cfg, err := policy.Parse("h.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	const want = `h.yaml:5: gateway: routes[0].host: a route with a host needs the client's Host passed to the upstream (floodgate serve --preserve-host, gateway.WithPreserveHost(true))`
	var ps policy.Problems
	if _, err := gateway.Check(cfg); !errors.As(err, &ps) || len(ps) != 1 || !strings.HasPrefix(ps[0].String(), want) {
		t.Errorf("Check: %v, want %q", err, want)
	}
	e := engineOf(t, cfg)
	if _, err := gateway.New(cfg, e, "http://127.0.0.1:1"); !errors.As(err, &ps) || !strings.HasPrefix(ps[0].String(), want) {
		t.Errorf("New: %v, want %q", err, want)
	}
	if _, err := gateway.Check(cfg, gateway.WithPreserveHost(true)); err != nil {
		t.Errorf("Check with WithPreserveHost: %v", err)
	}
	// Preserved, the upstream sees the Host that chose the route.
	srv := front(t, e, echo(t).URL, gateway.WithPreserveHost(true))
	for _, s := range []struct {
		host     string
		status   int
		upstream string
	}{
		{"api.example.com", 200, "host=api.example.com"},
		{"api.example.com", 429, ""},
		{"evil", 200, "host=evil"},
	} {
		r := do(t, "GET", srv.URL+"/slow", "Host", s.host)
		if r.status != s.status || !strings.Contains(r.body, s.upstream) {
			t.Errorf("Host %s: %d %q, want %d and the upstream seeing %q", s.host, r.status, r.body, s.status, s.upstream)
		}
	}
}

// A client's own address fields never reach the upstream from a peer the
// gateway does not trust, whatever header the section reads: X-Real-IP is
// the peer, the others are dropped; X-Forwarded-Host and -Proto are the
// gateway's. A trusted proxy's are passed on (Forwarded only when it is the
// configured header, as TestForwardingHeaders shows), X-Forwarded-Host and
// -Proto included: a TLS load balancer in front knows the scheme the
// client used, the gateway only its own hop's; a trusted proxy that sends
// none gets the gateway's.
func TestClientAddressHeaders(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, h := range []string{"X-Real-IP", "True-Client-IP", "CF-Connecting-IP", "Forwarded", "X-Forwarded-Host", "X-Forwarded-Proto"} {
			fmt.Fprintf(w, "%s=%s|", h, r.Header.Get(h))
		}
	}))
	defer up.Close()
	send := []string{"Host", "api.example.com", "X-Real-IP", "6.6.6.6", "True-Client-IP", "6.6.6.6", "CF-Connecting-IP", "6.6.6.6",
		"Forwarded", "for=6.6.6.6", "X-Forwarded-Host", "evil.example", "X-Forwarded-Proto", "https"}
	for _, tc := range []struct{ header, trusted, want string }{
		{"x-forwarded-for", "10.0.0.0/8", "X-Real-IP=127.0.0.1|True-Client-IP=|CF-Connecting-IP=|Forwarded=|X-Forwarded-Host=api.example.com|X-Forwarded-Proto=http|"},
		{"forwarded", "10.0.0.0/8", `X-Real-IP=127.0.0.1|True-Client-IP=|CF-Connecting-IP=|Forwarded=for=127.0.0.1;host="api.example.com";proto=http|X-Forwarded-Host=api.example.com|X-Forwarded-Proto=http|`},
		{"x-real-ip", "10.0.0.0/8", "X-Real-IP=127.0.0.1|True-Client-IP=|CF-Connecting-IP=|Forwarded=|X-Forwarded-Host=api.example.com|X-Forwarded-Proto=http|"},
		{"x-forwarded-for", "127.0.0.0/8", "X-Real-IP=6.6.6.6|True-Client-IP=6.6.6.6|CF-Connecting-IP=6.6.6.6|Forwarded=|X-Forwarded-Host=evil.example|X-Forwarded-Proto=https|"},
	} {
		cfg := "domain: edge\ngateway:\n  trusted_proxies: [" + tc.trusted + "]\n  proxy_header: " + tc.header + "\n  routes: [{path_prefix: /x}]\n"
		srv := front(t, engine(t, cfg, nil), up.URL)
		for _, p := range []string{"/x", "/unrouted"} {
			if r := do(t, "GET", srv.URL+p, send...); r.body != tc.want {
				t.Errorf("%s, trusted %s, %s: upstream got\n%s\nwant\n%s", tc.header, tc.trusted, p, r.body, tc.want)
			}
		}
	}
	srv := front(t, engine(t, "domain: edge\ngateway:\n  trusted_proxies: [127.0.0.0/8]\n  routes: [{path_prefix: /x}]\n", nil), up.URL)
	const want = "X-Real-IP=|True-Client-IP=|CF-Connecting-IP=|Forwarded=|X-Forwarded-Host=api.example.com|X-Forwarded-Proto=http|"
	if r := do(t, "GET", srv.URL+"/x", "Host", "api.example.com"); r.body != want {
		t.Errorf("trusted proxy sending no X-Forwarded-Host/-Proto: upstream got\n%s\nwant\n%s", r.body, want)
	}
}

// Methods match whatever their case: "get" is limited as GET (an upstream
// may serve it as one) rather than let through.
func TestMethodCase(t *testing.T) {
	const cfg = `
domain: edge
gateway:
  routes:
    - {path_prefix: /search, methods: [GET], descriptors: [{entries: [{source: generic_key, value: s}]}]}
descriptors:
  - {key: generic_key, value: s, rate_limit: {name: s, unit: minute, requests_per_unit: 2}}
`
	srv := front(t, engine(t, cfg, newClock(t0)), echo(t).URL)
	for i, s := range []struct {
		method string
		status int
	}{{"GET", 200}, {"get", 200}, {"Get", 429}, {"head", 429}, {"post", 200}} {
		if r := do(t, s.method, srv.URL+"/search"); r.status != s.status {
			t.Errorf("step %d %s /search: %d, want %d", i, s.method, r.status, s.status)
		}
	}
}

// Paths match decoded and cleaned, case-sensitively unless the route sets
// path_case_insensitive; ";" parameters are part of their segment.
func TestPathSpellings(t *testing.T) {
	const cfg = `
domain: edge
gateway:
  routes:
    - {path_prefix: /search, descriptors: [{entries: [{source: generic_key, value: s}]}]}
    - {path_prefix: /Docs, path_case_insensitive: true, descriptors: [{entries: [{source: generic_key, value: d}]}]}
descriptors:
  - {key: generic_key, value: s, rate_limit: {name: s, unit: minute, requests_per_unit: 100}}
  - {key: generic_key, value: d, rate_limit: {name: d, unit: minute, requests_per_unit: 100}}
`
	srv := front(t, engine(t, cfg, newClock(t0)), echo(t).URL)
	for _, s := range []struct{ path, route string }{
		{"/search/q", "s"},
		{"/%73earch/q", "s"},     // decoded
		{"/x/../search/q", "s"},  // cleaned
		{"//search/q", "s"},      // cleaned
		{"/Search/q", ""},        // case-sensitive
		{"/search;a/q", ""},      // ";a" is part of the segment
		{"/search/%2e%2e/x", ""}, // decoded and cleaned: /x
		{"/docs/a", "d"},         // path_case_insensitive
		{"/DOCS", "d"},
		{"/docsx", ""},
	} {
		req, _ := http.NewRequest("GET", srv.URL+s.path, nil)
		req.URL.Opaque = "//" + req.URL.Host + s.path // sent as written
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got := ""
		if p := resp.Header.Get("RateLimit-Policy"); p != "" {
			got = strings.Trim(strings.SplitN(p, ";", 2)[0], `"`)
		}
		if got != s.route {
			t.Errorf("GET %s: route %q, want %q", s.path, got, s.route)
		}
	}
}
