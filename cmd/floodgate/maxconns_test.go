package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// --max-connections bounds the HTTP and gRPC addresses: with 1, client
// after client is answered on the HTTP address (each closes the previous
// client's idle keep-alive connection), the serving line says the bound
// and /metrics reports it. A negative bound is refused, naming the flag.
func TestServeMaxConnections(t *testing.T) {
	var o, e bytes.Buffer
	if code := run(context.Background(), []string{"serve", "--max-connections", "-1"}, &o, &e); code == 0 ||
		!strings.Contains(e.String(), "--max-connections -1: must be >= 0 (0: no bound)") {
		t.Errorf("--max-connections -1: exit %d, stderr %q; want an error naming the flag", code, e.String())
	}

	out, errb, stop := startServe(t, "--reload-interval", "0", "--max-connections", "1")
	defer func() {
		if code := stop(); code != 0 {
			t.Errorf("serve exit %d after cancel: %s", code, errb.String())
		}
	}()
	if !strings.Contains(errb.String(), "max_connections=1") {
		t.Errorf("the serving line does not say the bound: %s", errb.String())
	}
	httpAddr, _, adminAddr := serveAddrs(t, out.String())
	get := func(url string) (int, string) {
		c := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
		defer c.CloseIdleConnections()
		resp, err := c.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	clients := make([]*http.Client, 3)
	for i := range clients {
		// Each client keeps its connection open (idle) when the next one comes.
		clients[i] = &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
		defer clients[i].CloseIdleConnections()
		resp, err := clients[i].Get("http://" + httpAddr + "/healthcheck")
		if err != nil {
			t.Fatalf("client %d: %v", i+1, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("client %d: /healthcheck %d, want 200", i+1, resp.StatusCode)
		}
	}
	_, metrics := get("http://" + adminAddr + "/metrics")
	for _, want := range []string{
		`floodgate_connections_max{listener="http"} 1`, `floodgate_connections_max{listener="grpc"} 1`,
		`floodgate_connections_idle_closed_total{listener="http"} 2`,
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
