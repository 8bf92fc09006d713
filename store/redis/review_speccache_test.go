package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// TestSpecCacheBounded: limits compiled per call (policy.Engine compiles
// one per lease it releases or renews, limiter's SetParams one per call,
// every configuration reload one per rule) do not pile up in the store:
// its caches of their script arguments, keyed by the limit, kept every
// limit ever used, and its arguments, for the life of the store.
func TestSpecCacheBounded(t *testing.T) {
	s := openT(t, redisURL(t))
	prefix := runKey() + ":spec:"
	const perCall, calls = 1024, 20 // 20480 limits, more than specCacheMax
	reqs := make([]store.Request, perCall)
	out := make([]algo.Decision, perCall)
	for c := range calls {
		for i := range reqs {
			l, err := algo.Compile(algo.Params{Algorithm: algo.Concurrency, Limit: 10, LeaseTTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			reqs[i] = store.Request{Key: fmt.Sprintf("%s%d", prefix, i), Limit: l, Cost: 1, Lease: uint64(c*perCall + i + 1)}
		}
		// A release, as policy.Engine.ReleaseLeases sends with the limits
		// it compiled from the lease tokens, then a peek.
		if err := s.Release(context.Background(), reqs); err != nil {
			t.Fatal(err)
		}
		if err := s.Peek(context.Background(), reqs, out); err != nil {
			t.Fatal(err)
		}
		for i := range reqs {
			l, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			_ = s.loneSpecOf(l) // a lone take's
			if out[i].Remaining != 9 {
				t.Fatalf("peek %d of %s = %+v, want 9 remaining", c, reqs[i].Key, out[i])
			}
		}
	}
	count := func(m interface{ Range(func(k, v any) bool) }) int {
		n := 0
		m.Range(func(k, v any) bool { n++; return true })
		return n
	}
	if n := count(&s.specs.m); n > specCacheMax {
		t.Errorf("%d limits used once each (%d calls of %d): %d kept in the store's spec cache, want at most %d", calls*perCall, calls, perCall, n, specCacheMax)
	}
	if n := count(&s.lones.m); n > specCacheMax {
		t.Errorf("%d limits used once each: %d kept in the store's lone spec cache, want at most %d", calls*perCall, n, specCacheMax)
	}
}
