package middleware_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/limiter"
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

// Instances whose own clocks disagree (the second runs 45 minutes ahead)
// report the same reset for the same key, for every algorithm a store
// decides: t, X-RateLimit-Reset and Retry-After come from the time stored
// on Redis (its TIME), not from each host's clock. The key is spent on
// the first instance, then refused on both.
func TestInstancesAgreeOnResetPerAlgorithm(t *testing.T) {
	addr := testserver.Redis(t)
	if addr == "" {
		return // skipped by testserver
	}
	rules := map[string]string{
		"fixed_window":   `unit: hour, requests_per_unit: 3`,
		"calendar_month": `unit: month, requests_per_unit: 3`,
		"sliding_window": `algorithm: sliding_window, unit: hour, requests_per_unit: 3`,
		"sliding_log":    `algorithm: sliding_log, unit: hour, requests_per_unit: 3`,
		"token_bucket":   `algorithm: token_bucket, unit: hour, requests_per_unit: 3`,
		"gcra":           `algorithm: gcra, unit: hour, requests_per_unit: 3`,
		"shaper":         `algorithm: shaper, unit: hour, requests_per_unit: 3`,
		"smooth_bursty":  `algorithm: smooth_bursty, unit: hour, requests_per_unit: 3`,
		"smooth_warmup":  `algorithm: smooth_warmup, unit: hour, requests_per_unit: 3, warmup_period: 1h`,
	}
	for name, rule := range rules {
		t.Run(name, func(t *testing.T) {
			cfg, err := policy.Parse("test.yaml", []byte("domain: web\ndescriptors:\n  - key: remote_address\n    rate_limit: {name: per-ip, "+rule+"}\n"))
			if err != nil {
				t.Fatal(err)
			}
			prefix := fmt.Sprintf("mwtest:%s:%d:", name, time.Now().UnixNano())
			var urls []string
			for _, skew := range []time.Duration{0, 45 * time.Minute} {
				st, err := redis.Open("redis://" + addr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st.Close() })
				clock := func() time.Time { return time.Now().Add(skew) }
				e, err := policy.NewEngine(cfg, st, policy.WithKeyPrefix(prefix), policy.WithClock(clock))
				if err != nil {
					t.Fatal(err)
				}
				m, err := middleware.New(e, "web", extractor(t, perIP))
				if err != nil {
					t.Fatal(err)
				}
				urls = append(urls, serve(t, m, ok).URL)
			}
			var r result
			for i := 0; i < 10; i++ {
				if r = get(t, urls[0]); r.status == 429 {
					break
				}
			}
			if r.status != 429 {
				t.Fatalf("first instance: %d after 10 requests, want 429", r.status)
			}
			other := get(t, urls[1])
			if other.status != 429 {
				t.Fatalf("second instance: %d, want 429 on the spent key", other.status)
			}
			for _, f := range []string{"X-RateLimit-Reset", "Retry-After"} {
				a, _ := strconv.Atoi(r.h.Get(f))
				b, _ := strconv.Atoi(other.h.Get(f))
				if a <= 0 || a-b > 1 || b-a > 1 {
					t.Errorf("%s: %d on the first instance, %d on the second (45 min ahead)", f, a, b)
				}
			}
			if r.h.Get("RateLimit-Policy") != other.h.Get("RateLimit-Policy") {
				t.Errorf("RateLimit-Policy %q and %q", r.h.Get("RateLimit-Policy"), other.h.Get("RateLimit-Policy"))
			}
		})
	}
}

// TestForLimiterOnRedis: two instances, each with its own Limiter of the
// same name on its own Redis connection, share one budget per client
// and report it alike: the decisions are the store's, on its clock.
func TestForLimiterOnRedis(t *testing.T) {
	addr := testserver.Redis(t)
	if addr == "" {
		return // skipped by testserver
	}
	name := fmt.Sprintf("mwtest-forlimiter-%d", time.Now().UnixNano())
	var urls []string
	for range 2 {
		st, err := redis.Open("redis://" + addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		lim, err := limiter.New(st, name, algo.Params{Algorithm: algo.TokenBucket, Limit: 4, Period: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		m, err := middleware.ForLimiter(lim, middleware.ClientIPKey())
		if err != nil {
			t.Fatal(err)
		}
		urls = append(urls, serve(t, m, ok).URL)
	}
	policyField := `"` + name + `";q=4;w=3600`
	for i, want := range []string{"3", "2", "1", "0"} {
		r := get(t, urls[i%2])
		if r.status != 200 || r.h.Get("X-RateLimit-Remaining") != want || r.h.Get("RateLimit-Policy") != policyField {
			t.Errorf("request %d on instance %d: %d remaining %q policy %q, want 200, %s, %s", i+1, i%2, r.status,
				r.h.Get("X-RateLimit-Remaining"), r.h.Get("RateLimit-Policy"), want, policyField)
		}
	}
	for i, u := range urls {
		if r := get(t, u); r.status != 429 || r.h.Get("Retry-After") == "" {
			t.Errorf("instance %d over the shared budget: %d, Retry-After %q", i, r.status, r.h.Get("Retry-After"))
		}
	}
}
