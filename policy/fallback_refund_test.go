package policy

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/resilient"
)

// A request the failure policy admitted while the store was down charged
// nothing there: refunding it once the store is back must not give the
// store units other requests spent. (Its Response recorded the units, and
// the refund took them back from the window: a 3 per minute limit admitted
// a 4th request.)
func TestRefundOfAFallbackAdmissionGivesNothingBack(t *testing.T) {
	for _, pol := range []resilient.Policy{resilient.FailOpen, resilient.FailLocal} {
		t.Run(pol.String(), func(t *testing.T) {
			srv := testserver.NewRedis(t)
			if srv == nil {
				t.Skip("no redis-server")
			}
			inner, err := redis.Open("redis://"+srv.Addr, redis.WithTimeout(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer inner.Close()
			st, err := resilient.New(inner, resilient.WithPolicy(pol), resilient.WithTimeout(time.Second),
				resilient.WithBreaker(1000, time.Second), resilient.WithOverLimitCache(0))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			e, err := NewEngine(mustParse(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 3}\n"), st)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			r := req("d", ent("k", "v"))
			for i := range 3 {
				if resp, err := e.Decide(ctx, r); err != nil || resp.Code != CodeOK {
					t.Fatalf("request %d: %v %v", i+1, resp.Code, err)
				}
			}
			if err := srv.Pause(); err != nil { // no answer: the failure policy answers
				t.Fatal(err)
			}
			fallback, err := e.Decide(ctx, r)
			if err != nil || fallback.Code != CodeOK {
				t.Fatalf("the failure policy's answer: %v %v, want OK", fallback.Code, err)
			}
			if err := srv.Resume(); err != nil {
				t.Fatal(err)
			}
			// The store answers again before the refund (no decision below
			// is the failure policy's).
			deadline := time.Now().Add(10 * time.Second)
			for inner.Client().Do(ctx, inner.Client().B().Ping().Build()).Error() != nil {
				if time.Now().After(deadline) {
					t.Fatal("the resumed Redis does not answer")
				}
				time.Sleep(20 * time.Millisecond) // a real process resuming
			}
			if err := e.Refund(ctx, fallback); err != nil {
				t.Fatal(err)
			}
			if resp, err := e.Decide(ctx, r); err != nil || resp.Code != CodeOverLimit {
				t.Fatalf("after refunding the fallback's admission: %v %v, want OVER_LIMIT (the store's 3 units are spent)", resp.Code, err)
			}
		})
	}
}
