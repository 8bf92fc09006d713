package headers

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memory"
)

// TestFieldsHonouredOverRandomRules: over random rules (every algorithm,
// units from a second to a year, bursts, shadow mode) decided by the
// Engine on a fake clock, at random costs and instants, every response's
// fields parse strictly (sf_test.go), and what they promise a client
// holds: after a refusal with Retry-After, the same request, sent
// Retry-After seconds later, passes (the draft's §6 and RFC 9110's
// delay-seconds, rounded up); a RateLimit member with r >= 1 of the only
// limit admits a request of cost 1 at once; and a refusing limit's t
// never points after Retry-After (draft -10 §6).
func TestFieldsHonouredOverRandomRules(t *testing.T) {
	algos := []string{"fixed_window", "sliding_window", "sliding_log", "token_bucket", "gcra", "shaper", "smooth_bursty", "smooth_warmup", "concurrency"}
	units := []string{"second", "minute", "hour", "day"}
	rounds := 300
	if testing.Short() {
		rounds = 40
	}
	retried, atOnce := 0, 0 // how often each promise was put to the test
	for round := range rounds {
		r := rand.New(rand.NewPCG(uint64(round), 7))
		alg, unit := algos[r.IntN(len(algos))], units[r.IntN(len(units))]
		limit := 1 + r.IntN(6)
		extra := ""
		switch alg {
		case "fixed_window":
			unit = append(units, "month", "year")[r.IntN(len(units)+2)]
		case "token_bucket", "gcra":
			extra = fmt.Sprintf(", burst: %d", 1+r.IntN(8))
		case "shaper":
			extra = fmt.Sprintf(", queue_size: %d", r.IntN(3))
		case "smooth_warmup":
			extra = ", warmup_period: 10s"
		}
		shadow := r.IntN(6) == 0
		cfg := fmt.Sprintf("domain: h\ndescriptors:\n  - {key: k, shadow_mode: %v, rate_limit: {name: %q, algorithm: %s, unit: %s, requests_per_unit: %d%s}}\n",
			shadow, "Rule "+strconv.Itoa(round), alg, unit, limit, extra)
		now := time.Date(2026, time.Month(1+r.IntN(12)), 1+r.IntN(28), r.IntN(24), r.IntN(60), r.IntN(60), r.IntN(1e9), time.UTC)
		clock := func() time.Time { return now }
		st, err := memory.New(memory.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		c, err := policy.Parse("h.yaml", []byte(cfg))
		if err != nil {
			t.Fatalf("%s: %v", cfg, err)
		}
		e, err := policy.NewEngine(c, st, policy.WithClock(clock))
		if err != nil {
			t.Fatalf("%s: %v", cfg, err)
		}
		w := NewWriter(Options{})
		decide := func(cost int64) (policy.Response, http.Header) {
			t.Helper()
			resp, err := e.Decide(context.Background(), policy.Request{Domain: "h", Hits: cost,
				Descriptors: []policy.Descriptor{{Entries: []policy.Entry{{Key: "k", Value: "v"}}}}})
			if err != nil {
				t.Fatalf("%s: %v", cfg, err)
			}
			h := http.Header{}
			w.WriteStatuses(h, resp.Statuses)
			return resp, h
		}
		for step := range 12 {
			cost := int64(1 + r.IntN(2))
			resp, h := decide(cost)
			where := fmt.Sprintf("%s  at %s, step %d, cost %d: %v", cfg, now.Format(time.RFC3339Nano), step, cost, h)
			if _, err := checkPolicyField(h.Get("RateLimit-Policy")); err != nil {
				t.Fatalf("%s\nRateLimit-Policy: %v", where, err)
			}
			rl, err := checkRateLimitField(h.Get("RateLimit"))
			if err != nil {
				t.Fatalf("%s\nRateLimit: %v", where, err)
			}
			if ra := h.Get("Retry-After"); ra != "" {
				secs, err := strconv.ParseInt(ra, 10, 64)
				if err != nil || secs < 1 {
					t.Fatalf("%s\nRetry-After %q: want delay-seconds >= 1", where, ra)
				}
				if tv, ok := rl[0].param("t"); ok && tv.(int64) > secs {
					t.Fatalf("%s\nt=%d after Retry-After %d", where, tv, secs)
				}
				if resp.Code == policy.CodeOK {
					t.Fatalf("%s\nRetry-After on an admitted request", where)
				}
				retried++
				now = now.Add(time.Duration(secs) * time.Second)
				if again, h2 := decide(cost); again.Code != policy.CodeOK {
					t.Fatalf("%s\nrefused again %ds later, as Retry-After said to wait: %v", where, secs, h2)
				}
			} else if rv, _ := rl[0].param("r"); resp.Code == policy.CodeOK && !shadow && alg != "concurrency" && rv.(int64) >= 1 {
				atOnce++
				if again, h2 := decide(1); again.Code != policy.CodeOK {
					t.Fatalf("%s\nr=%d, yet a request of cost 1 at once was refused: %v", where, rv, h2)
				}
			}
			now = now.Add(time.Duration(r.Int64N(int64(3 * time.Second))))
		}
		st.Close()
	}
	if retried == 0 || atOnce == 0 {
		t.Errorf("%d retries after Retry-After, %d requests on r >= 1: the rules tested no promise", retried, atOnce)
	}
}
