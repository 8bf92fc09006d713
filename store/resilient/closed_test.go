package resilient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/resilient"
)

// TestClosedWithOpenBreaker: a Store closed while its breaker is open
// answers every method with store.ErrClosed, as the store contract says,
// rather than a failure policy's answer.
func TestClosedWithOpenBreaker(t *testing.T) {
	for _, p := range []resilient.Policy{resilient.FailOpen, resilient.FailClosed, resilient.FailLocal, resilient.FailUnavailable} {
		t.Run(p.String(), func(t *testing.T) {
			srv, ss := sharedRedis(t, 1, resilient.WithPolicy(p), resilient.WithBreaker(1, time.Hour))
			s := ss[0]
			l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Hour})
			reqs := []store.Request{{Key: "closed-" + t.Name(), Limit: l, Cost: 1}}
			out := make([]algo.Decision, 1)
			ctx := context.Background()
			if err := srv.Kill(); err != nil {
				t.Fatal(err)
			}
			s.Take(ctx, reqs, out)
			if s.Breaker() != resilient.Open {
				t.Fatalf("breaker %v after a failure, want open", s.Breaker())
			}
			if err := s.Close(); err != nil {
				t.Logf("Close: %v", err)
			}
			if res, err := s.Take(ctx, reqs, out); !errors.Is(err, store.ErrClosed) {
				t.Errorf("Take after Close = %+v, %+v, %v; want store.ErrClosed", res, out[0], err)
			}
			if err := s.Peek(ctx, reqs, out); !errors.Is(err, store.ErrClosed) {
				t.Errorf("Peek after Close: %v; want store.ErrClosed", err)
			}
			if err := s.Refund(ctx, reqs); !errors.Is(err, store.ErrClosed) {
				t.Errorf("Refund after Close: %v; want store.ErrClosed", err)
			}
			if err := s.Release(ctx, reqs); !errors.Is(err, store.ErrClosed) {
				t.Errorf("Release after Close: %v; want store.ErrClosed", err)
			}
			if err := s.Reset(ctx, reqs[0].Key); !errors.Is(err, store.ErrClosed) {
				t.Errorf("Reset after Close: %v; want store.ErrClosed", err)
			}
			if err := s.Ping(ctx); !errors.Is(err, store.ErrClosed) {
				t.Errorf("Ping after Close: %v; want store.ErrClosed", err)
			}
		})
	}
}
