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
	"github.com/floodgate/floodgate/policy"
)

// tlsFront serves the gateway over TLS, offering HTTP/2 by ALPN when h2
// (as an embedding program's http.Server with a certificate does by
// default), HTTP/1.1 only otherwise. The client attempts HTTP/2 either way
// (ForceAttemptHTTP2) and trusts the test's self-signed certificate; conns
// counts the TCP connections the server accepted.
func tlsFront(t *testing.T, e *policy.Engine, upstream string, h2 bool) (srv *httptest.Server, client *http.Client, conns *atomic.Int64) {
	t.Helper()
	gw, err := gateway.New(e.Config(), e, upstream)
	if err != nil {
		t.Fatal(err)
	}
	conns = new(atomic.Int64)
	srv = httptest.NewUnstartedServer(gw)
	srv.EnableHTTP2 = h2
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	tr := &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	return srv, &http.Client{Transport: tr, Timeout: 10 * time.Second}, conns
}

// protoName is the protocol a response must have come over.
func protoName(h2 bool) string {
	if h2 {
		return "HTTP/2"
	}
	return "HTTP/1.1"
}

func checkProto(t *testing.T, resp *http.Response, h2 bool) {
	t.Helper()
	if want := map[bool]int{true: 2, false: 1}[h2]; resp.ProtoMajor != want {
		t.Fatalf("%s %s answered over %s, want %s", resp.Request.Method, resp.Request.URL.Path, resp.Proto, protoName(h2))
	}
}

const h2Config = `
domain: edge
gateway:
  routes:
    - name: by-address
      path_prefix: /ip
      descriptors:
        - entries: [{source: remote_address}]
    - name: by-key
      path_prefix: /key
      descriptors:
        - entries: [{source: header:X-API-Key}]
    - name: open
      path_prefix: /open
descriptors:
  - key: remote_address
    rate_limit: {name: per-ip, unit: minute, requests_per_unit: 3}
  - key: X-API-Key
    rate_limit: {name: per-key, unit: minute, requests_per_unit: 2}
`

// rateFields are the response fields a limited answer carries.
var rateFields = []string{"Retry-After", "RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining",
	"X-RateLimit-Reset", "Content-Type", "Cache-Control"}

// Over HTTP/2 the gateway limits as over HTTP/1.1: a budget of 3 admits
// exactly 3, then 429 with Retry-After, the IETF RateLimit and
// RateLimit-Policy fields, X-RateLimit-* and the problem body, each
// byte for byte what the same steps get over HTTP/1.1 on the same clock.
// The key is the client address (a new connection shares its budget, a
// spoofed X-Forwarded-For from an untrusted peer does not change it) or
// the configured header (another X-API-Key has its own budget).
func TestHTTP2LimitsAsHTTP1(t *testing.T) {
	type answer struct {
		status int
		fields map[string]string
		body   string
	}
	steps := []struct {
		path, key, xff string
		fresh          bool // on a connection of its own
		status         int
	}{
		{"/ip/a", "", "", false, 200},
		{"/ip/b", "", "", false, 200},
		{"/ip/c", "", "", true, 200}, // a new connection from the same address: the same budget
		{"/ip/d", "", "", false, 429},
		{"/ip/e", "", "203.0.113.9", false, 429}, // an untrusted peer's X-Forwarded-For is not its key
		{"/ip/f", "", "", true, 429},
		{"/key/a", "k1", "", false, 200},
		{"/key/b", "k1", "", false, 200},
		{"/key/c", "k1", "", false, 429},
		{"/key/d", "k2", "", false, 200}, // another key, another budget
		{"/key/e", "", "", false, 200},   // no key: no descriptor, unlimited
		{"/open", "", "", false, 200},
	}
	run := func(h2 bool) []answer {
		c := newClock(t0)
		up := echo(t)
		srv, client, _ := tlsFront(t, engine(t, h2Config, c), up.URL, h2)
		var got []answer
		for i, s := range steps {
			if s.fresh {
				client.Transport.(*http.Transport).CloseIdleConnections()
			}
			req, _ := http.NewRequest("GET", srv.URL+s.path, nil)
			if s.key != "" {
				req.Header.Set("X-API-Key", s.key)
			}
			if s.xff != "" {
				req.Header.Set("X-Forwarded-For", s.xff)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("%s step %d: %v", protoName(h2), i, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			checkProto(t, resp, h2)
			// The upstream saw its own address as Host, another port in
			// each run.
			a := answer{resp.StatusCode, map[string]string{}, strings.ReplaceAll(string(b), up.Listener.Addr().String(), "upstream")}
			for _, f := range rateFields {
				if v := resp.Header.Values(f); len(v) > 0 {
					a.fields[f] = strings.Join(v, ", ")
				}
			}
			if s.status == 200 {
				a.fields["X-Upstream"] = resp.Header.Get("X-Upstream")
			}
			if a.status != s.status {
				t.Errorf("%s step %d GET %s key %q: %d, want %d", protoName(h2), i, s.path, s.key, a.status, s.status)
			}
			got = append(got, a)
		}
		return got
	}
	h1, h2 := run(false), run(true)
	for i := range steps {
		if fmt.Sprint(h1[i]) != fmt.Sprint(h2[i]) {
			t.Errorf("step %d GET %s:\nHTTP/2   %v\nHTTP/1.1 %v", i, steps[i].path, h2[i], h1[i])
		}
	}
	// The values themselves, at t0 (10 s into the minute).
	want := map[int]map[string]string{
		0: {"RateLimit": `"per-ip";r=2;t=50`, "RateLimit-Policy": `"per-ip";q=3;w=60`, "X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "50", "X-Upstream": "yes"},
		3: {"Retry-After": "50", "RateLimit": `"per-ip";r=0;t=50`, "RateLimit-Policy": `"per-ip";q=3;w=60`, "X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0",
			"X-RateLimit-Reset": "50", "Content-Type": "application/problem+json", "Cache-Control": "no-store"},
		8: {"Retry-After": "50", "RateLimit": `"per-key";r=0;t=50`, "RateLimit-Policy": `"per-key";q=2;w=60`, "X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0",
			"X-RateLimit-Reset": "50", "Content-Type": "application/problem+json", "Cache-Control": "no-store"},
		10: {"X-Upstream": "yes"},
	}
	for i, w := range want {
		for f, v := range w {
			if got := h2[i].fields[f]; got != v {
				t.Errorf("HTTP/2 step %d GET %s: %s %q, want %q", i, steps[i].path, f, got, v)
			}
		}
	}
	if !strings.Contains(h2[3].body, `"violated-policies":["per-ip"]`) || !strings.Contains(h2[3].body, `"status":429`) {
		t.Errorf("HTTP/2 429 body: %s", h2[3].body)
	}
	if b, want := h2[0].body, "GET /ip/a host=upstream xff=127.0.0.1\n"; b != want {
		t.Errorf("HTTP/2: upstream saw %q, want %q", b, want)
	}
}

// Concurrent streams on one HTTP/2 connection are each counted: 20
// requests at once on one connection at a budget of 10 → exactly 10 reach
// the upstream (held there until all 10 are in, so the streams are open
// together) and 10 get 429.
func TestHTTP2ConcurrentStreamsCounted(t *testing.T) {
	const budget, n = 10, 20
	var reached atomic.Int64
	var apart atomic.Bool // an admitted request waited 5 s for the others
	all := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ip" {
			return
		}
		if reached.Add(1) == budget {
			close(all)
		}
		select {
		case <-all:
		case <-time.After(5 * time.Second):
			apart.Store(true)
		}
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	cfg := fmt.Sprintf(`
domain: edge
gateway:
  routes:
    - {path_prefix: /ip, descriptors: [{entries: [{source: remote_address}]}]}
    - {path_prefix: /open}
descriptors:
  - key: remote_address
    rate_limit: {name: per-ip, unit: minute, requests_per_unit: %d}
`, budget)
	srv, client, conns := tlsFront(t, engine(t, cfg, newClock(t0)), up.URL, true)
	// One request first, unlimited, so that the connection exists before
	// the 20 start (concurrent first requests may each dial).
	resp, err := client.Get(srv.URL + "/open")
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	checkProto(t, resp, true)

	var wg sync.WaitGroup
	var ok, limited, other atomic.Int64
	for range n {
		wg.Go(func() {
			resp, err := client.Get(srv.URL + "/ip")
			if err != nil {
				t.Error(err)
				other.Add(1)
				return
			}
			io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case resp.ProtoMajor != 2:
				t.Errorf("answered over %s", resp.Proto)
				other.Add(1)
			case resp.StatusCode == 200:
				ok.Add(1)
			case resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "50":
				limited.Add(1)
			default:
				t.Errorf("%d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
				other.Add(1)
			}
		})
	}
	wg.Wait()
	if ok.Load() != budget || limited.Load() != n-budget || other.Load() != 0 || reached.Load() != budget {
		t.Errorf("%d concurrent streams at a budget of %d: %d × 200, %d × 429, %d other, %d reached the upstream; want %d, %d, 0, %d",
			n, budget, ok.Load(), limited.Load(), other.Load(), reached.Load(), budget, n-budget, budget)
	}
	if c := conns.Load(); c != 1 {
		t.Errorf("the requests came on %d connections, want 1", c)
	}
	if apart.Load() {
		t.Errorf("the %d admitted requests were not at the upstream together", budget)
	}
}

// A streamed upstream response (flushed chunks) reaches an HTTP/2 client
// piece by piece, and its trailers arrive after the body, as over
// HTTP/1.1.
func TestHTTP2StreamingAndTrailers(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(protoName(h2), func(t *testing.T) {
			next := make(chan struct{})
			var held atomic.Bool // the first event did not reach the client before the second was sent
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				w.Header().Set("Trailer", "X-Checksum")
				io.WriteString(w, "data: 0\n\n")
				w.(http.Flusher).Flush()
				select {
				case <-next:
				case <-time.After(5 * time.Second):
					held.Store(true)
				}
				io.WriteString(w, "data: 1\n\n")
				w.Header().Set("X-Checksum", "c0ffee")
			}))
			defer up.Close()
			srv, client, _ := tlsFront(t, engine(t, h2Config, newClock(t0)), up.URL, h2)
			resp, err := client.Get(srv.URL + "/ip/events")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			checkProto(t, resp, h2)
			if resp.StatusCode != 200 || resp.Header.Get("RateLimit") != `"per-ip";r=2;t=50` {
				t.Errorf("%d RateLimit %q, want 200 and the limit's state", resp.StatusCode, resp.Header.Get("RateLimit"))
			}
			br := bufio.NewReader(resp.Body)
			// The first event arrives while the upstream still holds the
			// second: it was flushed through, not buffered.
			if line, err := br.ReadString('\n'); err != nil || line != "data: 0\n" || held.Load() {
				t.Fatalf("first event: %q %v, after the upstream gave up waiting: %v (not flushed through)", line, err, held.Load())
			}
			close(next)
			rest, err := io.ReadAll(br)
			if err != nil || string(rest) != "\ndata: 1\n\n" {
				t.Errorf("rest of the stream: %q %v", rest, err)
			}
			if got := resp.Trailer.Get("X-Checksum"); got != "c0ffee" {
				t.Errorf("trailer X-Checksum %q, want %q (trailers %v)", got, "c0ffee", resp.Trailer)
			}
		})
	}
}

// A request body of unknown length, sent in pieces, and its trailer reach
// the upstream from an HTTP/2 client as from an HTTP/1.1 one; a refused
// request with a body leaves the connection serving the next one.
func TestHTTP2RequestBody(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(protoName(h2), func(t *testing.T) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, err := io.ReadAll(r.Body)
				fmt.Fprintf(w, "%s %q X-Sum=%q err=%v", r.Method, b, r.Trailer.Get("X-Sum"), err)
			}))
			defer up.Close()
			srv, client, conns := tlsFront(t, engine(t, h2Config, newClock(t0)), up.URL, h2)
			post := func(key string, trailer bool, pieces ...string) (*http.Response, string) {
				t.Helper()
				pr, pw := io.Pipe()
				req, _ := http.NewRequest("POST", srv.URL+"/key/upload", pr)
				req.Header.Set("X-API-Key", key)
				if trailer {
					req.Trailer = http.Header{"X-Sum": nil}
				}
				go func() {
					for _, p := range pieces {
						if _, err := io.WriteString(pw, p); err != nil {
							return
						}
					}
					if trailer {
						req.Trailer.Set("X-Sum", fmt.Sprint(len(strings.Join(pieces, ""))))
					}
					pw.Close()
				}()
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				checkProto(t, resp, h2)
				return resp, string(b)
			}
			want := `POST "hello, world" X-Sum="12" err=<nil>`
			for i := range 2 {
				if resp, body := post("k1", true, "hello", ", ", "world"); resp.StatusCode != 200 || body != want {
					t.Errorf("upload %d: %d %q, want 200 %q", i+1, resp.StatusCode, body, want)
				}
			}
			// Without a trailer: over HTTP/2, Go's server takes a trailer
			// that arrives after it reset the stream of a request answered
			// before its body was read as a connection error (golang/go#58286),
			// which ends the other streams of the connection too.
			if resp, _ := post("k1", false, "refused"); resp.StatusCode != 429 {
				t.Errorf("third upload at a budget of 2: %d, want 429", resp.StatusCode)
			}
			if resp, body := post("k2", true, "hello", ", ", "world"); resp.StatusCode != 200 || body != want {
				t.Errorf("upload after a refusal: %d %q, want 200 %q", resp.StatusCode, body, want)
			}
			if c := conns.Load(); h2 && c != 1 {
				t.Errorf("the uploads came on %d connections, want 1", c)
			}
		})
	}
}
