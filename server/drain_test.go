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

// TestAdminServesDuringTheDrain: while a request in flight holds the drain
// (a slow upstream in gateway mode), the admin address still answers:
// /readyz and /healthz 503 "draining", /metrics 200. It closes last, once
// the drain is over.
func TestAdminServesDuringTheDrain(t *testing.T) {
	entered, finish := make(chan struct{}), make(chan struct{})
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-finish
		w.Write([]byte("done\n"))
	})
	srv := serverFor(t, releaseConfig, server.WithGateway(upstream), server.WithDrainTimeout(30*time.Second))
	ls, err := server.Listen("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ls) }()
	finished := false
	defer func() {
		if !finished {
			close(finish)
		}
	}()

	// A fresh connection per request: the symptom was a refused connection.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	get := func(path string) (int, string, error) {
		resp, err := client.Get("http://" + ls.Admin.Addr().String() + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	held := make(chan string, 1)
	go func() {
		resp, err := client.Get("http://" + ls.HTTP.Addr().String() + "/slow")
		if err != nil {
			held <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		held <- string(b)
	}()
	<-entered
	stop() // the drain begins; the slow request holds it

	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body, err := get("/readyz")
		if err != nil {
			t.Fatalf("/readyz during the drain: %v, want 503 draining", err)
		}
		if code == 503 {
			if !strings.Contains(body, "draining") {
				t.Fatalf("/readyz during the drain: 503 %s, want it to say draining", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d %s 5s after the drain began", code, body)
		}
		time.Sleep(5 * time.Millisecond) // waiting for Serve's goroutine to see ctx done
	}
	if code, body, err := get("/healthz"); err != nil || code != 503 || !strings.Contains(body, "draining") {
		t.Fatalf("/healthz during the drain: %d %s %v, want 503 draining", code, body, err)
	}
	if code, body, err := get("/metrics"); err != nil || code != 200 || !strings.Contains(body, "floodgate_") {
		t.Fatalf("/metrics during the drain: %d %v, want 200 with the metrics", code, err)
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned %v with a request in flight", err)
	default:
	}

	close(finish)
	finished = true
	if got := <-held; got != "done\n" {
		t.Fatalf("the request in flight got %q, want it to finish", got)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return 10s after the drain's last request finished")
	}
	if _, _, err := get("/readyz"); err == nil {
		t.Fatal("the admin address still answers after Serve returned")
	}
}
