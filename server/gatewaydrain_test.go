package server_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/server"
)

// A drain that times out in gateway mode reports the proxied requests it
// cut and their connections, not "HTTP API request(s)" (gateway mode moves
// the API to --api), counting each of the streams an HTTP/2 connection
// carries rather than the one connection.
func TestGatewayDrainCountsProxiedRequests(t *testing.T) {
	entered, finish := make(chan struct{}, 2), make(chan struct{})
	defer close(finish)
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select {
		case <-finish:
		case <-r.Context().Done():
		}
	})
	var logs logBuffer
	srv := serverFor(t, releaseConfig, server.WithGateway(upstream), server.WithDrainTimeout(300*time.Millisecond),
		server.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	ls, err := server.Listen("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ls) }()

	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true) // one connection, two streams
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for range 2 {
		go func() {
			if resp, err := client.Get("http://" + ls.HTTP.Addr().String() + "/slow"); err == nil {
				resp.Body.Close()
			}
		}()
	}
	for range 2 {
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the requests did not reach the gateway handler")
		}
	}
	stop()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the drain timeout")
	}
	want := "closed the connections of 2 proxied request(s) (gateway, 1 connection(s)) still in flight"
	if !strings.Contains(logs.String(), want) {
		t.Errorf("log %q lacks %q", logs.String(), want)
	}
}
