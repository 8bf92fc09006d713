package resilient_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/resilient"
)

// takeMany takes each req as one Take on s and returns its result and
// decisions.
func takeMany(t *testing.T, s store.Store, reqs ...store.Request) (store.Result, []algo.Decision) {
	t.Helper()
	out := make([]algo.Decision, len(reqs))
	res, err := s.Take(context.Background(), reqs, out)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	return res, out
}

// TestCachedRefusalReportsOthersTrueState: a Take of two keys, one over
// its limit (1 per minute, spent) and one with 94 of 100 remaining, is
// refused by a real Redis; repeated while the refusal is cached, it goes
// to the store again and reports the other key's true 94 remaining (the
// cache answered 1, the cost, before), and charges nothing. The over-limit
// key asked alone is still refused from the cache without a store call.
func TestCachedRefusalReportsOthersTrueState(t *testing.T) {
	addr := testserver.Redis(t)
	if addr == "" {
		t.Skip("no redis-server")
	}
	c := newClock()
	st, err := redis.Open("redis://"+addr, redis.WithTestClock(c.Now), redis.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	inner := &counting{Store: st}
	hits := 0
	s, err := resilient.New(inner, resilient.WithClock(c.Now), resilient.WithTimeout(2*time.Second),
		resilient.WithHooks(resilient.Hooks{CacheHit: func() { hits++ }}))
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	defer s.Close()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	over := store.Request{Key: "fg:test:olcache:" + run + ":over",
		Limit: compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Minute}), Cost: 1}
	other := store.Request{Key: "fg:test:olcache:" + run + ":to_number",
		Limit: compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Period: time.Minute}), Cost: 1}
	for i := range 6 {
		if res, _ := takeMany(t, s, other); !res.Allowed {
			t.Fatalf("take %d of %s refused", i+1, other.Key)
		}
	}
	if res, _ := takeMany(t, s, over); !res.Allowed {
		t.Fatalf("first take of %s refused", over.Key)
	}
	for i := range 4 {
		c.Advance(100 * time.Millisecond)
		before := inner.takes.Load()
		res, out := takeMany(t, s, over, other)
		if res.Allowed || res.Fallback {
			t.Fatalf("Take %d of both = %+v, want refused by the store", i+1, res)
		}
		if out[0].Allowed || out[0].Remaining != 0 || out[0].RetryAfter <= 0 {
			t.Fatalf("Take %d of both: over = %+v, want refused with 0 remaining", i+1, out[0])
		}
		want := algo.Decision{Allowed: true, Limit: 100, Remaining: 94, ResetAfter: out[1].ResetAfter}
		if out[1] != want || out[1].ResetAfter <= 0 {
			t.Fatalf("Take %d of both: other = %+v, want %+v (its true state, nothing charged)", i+1, out[1], want)
		}
		if got := inner.takes.Load() - before; got != 1 {
			t.Fatalf("Take %d of both made %d store calls, want 1", i+1, got)
		}
	}
	if hits != 0 {
		t.Fatalf("%d cache hits for the two-key takes, want 0", hits)
	}
	before := inner.takes.Load()
	res, out := takeMany(t, s, over)
	if res.Allowed || out[0].Allowed || out[0].Remaining != 0 {
		t.Fatalf("Take of %s alone = %+v %+v, want refused", over.Key, res, out[0])
	}
	if inner.takes.Load() != before || hits != 1 {
		t.Fatalf("Take of %s alone: %d store calls, %d cache hits; want 0 and 1", over.Key, inner.takes.Load()-before, hits)
	}
	if _, out := takeMany(t, s, other); out[0].Remaining != 93 {
		t.Fatalf("Take of %s after the refusals: %d remaining, want 93 (the refusals charged nothing)", other.Key, out[0].Remaining)
	}
}

// TestCachedRefusalHoldsWhileStoreDown: with the store down, a Take of
// two keys, one of which the cache holds as over its limit, is refused as
// the store would refuse it, under FailOpen and FailLocal alike (which
// would admit it): the cached key reports its cached refusal, the other
// the policy's state of it with nothing charged.
func TestCachedRefusalHoldsWhileStoreDown(t *testing.T) {
	for _, policy := range []resilient.Policy{resilient.FailOpen, resilient.FailLocal} {
		t.Run(policy.String(), func(t *testing.T) {
			srv := testserver.NewRedis(t)
			if srv == nil {
				t.Skip("no redis-server")
			}
			c := newClock()
			inner, err := redis.Open("redis://"+srv.Addr, redis.WithTestClock(c.Now), redis.WithTimeout(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			s, err := resilient.New(inner, resilient.WithClock(c.Now), resilient.WithPolicy(policy),
				resilient.WithBreaker(1, time.Hour), resilient.WithTimeout(time.Second),
				resilient.WithOverLimitCacheTTL(time.Hour))
			if err != nil {
				inner.Close()
				t.Fatal(err)
			}
			defer s.Close()
			over := store.Request{Key: "fg:over",
				Limit: compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Minute}), Cost: 1}
			other := store.Request{Key: "fg:to_number",
				Limit: compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Period: time.Minute}), Cost: 1}
			takeMany(t, s, over)
			if res, _ := takeMany(t, s, over, other); res.Allowed || res.Fallback {
				t.Fatalf("Take of both = %+v, want refused by the store", res)
			}
			if err := srv.Stop(); err != nil {
				t.Fatal(err)
			}
			c.Advance(10 * time.Second)
			for i := range 2 { // the first call fails on the store, the second finds the breaker open
				res, out := takeMany(t, s, over, other)
				if res.Allowed || !res.Fallback {
					t.Fatalf("Take %d of both with the store down = %+v, want refused, Fallback", i+1, res)
				}
				if out[0].Allowed || out[0].RetryAfter != 50*time.Second {
					t.Fatalf("Take %d of both: over = %+v, want the cached refusal, retry 50s", i+1, out[0])
				}
				if want := (algo.Decision{Allowed: true, Limit: 100, Remaining: 100}); out[1] != want {
					t.Fatalf("Take %d of both: other = %+v, want %+v", i+1, out[1], want)
				}
			}
			res, out := takeMany(t, s, other)
			if !res.Allowed || !res.Fallback || out[0].Remaining != 99 {
				t.Fatalf("Take of %s alone with the store down = %+v %+v, want admitted by %v with 99 remaining",
					other.Key, res, out[0], policy)
			}
		})
	}
}

// TestAdmittedTakeDropsCachedRefusal: instance A caches a refusal of a key
// (2 per minute, spent); instance B resets it on the shared Redis. A's
// next Take of that key with another is not answered from the cache (the
// other is not cached) and the store admits it: A then forgets the
// refusal, so the key asked alone is decided by the store and admitted,
// not refused from the cache until its TTL.
func TestAdmittedTakeDropsCachedRefusal(t *testing.T) {
	addr := testserver.Redis(t)
	if addr == "" {
		t.Skip("no redis-server")
	}
	c := newClock()
	open := func() *resilient.Store {
		inner, err := redis.Open("redis://"+addr, redis.WithTestClock(c.Now), redis.WithTimeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		s, err := resilient.New(inner, resilient.WithClock(c.Now), resilient.WithTimeout(2*time.Second),
			resilient.WithOverLimitCacheTTL(time.Hour))
		if err != nil {
			inner.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	over := store.Request{Key: "fg:test:olcache:" + run + ":over",
		Limit: compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 2, Period: time.Minute}), Cost: 1}
	other := store.Request{Key: "fg:test:olcache:" + run + ":other",
		Limit: compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Period: time.Minute}), Cost: 1}
	takeMany(t, a, over)
	takeMany(t, a, over)
	if res, _ := takeMany(t, a, over); res.Allowed || a.CachedKeys() != 1 {
		t.Fatalf("third take of %s = %+v, %d keys cached; want refused and cached", over.Key, res, a.CachedKeys())
	}
	if err := b.Reset(context.Background(), over.Key); err != nil {
		t.Fatal(err)
	}
	if res, out := takeMany(t, a, over, other); !res.Allowed || out[0].Remaining != 1 {
		t.Fatalf("Take of both after B's reset = %+v %+v, want admitted by the store, 1 remaining", res, out)
	}
	if a.CachedKeys() != 0 {
		t.Fatalf("%d keys cached after the store admitted the key, want 0", a.CachedKeys())
	}
	if res, out := takeMany(t, a, over); !res.Allowed || out[0].Remaining != 0 {
		t.Fatalf("Take of %s alone = %+v %+v, want admitted by the store, 0 remaining", over.Key, res, out[0])
	}
}
