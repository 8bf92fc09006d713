package resilient_test

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store/resilient"
)

// TestCachedRefusalOfALargerCost: a key refused at cost 1 and asked
// again at a larger cost gets the store's RetryAfter for that cost, as
// the same steps on a bare memory store give it: the retry of cost 1
// (0.9 s) told a client to come back 4 s too early under a token bucket,
// GCRA or sliding window, and a cost no request can pass got a retry
// rather than Never. A fixed window's refusal lasts until its end whatever
// the cost, and is still answered from the cache.
func TestCachedRefusalOfALargerCost(t *testing.T) {
	for _, r := range []struct {
		kind      algo.Kind
		cost      int64
		fromCache bool
	}{
		{algo.TokenBucket, 5, false},
		{algo.GCRA, 5, false},
		{algo.SlidingWindow, 5, false},
		{algo.SlidingLog, 5, false},
		{algo.FixedWindow, 5, true},
		{algo.FixedWindow, 11, false},
		{algo.TokenBucket, 11, false},
	} {
		c := newClock()
		inner := &counting{Store: memStore(t, c)}
		s, err := resilient.New(inner, resilient.WithClock(c.Now))
		if err != nil {
			t.Fatal(err)
		}
		bare := memStore(t, c)
		l := compile(t, algo.Params{Algorithm: r.kind, Limit: 10, Period: 10 * time.Second})
		for range 11 {
			take(t, s, "k", l, 1)
			take(t, bare, "k", l, 1)
		}
		c.Advance(100 * time.Millisecond)
		calls := inner.takes.Load()
		got, want := take(t, s, "k", l, r.cost), take(t, bare, "k", l, r.cost)
		if got.Allowed || got.RetryAfter != want.RetryAfter {
			t.Errorf("%v: cost %d after cost 1 was refused: allowed %v, RetryAfter %v; the store says allowed %v, RetryAfter %v",
				r.kind, r.cost, got.Allowed, got.RetryAfter, want.Allowed, want.RetryAfter)
		}
		if cached := inner.takes.Load() == calls; cached != r.fromCache {
			t.Errorf("%v: cost %d answered from the cache: %v, want %v", r.kind, r.cost, cached, r.fromCache)
		}
		s.Close()
		bare.Close()
	}
}

// TestCachedRefusalOfALargerCostWhileDown: the store down, a key the
// cache holds as refused at cost 1 still refuses a larger cost under
// FailOpen (its RetryAfter a lower bound, the store not there to say).
func TestCachedRefusalOfALargerCostWhileDown(t *testing.T) {
	srv, ss := sharedRedis(t, 1, resilient.WithPolicy(resilient.FailOpen), resilient.WithTimeout(time.Second))
	s := ss[0]
	l := compile(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Hour})
	key := "larger-" + t.Name()
	for range 10 {
		if !take(t, s, key, l, 1).Allowed {
			t.Fatal("refused within the burst")
		}
	}
	if take(t, s, key, l, 1).Allowed {
		t.Fatal("11th admitted")
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if d := take(t, s, key, l, 5); d.Allowed {
		t.Fatalf("cost 5 admitted with the store down and cost 1 cached as refused: %+v", d)
	}
	if d := take(t, s, key+"-other", l, 5); !d.Allowed {
		t.Fatalf("FailOpen refused a key the cache does not hold: %+v", d)
	}
}

// TestRaisedLimitIsNotRefusedFromCache: a key refused under one limit and
// asked again under another (an override raising it, a reload compiling
// the rule anew) goes to the store, which admits it under the new limit:
// the cache holds a refusal for the limit it was given.
func TestRaisedLimitIsNotRefusedFromCache(t *testing.T) {
	c := newClock()
	inner := &counting{Store: memStore(t, c)}
	s, err := resilient.New(inner, resilient.WithClock(c.Now), resilient.WithOverLimitCacheTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	low := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Hour})
	high := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Hour})
	take(t, s, "k", low, 1)
	if take(t, s, "k", low, 1).Allowed {
		t.Fatal("second take under the limit of 1 admitted")
	}
	calls := inner.takes.Load()
	if take(t, s, "k", low, 1).Allowed || inner.takes.Load() != calls {
		t.Fatal("the refusal was not answered from the cache")
	}
	if d := take(t, s, "k", high, 1); !d.Allowed {
		t.Fatalf("under the raised limit: %+v, want admitted by the store", d)
	}
	if inner.takes.Load() != calls+1 {
		t.Fatal("the take under the raised limit did not reach the store")
	}
}
