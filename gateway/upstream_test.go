package gateway_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/middleware"
)

// rawRequest sends request on a connection of its own to srv and returns
// the answer's status and body.
func rawRequest(t *testing.T, srv *httptest.Server, request string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%q: %v", request, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// A client that pauses mid-upload for longer than the upstream timeout,
// but less than the client timeout, is not the upstream's fault: the
// upstream timer is stopped while the gateway waits on the client (it ran,
// and the request got 504). One that stalls past the client timeout gets
// 408, logged as the client's fault (the log blamed the upstream timer).
func TestUploadPauseIsNotTheUpstreams(t *testing.T) {
	var logs errLog
	srv := front(t, engine(t, timeoutConfig, nil), slowClients(t).URL, gateway.WithUpstreamTimeout(150*time.Millisecond),
		gateway.WithClientTimeout(2*time.Second), gateway.WithErrorLog(logs.add))
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
	time.Sleep(500 * time.Millisecond) // a client's pause: 3 upstream timeouts
	io.WriteString(conn, strings.Repeat("x", 90))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != "got 100 bytes" {
		t.Errorf("upload paused for 500ms, upstream timeout 150ms, client timeout 2s: %d %q, want 200 %q (log: %s)", resp.StatusCode, b, "got 100 bytes", logs.String())
	}

	var logs2 errLog
	// The upstream timeout leaves room to dial and start reading the body
	// under -race on a loaded machine: a timer that fires before the
	// transport's first read of the body is a timeout of the upstream's
	// (504), not this test's case.
	srv = front(t, engine(t, timeoutConfig, nil), slowClients(t).URL, gateway.WithUpstreamTimeout(250*time.Millisecond),
		gateway.WithClientTimeout(600*time.Millisecond), gateway.WithErrorLog(logs2.add))
	code, body := rawRequest(t, srv, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
	if code != http.StatusRequestTimeout {
		t.Errorf("upload stalled past the client timeout: %d %s, want 408", code, body)
	}
	if l := logs2.String(); !strings.Contains(l, "nothing of the request body for 600ms") || strings.Contains(l, "upstream") {
		t.Errorf("log of the stalled upload: %q, want the client's fault and no upstream", l)
	}
}

// failing is an upstream that fails after the response header: /reset
// announces 1000 bytes, sends 7 and resets the connection; /cut streams a
// chunked body and closes the connection without its last chunk; /slow
// streams for as long as the client stays.
func failing(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/reset", "/cut":
			if r.URL.Path == "/reset" {
				w.Header().Set("Content-Length", "1000")
			}
			io.WriteString(w, "partial")
			w.(http.Flusher).Flush()
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			if r.URL.Path == "/reset" {
				conn.(*net.TCPConn).SetLinger(0)
			}
			conn.Close()
		case "/slow":
			for {
				if _, err := io.WriteString(w, "tick\n"); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
	}))
	t.Cleanup(up.Close)
	return up
}

// reasons counts WithUpstreamErrors' reports.
type reasons struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *reasons) add(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[reason]++
}

func (c *reasons) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprint(c.n)
}

// An upstream that fails after the response header is reported: logged
// with the route, the upstream and the error, and counted, with or without
// an upstream timeout. A client that goes away is not an upstream failure.
// (Nothing was logged: the body's failures went to ReverseProxy's
// discarded log.)
func TestUpstreamFailuresAfterTheHeader(t *testing.T) {
	const cfg = `
domain: edge
gateway:
  routes: [{name: all, path_prefix: /, descriptors: [{entries: [{source: remote_address}]}]}]
descriptors:
  - key: remote_address
    rate_limit: {name: per-client, unit: minute, requests_per_unit: 1000}
`
	for _, timeout := range []time.Duration{0, time.Minute} {
		t.Run(fmt.Sprint("timeout ", timeout), func(t *testing.T) {
			var logs errLog
			var count reasons
			srv := front(t, engine(t, cfg, nil), failing(t).URL, gateway.WithUpstreamTimeout(timeout),
				gateway.WithErrorLog(logs.add), gateway.WithUpstreamErrors(count.add))
			for _, p := range []string{"/reset", "/cut"} {
				resp, err := http.Get(srv.URL + p)
				if err == nil {
					_, err = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				if err == nil {
					t.Errorf("%s: the client got a complete response, want it cut off", p)
				}
			}
			l := logs.String()
			if n := strings.Count(l, `gateway: route "all": upstream http://`); n != 2 || strings.Count(l, "the response body failed after the header") != 2 {
				t.Errorf("log:\n%s\nwant 2 lines naming the route, the upstream and the failure", l)
			}
			if got := count.String(); got != "map[reset:2]" {
				t.Errorf("counted %s, want map[reset:2]", got)
			}

			// A client that leaves a stream is no upstream failure.
			resp, err := http.Get(srv.URL + "/slow")
			if err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(resp.Body)
			br.ReadString('\n')
			resp.Body.Close()
			time.Sleep(100 * time.Millisecond) // the gateway sees the client gone
			if got := count.String(); got != "map[reset:2]" || logs.String() != l {
				t.Errorf("after a client left: counted %s, log:\n%s\nwant nothing more", got, logs.String())
			}
		})
	}
}

// An upstream failing under load is counted every time but logged once
// per cause per gateway.UpstreamLogInterval.
func TestUpstreamErrorsAreBounded(t *testing.T) {
	var logs errLog
	var count reasons
	srv := front(t, engine(t, timeoutConfig, nil), failing(t).URL, gateway.WithErrorLog(logs.add), gateway.WithUpstreamErrors(count.add))
	for range 20 {
		if resp, err := http.Get(srv.URL + "/reset"); err == nil {
			io.ReadAll(resp.Body)
			resp.Body.Close()
		}
	}
	if got := count.String(); got != "map[reset:20]" {
		t.Errorf("counted %s, want map[reset:20]", got)
	}
	if n := len(strings.Split(logs.String(), "\n")); n != 1 {
		t.Errorf("20 resets logged %d lines, want 1:\n%s", n, logs.String())
	}
}

// Request trailers reach the upstream with their values (ReverseProxy's
// copy of the trailer map was made before the body, and the values, came
// in: the upstream got X-Sum with no value).
func TestRequestTrailers(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s X-Sum=%q", b, r.Trailer.Get("X-Sum"))
	}))
	defer up.Close()
	srv := front(t, engine(t, timeoutConfig, nil), up.URL)
	code, body := rawRequest(t, srv, "POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n5\r\nhello\r\n0\r\nX-Sum: 42\r\n\r\n")
	if code != 200 || body != `hello X-Sum="42"` {
		t.Errorf("chunked upload with a trailer: %d %q, want 200 %q", code, body, `hello X-Sum="42"`)
	}
}

// The upstream gets the path as the client wrote it, "\" included (it got
// %5C); a request target "*" is for OPTIONS only: any other method gets
// 400 (it went upstream as /%2A), OPTIONS * goes upstream as *.
func TestPathAsReceived(t *testing.T) {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", r.Method, r.RequestURI)
	}))
	up.Config.DisableGeneralOptionsHandler = true // OPTIONS * to the handler
	up.Start()
	defer up.Close()
	for _, base := range []string{"", "/base"} {
		gw, err := gateway.New(engine(t, timeoutConfig, nil).Config(), engine(t, timeoutConfig, nil), up.URL+base)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(gw)
		srv.Config.DisableGeneralOptionsHandler = true
		srv.Start()
		defer srv.Close()
		for _, s := range []struct {
			target string
			code   int
			want   string
		}{
			{`GET /x%20y/%2e%2e/z`, 200, `GET ` + base + `/x%20y/%2e%2e/z`},
			{`GET /a%2Fb/%41`, 200, `GET ` + base + `/a%2Fb/%41`},
			{`GET /a;b:c@d&e=f+g$h,i!j'k(l)m*n/~-._`, 200, `GET ` + base + `/a;b:c@d&e=f+g$h,i!j'k(l)m*n/~-._`},
			// Bytes a WHATWG URL parser reads otherwise than the route
			// match are re-encoded, as url.URL writes them.
			{`GET /\admin`, 200, `GET ` + base + `/%5Cadmin`},
			{`GET /a\b/c?q=\`, 200, `GET ` + base + `/a%5Cb/c?q=\`},
			{`GET /x/..\admin`, 200, `GET ` + base + `/x/..%5Cadmin`},
			{"GET /a|b^c`d{e}f\"g<h>", 200, `GET ` + base + `/a%7Cb%5Ec%60d%7Be%7Df%22g%3Ch%3E`},
			{`GET /a%2Fb|c`, 200, `GET ` + base + `/a/b%7Cc`}, // re-encoded whole
			// One leading "/", not a host to a WHATWG parser; under a base
			// path the slashes are not leading.
			{`GET //admin//x`, 200, `GET ` + strings.Repeat(base+"/", min(len(base), 1)) + `/admin//x`},
			{`GET /admin#x`, 400, ""},
			{`GET /a?q=1#x`, 400, ""},
			{`GET /x y`, 400, ""}, // the server refuses it
			{`GET *`, 400, ""},
			{`OPTIONS *`, 200, `OPTIONS *`},
		} {
			code, body := rawRequest(t, srv, s.target+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			if code != s.code || s.want != "" && body != s.want {
				t.Errorf("upstream %q, %s: %d %q, want %d %q", base, s.target, code, body, s.code, s.want)
			}
		}
	}
}

// An upstream that parses its request target as a WHATWG URL (Node's new
// URL(req.url, base), Deno, Bun: "#" starts the fragment, "\" is "/")
// reads the path the gateway matched the route on, or the request gets
// 400: "/admin#x" and "/x/..\admin" were served as /admin after matching
// another route, skipping /admin's limit.
func TestPathReadAsMatched(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.RequestURI)
	}))
	defer up.Close()
	srv := front(t, engine(t, timeoutConfig, nil), up.URL)
	base, _ := url.Parse("http://upstream.example/")
	whatwg := func(target string) string {
		u, err := base.Parse(strings.ReplaceAll(target, `\`, "/"))
		if err != nil {
			return "unparsable: " + err.Error()
		}
		return path.Clean("/" + u.Path)
	}
	for _, target := range []string{`/admin#x`, `/x/..\admin`, `/x\..\admin`, `/x/..%5Cadmin`, `/admin`, `//admin`, `///admin/x`, `//%61dmin`} {
		code, got := rawRequest(t, srv, "GET "+target+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		if code == http.StatusBadRequest {
			continue
		}
		u, err := url.ParseRequestURI(target)
		if err != nil {
			t.Fatal(err)
		}
		if matched := path.Clean(u.Path); code != 200 || whatwg(got) != matched {
			t.Errorf("GET %s: %d, the upstream got %q, which a WHATWG parser reads as %s; the gateway matched %s", target, code, got, whatwg(got), matched)
		}
	}
}

// The upstream gets the client's Accept-Encoding, or none: the transport
// does not ask for gzip on its own (and then decompress it).
func TestNoAcceptEncodingAdded(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "Accept-Encoding=%q", r.Header.Values("Accept-Encoding"))
	}))
	defer up.Close()
	srv := front(t, engine(t, timeoutConfig, nil), up.URL)
	if code, body := rawRequest(t, srv, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); code != 200 || body != `Accept-Encoding=[]` {
		t.Errorf("no Accept-Encoding sent: upstream got %s, want none", body)
	}
	if code, body := rawRequest(t, srv, "GET / HTTP/1.1\r\nHost: x\r\nAccept-Encoding: br\r\nConnection: close\r\n\r\n"); code != 200 || body != `Accept-Encoding=["br"]` {
		t.Errorf("Accept-Encoding: br sent: upstream got %s, want br", body)
	}
}

// refuse_status: 503 answers rate and concurrency refusals with 503 and a
// problem body of the draft's temporary-reduced-capacity type (-10 §5.2:
// the server's capacity, not the client's quota), its title, status and
// detail saying the same; the fields, Retry-After and violated-policies
// as a 429's.
func TestRefuseStatus(t *testing.T) {
	release, held := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/conn/hold" {
			close(held)
			<-release
		}
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	defer close(release)
	const cfg = `
domain: edge
gateway:
  refuse_status: 503
  routes:
    - {path_prefix: /rate, descriptors: [{entries: [{source: generic_key, value: rate}]}]}
    - {path_prefix: /conn, descriptors: [{entries: [{source: generic_key, value: conn}]}]}
descriptors:
  - {key: generic_key, value: rate, rate_limit: {name: rate, unit: minute, requests_per_unit: 1}}
  - {key: generic_key, value: conn, rate_limit: {name: conn, algorithm: concurrency, requests_per_unit: 1, lease_ttl: 1m}}
`
	srv := front(t, engine(t, cfg, newClock(t0)), up.URL)
	if r := do(t, "GET", srv.URL+"/rate"); r.status != 200 {
		t.Fatalf("first request: %d, want 200", r.status)
	}
	r := do(t, "GET", srv.URL+"/rate")
	var p middleware.Problem
	const (
		reduced = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
		title   = "Request cannot be satisfied due to temporary server capacity constraints"
	)
	if r.status != 503 || json.Unmarshal([]byte(r.body), &p) != nil || p.Status != 503 || p.Type != reduced || p.Title != title ||
		p.Detail != "rate: over the server's capacity; retry in 50 s" || p.RetryAfter == nil || *p.RetryAfter != 50 ||
		len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != "rate" ||
		r.h.Get("Retry-After") != "50" || r.h.Get("RateLimit") != `"rate";r=0;t=50` {
		t.Errorf("rate refusal: %d %v %s, want 503 with the temporary-reduced-capacity body (status 503), Retry-After and RateLimit", r.status, r.h, r.body)
	}

	go http.Get(srv.URL + "/conn/hold")
	select {
	case <-held: // the slot is taken until release
	case <-time.After(10 * time.Second):
		t.Fatal("the request that holds the slot did not reach the upstream")
	}
	r = do(t, "GET", srv.URL+"/conn")
	p = middleware.Problem{}
	if r.status != 503 || json.Unmarshal([]byte(r.body), &p) != nil || p.Status != 503 || p.Type != reduced || p.Title != title ||
		!strings.Contains(p.Detail, "in flight") || r.h.Get("RateLimit") == "" {
		t.Errorf("concurrency refusal: %d %v %s, want 503 with the problem body and RateLimit", r.status, r.h, r.body)
	}
}

// Each route's upstream failures are logged: one route's do not hide
// another's for UpstreamLogInterval (the cause left the route out).
func TestUpstreamErrorsLoggedPerRoute(t *testing.T) {
	const cfg = `
domain: edge
gateway:
  routes:
    - {name: a, path_prefix: /a}
    - {name: b, path_prefix: /b}
`
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close() // refused
	var logs errLog
	srv := front(t, engine(t, cfg, nil), down.URL, gateway.WithErrorLog(logs.add))
	for _, p := range []string{"/a", "/a", "/b", "/b", "/c"} {
		if r := do(t, "GET", srv.URL+p); r.status != http.StatusBadGateway {
			t.Fatalf("GET %s: %d, want 502", p, r.status)
		}
	}
	got := logs.String()
	for _, want := range []string{`route "a"`, `route "b"`, `a request no route matches (proxied unlimited)`} {
		if n := strings.Count(got, want); n != 1 {
			t.Errorf("%s logged %d times, want once:\n%s", want, n, got)
		}
	}
}
