package gateway_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
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
)

// upstreamKinds are the ways the gateway reaches an upstream: HTTP/1.1
// (http://), TLS offering only h2 by ALPN (https://), and HTTP/2 without
// TLS, with prior knowledge (h2c://).
var upstreamKinds = []string{"http", "h2", "h2c"}

// wantProto is the protocol the upstream must see requests in, by kind.
var wantProto = map[string]string{"http": "HTTP/1.1", "h2": "HTTP/2.0", "h2c": "HTTP/2.0"}

// startUpstream serves h on 127.0.0.1 as kind, a real http.Server whose
// Protocols allow that protocol alone. It returns the upstream URL for
// gateway.New and the options the gateway needs to reach it: for h2, a
// transport that trusts the test certificate, as an embedder with a
// private CA builds it (ForceAttemptHTTP2, the clone's, keeps h2 offered).
func startUpstream(t testing.TB, kind string, h http.Handler) (string, []gateway.Option) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	p := new(http.Protocols)
	srv.Config.Protocols = p
	switch kind {
	case "http":
		p.SetHTTP1(true)
		srv.Start()
		t.Cleanup(srv.Close)
		return srv.URL, nil
	case "h2":
		p.SetHTTP2(true)
		srv.EnableHTTP2 = true // ALPN offers "h2" alone
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return srv.URL, []gateway.Option{gateway.WithTransport(trusting(t, srv))}
	case "h2c":
		p.SetUnencryptedHTTP2(true)
		srv.Start()
		t.Cleanup(srv.Close)
		return "h2c://" + srv.Listener.Addr().String(), nil
	}
	t.Fatalf("unknown upstream kind %q", kind)
	return "", nil
}

// trusting is a transport as the gateway's default (a clone of
// http.DefaultTransport, DisableCompression) that trusts srv's certificate.
func trusting(t testing.TB, srv *httptest.Server) *http.Transport {
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	tr.DisableCompression = true
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// protoEcho answers with the protocol the request came in and what it
// carried; X-Upstream-Proto names the protocol too.
func protoEcho(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	w.Header().Set("X-Upstream-Proto", r.Proto)
	fmt.Fprintf(w, "%s %s %s host=%s xff=%s body=%q X-Sum=%q err=%v\n", r.Proto, r.Method, r.URL.RequestURI(), r.Host,
		r.Header.Get("X-Forwarded-For"), b, r.Trailer.Get("X-Sum"), err)
}

// An upstream that speaks only h2 (over TLS, by ALPN) or only h2c is
// reached over HTTP/2 and limited exactly as an HTTP/1.1 one: the same
// statuses, RateLimit, RateLimit-Policy, X-RateLimit-* and Retry-After
// fields and the same 429 problem bodies, byte for byte, on the same
// clock; the upstream sees the same request, in HTTP/2.
func TestH2UpstreamsLimitAsHTTP1(t *testing.T) {
	steps := []struct {
		path, key string
		status    int
	}{
		{"/ip/a", "", 200}, {"/ip/b?q=1", "", 200}, {"/ip/c", "", 200}, {"/ip/d", "", 429},
		{"/key/a", "k1", 200}, {"/key/b", "k1", 200}, {"/key/c", "k1", 429}, {"/key/d", "k2", 200},
		{"/open/x", "", 200},
	}
	answers := map[string][]string{}
	for _, kind := range upstreamKinds {
		up, opts := startUpstream(t, kind, http.HandlerFunc(protoEcho))
		srv := front(t, engine(t, h2Config, newClock(t0)), up, opts...)
		host := strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(up, "http://"), "https://"), "h2c://")
		for i, s := range steps {
			var hdr []string
			if s.key != "" {
				hdr = []string{"X-API-Key", s.key}
			}
			r := do(t, "GET", srv.URL+s.path, hdr...)
			if r.status != s.status {
				t.Errorf("%s upstream, step %d GET %s: %d, want %d", kind, i, s.path, r.status, s.status)
			}
			if s.status == 200 {
				want := fmt.Sprintf("%s GET %s host=%s xff=127.0.0.1 body=\"\" X-Sum=\"\" err=<nil>\n", wantProto[kind], s.path, host)
				if r.body != want || r.h.Get("X-Upstream-Proto") != wantProto[kind] {
					t.Errorf("%s upstream, step %d: the upstream saw %q, want %q", kind, i, r.body, want)
				}
			}
			a := fmt.Sprint(r.status, " ", strings.ReplaceAll(strings.ReplaceAll(r.body, host, "upstream"), wantProto[kind], "PROTO"))
			for _, f := range rateFields {
				a += fmt.Sprintf(" %s=%q", f, r.h.Values(f))
			}
			answers[kind] = append(answers[kind], a)
		}
	}
	for _, kind := range upstreamKinds[1:] {
		for i := range steps {
			if answers[kind][i] != answers["http"][i] {
				t.Errorf("step %d GET %s:\n%s upstream: %s\nhttp upstream: %s", i, steps[i].path, kind, answers[kind][i], answers["http"][i])
			}
		}
	}
	// The values themselves, at t0 (10 s into the minute), over h2c.
	if a := answers["h2c"][3]; !strings.Contains(a, `Retry-After=["50"]`) || !strings.Contains(a, `RateLimit=["\"per-ip\";r=0;t=50"]`) ||
		!strings.Contains(a, `"violated-policies":["per-ip"]`) || !strings.HasPrefix(a, "429 ") {
		t.Errorf("h2c upstream, the fourth /ip request: %s", a)
	}
}

// Over h2 and h2c upstreams, a streamed response reaches the client piece
// by piece (the first event while the upstream still holds the second)
// with its trailers after the body, declared or not (gRPC's grpc-status
// is not declared); a request body sent in pieces and its trailer reach
// the upstream, in HTTP/2.
func TestH2UpstreamsStreamBodiesAndTrailers(t *testing.T) {
	for _, kind := range upstreamKinds {
		t.Run(kind, func(t *testing.T) {
			next := make(chan struct{})
			var held atomic.Bool // the first event did not reach the client before the second was due
			mux := http.NewServeMux()
			mux.HandleFunc("/ip/events", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				w.Header().Set("Trailer", "X-Checksum")
				w.Header().Set("X-Upstream-Proto", r.Proto)
				io.WriteString(w, "data: 0\n\n")
				w.(http.Flusher).Flush()
				select {
				case <-next:
				case <-time.After(5 * time.Second):
					held.Store(true)
				}
				io.WriteString(w, "data: 1\n\n")
				w.Header().Set("X-Checksum", "c0ffee")
				w.Header().Set(http.TrailerPrefix+"X-Undeclared", "late")
			})
			mux.HandleFunc("/key/upload", protoEcho)
			up, opts := startUpstream(t, kind, mux)
			srv := front(t, engine(t, h2Config, newClock(t0)), up, opts...)

			resp, err := http.Get(srv.URL + "/ip/events")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get("X-Upstream-Proto") != wantProto[kind] || resp.Header.Get("RateLimit") != `"per-ip";r=2;t=50` {
				t.Errorf("%d, upstream in %q, RateLimit %q; want 200 in %s with the limit's state", resp.StatusCode,
					resp.Header.Get("X-Upstream-Proto"), resp.Header.Get("RateLimit"), wantProto[kind])
			}
			br := bufio.NewReader(resp.Body)
			if line, err := br.ReadString('\n'); err != nil || line != "data: 0\n" || held.Load() {
				t.Fatalf("first event: %q %v, after the upstream gave up waiting: %v (not flushed through)", line, err, held.Load())
			}
			close(next)
			if rest, err := io.ReadAll(br); err != nil || string(rest) != "\ndata: 1\n\n" {
				t.Errorf("rest of the stream: %q %v", rest, err)
			}
			if got, late := resp.Trailer.Get("X-Checksum"), resp.Trailer.Get("X-Undeclared"); got != "c0ffee" || late != "late" {
				t.Errorf("trailers %v, want X-Checksum c0ffee and X-Undeclared late", resp.Trailer)
			}

			pr, pw := io.Pipe()
			req, _ := http.NewRequest("POST", srv.URL+"/key/upload", pr)
			req.Header.Set("X-API-Key", "k1")
			req.Trailer = http.Header{"X-Sum": nil}
			go func() {
				for _, p := range []string{"hello", ", ", "world"} {
					if _, err := io.WriteString(pw, p); err != nil {
						return
					}
				}
				req.Trailer.Set("X-Sum", "12")
				pw.Close()
			}()
			resp, err = http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want := wantProto[kind] + ` POST /key/upload`; resp.StatusCode != 200 || !strings.HasPrefix(string(b), want) ||
				!strings.HasSuffix(string(b), `body="hello, world" X-Sum="12" err=<nil>`+"\n") {
				t.Errorf("upload: %d %q, want 200 %q… with the body and its trailer", resp.StatusCode, b, want)
			}
		})
	}
}

// A shaper holds excess requests to an h2c upstream as to any other: at
// 4 r/s, burst 2, delay 0, of four requests at once three reach the
// upstream 250 ms apart (the bound is 200 ms, for the loopback's jitter;
// unshaped they would arrive together) and the fourth is refused; each
// arrives in HTTP/2. The exact schedule is tested under synctest in
// TestShaping: the transport comes after the decision.
func TestH2CUpstreamShaping(t *testing.T) {
	var mu sync.Mutex
	var arrived []time.Time
	var protos []string
	up, _ := startUpstream(t, "h2c", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived, protos = append(arrived, time.Now()), append(protos, r.Proto)
		mu.Unlock()
	}))
	srv := front(t, engine(t, `
domain: edge
gateway:
  routes: [{path_prefix: /, descriptors: [{entries: [{source: remote_address}]}]}]
descriptors:
  - key: remote_address
    rate_limit: {name: shaped, algorithm: shaper, unit: second, requests_per_unit: 4, burst: 2, delay: 0}
`, nil), up)
	var wg sync.WaitGroup
	codes := make([]int, 4)
	for i := range codes {
		wg.Go(func() { codes[i] = do(t, "GET", srv.URL+"/x").status })
	}
	wg.Wait()
	refused := 0
	for _, c := range codes {
		if c == 429 {
			refused++
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if refused != 1 || len(arrived) != 3 {
		t.Fatalf("statuses %v, %d reached the upstream; want one 429 and 3 through", codes, len(arrived))
	}
	for i := 1; i < len(arrived); i++ {
		if gap := arrived[i].Sub(arrived[i-1]); gap < 200*time.Millisecond {
			t.Errorf("request %d reached the upstream %v after the one before, want about 250 ms (shaped)", i+1, gap)
		}
	}
	if fmt.Sprint(protos) != "[HTTP/2.0 HTTP/2.0 HTTP/2.0]" {
		t.Errorf("the upstream saw %v, want HTTP/2.0 each time", protos)
	}
}

// errLines collects the gateway's error log.
type errLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *errLines) add(_ *http.Request, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, err.Error())
}

func (l *errLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// upgradeThrough sends a websocket upgrade through the gateway at addr and
// returns the response, and the connection to go on with after a 101.
func upgradeThrough(t *testing.T, addr, path, upType string) (*http.Response, net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", path, upType)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("upgrade through the gateway: %v", err)
	}
	return resp, conn, br
}

// HTTP/2 has no protocol upgrade. A websocket to an h2c upstream gets a
// 502 that says why, at once, without reaching the upstream or spending
// the client's budget, logged once per route; other requests go on. An
// https:// upstream gets websockets over HTTP/1.1, by ALPN, its other
// requests in h2: one that also speaks HTTP/1.1 takes them, one that
// speaks only h2 refuses them, 502, the log saying why.
func TestH2UpstreamUpgrades(t *testing.T) {
	t.Run("h2c", func(t *testing.T) {
		var reached atomic.Int64
		up, _ := startUpstream(t, "h2c", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reached.Add(1)
			w.Header().Set("X-Upstream-Proto", r.Proto)
		}))
		var log errLines
		srv := front(t, engine(t, h2Config, newClock(t0)), up, gateway.WithErrorLog(log.add))
		for range 2 {
			resp, _, _ := upgradeThrough(t, srv.Listener.Addr().String(), "/ip/ws", "websocket")
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 502 || !strings.Contains(string(b), "speaks HTTP/2 only (h2c), which has no protocol upgrade: a websocket cannot be proxied to it") {
				t.Errorf("websocket to an h2c upstream: %d %s, want 502 saying why", resp.StatusCode, b)
			}
		}
		if n := reached.Load(); n != 0 {
			t.Errorf("the upstream was reached %d times by websocket upgrades", n)
		}
		if l := log.String(); strings.Count(l, "\n") != 0 || !strings.Contains(l, `route "by-address": upstream h2c://`) ||
			!strings.Contains(l, "HTTP/2 (h2c) has no protocol upgrade, so websockets cannot reach this upstream") {
			t.Errorf("log %q, want one line naming the route and why", l)
		}
		// The budget of 3 is whole, and the upstream answers in HTTP/2.
		for i := range 3 {
			if r := do(t, "GET", srv.URL+"/ip/x"); r.status != 200 || r.h.Get("X-Upstream-Proto") != "HTTP/2.0" {
				t.Errorf("request %d after the upgrades: %d in %q, want 200 in HTTP/2.0", i+1, r.status, r.h.Get("X-Upstream-Proto"))
			}
		}
	})
	for _, h1too := range []bool{true, false} {
		name := map[bool]string{true: "https h2 and http/1.1", false: "https h2 only"}[h1too]
		t.Run(name, func(t *testing.T) {
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Upstream-Proto", r.Proto)
				if r.Header.Get("Upgrade") == "" {
					return
				}
				conn, rw, ok := upgrade(w)
				if !ok {
					return
				}
				defer conn.Close()
				if line, err := rw.ReadString('\n'); err == nil {
					rw.WriteString("echo " + r.Proto + " " + line)
					rw.Flush()
				}
			})
			upSrv := httptest.NewUnstartedServer(h)
			p := new(http.Protocols)
			p.SetHTTP2(true)
			p.SetHTTP1(h1too)
			upSrv.Config.Protocols = p
			upSrv.TLS = &tls.Config{NextProtos: []string{"h2"}}
			if h1too {
				upSrv.TLS.NextProtos = append(upSrv.TLS.NextProtos, "http/1.1")
			}
			upSrv.StartTLS()
			defer upSrv.Close()
			var log errLines
			srv := front(t, engine(t, h2Config, newClock(t0)), upSrv.URL, gateway.WithTransport(trusting(t, upSrv)), gateway.WithErrorLog(log.add))
			if r := do(t, "GET", srv.URL+"/open/x"); r.status != 200 || r.h.Get("X-Upstream-Proto") != "HTTP/2.0" {
				t.Errorf("a plain request: %d in %q, want 200 in HTTP/2.0", r.status, r.h.Get("X-Upstream-Proto"))
			}
			resp, conn, br := upgradeThrough(t, srv.Listener.Addr().String(), "/open/ws", "websocket")
			if !h1too {
				b, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != 502 || !strings.Contains(string(b), "the upstream could not be reached") ||
					!strings.Contains(log.String(), "a protocol upgrade such as a websocket goes to an https:// upstream over HTTP/1.1, which an upstream that speaks only HTTP/2 refuses") {
					t.Errorf("websocket to an h2-only upstream: %d %s, log %q; want 502, the log saying why", resp.StatusCode, b, log.String())
				}
				return
			}
			if resp.StatusCode != 101 {
				t.Fatalf("websocket to an h2 and http/1.1 upstream: %d, want 101", resp.StatusCode)
			}
			io.WriteString(conn, "hello\n")
			if got, err := br.ReadString('\n'); err != nil || got != "echo HTTP/1.1 hello\n" {
				t.Errorf("through the upgraded connection: %q %v, want the upstream's echo over HTTP/1.1", got, err)
			}
		})
	}
}

// A client's offer to switch to h2c (curl --http2 on http://) is not
// passed on: an upstream that took it would switch the connection to
// HTTP/2, spliced through, and every request then sent on it would reach
// the upstream unlimited. The request is proxied as a plain one, limited,
// to HTTP/1.1 and h2c upstreams alike.
func TestH2CUpgradeOfferNotPassedOn(t *testing.T) {
	for _, kind := range []string{"http", "h2c"} {
		t.Run(kind, func(t *testing.T) {
			var offered atomic.Int64
			up, _ := startUpstream(t, kind, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Upgrade") != "" || r.Header.Get("Http2-Settings") != "" {
					// As an upstream that takes h2c upgrades would.
					offered.Add(1)
					w.Header().Set("Connection", "Upgrade")
					w.Header().Set("Upgrade", "h2c")
					w.WriteHeader(http.StatusSwitchingProtocols)
					return
				}
				w.Header().Set("X-Upstream-Proto", r.Proto)
			}))
			srv := front(t, engine(t, h2Config, newClock(t0)), up)
			for i, want := range []int{200, 200, 200, 429} {
				conn, err := net.Dial("tcp", srv.Listener.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				conn.SetDeadline(time.Now().Add(10 * time.Second))
				fmt.Fprintf(conn, "GET /ip/x HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n")
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				conn.Close()
				if err != nil {
					t.Fatalf("request %d: %v", i+1, err)
				}
				if resp.StatusCode != want || want == 200 && resp.Header.Get("X-Upstream-Proto") != wantProto[kind] {
					t.Errorf("request %d offering h2c: %d from an upstream in %q, want %d in %s", i+1, resp.StatusCode, resp.Header.Get("X-Upstream-Proto"), want, wantProto[kind])
				}
			}
			if n := offered.Load(); n != 0 {
				t.Errorf("the upstream was offered h2c %d times", n)
			}
		})
	}
}

// An upstream that does not speak what its URL says fails at once with a
// 502 (or, silent, a 504 at the upstream timeout), never a hang, and the
// log says what went wrong: an HTTP/1.1 server given as h2c:// answers the
// HTTP/2 preface in HTTP/1.1; an h2c-only server given as http:// resets
// the connection; nothing listening is a failed dial.
func TestH2CUpstreamMismatch(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	var held []net.Conn
	var heldMu sync.Mutex
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			heldMu.Lock()
			held = append(held, c) // read nothing, answer nothing
			heldMu.Unlock()
		}
	}()
	defer func() {
		heldMu.Lock()
		for _, c := range held {
			c.Close()
		}
		heldMu.Unlock()
	}()
	h1, _ := startUpstream(t, "http", http.HandlerFunc(protoEcho))
	h2c, _ := startUpstream(t, "h2c", http.HandlerFunc(protoEcho))
	for _, tc := range []struct {
		name, upstream string
		status         int
		reason, log    string
	}{
		{"HTTP/1.1 upstream as h2c://", "h2c://" + strings.TrimPrefix(h1, "http://"), 502, gateway.ReasonOther,
			"no HTTP/2 connection: an h2c:// upstream must speak HTTP/2 without TLS, with prior knowledge; one that speaks only HTTP/1.1 answers in HTTP/1.1 and closes: give it as http://"},
		// Reset, or closed after reading the request: the text varies.
		{"h2c upstream as http://", "http://" + strings.TrimPrefix(h2c, "h2c://"), 502, gateway.ReasonReset, ""},
		{"silent h2c:// upstream", "h2c://" + silent.Addr().String(), 504, gateway.ReasonTimeout, "no answer within 300ms (--upstream-timeout)"},
		{"nothing listening at h2c://", "h2c://" + freeAddr(t), 502, gateway.ReasonConnect, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log errLines
			var reasons []string
			var mu sync.Mutex
			srv := front(t, engine(t, h2Config, newClock(t0)), tc.upstream, gateway.WithUpstreamTimeout(300*time.Millisecond),
				gateway.WithErrorLog(log.add), gateway.WithUpstreamErrors(func(r string) { mu.Lock(); reasons = append(reasons, r); mu.Unlock() }))
			start := time.Now()
			r := do(t, "GET", srv.URL+"/ip/x")
			took := time.Since(start)
			if r.status != tc.status || took > 5*time.Second {
				t.Errorf("%d after %v, want %d at once (or at the upstream timeout)", r.status, took, tc.status)
			}
			mu.Lock()
			defer mu.Unlock()
			if l := log.String(); !strings.Contains(l, tc.log) || !strings.Contains(l, "upstream "+tc.upstream) || fmt.Sprint(reasons) != "["+tc.reason+"]" {
				t.Errorf("log %q, reasons %v; want %q about %s, reason %s", l, reasons, tc.log, tc.upstream, tc.reason)
			}
		})
	}
}

// New takes h2c://host:port[/path] and refuses what cannot work, saying
// why: no host, a user, a query; an h2:// scheme (HTTP/2 is https:// or
// h2c://); a WithTransport *http.Transport that would send HTTP/1.1 to an
// h2c upstream. A transport set for h2c is used as given.
func TestNewH2CUpstreams(t *testing.T) {
	e := engine(t, h2Config, nil)
	h2cOnly := func(h1 bool) *http.Transport {
		p := new(http.Protocols)
		p.SetUnencryptedHTTP2(true)
		p.SetHTTP1(h1)
		return &http.Transport{Protocols: p}
	}
	for _, tc := range []struct {
		upstream string
		opts     []gateway.Option
		want     string // "" accepted
	}{
		{"h2c://127.0.0.1:1", nil, ""},
		{"H2C://127.0.0.1:1/prefix", nil, ""},
		{"h2c://127.0.0.1:1", []gateway.Option{gateway.WithTransport(h2cOnly(false))}, ""},
		{"h2c:///x", nil, `upstream "h2c:///x": want h2c://host:port (HTTP/2 without TLS), with an optional path and no user, query or fragment`},
		{"h2c://u:pw@127.0.0.1:1", nil, "want h2c://host:port (HTTP/2 without TLS), with an optional path and no user, query or fragment"},
		{"h2c://127.0.0.1:1?x=1", nil, "no user, query or fragment"},
		{"h2c://127.0.0.1", nil, `upstream "h2c://127.0.0.1": no port: h2c has no default port; want h2c://host:port`},
		{"h2c://127.0.0.1/", nil, "no port: h2c has no default port"},
		{"h2c://127.0.0.1:/", nil, "no port: h2c has no default port"},
		{"H2C://127.0.0.1", nil, "no port: h2c has no default port"},
		{"h2c://[::1]/p", nil, `upstream "h2c://[::1]/p": no port: h2c has no default port; want h2c://host:port`},
		{"h2c://[::1]:1/p", nil, ""},
		{"h2c://127.0.0.1:0", nil, `upstream "h2c://127.0.0.1:0": port 0 cannot be connected to`},
		{"http://[::1]:0/", nil, "port 0 cannot be connected to"},
		{"h2://127.0.0.1:1", nil, `want an absolute http://, https:// or h2c:// URL with a host and no user, query or fragment; HTTP/2 is https:// (over TLS, chosen by ALPN) or h2c:// (without TLS)`},
		{"h2c://127.0.0.1:1", []gateway.Option{gateway.WithTransport(&http.Transport{})}, "the WithTransport transport does not speak HTTP/2 without TLS: set its Protocols to UnencryptedHTTP2 alone"},
		{"h2c://127.0.0.1:1", []gateway.Option{gateway.WithTransport(h2cOnly(true))}, "set its Protocols to UnencryptedHTTP2 alone (with HTTP1 among them it sends HTTP/1.1 to the upstream)"},
	} {
		_, err := gateway.New(e.Config(), e, tc.upstream, tc.opts...)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("New(%q): %v, want %q", tc.upstream, err, tc.want)
		}
	}
	if _, err := gateway.New(e.Config(), e, "h2c://u:s3cret@127.0.0.1:1"); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("an error shows the password: %v", err)
	}
}
