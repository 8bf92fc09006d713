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
		{"GET", "/admin/api/scales/quota/hourly", "PUT"},
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
