package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memory"
)

// streaming answers /stream with a body that sends a line every 10 s for
// 3 minutes, through a pipe (in the synctest bubble), and anything else at
// once.
type streaming struct{}

func (streaming) RoundTrip(r *http.Request) (*http.Response, error) {
	res := &http.Response{StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"text/event-stream"}}, Request: r, ContentLength: -1}
	if r.URL.Path != "/stream" {
		res.Body = io.NopCloser(strings.NewReader("ok\n"))
		return res, nil
	}
	pr, pw := io.Pipe()
	go func() {
		for i := range 18 {
			time.Sleep(10 * time.Second)
			fmt.Fprintf(pw, "data: %d\n\n", i)
		}
		pw.Close()
	}()
	res.Body = pr
	return res, nil
}

// A stream through the gateway that lasts 3× the lease TTL keeps its
// concurrency slot: the middleware renews its lease while it flows, so a
// second request is refused until the stream ends, then admitted.
func TestStreamKeepsItsSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, err := policy.Parse("gw.yaml", []byte(`
domain: edge
gateway:
  routes: [{path_prefix: /, descriptors: [{entries: [{source: remote_address}]}]}]
descriptors:
  - key: remote_address
    rate_limit: {name: streams, algorithm: concurrency, requests_per_unit: 1, lease_ttl: 1m}
`))
		if err != nil {
			t.Fatal(err)
		}
		st, _ := memory.New()
		defer st.Close()
		e, err := policy.NewEngine(cfg, st)
		if err != nil {
			t.Fatal(err)
		}
		var logged []error
		gw, err := gateway.New(cfg, e, "http://upstream.test", gateway.WithTransport(streaming{}),
			gateway.WithErrorLog(func(_ *http.Request, err error) { logged = append(logged, err) }))
		if err != nil {
			t.Fatal(err)
		}
		get := func(path string) *httptest.ResponseRecorder {
			w := httptest.NewRecorder()
			gw.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
			return w
		}
		stream := make(chan *httptest.ResponseRecorder, 1)
		go func() { stream <- get("/stream") }()
		synctest.Wait()
		if w := get("/other"); w.Code != http.StatusTooManyRequests {
			t.Fatalf("second request at 0s: %d, want 429", w.Code)
		}
		time.Sleep(63 * time.Second)
		if w := get("/other"); w.Code != http.StatusTooManyRequests {
			t.Fatalf("second request at 63s, the stream still flowing: %d, want 429", w.Code)
		}
		time.Sleep(time.Minute + 47*time.Second) // 2m50s
		if w := get("/other"); w.Code != http.StatusTooManyRequests {
			t.Fatalf("second request at 2m50s, the stream still flowing: %d, want 429", w.Code)
		}
		w := <-stream
		if w.Code != http.StatusOK || strings.Count(w.Body.String(), "data: ") != 18 {
			t.Fatalf("stream: %d, body %q; want 200 and 18 events", w.Code, w.Body.String())
		}
		if w := get("/other"); w.Code != http.StatusOK {
			t.Fatalf("second request after the stream ended: %d, want 200", w.Code)
		}
		if len(logged) > 0 {
			t.Fatalf("errors logged: %v", logged)
		}
	})
}
