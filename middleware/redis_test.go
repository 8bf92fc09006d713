package middleware_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/middleware"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/redis"
)

// Two service instances, each with its own Engine and Redis connection, on
// one Redis: they share the budget and report the same state, because the
// values come from the stored decision (on Redis's clock), not from each
// host.
func TestInstancesAgreeOnRedis(t *testing.T) {
	addr := testserver.Redis(t)
	if addr == "" {
		return // skipped by testserver
	}
	cfg, err := policy.Parse("test.yaml", []byte(`
domain: web
descriptors:
  - key: remote_address
    rate_limit: {name: per-ip, unit: hour, requests_per_unit: 5}
`))
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("mwtest:%d:", time.Now().UnixNano())
	var urls []string
	for range 2 {
		st, err := redis.Open("redis://" + addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		e, err := policy.NewEngine(cfg, st, policy.WithKeyPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		m, err := middleware.New(e, "web", extractor(t, perIP))
		if err != nil {
			t.Fatal(err)
		}
		urls = append(urls, serve(t, m, ok).URL)
	}
	var resets []int
	for i, want := range []string{"4", "3", "2", "1", "0"} {
		r := get(t, urls[i%2])
		if r.status != 200 || r.h.Get("X-RateLimit-Remaining") != want {
			t.Fatalf("request %d on instance %d: %d remaining %q, want 200 remaining %s", i, i%2, r.status, r.h.Get("X-RateLimit-Remaining"), want)
		}
		if r.h.Get("RateLimit-Policy") != `"per-ip";q=5;w=3600` {
			t.Errorf("instance %d: RateLimit-Policy %q", i%2, r.h.Get("RateLimit-Policy"))
		}
		reset, _ := strconv.Atoi(r.h.Get("X-RateLimit-Reset"))
		resets = append(resets, reset)
	}
	for _, u := range urls {
		if r := get(t, u); r.status != 429 {
			t.Errorf("%s over the shared budget: %d", u, r.status)
		}
	}
	// One window end on Redis's clock: the instances' resets differ only by
	// the time between the requests (well under a second) and rounding.
	for i := 1; i < len(resets); i++ {
		if d := resets[i-1] - resets[i]; d < 0 || d > 1 {
			t.Errorf("X-RateLimit-Reset went %v: instances disagree on the window's end", resets)
		}
	}
}
