package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// soakRules are the two valid configurations the churn alternates: a
// renamed adaptive rule and new limits each time, as an operator's edits.
func soakRules(i int) string {
	return fmt.Sprintf(`domain: api
descriptors:
  - key: remote_address
    rate_limit: {name: per-ip, algorithm: token_bucket, unit: second, requests_per_unit: %d, burst: 40}
  - key: svc
    rate_limit:
      name: adaptive-%d
      unit: second
      requests_per_unit: 2000
      adaptive: {min: 0.2, max: 1, error_ratio: 0.05}
  - key: tenant
    rate_limit: {name: per-tenant, unit: second, requests_per_unit: 50, strategy: wait, max_wait: 50ms}
`, 20+i%7, i%2)
}

// TestSoakChurnReturnsToBaseline is the soak of the server under churn,
// bounded: 40 hot reloads (valid and invalid in turn), runtime overrides
// and rate scales set and removed, resets and decisions on keys never seen
// before, request-carried limits never seen before, and client connections
// opened and abandoned (a header or a body that never ends, a gRPC stream
// whose message never comes). When the churn is over, the goroutines come
// back to what they were (a reload, an override or an abandoned
// connection that kept one would show 40 of them), the metric series to
// their number, and the configuration in force is the last valid one.
func TestSoakChurnReturnsToBaseline(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "api.yaml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(file+".tmp", []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".tmp", file); err != nil {
			t.Fatal(err)
		}
	}
	write(soakRules(0))
	out, _, stop := startServe(t, "--config", dir, "--reload-interval", "100ms")
	defer stop()
	httpAddr, grpcAddr, admin := serveAddrs(t, out.String())
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	do := func(method, url, body string) int {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	metrics := func() string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+admin+"/metrics", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	// series returns the names and labels of m's series.
	series := func(m string) map[string]bool {
		out := map[string]bool{}
		for line := range strings.Lines(m) {
			if !strings.HasPrefix(line, "#") {
				out[strings.Fields(line)[0]] = true
			}
		}
		return out
	}
	reloads := func() int {
		n := 0
		for line := range strings.Lines(metrics()) {
			if strings.HasPrefix(line, "floodgate_config_reloads_total{") {
				f := strings.Fields(line)
				v, _ := strconv.ParseFloat(f[len(f)-1], 64)
				n += int(v)
			}
		}
		return n
	}
	// One round of everything the churn does, so that every series it
	// brings (each transport, status, rule, the request-carried limits'
	// rule) exists before the baseline.
	round := func(i int) {
		t.Helper()
		v1 := fmt.Sprintf(`{"domain":"api","descriptors":[{"entries":[{"key":"remote_address","value":"soak-%d"}]},{"entries":[{"key":"svc","value":"s"}]},{"entries":[{"key":"tenant","value":"t%d"}]}]}`, i, i%3)
		if c := do(http.MethodPost, "http://"+httpAddr+"/v1/decide", v1); c != http.StatusOK {
			t.Fatalf("round %d: /v1/decide %d", i, c)
		}
		js := fmt.Sprintf(`{"domain":"api","descriptors":[{"entries":[{"key":"remote_address","value":"rl-%d"}],"limit":{"requests_per_unit":%d,"unit":"SECOND"}}]}`, i, 1000+i)
		if c := do(http.MethodPost, "http://"+httpAddr+"/json", js); c != http.StatusOK {
			t.Fatalf("round %d: /json %d", i, c)
		}
		base := "http://" + admin + "/admin/api/"
		for _, r := range []struct {
			method, path, body string
			want               int
		}{
			{http.MethodPut, "overrides/api/per-ip", fmt.Sprintf(`{"requests_per_unit":%d,"period":"minute"}`, 5+i%7), http.StatusOK},
			{http.MethodPut, "scales/api/per-tenant", `{"factor":0.5,"reason":"soak"}`, http.StatusOK},
			{http.MethodPost, "reset", fmt.Sprintf(`{"domain":"api","descriptors":[{"entries":[{"key":"remote_address","value":"reset-%d"}]}]}`, i), http.StatusOK},
			{http.MethodPost, "inspect", v1, http.StatusOK},
			{http.MethodDelete, "overrides/api/per-ip", "", http.StatusNoContent},
			{http.MethodDelete, "scales/api/per-tenant", "", http.StatusNoContent},
			{http.MethodGet, "stats", "", http.StatusOK},
		} {
			if c := do(r.method, base+r.path, r.body); c != r.want {
				t.Fatalf("round %d: %s /admin/api/%s: %d, want %d", i, r.method, r.path, c, r.want)
			}
		}
	}
	// abandon opens connections that never finish a request, and a gRPC
	// connection with streams whose message never comes, then drops them.
	abandon := func() {
		t.Helper()
		var conns []net.Conn
		for range 10 {
			for _, addr := range []string{httpAddr, admin} {
				for _, start := range []string{
					"",                                    // nothing at all
					"POST /v1/decide HTTP/1.1\r\nHost: x", // a header that never ends
					"POST /json HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 500\r\n\r\n{\"domain\":", // a body that never ends
				} {
					c, err := net.Dial("tcp", addr)
					if err != nil {
						t.Fatal(err)
					}
					conns = append(conns, c)
					if start != "" {
						if _, err := io.WriteString(c, start); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
		}
		cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		for range 20 {
			if _, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true},
				"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(100 * time.Millisecond) // let the server take them up: a real process's timing
		cancel()
		cc.Close()
		for _, c := range conns {
			c.Close()
		}
	}
	round(-1)
	abandon()
	before := reloads()
	write(soakRules(1))
	for deadline := time.Now().Add(10 * time.Second); reloads() <= before; {
		if time.Now().After(deadline) {
			t.Fatal("the first reload not attempted within 10s")
		}
		time.Sleep(20 * time.Millisecond) // waiting for the watcher
	}
	// settle waits until the goroutines are at most want, and returns
	// their number then, or at the deadline.
	settle := func(want int) int {
		deadline := time.Now().Add(15 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= want || time.Now().After(deadline) {
				return n
			}
			time.Sleep(50 * time.Millisecond) // connections closing: a real process's timing
		}
	}
	round(-2) // the series of the rules now in force
	// The baseline: the goroutines once their number stops falling.
	baseG := runtime.NumGoroutine()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond) // connections closing: a real process's timing
		n := runtime.NumGoroutine()
		if n >= baseG {
			break
		}
		baseG = n
	}
	baseSeries := series(metrics())

	const reloadsN = 40
	for i := range reloadsN {
		before = reloads()
		if i%2 == 0 {
			write(soakRules(i) + fmt.Sprintf("  - key: broken\n    rate_limit: {unit: second, requests_per_unit: -%d}\n", i+1))
		} else {
			write(soakRules(i + 2))
		}
		for deadline := time.Now().Add(10 * time.Second); reloads() <= before; {
			if time.Now().After(deadline) {
				t.Fatalf("reload %d: not attempted within 10s", i)
			}
			time.Sleep(20 * time.Millisecond) // waiting for the watcher
		}
		round(i)
		if i%10 == 0 {
			abandon()
		}
	}
	if n := settle(baseG + 3); n > baseG+3 {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines after %d reloads and the churn, %d before:\n%s", n, reloadsN, baseG, buf[:runtime.Stack(buf, true)])
	}
	m := metrics()
	after := series(m)
	for k := range after {
		if !baseSeries[k] {
			t.Errorf("a metric series after the churn that was not there before: %s", k)
		}
	}
	if len(after) != len(baseSeries) {
		t.Errorf("%d metric series after the churn, %d before", len(after), len(baseSeries))
	}
	if !strings.Contains(m, "floodgate_config_last_reload_successful 1") {
		t.Errorf("the last reload, of a valid file, did not succeed")
	}
	resp, err := client.Get("http://" + admin + "/admin/api/config")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	last := fmt.Sprintf(`"limit":"token_bucket %d/1s capacity 40"`, 20+(reloadsN+1)%7)
	if !strings.Contains(string(b), last) || !strings.Contains(string(b), "adaptive-1") {
		t.Errorf("the configuration in force is not the last one written (per-ip %s, adaptive-1):\n%s", last, b)
	}
}
