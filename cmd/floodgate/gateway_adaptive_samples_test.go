package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"
)

// TestServeGatewayFeedsAdaptiveRules: serve --upstream feeds an adaptive
// rule on a route the latencies of the requests it proxies: three
// requests to an upstream 300 ms slow over a 100 ms threshold bring the
// rule's factor down at the controller's next step (steps: several
// samples may fall in different intervals), seen on the admin API,
// with no sample posted to /v1/observe.
func TestServeGatewayFeedsAdaptiveRules(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond)
		w.Write([]byte("slow"))
	}))
	defer up.Close()
	dir, _ := writeConfig(t, `domain: edge
gateway:
  routes: [{name: api, path_prefix: /api, descriptors: [{entries: [{source: generic_key, value: api}]}]}]
descriptors:
  - key: generic_key
    value: api
    rate_limit:
      name: backend
      unit: minute
      requests_per_unit: 1000
      adaptive: {latency_threshold: 100ms, decrease: 0.5, min_samples: 1, interval: 200ms}
`)
	out, errb, stop := startServe(t, "--config", dir, "--reload-interval", "0", "--upstream", up.URL)
	defer stop()
	m := regexp.MustCompile(`gateway http (\S+) -> .* admin (\S+) `).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no addresses in serve's stdout %q", out.String())
	}
	type view struct {
		Adaptive []struct {
			Rule   string  `json:"rule"`
			Factor float64 `json:"factor"`
			Reason string  `json:"reason"` // why the factor in force is

		} `json:"adaptive"`
	}
	state := func() (float64, string) {
		resp, err := http.Get("http://" + m[2] + "/admin/api/adaptive")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v view
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || len(v.Adaptive) != 1 {
			t.Fatalf("/admin/api/adaptive: %d %+v %v", resp.StatusCode, v, err)
		}
		return v.Adaptive[0].Factor, v.Adaptive[0].Reason
	}
	if f, _ := state(); f != 1 {
		t.Fatalf("factor %v before any request, want 1", f)
	}
	// The slowest request as the client saw it: the gateway's sample of
	// the upstream's latency lies between the upstream's 300 ms and that.
	var slowest time.Duration
	for range 3 {
		begin := time.Now()
		resp, err := http.Get("http://" + m[1] + "/api/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		slowest = max(slowest, time.Since(begin))
		if resp.StatusCode != 200 {
			t.Fatalf("GET /api/x: %d", resp.StatusCode)
		}
	}
	// The controller steps every 200 ms on serve's ticker: wait for the
	// step that judges the samples (not for any rate math).
	deadline := time.Now().Add(10 * time.Second)
	for {
		f, reason := state()
		if f < 1 {
			// Each request may land in an interval of its own: one
			// overloaded step or more, each halving the factor. The
			// latency is shown to three digits (10 ms steps from 1 s).
			lat := regexp.MustCompile(`^p99 latency (\S+) > 100ms threshold$`).FindStringSubmatch(reason)
			var d time.Duration
			if lat != nil {
				d, _ = time.ParseDuration(lat[1])
			}
			if lat == nil || d < 300*time.Millisecond || d > slowest+10*time.Millisecond {
				t.Fatalf("factor %v (%q), want a p99 latency over the threshold from the upstream's 300 ms to the slowest request's %v", f, reason, slowest)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("factor still %v 10s after 3 slow requests (%s): the gateway fed no samples\n%s", f, reason, errb.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
