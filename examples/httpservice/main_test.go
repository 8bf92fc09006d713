package main

import (
	"bytes"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// The example service answers as its README says. Its clock stands still:
// /hello's and /report's windows are a minute, and a minute's end among
// their calls on the real clock would admit the call the test wants
// refused.
func TestService(t *testing.T) {
	now := time.Now()
	h, closeStore, err := newHandler(func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(path string, hdr ...string) *http.Response {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for i := range 5 {
		if r := get("/hello"); r.StatusCode != 200 || r.Header.Get("RateLimit-Policy") != `"hello-per-ip";q=5;w=60` {
			t.Fatalf("/hello %d: %d %v", i, r.StatusCode, r.Header)
		}
	}
	if r := get("/hello"); r.StatusCode != 429 || r.Header.Get("Retry-After") == "" {
		t.Errorf("/hello over the limit: %d %v", r.StatusCode, r.Header)
	}
	if r := get("/api/orders", "X-API-Key", "k-1"); r.StatusCode != 200 || r.Header.Get("RateLimit") != `"per-key";r=9;t=1` {
		t.Errorf("/api with a key: %d RateLimit %q", r.StatusCode, r.Header.Get("RateLimit"))
	}
	if r := get("/api/orders"); r.StatusCode != 200 || r.Header.Get("RateLimit-Policy") != `"anonymous";q=1;w=1` {
		t.Errorf("/api without a key: %d %q", r.StatusCode, r.Header.Get("RateLimit-Policy"))
	}
	for range 3 {
		get("/report")
	}
	if r := get("/report"); r.StatusCode != 200 || r.Header.Get("X-Report") != "cached" {
		t.Errorf("/report over the limit: %d X-Report %q", r.StatusCode, r.Header.Get("X-Report"))
	}
}

// A port in use is run's error, and the service never says it listens:
// the README waits for that line before it sends requests.
func TestRunPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var logged bytes.Buffer
	log.SetOutput(&logged)
	defer log.SetOutput(os.Stderr)
	err = run(t.Context(), ln.Addr().String())
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("run on a port in use = %v, want the bind error", err)
	}
	if strings.Contains(logged.String(), "listening") {
		t.Errorf("run on a port in use logged %q: it said it listened", logged.String())
	}
}
