package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/server"
)

// webReq is a request as a browser (or curl) sends it: host is the Host
// field ("" for the server's own address), hdr further fields.
type webReq struct {
	method, path, body, host string
	hdr                      []string
}

func (q webReq) send(t *testing.T, base string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(q.method, base+q.path, strings.NewReader(q.body))
	if err != nil {
		t.Fatal(err)
	}
	if q.body == "" {
		req.Body = http.NoBody
	}
	if q.host != "" {
		req.Host = q.host
	}
	for i := 0; i+1 < len(q.hdr); i += 2 {
		req.Header.Set(q.hdr[i], q.hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const quotaKV = `{"domain":"quota","descriptors":[{"entries":[{"key":"client","value":"c1"}]}]}`

// crossSite is what a browser adds to a form or fetch a page of
// evil.example sends to the listener.
var crossSite = []string{"Content-Type", "text/plain", "Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site"}

// TestAdminRefusesWebPages: without an admin token the admin API is open
// to whoever reaches the listener, a loopback one by default, and the
// operator's browser reaches it. A page of another site could post a
// reset or samples as a simple form (text/plain, read as JSON, no CORS
// preflight): a cross-site request that changes something is 403. A page
// that re-points its own name at 127.0.0.1 (DNS rebinding) is same-origin
// with itself and could read and change everything: a Host that is not an
// IP address or localhost is 403. curl, scripts and the dashboard's own
// requests (same origin, addressed by IP or localhost) pass.
func TestAdminRefusesWebPages(t *testing.T) {
	e := newEnv(t)
	if code, body, _ := do(t, "POST", e.http.URL+"/v1/decide", "", []byte(quotaKV)); code != 200 {
		t.Fatalf("decide: %d %s", code, body)
	}
	self := strings.TrimPrefix(e.admin.URL, "http://")
	_, port, _ := strings.Cut(self, ":")
	for _, tc := range []struct {
		name string
		req  webReq
		code int
		want string
	}{
		{"form post of a reset from another site", webReq{"POST", "/admin/api/reset", quotaKV, "", crossSite}, 403, "cross-origin request refused"},
		{"reset with Origin alone (no Sec-Fetch-Site)", webReq{"POST", "/admin/api/reset", quotaKV, "", []string{"Origin", "http://evil.example"}}, 403, "cross-origin request refused"},
		{"samples from another site", webReq{"POST", "/admin/api/observe", `{"domain":"quota","rule":"hourly","latency_ms":1e9,"failed":true}`, "", crossSite}, 403, "cross-origin request refused"},
		{"override from another site", webReq{"PUT", "/admin/api/overrides/quota/hourly", `{"requests_per_unit":1}`, "", []string{"Sec-Fetch-Site", "same-site"}}, 403, "cross-origin request refused"},
		{"config read through a rebound name", webReq{"GET", "/admin/api/config", "", "evil.example:" + port, []string{"Sec-Fetch-Site", "same-origin"}}, 403, "DNS rebinding"},
		{"override through a rebound name", webReq{"PUT", "/admin/api/overrides/quota/hourly", `{"requests_per_unit":1}`, "evil.example.:" + port,
			[]string{"Origin", "http://evil.example.:" + port, "Sec-Fetch-Site", "same-origin"}}, 403, "DNS rebinding"},
		{"reset through a rebound name", webReq{"POST", "/admin/api/reset", quotaKV, "evil.example", nil}, 403, "set --admin-token to use a host name"},

		{"curl by IP", webReq{"GET", "/admin/api/config", "", "", nil}, 200, ""},
		{"curl by localhost", webReq{"GET", "/admin/api/overrides", "", "localhost:" + port, nil}, 200, ""},
		{"curl by [::1]", webReq{"GET", "/admin/api/overrides", "", "[::1]:" + port, nil}, 200, ""},
		{"a name under .localhost", webReq{"GET", "/admin/api/overrides", "", "floodgate.localhost", nil}, 200, ""},
		{"curl posts an inspect", webReq{"POST", "/admin/api/inspect", quotaKV, "", nil}, 200, ""},
		{"the dashboard's own post", webReq{"POST", "/admin/api/inspect", quotaKV, "",
			[]string{"Origin", e.admin.URL, "Sec-Fetch-Site", "same-origin"}}, 200, ""},
		{"the dashboard page by IP", webReq{"GET", "/dashboard", "", "", nil}, 200, ""},
		{"the dashboard page through a rebound name", webReq{"GET", "/dashboard", "", "admin.example", nil}, 403, "DNS rebinding"},
		{"metrics through a rebound name", webReq{"GET", "/metrics", "", "evil.example:" + port, nil}, 403, "DNS rebinding"},
	} {
		code, body := tc.req.send(t, e.admin.URL)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %s %s: %d %s, want %d saying %q", tc.name, tc.req.method, tc.req.path, code, body, tc.code, tc.want)
		}
	}
	// None of the refused requests changed anything.
	code, body := webReq{"POST", "/admin/api/inspect", quotaKV, "", nil}.send(t, e.admin.URL)
	var in struct {
		Keys []server.KeyState `json:"keys"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &in) != nil || len(in.Keys) != 1 || !in.Keys[0].Exists {
		t.Errorf("after the refused resets, inspect: %d %s, want the key still there", code, body)
	}
	if ov := e.eng.Overrides(); len(ov) != 0 {
		t.Errorf("after the refused overrides: %v", ov)
	}
}

// TestAdminTokenAllowsHostNames: with a token a browser cannot send
// (it needs a CORS preflight the admin API never grants), any Host is
// fine; a cross-site request that changes something is still refused.
func TestAdminTokenAllowsHostNames(t *testing.T) {
	e := newEnv(t, server.WithAdminToken("tok"))
	auth := []string{"Authorization", "Bearer tok"}
	if code, body := (webReq{"GET", "/admin/api/config", "", "floodgate-admin.internal:9090", auth}).send(t, e.admin.URL); code != 200 {
		t.Errorf("a host name with the token: %d %s, want 200", code, body)
	}
	if code, body := (webReq{"GET", "/admin/api/config", "", "floodgate-admin.internal:9090", nil}).send(t, e.admin.URL); code != 401 {
		t.Errorf("a host name without the token: %d %s, want 401", code, body)
	}
	if code, body := (webReq{"POST", "/admin/api/reset", quotaKV, "", append(crossSite, auth...)}).send(t, e.admin.URL); code != 403 {
		t.Errorf("a cross-site reset with the token: %d %s, want 403", code, body)
	}
}

// TestObserveRefusesWebPages: without a token, /v1/observe takes samples
// from loopback peers, and a browser on the operator's machine is one: a
// page of another site, or one reaching the listener through a rebound
// name, could push the adaptive limits down. Both are 403; a local agent
// addressing the listener by IP still posts.
func TestObserveRefusesWebPages(t *testing.T) {
	const sample = `{"domain":"quota","rule":"hourly","latency_ms":1e9,"failed":true}`
	e := newEnv(t)
	u, _ := url.Parse(e.http.URL)
	for _, tc := range []struct {
		name string
		req  webReq
		code int
		want string
	}{
		{"a form post from another site", webReq{"POST", "/v1/observe", sample, "", crossSite}, 403, "cross-origin request refused"},
		{"through a rebound name", webReq{"POST", "/v1/observe", sample, "evil.example:" + u.Port(), []string{"Sec-Fetch-Site", "same-origin"}}, 403, "DNS rebinding"},
		{"a local agent", webReq{"POST", "/v1/observe", sample, "", nil}, 204, ""},
	} {
		if code, body := tc.req.send(t, e.http.URL); code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want %d saying %q", tc.name, code, body, tc.code, tc.want)
		}
	}
	// With a token the Host is free; a cross-site post is still refused.
	e = newEnv(t, server.WithObserveToken("obs"))
	auth := []string{"Authorization", "Bearer obs"}
	if code, body := (webReq{"POST", "/v1/observe", sample, "floodgate.internal", auth}).send(t, e.http.URL); code != 204 {
		t.Errorf("with the token, by host name: %d %s, want 204", code, body)
	}
	if code, body := (webReq{"POST", "/v1/observe", sample, "", append(crossSite, auth...)}).send(t, e.http.URL); code != 403 {
		t.Errorf("with the token, from another site: %d %s, want 403", code, body)
	}
}
