package server_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/server"
)

// decisionPaths are the decision APIs' POST endpoints.
var decisionPaths = []string{"/json", "/v1/decide", "/v1/peek", "/v1/release", "/v1/renew", "/v1/observe"}

// TestSecDecisionAPIsRefuseCrossSite: the decision APIs read text/plain and
// form bodies as JSON, which a page of another site can post without a
// CORS preflight, so a page the operator visits could spend budgets (or
// release and renew leases) on a loopback --http: every state-changing
// request a browser marks as another site's is 403, as /v1/observe's was;
// nothing is spent. Clients without Origin or Sec-Fetch-Site (Envoy, SDKs,
// curl), and same-origin pages, are served as before.
func TestSecDecisionAPIsRefuseCrossSite(t *testing.T) {
	e := newEnv(t)
	peek := func() string {
		t.Helper()
		code, body := webReq{"POST", "/v1/peek", quotaKV, "", []string{"Content-Type", "application/json"}}.send(t, e.http.URL)
		if code != 200 {
			t.Fatalf("peek: %d %s", code, body)
		}
		return body
	}
	before := peek()
	for _, path := range decisionPaths {
		for _, hdr := range [][]string{
			crossSite,
			{"Content-Type", "text/plain", "Origin", "http://evil.example"},
			{"Content-Type", "application/x-www-form-urlencoded", "Origin", "http://evil.example"},
			{"Content-Type", "text/plain", "Sec-Fetch-Site", "same-site"},
		} {
			for _, method := range []string{"POST", "PUT"} {
				code, body := webReq{method, path, quotaKV, "", hdr}.send(t, e.http.URL)
				if code != 403 || !strings.Contains(body, "cross-origin request refused") {
					t.Errorf("%s %s with %v: %d %s, want 403 cross-origin request refused", method, path, hdr, code, body)
				}
			}
		}
	}
	if after := peek(); after != before {
		t.Errorf("the refused requests spent budget: peek %s before, %s after", before, after)
	}
	for _, path := range []string{"/json", "/v1/decide", "/v1/peek"} {
		for _, hdr := range [][]string{
			nil,
			{"Content-Type", "text/plain"},
			{"Content-Type", "application/x-www-form-urlencoded"},
			{"Content-Type", "application/json", "Origin", e.http.URL, "Sec-Fetch-Site", "same-origin"},
		} {
			if code, body := (webReq{"POST", path, quotaKV, "", hdr}).send(t, e.http.URL); code != 200 {
				t.Errorf("POST %s with %v: %d %s, want 200", path, hdr, code, body)
			}
		}
	}
	if code, body := (webReq{"GET", "/healthcheck", "", "", []string{"Sec-Fetch-Site", "cross-site", "Origin", "http://evil.example"}}).send(t, e.http.URL); code != 200 {
		t.Errorf("GET /healthcheck from another site: %d %s, want 200 (reads change nothing)", code, body)
	}
}

// TestSecGatewayAPIRefusesCrossSite: in gateway mode the decision APIs on
// --api (Listeners.API) refuse another site's requests too.
func TestSecGatewayAPIRefusesCrossSite(t *testing.T) {
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	srv := serverFor(t, releaseConfig, server.WithGateway(upstream), server.WithDrainTimeout(time.Second))
	ls, err := server.Listen("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if ls.API, err = (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	serve(t, srv, ls)
	base := "http://" + ls.API.Addr().String()
	for _, path := range decisionPaths {
		if code, body := (webReq{"POST", path, quotaKV, "", crossSite}).send(t, base); code != 403 || !strings.Contains(body, "cross-origin request refused") {
			t.Errorf("--api: POST %s from another site: %d %s, want 403", path, code, body)
		}
	}
	if code, body := (webReq{"POST", "/json", `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`, "", []string{"Content-Type", "text/plain"}}).send(t, base); code != 200 {
		t.Errorf("--api: POST /json from curl: %d %s, want 200", code, body)
	}
}
