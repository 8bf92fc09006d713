package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// h2Rules limits /ip to 3 a day per client address: a fixed window on a
// real clock, whose end among a test's requests would admit one it wants
// refused (a day's end is 24 times rarer than an hour's).
const h2Rules = `domain: edge
gateway:
  routes:
    - {path_prefix: /ip, descriptors: [{entries: [{source: remote_address}]}]}
descriptors:
  - key: remote_address
    rate_limit: {name: per-ip, unit: day, requests_per_unit: 3}
`

// protoUpstream answers with the protocol the request came in, its path
// and body.
func protoUpstream(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	fmt.Fprintf(w, "%s %s %s %q", r.Proto, r.Method, r.URL.Path, b)
}

// gatewayAddr reads the gateway's address from serve's stdout.
func gatewayAddr(t *testing.T, out string) string {
	t.Helper()
	m := regexp.MustCompile(`gateway http (\S+) -> (\S+),`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no gateway address in serve's stdout %q", out)
	}
	return m[1]
}

// checkLimited sends 5 requests for /ip/x through the gateway at base:
// the first 3 reach the upstream, which saw them in proto, the last 2 get
// 429 with Retry-After and the limit's fields.
func checkLimited(t *testing.T, client *http.Client, base, proto string) {
	t.Helper()
	for i, want := range []int{200, 200, 200, 429, 429} {
		resp, err := client.Get(base + "/ip/x")
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		h := resp.Header
		remaining := max(2-i, 0)
		if resp.StatusCode != want || h.Get("X-RateLimit-Limit") != "3" || h.Get("X-RateLimit-Remaining") != strconv.Itoa(remaining) ||
			!strings.HasPrefix(h.Get("RateLimit"), `"per-ip";r=`+strconv.Itoa(remaining)+";t=") || h.Get("RateLimit-Policy") != `"per-ip";q=3;w=86400` {
			t.Errorf("request %d: %d %v; want %d with the limit's fields (remaining %d)", i+1, resp.StatusCode, h, want, remaining)
		}
		if want == 200 && string(b) != proto+` GET /ip/x ""` {
			t.Errorf("request %d: the upstream answered %q, want it to have seen %s GET /ip/x", i+1, b, proto)
		}
		if ra, err := strconv.Atoi(h.Get("Retry-After")); want == 429 && (err != nil || ra <= 0 || ra > 86400 ||
			!strings.Contains(string(b), `"violated-policies":["per-ip"]`)) {
			t.Errorf("request %d: Retry-After %q, body %s; want whole seconds within the day and the problem body", i+1, h.Get("Retry-After"), b)
		}
	}
}

// serve --upstream h2c://host:port reaches an upstream that speaks only
// HTTP/2 without TLS: the upstream sees every request in HTTP/2, a budget
// of 3 admits exactly 3, then 429 with the fields; a request body goes
// through; a websocket gets 502 saying why (HTTP/2 has no upgrade),
// logged once.
func TestServeGatewayH2CUpstream(t *testing.T) {
	up := httptest.NewUnstartedServer(http.HandlerFunc(protoUpstream))
	up.Config.Protocols = new(http.Protocols)
	up.Config.Protocols.SetUnencryptedHTTP2(true) // HTTP/1.1 refused
	up.Start()
	defer up.Close()
	upstream := "h2c://" + up.Listener.Addr().String()
	dir, _ := writeConfig(t, h2Rules)
	out, errb, stop := startServe(t, "--config", dir, "--reload-interval", "0", "--upstream", upstream)
	defer func() {
		if code := stop(); code != 0 {
			t.Errorf("exit %d after cancel: %s", code, errb.String())
		}
	}()
	if !strings.Contains(out.String(), "-> "+upstream+",") || !strings.Contains(errb.String(), "upstream="+upstream) {
		t.Errorf("serve does not say it proxies to %s: %q %q", upstream, out.String(), errb.String())
	}
	base := "http://" + gatewayAddr(t, out.String())
	client := &http.Client{Timeout: 10 * time.Second}
	checkLimited(t, client, base, "HTTP/2.0")

	resp, err := client.Post(base+"/upload", "text/plain", strings.NewReader("hello, h2c"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != `HTTP/2.0 POST /upload "hello, h2c"` {
		t.Errorf("POST: %d %q, want the upstream to have read the body in HTTP/2", resp.StatusCode, b)
	}

	for range 2 {
		conn, err := net.Dial("tcp", gatewayAddr(t, out.String()))
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		conn.Close()
		if resp.StatusCode != 502 || !strings.Contains(string(b), "a websocket cannot be proxied to it") {
			t.Errorf("websocket: %d %s, want 502 saying why", resp.StatusCode, b)
		}
	}
	if n := strings.Count(errb.String(), "HTTP/2 (h2c) has no protocol upgrade"); n != 1 {
		t.Errorf("the refused websockets were logged %d times, want once: %s", n, errb.String())
	}
}

// An --upstream URL that cannot work is refused at start, saying what is
// wanted, with any password hidden; h2:// points to https:// and h2c://.
func TestServeUpstreamH2CURLErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"--upstream", "h2c://"}, "", `floodgate serve: --upstream h2c://: gateway: upstream "h2c://": want h2c://host:port (HTTP/2 without TLS), with an optional path and no user, query or fragment` + "\n"},
		{[]string{"--upstream", "h2c://127.0.0.1:1?x=1"}, "", "no user, query or fragment\n"},
		{nil, "h2c://admin:s3cret@127.0.0.1:1", `floodgate serve: FLOODGATE_UPSTREAM="h2c://admin:xxxxx@127.0.0.1:1": gateway: upstream "h2c://admin:xxxxx@127.0.0.1:1": want h2c://host:port`},
		{[]string{"--upstream", "h2://127.0.0.1:1"}, "", "; HTTP/2 is https:// (over TLS, chosen by ALPN) or h2c:// (without TLS)\n"},
	} {
		t.Setenv("FLOODGATE_UPSTREAM", tc.env)
		args := append([]string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, tc.args...)
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 1 || !strings.Contains(errb.String(), tc.want) || strings.Contains(errb.String(), "s3cret") {
			t.Errorf("%v %q: exit %d, stderr %q; want exit 1 saying %q", tc.args, tc.env, code, errb.String(), tc.want)
		}
	}
}

// h2Upstream serves protoUpstream over TLS with a certificate of ca,
// offering only h2 by ALPN and refusing HTTP/1.1.
func h2Upstream(t *testing.T, ca *testCA) *httptest.Server {
	t.Helper()
	c, k := ca.issue(t, 2, false, "")
	cert, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewUnstartedServer(http.HandlerFunc(protoUpstream))
	up.Config.Protocols = new(http.Protocols)
	up.Config.Protocols.SetHTTP2(true)
	up.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}
	up.StartTLS()
	t.Cleanup(up.Close)
	return up
}

// serve --upstream https://… trusts the system's CAs: an upstream whose
// certificate a private CA signed, not given to the process, fails its
// handshake — 502, the log naming the certificate.
func TestServeGatewayHTTPSUpstreamUnknownCA(t *testing.T) {
	up := h2Upstream(t, newTestCA(t, "private CA"))
	dir, _ := writeConfig(t, h2Rules)
	out, errb, stop := startServe(t, "--config", dir, "--reload-interval", "0", "--upstream", up.URL)
	defer stop()
	resp, err := http.Get("http://" + gatewayAddr(t, out.String()) + "/ip/x")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 502 || !strings.Contains(string(b), "the upstream could not be reached") {
		t.Errorf("%d %s, want 502", resp.StatusCode, b)
	}
	if !strings.Contains(errb.String(), "certificate signed by unknown authority") {
		t.Errorf("the log does not say why: %s", errb.String())
	}
}

// The real binary, `floodgate serve --upstream https://…` with the
// upstream's private CA given by SSL_CERT_FILE, reaches an upstream that
// offers only h2 by ALPN over HTTP/2 (the default transport attempts it),
// limited as any other: 3 through, then 429.
func TestBinaryGatewayHTTPSUpstreamOverH2(t *testing.T) {
	ca := newTestCA(t, "private CA")
	_, _, caFile := tlsFilesFor(t, ca)
	up := h2Upstream(t, ca)
	dir, _ := writeConfig(t, h2Rules)

	p := startBinary(t, []string{"SSL_CERT_FILE=" + caFile}, "--config", dir, "--reload-interval", "0", "--upstream", up.URL)
	httpAddr := gatewayAddr(t, p.Stdout())
	checkLimited(t, &http.Client{Timeout: 10 * time.Second}, "http://"+httpAddr, "HTTP/2.0")
}
