package redis

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
)

// TestRequestContextKeepsTheSyncPath: decisions under a context that can
// be cancelled but has no deadline, as a request handler's, leave the
// connection on rueidis's synchronous path. Under such a context rueidis
// would start its background writer and reader for the connection (two
// goroutines for good) and send every later call through them, a quarter
// more latency for a caller alone on the connection.
func TestRequestContextKeepsTheSyncPath(t *testing.T) {
	addr := testserver.Redis(t)
	if addr == "" {
		return
	}
	s := openT(t, "redis://"+addr)
	l, err := algo.Compile(algo.Params{Algorithm: algo.GCRA, Limit: 1000, Period: time.Second, Burst: 1000})
	if err != nil {
		t.Fatal(err)
	}
	reqs := []store.Request{{Key: runID + ":sync", Limit: l, Cost: 1}}
	out := make([]algo.Decision, 1)
	calls := func(ctx context.Context) {
		t.Helper()
		for range 3 {
			if _, err := s.Take(ctx, reqs, out); err != nil {
				t.Fatal(err)
			}
			if err := s.Peek(ctx, reqs, out); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.Inspect(ctx, reqs[0].Key); err != nil {
				t.Fatal(err)
			}
		}
	}
	calls(context.Background())
	before := settledGoroutines()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls(ctx)
	if after := settledGoroutines(); after > before {
		t.Fatalf("goroutines %d → %d after calls under a cancellable context: rueidis left its synchronous path", before, after)
	}
	// The context still counts before a call is sent.
	cancel()
	if _, err := s.Take(ctx, reqs, out); err == nil {
		t.Fatal("a take under a cancelled context succeeded")
	}
}

// settledGoroutines counts goroutines once short-lived ones have ended.
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for range 20 {
		time.Sleep(5 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m == n {
			return n
		}
		n = m
	}
	return n
}
