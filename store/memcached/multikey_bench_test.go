package memcached_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
)

// multiKeyLimits are the two ways the store keeps state, each with a
// budget so large that a benchmark's refunds never fill it: every Refund
// writes (a refund into a full bucket would change nothing and write
// nothing, measuring reads only).
func multiKeyLimits(b *testing.B) []struct {
	name string
	l    *algo.Limit
} {
	const budget = 1 << 21 // capacity × period stays under the algo package's 2^53 µs
	return []struct {
		name string
		l    *algo.Limit
	}{
		{"counter", compile(b, algo.Params{Algorithm: algo.FixedWindow, Limit: budget, Period: time.Hour})},
		{"cas", compile(b, algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Hour, Burst: budget})},
	}
}

// multiKeyRequests returns n requests of cost 1 on n fresh keys of l,
// each key charged half its budget first (so that Peek reads a state and
// Refund has units to give back), and checks that every key holds a state.
func multiKeyRequests(b *testing.B, s *memcached.Store, l *algo.Limit, n int) []store.Request {
	b.Helper()
	c := ctx(b)
	pre := uniqueKey(b, "k")
	reqs := make([]store.Request, n)
	for i := range reqs {
		reqs[i] = store.Request{Key: pre + strconv.Itoa(i), Limit: l, Cost: l.Capacity() / 2}
	}
	out := make([]algo.Decision, n)
	if res, err := s.Take(c, reqs, out); err != nil || !res.Allowed {
		b.Fatalf("charging %d keys: %v, %v", n, res, err)
	}
	for i := range reqs {
		reqs[i].Cost = 1
	}
	if err := s.Peek(c, reqs, out); err != nil {
		b.Fatal(err)
	}
	for i, d := range out {
		if d.Remaining != l.Capacity()-l.Capacity()/2-1 { // Peek's Remaining is after its cost of 1
			b.Fatalf("key %d: %+v, want the half charged", i, d)
		}
	}
	return reqs
}

// benchMultiKey runs op over 1, 4 and 16 keys of each kind of state, at
// one fixed instant (nothing refills), and reports the round trips to the
// server per call.
func benchMultiKey(b *testing.B, op func(s *memcached.Store, reqs []store.Request, out []algo.Decision) error) {
	for _, lt := range multiKeyLimits(b) {
		for _, n := range []int{1, 4, 16} {
			b.Run(lt.name+"/keys="+strconv.Itoa(n), func(b *testing.B) {
				s := open(b, newClock(t0))
				reqs := multiKeyRequests(b, s, lt.l, n)
				out := make([]algo.Decision, n)
				before := memcached.RoundTrips(s)[0]
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if err := op(s, reqs, out); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(memcached.RoundTrips(s)[0]-before)/float64(b.N), "trips/op")
			})
		}
	}
}

// BenchmarkPeekKeys is Peek of n keys at once.
func BenchmarkPeekKeys(b *testing.B) {
	benchMultiKey(b, func(s *memcached.Store, reqs []store.Request, out []algo.Decision) error {
		return s.Peek(b.Context(), reqs, out)
	})
}

// BenchmarkRefundKeys is Refund of one unit on each of n keys at once.
func BenchmarkRefundKeys(b *testing.B) {
	benchMultiKey(b, func(s *memcached.Store, reqs []store.Request, _ []algo.Decision) error {
		return s.Refund(b.Context(), reqs)
	})
}
