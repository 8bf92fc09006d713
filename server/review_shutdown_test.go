package server_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/server"
)

// TestHealthcheckDuringShutdownDelay: GET /healthcheck on the HTTP address,
// which SERVER.md offers as a Kubernetes readinessProbe, turns 503 from the
// moment shutdown begins, the shutdown delay included, as /readyz does; it
// used to stay 200 until the drain, so that a probe on it kept the
// instance in rotation for the whole delay.
func TestHealthcheckDuringShutdownDelay(t *testing.T) {
	srv := serverFor(t, releaseConfig, server.WithShutdownDelay(3*time.Second), server.WithDrainTimeout(time.Second))
	ls, err := server.Listen("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ls) }()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	get := func(addr, path string) (int, string) {
		t.Helper()
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(ls.HTTP.Addr().String(), "/healthcheck"); code != 200 || body != "OK" {
		t.Fatalf("/healthcheck while serving: %d %q, want 200 OK", code, body)
	}
	stop()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body := get(ls.Admin.Addr().String(), "/readyz")
		if code == 503 {
			if !strings.Contains(body, "shutting down") {
				t.Fatalf("/readyz in the shutdown delay: %d %s", code, body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d %s 5s after shutdown began", code, body)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if code, body := get(ls.HTTP.Addr().String(), "/healthcheck"); code != 503 || !strings.Contains(body, `"shutting down"`) {
		t.Errorf("/healthcheck in the shutdown delay: %d %s, want 503 {\"error\":\"shutting down\"}", code, body)
	}
	// The liveness of the process is unchanged: /healthz stays 200.
	if code, body := get(ls.Admin.Addr().String(), "/healthz"); code != 200 {
		t.Errorf("/healthz in the shutdown delay: %d %s, want 200", code, body)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Serve did not return 15s after shutdown began (3s delay)")
	}
}
