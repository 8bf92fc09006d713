package server_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/server"
)

// TestObserveAuth: POST /v1/observe steers the adaptive limits, so the
// public address takes it only with the observe token (else the admin
// token), and with neither only from a loopback peer; the admin address
// takes it at /admin/api/observe under the admin token (without one, from
// a loopback peer only).
func TestObserveAuth(t *testing.T) {
	const sample = `{"domain":"quota","rule":"hourly","latency_ms":5}`
	type try struct {
		handler    string // "api" or "admin"
		path, peer string
		auth       string
		code       int
		want       string
	}
	for _, tc := range []struct {
		name  string
		opts  []server.Option
		tries []try
	}{
		{"no token", nil, []try{
			{"api", "/v1/observe", "127.0.0.1:4000", "", 204, ""},
			{"api", "/v1/observe", "[::1]:4000", "", 204, ""},
			{"api", "/v1/observe", "[::ffff:127.0.0.1]:4000", "", 204, ""},
			{"api", "/v1/observe", "203.0.113.7:4000", "", 403, "set --observe-token (or --admin-token)"},
			{"api", "/v1/observe", "10.0.0.5:4000", "Bearer anything", 403, "loopback peers only"},
			{"admin", "/admin/api/observe", "127.0.0.1:4000", "", 204, ""},
			{"admin", "/admin/api/observe", "203.0.113.7:4000", "", 403, "set --admin-token"},
		}},
		{"admin token", []server.Option{server.WithAdminToken("adm")}, []try{
			{"api", "/v1/observe", "127.0.0.1:4000", "", 401, "missing Authorization: Bearer <observe-token>"},
			{"api", "/v1/observe", "203.0.113.7:4000", "Bearer nope", 401, "wrong observe token"},
			{"api", "/v1/observe", "203.0.113.7:4000", "Basic YWRtOg==", 401, "does not use the Bearer scheme"},
			{"api", "/v1/observe", "203.0.113.7:4000", "bearer adm", 204, ""},
			{"admin", "/admin/api/observe", "127.0.0.1:4000", "", 401, "missing Authorization: Bearer <admin-token>"},
			{"admin", "/admin/api/observe", "203.0.113.7:4000", "Bearer adm", 204, ""},
		}},
		{"observe token", []server.Option{server.WithAdminToken("adm"), server.WithObserveToken("obs")}, []try{
			{"api", "/v1/observe", "203.0.113.7:4000", "Bearer obs", 204, ""},
			{"api", "/v1/observe", "127.0.0.1:4000", "Bearer adm", 401, "wrong observe token"},
			{"admin", "/admin/api/observe", "127.0.0.1:4000", "Bearer obs", 401, "wrong admin token"},
			{"admin", "/admin/api/observe", "127.0.0.1:4000", "Bearer adm", 204, ""},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.opts...)
			handlers := map[string]http.Handler{"api": e.srv.HTTPHandler(), "admin": e.srv.AdminHandler()}
			for _, tr := range tc.tries {
				r := httptest.NewRequest("POST", tr.path, strings.NewReader(sample))
				r.RemoteAddr = tr.peer
				r.Host = "127.0.0.1:9090" // as curl addresses a loopback listener
				if tr.auth != "" {
					r.Header.Set("Authorization", tr.auth)
				}
				rec := httptest.NewRecorder()
				handlers[tr.handler].ServeHTTP(rec, r)
				if rec.Code != tr.code || !strings.Contains(rec.Body.String(), tr.want) {
					t.Errorf("POST %s from %s with %q: %d %s, want %d saying %q", tr.path, tr.peer, tr.auth, rec.Code, rec.Body, tr.code, tr.want)
				}
				if rec.Code == 403 && rec.Header().Get("Content-Type") != "application/json" {
					t.Errorf("403 without a JSON error: %q", rec.Header().Get("Content-Type"))
				}
			}
		})
	}
}
