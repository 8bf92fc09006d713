// Package gateway_test holds the gateway example's test: edge.yaml loads,
// its routes build as `floodgate serve --upstream` builds them, and the
// limits behave as the README shows.
package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memory"
)

func TestExample(t *testing.T) {
	cfg, err := policy.Load(".")
	if err != nil {
		t.Fatalf("edge.yaml:\n%v", err)
	}
	if warnings, err := gateway.Check(cfg); err != nil || len(warnings) > 0 {
		t.Fatalf("routes: %v, warnings %v", err, warnings)
	}
	held, release := make(chan struct{}, 2), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("sleep") {
			held <- struct{}{}
			<-release
		}
		io.WriteString(w, "upstream")
	}))
	defer up.Close()
	// The store's clock stands still: /api's window is a minute, and a
	// minute's end among its six calls on the real clock would admit the
	// sixth.
	now := time.Now()
	st, _ := memory.New(memory.WithClock(func() time.Time { return now }))
	defer st.Close()
	eng, err := policy.NewEngine(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(cfg, eng, up.URL)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	defer srv.Close()
	get := func(path string) *http.Response {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}

	// A browser's CORS preflight from the allowed origin passes unlimited:
	// the 5 calls below are all admitted after it.
	pre, _ := http.NewRequest(http.MethodOptions, srv.URL+"/api/orders", nil)
	pre.Header.Set("Origin", "https://app.example.com")
	pre.Header.Set("Access-Control-Request-Method", "POST")
	if resp, err := http.DefaultClient.Do(pre); err != nil || resp.StatusCode != 200 {
		t.Fatalf("preflight: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// /api: 5 a minute, then 429 with Retry-After.
	for i := range 5 {
		if resp := get("/api/orders"); resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != `"api";q=5;w=60` {
			t.Fatalf("/api call %d: %d %q", i+1, resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
		}
	}
	if resp := get("/api/orders"); resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("6th /api call: %d, Retry-After %q; want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// The 429 to a page of the allowed origin carries the CORS fields.
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/orders", nil)
	req.Header.Set("Origin", "https://app.example.com")
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != 429 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
			!strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "Retry-After") {
			t.Errorf("429 to https://app.example.com: %d %v", resp.StatusCode, resp.Header)
		}
	}
	// Unrouted: passed on without a limit or fields.
	if resp := get("/about"); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") != "" {
		t.Errorf("/about: %d %v", resp.StatusCode, resp.Header)
	}
	// /download: two in flight; a third at the same time is refused.
	var wg sync.WaitGroup
	codes := make(chan int, 2)
	for range 2 {
		wg.Go(func() { codes <- get("/download/big.iso?sleep=1").StatusCode })
	}
	// The third is sent once both are held upstream, their slots taken.
	<-held
	<-held
	third := get("/download/big.iso")
	close(release)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Errorf("a held /download got %d, want 200", c)
		}
	}
	if third.StatusCode != 429 {
		t.Errorf("third /download in flight: %d, want 429", third.StatusCode)
	}
}
