package memcached_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
)

// twoServers starts two private memcached servers and returns the URL of
// a ring over both.
func twoServers(t *testing.T) string {
	t.Helper()
	a, b := testserver.NewMemcached(t), testserver.NewMemcached(t)
	if a == nil || b == nil {
		t.Skip("no memcached")
	}
	return "memcached://" + a.Addr + "," + b.Addr
}

func openURL(t *testing.T, url string, clock *fakeClock, opts ...memcached.Option) *memcached.Store {
	t.Helper()
	opts = append([]memcached.Option{memcached.WithTimeout(5 * time.Second), memcached.WithClock(clock.Now)}, opts...)
	s, err := memcached.Open(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// tripsSince returns the round trips to each server of s since before.
func tripsSince(s *memcached.Store, before []int64) []int64 {
	after := memcached.RoundTrips(s)
	for i := range after {
		after[i] -= before[i]
	}
	return after
}

// TestPeekBatchMatchesKeyByKey: a Peek of many requests, over keys of
// every algorithm spread over two servers, decides each as a Peek of that
// request alone does, on keys in every condition: missing, live, expired
// on the store's clock (the item still in memcached), holding another
// algorithm's state, asked twice in one call, and with costs of 0, 1 and
// over the capacity. It reads them in one round trip per server, where it
// used to take one per key.
func TestPeekBatchMatchesKeyByKey(t *testing.T) {
	clock := newClock(t0.Add(123456789 * time.Microsecond))
	s := openURL(t, twoServers(t), clock)
	c := ctx(t)
	const perCase = 3
	type key struct {
		name string
		l    *algo.Limit
	}
	var expired, live, missing, foreign []key
	for _, lt := range limits {
		l := compile(t, lt.p)
		for j := range perCase {
			expired = append(expired, key{uniqueKey(t, lt.name+"-expired"+itoa(j)), l})
			live = append(live, key{uniqueKey(t, lt.name+"-live"+itoa(j)), l})
			missing = append(missing, key{uniqueKey(t, lt.name+"-missing"+itoa(j)), l})
			foreign = append(foreign, key{uniqueKey(t, lt.name+"-foreign"+itoa(j)), l})
		}
	}
	charge := func(keys []key, l func(key) *algo.Limit) {
		t.Helper()
		for _, k := range keys {
			out := make([]algo.Decision, 1)
			if _, err := s.Take(c, []store.Request{{Key: k.name, Limit: l(k), Cost: 2, Lease: 9}}, out); err != nil || !out[0].Allowed {
				t.Fatalf("charging %s: %+v, %v", k.name, out[0], err)
			}
		}
	}
	charge(expired, func(k key) *algo.Limit { return k.l })
	// Past every expired key's ExpiresAt (the longest is a calendar
	// month), but not memcached's: its items are still there.
	clock.Advance(40 * 24 * time.Hour)
	charge(live, func(k key) *algo.Limit { return k.l })
	other := compile(t, algo.Params{Algorithm: algo.GCRA, Limit: 5, Period: time.Second, Burst: 3})
	otherCAS := compile(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 5, Period: time.Second, Burst: 10})
	charge(foreign, func(k key) *algo.Limit {
		if k.l.Algorithm() == algo.GCRA {
			return otherCAS
		}
		return other
	})
	clock.Advance(100 * time.Millisecond)

	var reqs []store.Request
	for _, keys := range [][]key{expired, live, missing, foreign} {
		for j, k := range keys {
			cost := []int64{0, 1, k.l.Capacity() + 1}[j%perCase]
			reqs = append(reqs, store.Request{Key: k.name, Limit: k.l, Cost: cost})
		}
	}
	reqs = append(reqs, reqs[len(expired)+1], reqs[len(expired)+2]) // live keys asked twice
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })

	want := make([]algo.Decision, len(reqs))
	for i := range reqs {
		if err := s.Peek(c, reqs[i:i+1], want[i:i+1]); err != nil {
			t.Fatalf("Peek of request %d alone: %v", i, err)
		}
	}
	before := memcached.RoundTrips(s)
	got := make([]algo.Decision, len(reqs))
	if err := s.Peek(c, reqs, got); err != nil {
		t.Fatal(err)
	}
	trips := tripsSince(s, before)
	for i := range reqs {
		if got[i] != want[i] {
			t.Errorf("request %d (%s, cost %d): Peek of all = %+v; alone = %+v", i, reqs[i].Key, reqs[i].Cost, got[i], want[i])
		}
	}
	perServer := make([]int, len(trips))
	for _, r := range reqs {
		perServer[s.Partition(r.Key)]++
	}
	for i, n := range trips {
		if perServer[i] == 0 {
			t.Fatalf("no key on server %d: the test does not spread keys over both", i)
		}
		if n != 1 {
			t.Errorf("Peek of %d requests: %d round trips to server %d (holding %d of them), want 1", len(reqs), n, i, perServer[i])
		}
	}
	// The answers are not all alike: the cases above are really there.
	kinds := map[string]bool{}
	for _, d := range got {
		kinds[fmt.Sprintf("%v/%v", d.Allowed, d.Remaining == d.Limit)] = true
	}
	if len(kinds) < 3 {
		t.Errorf("the decisions fall into %d kinds only (%v): the keys are not in the conditions named", len(kinds), kinds)
	}
}

// TestRefundBatchRoundTrips: a Refund of many keys over two servers gives
// back each request's units as a Refund of that request alone would,
// window counters in one round trip per server and compare-and-swap
// states in two (read, then cas), where it used to take one or two per
// key.
func TestRefundBatchRoundTrips(t *testing.T) {
	clock := newClock(t0)
	s := openURL(t, twoServers(t), clock)
	c := ctx(t)
	const n = 40
	for _, p := range []algo.Params{
		{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Hour},
		{Algorithm: algo.SlidingWindow, Limit: 10, Period: time.Hour, SubWindows: 4},
		{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Hour, Burst: 10},
		{Algorithm: algo.SlidingLog, Limit: 10, Period: time.Hour},
	} {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			l := compile(t, p)
			pre := uniqueKey(t, "k")
			reqs := make([]store.Request, n)
			for i := range reqs {
				reqs[i] = store.Request{Key: pre + strconv.Itoa(i), Limit: l, Cost: 5}
			}
			out := make([]algo.Decision, n)
			res, err := s.Take(c, reqs, out)
			if err != nil || !res.Allowed {
				t.Fatalf("Take: %+v, %v", res, err)
			}
			// Key i gets back i%3 units of its 5 (0: a refund of nothing),
			// plus one more for the first key, asked twice.
			refund := make([]store.Request, 0, n+1)
			for i := range reqs {
				refund = append(refund, store.Request{Key: reqs[i].Key, Limit: l, Cost: int64(i % 3), At: res.At})
			}
			refund = append(refund, store.Request{Key: reqs[1].Key, Limit: l, Cost: 1, At: res.At})
			before := memcached.RoundTrips(s)
			if err := s.Refund(c, refund); err != nil {
				t.Fatal(err)
			}
			maxTrips := int64(2)
			if l.Algorithm() == algo.FixedWindow || l.Algorithm() == algo.SlidingWindow {
				maxTrips = 1
			}
			for i, d := range tripsSince(s, before) {
				if d > maxTrips {
					t.Errorf("Refund of %d requests: %d round trips to server %d, want at most %d", len(refund), d, i, maxTrips)
				}
			}
			for i := range reqs {
				reqs[i].Cost = 0
			}
			if err := s.Peek(c, reqs, out); err != nil {
				t.Fatal(err)
			}
			for i, d := range out {
				want := 10 - 5 + int64(i%3)
				if i == 1 {
					want++
				}
				if d.Remaining != want {
					t.Errorf("key %d: %d remaining after the Refund, want %d", i, d.Remaining, want)
				}
			}
		})
	}
}

// TestRefundConcurrentExact: goroutines on two store instances (whose
// local locks do not serialize each other: their writes race on
// compare-and-swap) take random sets of the same few keys and refund part
// of what they took, several keys and the same key twice in one Refund,
// at one instant (nothing refills). Every key then holds exactly what was
// taken less what was refunded: no refund lost, none applied twice.
func TestRefundConcurrentExact(t *testing.T) {
	clock := newClock(t0)
	url := twoServers(t)
	opts := []memcached.Option{memcached.WithRetries(1000), memcached.WithBackoff(10*time.Microsecond, time.Millisecond)}
	stores := []*memcached.Store{openURL(t, url, clock, opts...), openURL(t, url, clock, opts...)}
	c := ctx(t)
	const budget = 1 << 20
	type key struct {
		name string
		l    *algo.Limit
		held atomic.Int64
	}
	var keys []*key
	for _, l := range stressLimits(t, budget) {
		if l.Algorithm() == algo.Concurrency {
			continue // given back by Release, not Refund
		}
		for j := range 3 {
			keys = append(keys, &key{name: uniqueKey(t, l.Algorithm().String()+itoa(j)), l: l})
		}
	}
	const goroutines, rounds = 8, 40
	var wg sync.WaitGroup
	var errs atomic.Int64
	for g := range goroutines {
		s := stores[g%len(stores)]
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 11))
			for range rounds {
				n := 1 + rng.IntN(6)
				reqs := make([]store.Request, n)
				picked := make([]*key, n)
				for i := range reqs {
					picked[i] = keys[rng.IntN(len(keys))]
					reqs[i] = store.Request{Key: picked[i].name, Limit: picked[i].l, Cost: 1 + rng.Int64N(3)}
				}
				out := make([]algo.Decision, n)
				res, err := s.Take(c, reqs, out)
				if err != nil || !res.Allowed {
					t.Errorf("Take: %+v, %v (the budget is never reached)", res, err)
					errs.Add(1)
					return
				}
				for i, k := range picked {
					k.held.Add(reqs[i].Cost)
				}
				var refund []store.Request
				for i, r := range reqs {
					if back := rng.Int64N(r.Cost + 1); back > 0 {
						r.Cost, r.At = back, res.At
						refund = append(refund, r)
						picked[i].held.Add(-back)
					}
				}
				if err := s.Refund(c, refund); err != nil {
					t.Errorf("Refund: %v", err)
					errs.Add(1)
					return
				}
			}
		})
	}
	wg.Wait()
	if errs.Load() > 0 {
		return
	}
	out := make([]algo.Decision, 1)
	for _, k := range keys {
		if err := stores[0].Peek(c, []store.Request{{Key: k.name, Limit: k.l}}, out); err != nil {
			t.Fatal(err)
		}
		if held := budget - out[0].Remaining; held != k.held.Load() {
			t.Errorf("%s: holds %d units, want %d (taken less refunded)", k.name, held, k.held.Load())
		}
	}
	var retries uint64
	for _, s := range stores {
		retries += s.Stats().CASRetries
	}
	t.Logf("compare-and-swap retries: %d", retries)
}
