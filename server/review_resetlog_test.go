package server_test

import (
	"bytes"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/floodgate/floodgate/server"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestResetLogLeavesValuesOut: DELETE /admin/api/keys/{key} logs the
// reset (and lists it as an event) without the key's descriptor values: it
// logged msg="reset key fg:api|remote_address=7.7.7.7#token_bucket:…" at
// INFO, while the store log lines keep keys, which hold client addresses
// and API keys, out of the log.
func TestResetLogLeavesValuesOut(t *testing.T) {
	var logged syncBuf
	srv := serverFor(t, fallbackConfig, server.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	h := httptest.NewServer(srv.HTTPHandler())
	defer h.Close()
	admin := httptest.NewServer(srv.AdminHandler())
	defer admin.Close()
	if code, body, _ := do(t, "POST", h.URL+"/v1/decide", "application/json", []byte(ipRequest)); code != 200 {
		t.Fatalf("decide: %d %s", code, body)
	}
	code, body, _ := do(t, "POST", admin.URL+"/admin/api/inspect", "application/json", []byte(ipRequest))
	if code != 200 {
		t.Fatalf("inspect: %d %s", code, body)
	}
	i := strings.Index(string(body), `"key":"`)
	if i < 0 {
		t.Fatalf("inspect: no key in %s", body)
	}
	key, _, _ := strings.Cut(string(body)[i+len(`"key":"`):], `"`)
	if !strings.Contains(key, "7.7.7.7") {
		t.Fatalf("inspect's key %q does not hold the value", key)
	}
	if code, body, _ := do(t, "DELETE", admin.URL+"/admin/api/keys/"+url.PathEscape(key), "", nil); code != 204 {
		t.Fatalf("DELETE key %s: %d %s", key, code, body)
	}
	if code, body, _ := do(t, "POST", admin.URL+"/admin/api/reset", "application/json", []byte(ipRequest)); code != 200 {
		t.Fatalf("reset: %d %s", code, body)
	}
	out := logged.String()
	if strings.Contains(out, "7.7.7.7") {
		t.Errorf("the log holds the descriptor value:\n%s", out)
	}
	if !strings.Contains(out, "reset key fg:api|remote_address=…#token_bucket:") {
		t.Errorf("the log does not say which rule's key was reset:\n%s", out)
	}
	for _, ev := range srv.Events() {
		if strings.Contains(ev.Message, "7.7.7.7") {
			t.Errorf("event %q holds the descriptor value", ev.Message)
		}
	}
}
