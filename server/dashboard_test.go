package server_test

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/server"
)

// sameOrigin is what Chromium adds to the dashboard's own fetch of its
// poll: the page and the admin API share their origin.
var sameOrigin = []string{"Sec-Fetch-Site", "same-origin", "Sec-Fetch-Mode", "cors", "Sec-Fetch-Dest", "empty"}

// dashboardPage returns the page as served, failing unless it is HTML
// under a Content-Security-Policy that lets it fetch from its own origin.
func dashboardPage(t *testing.T, e *env) string {
	t.Helper()
	code, body, hdr := do(t, "GET", e.admin.URL+"/dashboard", "", nil)
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /dashboard: %d %s", code, hdr.Get("Content-Type"))
	}
	if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || strings.Contains(csp, "connect-src") {
		t.Errorf("Content-Security-Policy %q: the page's fetch needs connect-src to fall back to default-src 'self'", csp)
	}
	if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") || hdr.Get("X-Frame-Options") != "DENY" {
		t.Errorf("Content-Security-Policy %q, X-Frame-Options %q: another site's page could frame the dashboard", csp, hdr.Get("X-Frame-Options"))
	}
	return string(body)
}

// TestDashboardPoll: the page's poll, sent as a browser sends it from the
// page opened at an IP address, localhost or [::1], passes the admin
// API's cross-origin and Host checks, and its answer has every field the
// page reads (s.<field> in the script).
func TestDashboardPoll(t *testing.T) {
	e := newEnv(t)
	page := dashboardPage(t, e)
	var paths []string
	for _, m := range regexp.MustCompile(`fetch\("([^"]+)"`).FindAllStringSubmatch(page, -1) {
		paths = append(paths, m[1])
	}
	if !slices.Equal(paths, []string{"/admin/api/stats"}) {
		t.Fatalf("the page fetches %q, want only /admin/api/stats (a new fetch needs its own test here)", paths)
	}
	var fields []string
	for _, m := range regexp.MustCompile(`\bs\.([a-z][a-z0-9_]*)`).FindAllStringSubmatch(page, -1) {
		if !slices.Contains(fields, m[1]) {
			fields = append(fields, m[1])
		}
	}
	if len(fields) < 10 {
		t.Fatalf("found only %q read from the poll's answer in the page", fields)
	}
	if code, body, _ := do(t, "POST", e.http.URL+"/v1/decide", "", []byte(quotaKV)); code != 200 {
		t.Fatalf("decide: %d %s", code, body)
	}
	_, port, _ := strings.Cut(strings.TrimPrefix(e.admin.URL, "http://"), ":")
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "[::1]:" + port} {
		code, body := webReq{"GET", "/admin/api/stats", "", host, append([]string{"Referer", "http://" + host + "/dashboard"}, sameOrigin...)}.send(t, e.admin.URL)
		if code != 200 {
			t.Errorf("the page opened at http://%s/dashboard: its poll is %d %s, want 200", host, code, body)
			continue
		}
		var got map[string]json.RawMessage
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatalf("poll answer: %v: %s", err, body)
		}
		for _, f := range fields {
			if _, ok := got[f]; !ok {
				t.Errorf("the page reads s.%s, which the poll's answer lacks: %s", f, body)
			}
		}
	}
}

// TestDashboardRefusals: what the page shows when its poll is refused is
// the answer's JSON "error" (under "stats: HTTP <code>: "), so each
// refusal it can meet must be JSON saying what to do.
func TestDashboardRefusals(t *testing.T) {
	e := newEnv(t)
	page := dashboardPage(t, e)
	_, port, _ := strings.Cut(strings.TrimPrefix(e.admin.URL, "http://"), ":")
	check := func(name string, e *env, q webReq, code int, want string) {
		t.Helper()
		got, body := q.send(t, e.admin.URL)
		var m struct {
			Error string `json:"error"`
		}
		if got != code || json.Unmarshal([]byte(body), &m) != nil || !strings.Contains(m.Error, want) {
			t.Errorf("%s: %d %s, want %d with an error saying %q", name, got, body, code, want)
		}
	}
	check("page opened through a host name, no token", e,
		webReq{"GET", "/admin/api/stats", "", "floodgate.example:" + port, sameOrigin}, 403, "address it by IP (e.g. 127.0.0.1), or set --admin-token")

	e = newEnv(t, server.WithAdminToken("tok"))
	check("no token yet", e, webReq{"GET", "/admin/api/stats", "", "", sameOrigin}, 401, "missing Authorization")
	check("a mistyped token", e, webReq{"GET", "/admin/api/stats", "", "", append([]string{"Authorization", "Bearer tik"}, sameOrigin...)}, 401, "wrong admin token")
	if code, body := (webReq{"GET", "/admin/api/stats", "", "floodgate.example:" + port,
		append([]string{"Authorization", "Bearer tok"}, sameOrigin...)}).send(t, e.admin.URL); code != 200 {
		t.Errorf("the page through a host name with the token: %d %s, want 200", code, body)
	}

	// What a request carries (keys, domains, reasons, event messages) is
	// written into the page as text, never parsed as HTML.
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
		if strings.Contains(page, sink) {
			t.Errorf("the page uses %s: write request data with textContent", sink)
		}
	}
}
