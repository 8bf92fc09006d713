package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/server"
)

// TestAdminTokenScheme: the Authorization scheme name is case-insensitive
// (RFC 9110 §11.1); a field of another scheme is told that Bearer is
// expected, not that the token is wrong; the 401 never echoes the field.
func TestAdminTokenScheme(t *testing.T) {
	e := newEnv(t, server.WithAdminToken("s3cret"))
	for _, tc := range []struct {
		auth string
		code int
		want string
	}{
		{"Bearer s3cret", 200, ""},
		{"bearer s3cret", 200, ""},
		{"BEARER s3cret", 200, ""},
		{"bEaReR   s3cret", 200, ""},
		{"", 401, "missing Authorization: Bearer <admin-token>"},
		{"Bearer nope", 401, "wrong admin token"},
		{"bearer nope", 401, "wrong admin token"},
		{"Basic YWRtaW46czNjcmV0", 401, "does not use the Bearer scheme"},
		{"s3cret", 401, "does not use the Bearer scheme"},
		{"Token s3cret", 401, "does not use the Bearer scheme"},
	} {
		var hdr []string
		if tc.auth != "" {
			hdr = []string{"Authorization", tc.auth}
		}
		code, body, h := do(t, "GET", e.admin.URL+"/admin/api/overrides", "", nil, hdr...)
		if code != tc.code || !strings.Contains(errMsg(body), tc.want) {
			t.Errorf("Authorization %q: %d %s, want %d saying %q", tc.auth, code, body, tc.code, tc.want)
		}
		if code == 401 {
			if h.Get("WWW-Authenticate") == "" {
				t.Errorf("Authorization %q: 401 without WWW-Authenticate", tc.auth)
			}
			if tc.auth != "" && strings.Contains(string(body), tc.auth) {
				t.Errorf("Authorization %q: the 401 %s echoes the field", tc.auth, body)
			}
		}
	}
}

// TestAdminRouting: a known path with a wrong method is 405 with Allow;
// an override or scale path without its rule is a 400 saying so, not a
// redirect to a path with an empty rule; a reset that matches no key
// answers an empty list.
func TestAdminRouting(t *testing.T) {
	e := newEnv(t, server.WithAdminToken("tok"))
	auth := []string{"Authorization", "Bearer tok"}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(method, path, body string) (int, string, http.Header) {
		t.Helper()
		req, err := http.NewRequest(method, e.admin.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(auth[0], auth[1])
		req.Header.Set("Content-Type", "application/json")
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}

	for _, tc := range []struct{ method, path, allow string }{
		{"POST", "/admin/api/config", "GET, HEAD"},
		{"GET", "/admin/api/reset", "POST"},
		{"DELETE", "/admin/api/inspect", "POST"},
		{"GET", "/admin/api/overrides/quota/hourly", "PUT, DELETE"},
		{"POST", "/admin/api/overrides", "GET, HEAD"},
		{"GET", "/admin/api/scales/quota/hourly", "PUT, DELETE"},
		{"PUT", "/admin/api/keys/some-key", "GET, HEAD, DELETE"},
		{"POST", "/metrics", "GET, HEAD"},
		{"DELETE", "/healthz", "GET, HEAD"},
		{"POST", "/readyz", "GET, HEAD"},
		{"PUT", "/dashboard", "GET, HEAD"},
	} {
		code, body, h := send(tc.method, tc.path, "")
		if code != 405 || h.Get("Allow") != tc.allow || !strings.Contains(body, "method not allowed") {
			t.Errorf("%s %s: %d %s (Allow %q), want 405 with Allow %q", tc.method, tc.path, code, body, h.Get("Allow"), tc.allow)
		}
	}
	for _, path := range []string{"/admin/api/nope", "/nope"} {
		if code, body, _ := send("GET", path, ""); code != 404 {
			t.Errorf("GET %s: %d %s, want 404", path, code, body)
		}
	}

	for _, tc := range []struct{ method, path, body string }{
		{"PUT", "/admin/api/overrides/quota", `{"requests_per_unit":5}`},
		{"PUT", "/admin/api/overrides/quota/", `{"requests_per_unit":5}`},
		{"DELETE", "/admin/api/overrides/quota", ""},
		{"PUT", "/admin/api/scales/quota", `{"factor":0.5}`},
		{"PUT", "/admin/api/scales/quota/", `{"factor":0.5}`},
		{"DELETE", "/admin/api/scales/quota", ""},
	} {
		code, body, _ := send(tc.method, tc.path, tc.body)
		if code != 400 || !strings.Contains(body, "no rule name") {
			t.Errorf("%s %s: %d %s, want 400 saying the rule name is missing", tc.method, tc.path, code, body)
		}
	}
	for _, method := range []string{"GET", "DELETE"} {
		if code, body, _ := send(method, "/admin/api/keys", ""); code != 400 || !strings.Contains(body, "no key") {
			t.Errorf("%s /admin/api/keys: %d %s, want 400 saying the key is missing", method, code, body)
		}
	}
	if code, body, _ := send("GET", "/admin/api/overrides", ""); code != 200 || !strings.Contains(body, `"overrides":[]`) {
		t.Fatalf("the rule-less PUTs set an override: %d %s", code, body)
	}

	code, body, _ := send("POST", "/admin/api/reset", `{"domain":"quota","descriptors":[{"entries":[{"key":"nothing","value":"matches"}]}]}`)
	if code != 200 || strings.TrimSpace(body) != `{"reset":[]}` {
		t.Errorf("a reset matching no key: %d %s, want 200 {\"reset\":[]}", code, body)
	}
}

// TestAdminPathSpellings: the admin API under another spelling — another
// case, %2F between its segments — is no endpoint, but it meets the API's
// checks before it is told so: without the token 401, from a web page of
// another site 403, addressed to a foreign host name without a token 403;
// with the token a 404 saying paths are case-sensitive. Nothing of the
// API answers, and no redirect makes such a path work. Other paths in
// another case are a 404 naming the path meant.
func TestAdminPathSpellings(t *testing.T) {
	stray := []string{"/ADMIN/api/config", "/Admin/api/config", "/admin/API/config", "/ADMIN/API/CONFIG",
		"/ADMIN/api/keys/fg:x", "/Admin/api/overrides/quota/hourly", "/admin%2Fapi/config", "/admin/api%2Fconfig",
		"/ADMIN/api", "/ADMIN/api/"}
	send := func(t *testing.T, url, method, path string, hdr ...string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, url+path, strings.NewReader(`{"domain":"quota"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(hdr); i += 2 {
			if hdr[i] == "Host" {
				req.Host = hdr[i+1]
			} else {
				req.Header.Set(hdr[i], hdr[i+1])
			}
		}
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, errMsg(b)
	}

	t.Run("token", func(t *testing.T) {
		e := newEnv(t, server.WithAdminToken("tok"))
		for _, path := range stray {
			for _, method := range []string{"GET", "POST", "PUT", "DELETE"} {
				for _, tc := range []struct {
					name string
					hdr  []string
					code int
					want string
				}{
					{"no token", nil, 401, "missing Authorization"},
					{"wrong token", []string{"Authorization", "Bearer nope"}, 401, "wrong admin token"},
					{"the token", []string{"Authorization", "Bearer tok"}, 404, "paths are case-sensitive; the admin API is under /admin/api/"},
				} {
					code, msg := send(t, e.admin.URL, method, path, tc.hdr...)
					if code != tc.code || !strings.Contains(msg, tc.want) {
						t.Errorf("%s %s with %s: %d %q, want %d saying %q", method, path, tc.name, code, msg, tc.code, tc.want)
					}
				}
				if method == "GET" {
					continue
				}
				code, msg := send(t, e.admin.URL, method, path, "Authorization", "Bearer tok", "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site")
				if code != 403 || !strings.Contains(msg, "cross-origin request refused") {
					t.Errorf("%s %s from another site's page, with the token: %d %q, want 403 cross-origin", method, path, code, msg)
				}
			}
		}
		if code, msg := send(t, e.admin.URL, "GET", "/admin/api/config", "Authorization", "Bearer tok"); code != 200 {
			t.Errorf("GET /admin/api/config: %d %q, want 200", code, msg)
		}
	})

	t.Run("no token", func(t *testing.T) {
		e := newEnv(t)
		for _, path := range stray {
			if code, msg := send(t, e.admin.URL, "GET", path, "Host", "evil.example:9090"); code != 403 || !strings.Contains(msg, "DNS rebinding") {
				t.Errorf("GET %s addressed to evil.example: %d %q, want 403 (DNS rebinding)", path, code, msg)
			}
			if code, msg := send(t, e.admin.URL, "GET", path); code != 404 || !strings.Contains(msg, "paths are case-sensitive") {
				t.Errorf("GET %s: %d %q, want 404 saying paths are case-sensitive", path, code, msg)
			}
		}
		for _, tc := range []struct{ path, want string }{
			{"/DASHBOARD", "did you mean /dashboard?"},
			{"/Metrics", "did you mean /metrics?"},
			{"/nope", "see /dashboard"},
		} {
			if code, msg := send(t, e.admin.URL, "GET", tc.path); code != 404 || !strings.Contains(msg, tc.want) {
				t.Errorf("GET %s: %d %q, want 404 saying %q", tc.path, code, msg, tc.want)
			}
		}
	})
}
