package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A body the upstream cuts short after a 200 header is one failed sample
// to the adaptive rule that decided the request, as the package says.
// Under an http.Server, ReverseProxy aborts such a response by panicking
// with http.ErrAbortHandler: the sample must be fed all the same.
func TestGatewayFeedsACutShortBody(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(http.StatusOK)
		w.Write([]byte("part"))
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer up.Close()
	e := engine(t, adaptiveConfig, newClock(t0))
	srv := front(t, e, up.URL)
	e.StepAdaptive(t0) // start the schedule
	for range 3 {
		resp, err := http.Get(srv.URL + "/api/cut")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	if s := adaptiveState(t, e, "backend"); s.Pending != 3 {
		t.Fatalf("%d samples after 3 proxied requests whose body the upstream cut short, want 3", s.Pending)
	}
	stepped := false
	for _, ch := range e.StepAdaptive(t0.Add(time.Second)) {
		if ch.Rule == "backend" {
			stepped = true
			if ch.Errors != 3 {
				t.Fatalf("backend stepped on %d errors, want 3 (bodies cut short): %s", ch.Errors, ch)
			}
		}
	}
	if !stepped {
		t.Fatal("backend was not stepped")
	}
}
