package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// TestDoneContextIsCallers: every call given a context that is already
// done (cancelled, or past its deadline) returns the context's error, not
// store.ErrUnavailable: the caller gave up, the store is not out, and
// store/resilient must neither answer with its failure policy nor count it
// against the store. Take and Peek did so; Refund, Release and Renew sent
// nothing but reported an outage. Nothing is sent: the lease a Release
// with a done context names is still held.
func TestDoneContextIsCallers(t *testing.T) {
	s := openT(t, redisURL(t))
	l, err := algo.Compile(smallParams(algo.Concurrency))
	if err != nil {
		t.Fatal(err)
	}
	key := runKey() + ":done"
	out := make([]algo.Decision, 1)
	if _, err := s.Take(context.Background(), []store.Request{{Key: key, Limit: l, Cost: 1, Lease: 3}}, out); err != nil {
		t.Fatalf("Take: %v", err)
	}
	if !out[0].Allowed {
		t.Fatalf("Take = %+v, want allowed", out[0])
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	req := []store.Request{{Key: key, Limit: l, Cost: 1, Lease: 3}}
	for _, c := range []struct {
		name string
		ctx  context.Context
		want error
	}{{"a cancelled", cancelled, context.Canceled}, {"an expired", expired, context.DeadlineExceeded}} {
		calls := []struct {
			op  string
			run func(ctx context.Context) error
		}{
			{"take", func(ctx context.Context) error { _, err := s.Take(ctx, req, out); return err }},
			{"peek", func(ctx context.Context) error { return s.Peek(ctx, req, out) }},
			{"refund", func(ctx context.Context) error { return s.Refund(ctx, req) }},
			{"release", func(ctx context.Context) error { return s.Release(ctx, req) }},
			{"renew", func(ctx context.Context) error { return s.Renew(ctx, req) }},
		}
		for _, call := range calls {
			err := call.run(c.ctx)
			if !errors.Is(err, c.want) || errors.Is(err, store.ErrUnavailable) {
				t.Errorf("%s with %s context: %v, want %v and not store.ErrUnavailable", call.op, c.name, err, c.want)
			}
		}
	}
	// The Releases were not sent: the lease is still held, so a Peek of
	// one more leaves 5-1-1 (4 had the lease been released).
	if err := s.Peek(context.Background(), []store.Request{{Key: key, Limit: l, Cost: 1}}, out); err != nil {
		t.Fatalf("Peek: %v", err)
	}
	if out[0].Remaining != 3 {
		t.Errorf("after Releases with done contexts, Peek remaining = %d, want 3 (the lease still held)", out[0].Remaining)
	}
}
