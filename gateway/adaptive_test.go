package gateway_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/policy"
)

const adaptiveConfig = `
domain: edge
gateway:
  routes:
    - name: api
      path_prefix: /api
      descriptors: [{entries: [{source: generic_key, value: api}]}]
    - name: tight
      path_prefix: /tight
      descriptors: [{entries: [{source: generic_key, value: tight}]}]
    - name: plain
      path_prefix: /plain
      descriptors: [{entries: [{source: generic_key, value: plain}]}]
descriptors:
  - key: generic_key
    value: api
    rate_limit:
      name: backend
      unit: minute
      requests_per_unit: 1000
      adaptive: {min: 0.25, latency_threshold: 100ms, error_ratio: 0.2, decrease: 0.5, increase: 0.25, min_samples: 3}
  - key: generic_key
    value: tight
    rate_limit:
      name: tight
      unit: minute
      requests_per_unit: 1
      adaptive: {latency_threshold: 100ms, min_samples: 1}
  - key: generic_key
    value: plain
    rate_limit: {name: plain, unit: minute, requests_per_unit: 1000}
`

// adaptiveState is rule's adaptive state in e.
func adaptiveState(t *testing.T, e *policy.Engine, rule string) policy.AdaptiveState {
	t.Helper()
	for _, s := range e.AdaptiveStates() {
		if s.Rule == rule {
			return s
		}
	}
	t.Fatalf("no adaptive rule %q", rule)
	return policy.AdaptiveState{}
}

// parallel sends n GETs to url at once and checks each gets status.
func parallel(t *testing.T, url string, n, status int) {
	t.Helper()
	var wg sync.WaitGroup
	got := make([]int, n)
	for i := range n {
		wg.Go(func() {
			resp, err := http.Get(url)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			got[i] = resp.StatusCode
		})
	}
	wg.Wait()
	for _, s := range got {
		if s != status {
			t.Fatalf("GET %s: statuses %v, want %d", url, got, status)
		}
	}
}

// The gateway feeds an adaptive rule one sample per request it proxied on
// the rule's decision: a slow upstream (300 ms over a 100 ms threshold)
// and one answering 500, or not at all (502), bring the rule's factor
// down at the next step; a fast healthy one brings it back up. Requests
// the gateway refuses, that match no route, or whose route's rules have
// no adaptive block feed nothing, and WithAdaptiveSamples(false) feeds
// nothing at all. The controller is stepped by hand (StepAdaptive); only
// the latencies are real.
func TestGatewayFeedsAdaptiveRules(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/slow"):
			time.Sleep(300 * time.Millisecond)
		case strings.HasSuffix(r.URL.Path, "/fail"):
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		w.Write([]byte("ok"))
	}))
	defer up.Close()
	e := engine(t, adaptiveConfig, newClock(t0))
	srv := front(t, e, up.URL)
	now := t0
	step := func() policy.ScaleChange {
		t.Helper()
		now = now.Add(time.Second)
		for _, ch := range e.StepAdaptive(now) {
			if ch.Rule == "backend" {
				return ch
			}
		}
		t.Fatal("backend was not stepped")
		return policy.ScaleChange{}
	}
	factor := func() float64 { return adaptiveState(t, e, "backend").Factor }
	pending := func() int64 { return adaptiveState(t, e, "backend").Pending }
	step() // the first call steps every controller: start the schedule

	// Slow: p99 300 ms > 100 ms.
	parallel(t, srv.URL+"/api/slow", 3, http.StatusOK)
	if p := pending(); p != 3 {
		t.Fatalf("%d samples after 3 proxied requests, want 3", p)
	}
	if ch := step(); !ch.Overloaded || !strings.Contains(ch.Reason, "latency") || ch.Samples != 3 || factor() != 0.5 {
		t.Fatalf("after a slow upstream: %s (samples %d), factor %v, want 0.5", ch, ch.Samples, factor())
	}

	// Failing: the upstream's 500s are errors, at the latency they came at.
	parallel(t, srv.URL+"/api/fail", 5, http.StatusInternalServerError)
	if ch := step(); !ch.Overloaded || !strings.Contains(ch.Reason, "error ratio 100%") || ch.Errors != 5 || factor() != 0.25 {
		t.Fatalf("after an upstream answering 500: %s (errors %d), factor %v, want 0.25", ch, ch.Errors, factor())
	}

	// Healthy and fast: back up by increase.
	parallel(t, srv.URL+"/api/fast", 5, http.StatusOK)
	if ch := step(); ch.Overloaded || ch.Samples != 5 || ch.Errors != 0 || factor() != 0.5 {
		t.Fatalf("after a healthy upstream: %s, factor %v, want 0.5", ch, factor())
	}

	// An upstream that cannot be reached: the gateway's 502s are errors.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	deadSrv := front(t, e, dead)
	parallel(t, deadSrv.URL+"/api/x", 4, http.StatusBadGateway)
	if ch := step(); !ch.Overloaded || ch.Errors != 4 || factor() != 0.25 {
		t.Fatalf("after an unreachable upstream: %s (errors %d), factor %v, want 0.25", ch, ch.Errors, factor())
	}

	// Nothing reaches backend's controller from other routes, unrouted
	// requests, or refusals.
	parallel(t, srv.URL+"/plain", 3, http.StatusOK)
	parallel(t, srv.URL+"/elsewhere", 3, http.StatusOK)
	if p := pending(); p != 0 {
		t.Fatalf("%d samples from requests backend did not decide, want 0", p)
	}
	do(t, "GET", srv.URL+"/tight")
	if p := adaptiveState(t, e, "tight").Pending; p != 1 {
		t.Fatalf("tight: %d samples after one admitted request, want 1", p)
	}
	for range 3 {
		if r := do(t, "GET", srv.URL+"/tight"); r.status != http.StatusTooManyRequests {
			t.Fatalf("tight: %d, want 429", r.status)
		}
	}
	if p := adaptiveState(t, e, "tight").Pending; p != 1 {
		t.Fatalf("tight: %d samples after refusals, want still 1", p)
	}

	// Off: nothing fed.
	off := front(t, e, up.URL, gateway.WithAdaptiveSamples(false))
	parallel(t, off.URL+"/api/slow", 3, http.StatusOK)
	if p := pending(); p != 0 {
		t.Fatalf("WithAdaptiveSamples(false): %d samples, want 0", p)
	}
}

// stubUpstream answers every request 200 without a network, so that the
// gateway's own allocations can be counted.
type stubUpstream struct{}

func (stubUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Body: http.NoBody, Request: r}, nil
}

type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}

// Feeding samples costs no allocation: a route whose rules have no
// adaptive block, in a domain that has none or one that has some, and a
// route whose adaptive rule decides its requests allocate as many times
// per request with samples on as with them off.
func TestAdaptiveSamplesAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts do not hold under the race detector (sync.Pool)")
	}
	noAdaptive := adaptiveConfig[:strings.Index(adaptiveConfig, "descriptors:\n  - key")] + `descriptors:
  - key: generic_key
    rate_limit: {name: any, unit: minute, requests_per_unit: 1000000}
`
	allocs := func(cfg, path string, on bool) float64 {
		e := engine(t, cfg, newClock(t0))
		gw, err := gateway.New(e.Config(), e, "http://upstream.invalid", gateway.WithTransport(stubUpstream{}),
			gateway.WithAdaptiveSamples(on), gateway.WithClientTimeout(0), gateway.WithUpstreamTimeout(0))
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest("GET", path, nil)
		w := &discardWriter{h: http.Header{}}
		gw.ServeHTTP(w, r)
		return testing.AllocsPerRun(200, func() { clear(w.h); gw.ServeHTTP(w, r) })
	}
	for _, c := range []struct{ name, cfg, path string }{
		{"no adaptive rule in the domain", noAdaptive, "/plain"},
		{"a route without adaptive rules", adaptiveConfig, "/plain"},
		{"a route with an adaptive rule", adaptiveConfig, "/api/x"},
	} {
		on, off := allocs(c.cfg, c.path, true), allocs(c.cfg, c.path, false)
		t.Logf("%s: %v allocations per request with samples on, %v off", c.name, on, off)
		if on != off {
			t.Errorf("%s: %v allocations per request with samples on, %v off", c.name, on, off)
		}
	}
}
