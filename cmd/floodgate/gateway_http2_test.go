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

// serve --upstream with --tls-cert offers HTTP/1.1 only by ALPN (docs/SERVER.md,
// TLS): a client that attempts HTTP/2 — a browser, curl, Go's
// ForceAttemptHTTP2 — is answered over HTTP/1.1 and limited as any other:
// a budget of 3 admits exactly 3 (proxied to the upstream), then 429 with
// Retry-After, the IETF fields and X-RateLimit-*.
func TestServeGatewayTLSAnswersHTTP2ClientsOverHTTP1(t *testing.T) {
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
    rate_limit: {name: per-ip, unit: hour, requests_per_unit: 3}
`)
	ca := newTestCA(t, "test CA")
	cert, key, _ := tlsFilesFor(t, ca)
	out, errb, stop := startServe(t, "--config", dir, "--reload-interval", "0", "--upstream", up.URL, "--tls-cert", cert, "--tls-key", key)
	defer func() {
		if code := stop(); code != 0 {
			t.Errorf("exit %d after cancel: %s", code, errb.String())
		}
	}()
	m := regexp.MustCompile(`gateway http (\S+) `).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no gateway address in serve's stdout %q", out.String())
	}
	httpAddr := m[1]
	tr := &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: ca.pool}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	for i, want := range []int{200, 200, 200, 429, 429} {
		resp, err := client.Get("https://" + httpAddr + "/ip/x")
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 1 || resp.TLS == nil || resp.TLS.NegotiatedProtocol != "http/1.1" {
			t.Errorf("request %d: %s, ALPN %q; want HTTP/1.1 as negotiated", i+1, resp.Proto, resp.TLS.NegotiatedProtocol)
		}
		h := resp.Header
		remaining := max(2-i, 0)
		if resp.StatusCode != want || h.Get("X-RateLimit-Limit") != "3" || h.Get("X-RateLimit-Remaining") != strconv.Itoa(remaining) ||
			!strings.HasPrefix(h.Get("RateLimit"), `"per-ip";r=`+strconv.Itoa(remaining)+";t=") ||
			h.Get("RateLimit-Policy") != `"per-ip";q=3;w=3600` {
			t.Errorf("request %d: %d %v; want %d with the limit's fields (remaining %d)", i+1, resp.StatusCode, h, want, remaining)
		}
		if want == 200 && string(b) != "upstream /ip/x" {
			t.Errorf("request %d: body %q, want the upstream's", i+1, b)
		}
		if ra, err := strconv.Atoi(h.Get("Retry-After")); want == 429 && (err != nil || ra <= 0 || ra > 3600) {
			t.Errorf("request %d: Retry-After %q, want whole seconds within the hour", i+1, h.Get("Retry-After"))
		}
	}
}
