package loadgen_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate/floodgate/loadgen"
)

// An answer whose body was still coming when the run was interrupted is
// cancelled and not counted, in the statuses as in the requests: the
// report's statuses line added up to more than its requests line.
func TestInterruptedAnswerIsNotCounted(t *testing.T) {
	headersSent := make(chan struct{}, 1)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		// 32 MiB, more than the kernel's socket buffers on both sides
		// hold: once written, the client has read the headers and is
		// reading the body.
		chunk := make([]byte, 1<<20)
		for range 32 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
		w.(http.Flusher).Flush()
		select {
		case headersSent <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-headersSent:
		case <-time.After(10 * time.Second):
		}
		cancel()
	}()
	res, err := loadgen.Run(ctx, loadgen.Config{Protocol: loadgen.HTTP, Addr: srv.URL, Requests: 1, Concurrency: 1, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var statuses int64
	for _, n := range res.Statuses {
		statuses += n
	}
	if res.Stop != loadgen.StopInterrupted || res.Requests != 0 || statuses != res.Requests {
		t.Errorf("Stop %v, Requests %d, Statuses %v: want an interrupted run of 0 requests and no status", res.Stop, res.Requests, res.Statuses)
	}
}
