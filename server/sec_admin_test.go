package server_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/server"
)

// TestSecAdminAPIRemotePeers: without an admin token, an admin address
// bound to 0.0.0.0 or the pod's IP (for probes and scrapes) answered the
// admin API to the network: every /admin/api/ request from a peer that is
// not loopback is 403, naming --admin-token, whatever its method and
// however the path is spelled. /metrics, /healthz, /readyz and the
// dashboard page stay open to such peers (probes address them by the pod's
// IP or a name of their own); loopback peers (all of 127.0.0.0/8, ::1)
// keep the API; with a token, any peer that carries it does.
func TestSecAdminAPIRemotePeers(t *testing.T) {
	e := newEnv(t)
	h := e.srv.AdminHandler()
	call := func(method, path, peer, host, auth, body string) (int, string) {
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		r.RemoteAddr, r.Host = peer, host
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec.Code, rec.Body.String()
	}
	api := []struct{ method, path, body string }{
		{"GET", "/admin/api/config", ""},
		{"POST", "/admin/api/reset", quotaKV},
		{"POST", "/admin/api/inspect", quotaKV},
		{"DELETE", "/admin/api/keys/x", ""},
		{"PUT", "/admin/api/overrides/quota/hourly", `{"requests_per_unit":1}`},
		{"PUT", "/admin/api/scales/quota/hourly", `{"scale":0.1}`},
		{"POST", "/admin/api/observe", `{"domain":"quota","rule":"hourly","latency_ms":1e9,"failed":true}`},
		{"GET", "/admin/api/events", ""},
		{"GET", "/admin/api/nope", ""},
		{"GET", "/ADMIN/api/config", ""},
	}
	for _, peer := range []string{"10.0.0.5:4000", "203.0.113.7:4000", "[2001:db8::1]:4000", "[::ffff:10.0.0.5]:4000"} {
		for _, q := range api {
			for _, host := range []string{"10.0.0.9:9090", "127.0.0.1:9090"} {
				code, body := call(q.method, q.path, peer, host, "", q.body)
				if code != 403 || !strings.Contains(body, "set --admin-token") {
					t.Errorf("no token, %s %s from %s (Host %s): %d %s, want 403 saying to set --admin-token", q.method, q.path, peer, host, code, body)
				}
			}
		}
		for _, path := range []string{"/metrics", "/healthz", "/readyz", "/dashboard"} {
			if code, body := call("GET", path, peer, "floodgate.ns.svc:9090", "", ""); code != 200 {
				t.Errorf("no token, GET %s from %s: %d %s, want 200 (open to probes and scrapes)", path, peer, code, body)
			}
		}
	}
	if ov := e.eng.Overrides(); len(ov) != 0 {
		t.Errorf("the refused overrides took effect: %v", ov)
	}
	for _, peer := range []string{"127.0.0.1:4000", "127.0.0.2:4000", "[::1]:4000", "[::ffff:127.0.0.1]:4000"} {
		if code, body := call("GET", "/admin/api/config", peer, "127.0.0.1:9090", "", ""); code != 200 {
			t.Errorf("no token, GET /admin/api/config from loopback %s: %d %s, want 200", peer, code, body)
		}
	}

	e = newEnv(t, server.WithAdminToken("adm"))
	h = e.srv.AdminHandler()
	if code, body := call("GET", "/admin/api/config", "203.0.113.7:4000", "floodgate.ns.svc:9090", "Bearer adm", ""); code != 200 {
		t.Errorf("with the token, from a remote peer: %d %s, want 200", code, body)
	}
	if code, body := call("GET", "/admin/api/config", "203.0.113.7:4000", "10.0.0.9:9090", "", ""); code != 401 {
		t.Errorf("token set, none sent, from a remote peer: %d %s, want 401", code, body)
	}
}

// TestSecAdminHostCheckEverywhere: without an admin token, a loopback admin
// listener refuses a Host that is not an IP address or localhost on every
// path, not only the admin API's: a page that re-points its name at
// 127.0.0.1 (DNS rebinding) could read /metrics, /readyz, /healthz and the
// dashboard. A Prometheus or curl on the same host (by IP, localhost, ::1)
// is served; with a token any Host is.
func TestSecAdminHostCheckEverywhere(t *testing.T) {
	e := newEnv(t)
	_, port, _ := strings.Cut(strings.TrimPrefix(e.admin.URL, "http://"), ":")
	paths := []string{"/metrics", "/healthz", "/readyz", "/dashboard", "/admin/api/config", "/nope"}
	for _, path := range paths {
		for _, host := range []string{"evil.example:" + port, "evil.example", "evil.example.:" + port, "127.0.0.1.nip.io:" + port} {
			code, body := webReq{"GET", path, "", host, []string{"Sec-Fetch-Site", "same-origin"}}.send(t, e.admin.URL)
			if code != 403 || !strings.Contains(body, "DNS rebinding") {
				t.Errorf("no token, GET %s with Host %s: %d %.120s, want 403 (DNS rebinding)", path, host, code, body)
			}
		}
		if path == "/nope" {
			continue
		}
		for _, host := range []string{"", "localhost:" + port, "[::1]:" + port, "127.0.0.1"} {
			if code, body := (webReq{"GET", path, "", host, nil}).send(t, e.admin.URL); code != 200 {
				t.Errorf("no token, GET %s with Host %q: %d %.120s, want 200", path, host, code, body)
			}
		}
	}
	e = newEnv(t, server.WithAdminToken("adm"))
	for _, path := range []string{"/metrics", "/healthz", "/readyz", "/dashboard"} {
		if code, body := (webReq{"GET", path, "", "floodgate.internal:9090", nil}).send(t, e.admin.URL); code != 200 {
			t.Errorf("with a token, GET %s by host name: %d %.120s, want 200", path, code, body)
		}
	}
}

// TestSecAdminHostCheckServe: Serve's admin listener on the loopback gets
// the check too (the listener's address decides, recorded by Serve).
func TestSecAdminHostCheckServe(t *testing.T) {
	srv := serverFor(t, releaseConfig)
	ls, err := server.Listen("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, srv, ls)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	for host, want := range map[string]int{"evil.example": 403, "localhost": 200, "": 200} {
		req, _ := http.NewRequest("GET", "http://"+ls.Admin.Addr().String()+"/metrics", nil)
		if host != "" {
			req.Host = host
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET /metrics with Host %q on a loopback admin listener: %d %.120s, want %d", host, resp.StatusCode, b, want)
		}
	}
}
