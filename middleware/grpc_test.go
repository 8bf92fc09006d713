package middleware_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate/dimension"
	"github.com/floodgate/floodgate/middleware"
)

// grpcRequest is a POST to path over HTTP/2 with Content-Type ct, as a
// gRPC client sends it.
func grpcRequest(path, ct string) *http.Request {
	r := httptest.NewRequest("POST", path, nil)
	r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/2.0", 2, 0
	r.Header.Set("Content-Type", ct)
	return r
}

func TestIsGRPC(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/grpc":                true,
		"application/grpc+proto":          true,
		"application/grpc+json":           true,
		"Application/GRPC":                true,
		"application/grpc; charset=utf-8": true,
		"application/grpc-web":            false,
		"application/grpc-web+proto":      false,
		"application/grpcx":               false,
		"application/json":                false,
		"":                                false,
	} {
		r := grpcRequest("/pkg.Svc/M", ct)
		if got := middleware.IsGRPC(r); got != want {
			t.Errorf("IsGRPC(Content-Type %q) = %v, want %v", ct, got, want)
		}
	}
}

func TestGRPCCode(t *testing.T) {
	for status, want := range map[int]int{400: 3, 408: 4, 413: 8, 429: 8, 500: 13, 502: 14, 503: 14, 504: 14, 418: 2} {
		if got := middleware.GRPCCode(status); got != want {
			t.Errorf("GRPCCode(%d) = %d, want %d", status, got, want)
		}
	}
}

// A gRPC call gets a trailers-only gRPC error: HTTP 200, no body, the
// code and the percent-encoded message, the fields set before kept; any
// other request gets the problem body.
func TestWriteProblemFor(t *testing.T) {
	p := middleware.Problem{Status: 503, Detail: "the store timed out: 100% é\n"}
	r := grpcRequest("/pkg.Svc/M", "application/grpc+proto")
	w := httptest.NewRecorder()
	w.Header().Set("Retry-After", "7")
	w.Header().Set("Content-Length", "99")
	middleware.WriteProblemFor(w, r, p)
	h := w.Result().Header
	if w.Code != 200 || w.Body.Len() != 0 || h.Get("Content-Type") != "application/grpc" || h.Get("Grpc-Status") != "14" ||
		h.Get("Grpc-Message") != "the store timed out: 100%25 %C3%A9%0A" || h.Get("Retry-After") != "7" || h.Get("Content-Length") != "" {
		t.Errorf("gRPC: %d %v %q; want 200, UNAVAILABLE, the message percent-encoded, Retry-After kept", w.Code, h, w.Body)
	}

	r.Header.Set("Content-Type", "application/json")
	w = httptest.NewRecorder()
	middleware.WriteProblemFor(w, r, p)
	if w.Code != 503 || w.Header().Get("Content-Type") != "application/problem+json" || w.Header().Get("Grpc-Status") != "" {
		t.Errorf("HTTP: %d %v, want the 503 problem body", w.Code, w.Header())
	}
}

// The middleware admits 3 gRPC calls (HTTP 200, no grpc-status of its
// own) and refuses the fourth, over the limit, with
// RESOURCE_EXHAUSTED, saying why, with the limit's fields and Retry-After.
func TestRejectGRPC(t *testing.T) {
	m, err := middleware.New(engine(t, perIPConfig, newClock(t0)), "web", extractor(t, perIP))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(ok))
	for i := range 4 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, grpcRequest("/pkg.Svc/M", "application/grpc"))
		grpcStatus := w.Header().Get("Grpc-Status")
		if w.Code != 200 || (i < 3) != (grpcStatus == "") {
			t.Errorf("call %d: %d grpc-status %q", i+1, w.Code, grpcStatus)
		}
		if i == 3 && (grpcStatus != "8" || w.Header().Get("Grpc-Message") != "per-ip: rate limit exceeded; retry in 50 s" ||
			w.Header().Get("Retry-After") != "50" || w.Header().Get("X-RateLimit-Remaining") != "0" || w.Body.Len() != 0) {
			t.Errorf("call 4: %v %q; want RESOURCE_EXHAUSTED, its message, Retry-After and the fields, no body", w.Header(), w.Body)
		}
		if ms, err := strconv.Atoi(w.Header().Get("Grpc-Retry-Pushback-Ms")); i == 3 && (err != nil || ms <= 49000 || ms > 50000) {
			t.Errorf("call 4: grpc-retry-pushback-ms %q, want the wait in ms (within Retry-After's 50 s)", w.Header().Get("Grpc-Retry-Pushback-Ms"))
		}
	}
}

// A gRPC call a limit can never admit is told not to retry
// (grpc-retry-pushback-ms -1), one a concurrency limit refuses gets no
// pushback (no time is promised), and an HTTP request gets none.
func TestGRPCPushbackNeverAndConcurrency(t *testing.T) {
	m, err := middleware.New(engine(t, `
domain: web
descriptors:
  - key: path
    value: /blocked
    rate_limit: {name: blocked, unit: second, requests_per_unit: 0}
  - key: path
    value: /slots
    rate_limit: {name: slots, algorithm: concurrency, requests_per_unit: 1, lease_ttl: 1m}
`, newClock(t0)), "web", extractor(t, dimension.Spec{Descriptors: []dimension.DescriptorSpec{{Entries: []dimension.EntrySpec{{Source: "path"}}}}}))
	if err != nil {
		t.Fatal(err)
	}
	call := func(path, ct string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		m.Handler(http.HandlerFunc(ok)).ServeHTTP(w, grpcRequest(path, ct))
		return w
	}
	if w := call("/blocked", "application/grpc"); w.Header().Get("Grpc-Status") != "8" || w.Header().Get("Grpc-Retry-Pushback-Ms") != "-1" {
		t.Errorf("never: %v, want RESOURCE_EXHAUSTED with grpc-retry-pushback-ms -1", w.Header())
	}
	if w := call("/blocked", "application/json"); w.Code != 429 || w.Header().Get("Grpc-Retry-Pushback-Ms") != "" {
		t.Errorf("never over HTTP: %d %v, want 429 without a gRPC pushback", w.Code, w.Header())
	}
	done, pass := m.Check(httptest.NewRecorder(), httptest.NewRequest("POST", "/slots", nil))
	if !pass {
		t.Fatal("the first slot refused")
	}
	defer done()
	if w := call("/slots", "application/grpc"); w.Header().Get("Grpc-Status") != "8" || w.Header().Values("Grpc-Retry-Pushback-Ms") != nil {
		t.Errorf("concurrency: %v, want RESOURCE_EXHAUSTED without a pushback", w.Header())
	}
}

// A gRPC call a degrade rule refuses is rejected, RESOURCE_EXHAUSTED, not
// handed to the fallback, whose HTTP answer its client could not read;
// an HTTP request still gets the fallback.
func TestGRPCNotDegraded(t *testing.T) {
	fallback := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "cached\n") })
	m, err := middleware.New(engine(t, strategiesConfig, newClock(t0)), "web",
		extractor(t, dimension.Spec{Descriptors: []dimension.DescriptorSpec{{Entries: []dimension.EntrySpec{{Source: "path"}}}}}),
		middleware.WithFallback("cached", fallback), middleware.WithFallback("nowhere", fallback), middleware.WithDescriptorCheck(false))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(ok))
	for i, ct := range []string{"application/json", "application/grpc", "application/json"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, grpcRequest("/degrade", ct))
		switch {
		case i == 1 && (w.Code != 200 || w.Header().Get("Grpc-Status") != "8" || w.Body.Len() != 0):
			t.Errorf("gRPC call over the limit: %d %v %q, want RESOURCE_EXHAUSTED, no body", w.Code, w.Header(), w.Body)
		case i == 2 && w.Body.String() != "cached\n":
			t.Errorf("HTTP request over the limit: %d %q, want the fallback's answer", w.Code, w.Body)
		}
	}
}

// Only a POST over HTTP/2 is a gRPC call: a GET, or an HTTP/1.1 request,
// with Content-Type application/grpc that a limit refuses gets the 429
// (not cached by shared caches), not a 200 with no body that a cache in
// front could store for the URL and serve to everyone else.
func TestGRPCOnlyPOSTOverHTTP2(t *testing.T) {
	get := grpcRequest("/page", "application/grpc")
	get.Method = "GET"
	h1 := grpcRequest("/page", "application/grpc")
	h1.Proto, h1.ProtoMajor, h1.ProtoMinor = "HTTP/1.1", 1, 1
	for name, r := range map[string]*http.Request{"GET over HTTP/2": get, "POST over HTTP/1.1": h1} {
		if middleware.IsGRPC(r) {
			t.Errorf("%s: IsGRPC = true, want false", name)
		}
	}
	m, err := middleware.New(engine(t, perIPConfig, newClock(t0)), "web", extractor(t, perIP))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(ok))
	for range 3 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/page", nil))
	}
	r := httptest.NewRequest("GET", "/page", nil)
	r.Header.Set("Content-Type", "application/grpc")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 429 || w.Header().Get("Grpc-Status") != "" || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("refused GET with Content-Type application/grpc: %d %v, want the 429 problem", w.Code, w.Header())
	}
}

// A gRPC call's deadline (grpc-timeout) bounds the wait strategy and the
// shaper's hold as a context deadline does: a call whose turn comes after
// it is refused at once, RESOURCE_EXHAUSTED with its pushback, instead of
// held (here up to max_wait, 10 s) until its client gave up on its own;
// a call within its deadline still waits its turn, and a bad grpc-timeout
// is ignored.
func TestGRPCTimeoutBoundsTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, closeStore := bubbleEngine(t, `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {name: queued, algorithm: token_bucket, unit: second, requests_per_unit: 1, burst: 1,
                 strategy: wait, max_wait: 10s}
`)
		defer closeStore()
		m, err := middleware.New(e, "web", extractor(t, perIP))
		if err != nil {
			t.Fatal(err)
		}
		h := m.Handler(http.HandlerFunc(ok))
		for _, tc := range []struct {
			timeout    string
			want       string // grpc-status, "" when admitted
			waitAtMost time.Duration
		}{
			{"200m", "8", 0},                // the turn is 1 s away
			{"3S", "", time.Second},         // waits its turn
			{"x", "", time.Second},          // not a grpc-timeout: max_wait alone
			{"999999999S", "", time.Second}, // 9 digits: not one either
		} {
			h.ServeHTTP(httptest.NewRecorder(), grpcRequest("/pkg.Svc/M", "application/grpc")) // takes the token
			r := grpcRequest("/pkg.Svc/M", "application/grpc")
			r.Header.Set("Grpc-Timeout", tc.timeout)
			begin := time.Now()
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			took := time.Since(begin)
			if got := w.Header().Get("Grpc-Status"); got != tc.want || took > tc.waitAtMost {
				t.Errorf("grpc-timeout %s: grpc-status %q after %v, want %q within %v", tc.timeout, got, took, tc.want, tc.waitAtMost)
			}
			if tc.want == "8" && w.Header().Get("Grpc-Retry-Pushback-Ms") == "" {
				t.Errorf("grpc-timeout %s: no grpc-retry-pushback-ms in %v", tc.timeout, w.Header())
			}
			time.Sleep(2 * time.Second) // the bucket refills for the next case
		}
	})
}
