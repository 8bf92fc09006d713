package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A gRPC upstream's failures come as HTTP 200 with a grpc-status that
// says so, in the trailers or, for a trailers-only answer, the header: the
// gateway's samples count UNAVAILABLE and its kind as failed, while OK and
// the caller's own mistakes (INVALID_ARGUMENT) are not the upstream's.
func TestGatewayGRPCStatusFeedsFailures(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		status := r.URL.Query().Get("status")
		if r.URL.Query().Get("only") != "" { // trailers-only: the status in the header
			w.Header().Set("Grpc-Status", status)
			w.WriteHeader(http.StatusOK)
			return
		}
		w.Header().Set("Trailer", "Grpc-Status")
		w.WriteHeader(http.StatusOK)
		w.Write([]byte{0, 0, 0, 0, 0})
		w.Header().Set("Grpc-Status", status)
	}))
	defer up.Close()
	e := engine(t, adaptiveConfig, newClock(t0))
	srv := front(t, e, up.URL)
	now := t0
	step := func() (errs int64) {
		t.Helper()
		now = now.Add(time.Second)
		for _, ch := range e.StepAdaptive(now) {
			if ch.Rule == "backend" {
				return ch.Errors
			}
		}
		t.Fatal("backend was not stepped")
		return 0
	}
	get := func(query string) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/api/call?" + query)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body) // to the trailers
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d", query, resp.StatusCode)
		}
	}
	step() // start the schedule
	for _, tc := range []struct {
		queries []string
		errs    int64
	}{
		{[]string{"status=14", "status=14", "status=13"}, 3},             // UNAVAILABLE, INTERNAL in the trailers
		{[]string{"status=14&only=1", "status=8&only=1", "status=0"}, 2}, // trailers-only, RESOURCE_EXHAUSTED; OK
		{[]string{"status=0", "status=3", "status=5&only=1"}, 0},         // OK, INVALID_ARGUMENT, NOT_FOUND: not failures
	} {
		for _, q := range tc.queries {
			get(q)
		}
		if got := step(); got != tc.errs {
			t.Errorf("%v: %d failed samples at the step, want %d", tc.queries, got, tc.errs)
		}
	}
}
