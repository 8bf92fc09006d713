package server_test

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/server"
)

// TestReadyzKeylessWithAStoppedRedis: with its Redis killed, /readyz (at
// the third failed ping in a row) and
// the "store not answering" WARN line give the store's own text (the
// refused connection), not `redis: peek "fg:__ping": store: unavailable:
// …`: SERVER.md says they leave out the operation and the key.
func TestReadyzKeylessWithAStoppedRedis(t *testing.T) {
	rs := testserver.NewRedis(t)
	if rs == nil {
		t.Skip("no redis-server")
	}
	e := newStoreLogEnv(t, "redis://"+rs.Addr, 50*time.Millisecond)
	admin := httptest.NewServer(e.srv.AdminHandler())
	defer admin.Close()
	if code, body, _ := do(t, "GET", admin.URL+"/readyz", "", nil); code != 200 {
		t.Fatalf("/readyz with the store up: %d %s", code, body)
	}
	if err := rs.Kill(); err != nil {
		t.Fatal(err)
	}
	// Not ready at the third failed ping in a row (WithReadiness).
	for range server.DefaultReadyFailures - 1 {
		do(t, "GET", admin.URL+"/readyz", "", nil)
	}
	code, body, _ := do(t, "GET", admin.URL+"/readyz", "", nil)
	if code != 503 || !strings.Contains(string(body), "not ready: store does not answer: ") {
		t.Fatalf("/readyz with the store killed: %d %s, want 503 not ready", code, body)
	}
	logged := e.log.String()
	line := ""
	for _, l := range strings.Split(logged, "\n") {
		if strings.Contains(l, "store not answering") {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("no \"store not answering\" line:\n%s", logged)
	}
	for what, text := range map[string]string{"/readyz": string(body), "the WARN line": line} {
		if strings.Contains(text, "fg:") || strings.Contains(text, "peek") || strings.Contains(text, "redis: ") {
			t.Errorf("%s names the operation or the key: %s", what, text)
		}
		if !strings.Contains(text, "connection refused") && !strings.Contains(text, "EOF") && !strings.Contains(text, "reset") &&
			!strings.Contains(text, "no answer within") {
			t.Errorf("%s does not give the store's failure: %s", what, text)
		}
	}
}
