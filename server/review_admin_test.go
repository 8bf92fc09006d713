package server_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/server"
)

// "Authorization: Bearer" with no token is a missing token, not a wrong
// one: it is what an unset variable in a script sends.
func TestEmptyBearerTokenIsMissing(t *testing.T) {
	srv := serverFor(t, fallbackConfig, server.WithAdminToken("s3cret"))
	admin := httptest.NewServer(srv.AdminHandler())
	defer admin.Close()
	for _, auth := range []string{"Bearer", "Bearer ", "bearer   "} {
		code, body, _ := do(t, "GET", admin.URL+"/admin/api/config", "", nil, "Authorization", auth)
		if code != 401 || !strings.Contains(string(body), "missing admin token") || strings.Contains(string(body), "wrong") {
			t.Errorf("Authorization %q: %d %s, want 401 saying the token is missing", auth, code, body)
		}
	}
	if code, body, _ := do(t, "GET", admin.URL+"/admin/api/config", "", nil, "Authorization", "Bearer nope"); code != 401 || !strings.Contains(string(body), "wrong admin token") {
		t.Errorf("a wrong token: %d %s, want 401 wrong admin token", code, body)
	}
}

// /admin/api/config says that a requests_per_unit: 0 rule refuses
// everything ("deny": true); it showed such a rule with no limit at all,
// as if it limited nothing.
func TestConfigViewShowsDenyRules(t *testing.T) {
	srv := serverFor(t, `
domain: api
descriptors:
  - key: remote_address
    rate_limit: {name: per-ip, unit: second, requests_per_unit: 20}
  - key: blocked
    rate_limit: {name: blocked, unit: second, requests_per_unit: 0}
`)
	admin := httptest.NewServer(srv.AdminHandler())
	defer admin.Close()
	code, body, _ := do(t, "GET", admin.URL+"/admin/api/config", "", nil)
	if code != 200 {
		t.Fatalf("config: %d %s", code, body)
	}
	if !strings.Contains(string(body), `"name":"blocked"`) || !strings.Contains(string(body), `"deny":true`) || strings.Count(string(body), `"deny":true`) != 1 {
		t.Errorf("config view: %s, want the blocked rule (only) marked \"deny\":true", body)
	}
}
