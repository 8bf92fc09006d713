package main

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// serve --upstream with --tls-cert offers h2 and http/1.1 by ALPN on the
// gateway's address (docs/SERVER.md, TLS): a client that attempts HTTP/2 —
// a browser, curl, Go's ForceAttemptHTTP2, a gRPC client — gets it, one
// that offers only http/1.1 (a websocket client) gets HTTP/1.1, and both
// are limited alike: a budget of 3 admits exactly 3 (proxied to the
// upstream), then 429 with Retry-After, the IETF fields and X-RateLimit-*.
// The decision APIs' --api address stays HTTP/1.1.
func TestServeGatewayTLSAnswersHTTP2AndHTTP1(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "upstream "+r.URL.Path)
	}))
	defer up.Close()
	dir, _ := writeConfig(t, `domain: edge
gateway:
  routes:
    - {path_prefix: /ip, descriptors: [{entries: [{source: remote_address}]}]}
descriptors:
  - key: remote_address
    rate_limit: {name: per-ip, unit: day, requests_per_unit: 3}
`)
	ca := newTestCA(t, "test CA")
	cert, key, _ := tlsFilesFor(t, ca)
	out, errb, stop := startServe(t, "--config", dir, "--reload-interval", "0", "--upstream", up.URL, "--tls-cert", cert, "--tls-key", key,
		"--api", "127.0.0.1:0")
	defer func() {
		if code := stop(); code != 0 {
			t.Errorf("exit %d after cancel: %s", code, errb.String())
		}
	}()
	m := regexp.MustCompile(`gateway http (\S+) .*decision APIs (\S+),`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no gateway and API addresses in serve's stdout %q", out.String())
	}
	httpAddr, apiAddr := m[1], m[2]
	h2 := []string{"h2", "http/1.1"}
	for i, c := range []struct {
		offer []string
		alpn  string
		want  int
	}{{h2, "h2", 200}, {[]string{"http/1.1"}, "http/1.1", 200}, {h2, "h2", 200}, {h2, "h2", 429}, {[]string{"http/1.1"}, "http/1.1", 429}} {
		tr := &http.Transport{ForceAttemptHTTP2: c.alpn == "h2", TLSClientConfig: &tls.Config{RootCAs: ca.pool, NextProtos: c.offer}}
		client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
		resp, err := client.Get("https://" + httpAddr + "/ip/x")
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		if wantMajor := map[string]int{"h2": 2, "http/1.1": 1}[c.alpn]; resp.ProtoMajor != wantMajor || resp.TLS == nil || resp.TLS.NegotiatedProtocol != c.alpn {
			t.Errorf("request %d offering %v: %s, ALPN %q; want %q as negotiated", i+1, c.offer, resp.Proto, resp.TLS.NegotiatedProtocol, c.alpn)
		}
		h := resp.Header
		remaining := max(2-i, 0)
		if resp.StatusCode != c.want || h.Get("X-RateLimit-Limit") != "3" || h.Get("X-RateLimit-Remaining") != strconv.Itoa(remaining) ||
			!strings.HasPrefix(h.Get("RateLimit"), `"per-ip";r=`+strconv.Itoa(remaining)+";t=") ||
			h.Get("RateLimit-Policy") != `"per-ip";q=3;w=86400` {
			t.Errorf("request %d: %d %v; want %d with the limit's fields (remaining %d)", i+1, resp.StatusCode, h, c.want, remaining)
		}
		if c.want == 200 && string(b) != "upstream /ip/x" {
			t.Errorf("request %d: body %q, want the upstream's", i+1, b)
		}
		if ra, err := strconv.Atoi(h.Get("Retry-After")); c.want == 429 && (err != nil || ra <= 0 || ra > 86400) {
			t.Errorf("request %d: Retry-After %q, want whole seconds within the day", i+1, h.Get("Retry-After"))
		}
	}
	conn, err := tls.Dial("tcp", apiAddr, &tls.Config{RootCAs: ca.pool, NextProtos: h2})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if p := conn.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
		t.Errorf("--api negotiated %q offered %v, want http/1.1", p, h2)
	}
}
