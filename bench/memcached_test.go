package bench

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
)

// The Memcached store, 64 goroutines, one algorithm per sub-benchmark:
// over 10 000 keys (no contention) and on one hot key (every goroutine on
// the same key: compare-and-swap contention for the bucket algorithms).
// The Redis store runs the same scenario as BenchmarkRedisKeys10kParallel64
// and BenchmarkRedisKeys1Parallel64. Extra metrics: casretries/op (lost
// compare-and-swaps retried, per decision) and admitted/op (the share of
// decisions admitted: a hot key spends some budgets). The sub-benchmark
// gomemcache-incr is the floor: one bare incr per operation through the
// same client, no limiter.
func BenchmarkMemcachedKeys10kParallel64(b *testing.B) { benchMemcached(b, 10_000) }

// BenchmarkMemcachedKeys1Parallel64 is the hot-key variant.
func BenchmarkMemcachedKeys1Parallel64(b *testing.B) { benchMemcached(b, 1) }

// memcachedLimits are the limits of the store scenarios, per algorithm.
// Memcached drops a key when its state is as good as new, so each limit
// keeps a charged key's state alive for the whole run (refilling within an
// hour, not a second) and never refuses over 10 000 keys; a hot key spends
// the sliding log's 1000 (its state holds one entry per unit). The one
// exception is the warm-up limiter, which is back to cold (fresh) within a
// millisecond of a take whatever its rate.
var memcachedLimits = []algo.Params{
	{Algorithm: algo.FixedWindow, Limit: neverBurst, Period: time.Hour},
	{Algorithm: algo.SlidingWindow, Limit: neverBurst, Period: time.Hour},
	{Algorithm: algo.SlidingLog, Limit: 1000, Period: time.Hour},
	{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Hour, Burst: 2_000_000},
	{Algorithm: algo.GCRA, Limit: 1, Period: time.Hour, Burst: 2_000_000},
	{Algorithm: algo.Shaper, Limit: 1, Period: time.Hour, Burst: 2_000_000 - 1},
	{Algorithm: algo.SmoothBursty, Limit: 1000, Period: time.Second, MaxBurstSeconds: 3600, MaxWait: time.Hour},
	{Algorithm: algo.SmoothWarmup, Limit: 1000, Period: time.Second, WarmupPeriod: time.Second, MaxWait: time.Hour},
	{Algorithm: algo.Concurrency, Limit: 1_000_000, LeaseTTL: time.Hour},
}

func benchMemcached(b *testing.B, n int) {
	addr := testserver.Memcached(b)
	if addr == "" {
		return
	}
	keys := benchKeys(n)
	for _, p := range memcachedLimits {
		b.Run(p.Algorithm.String(), func(b *testing.B) {
			l, err := algo.Compile(p)
			if err != nil {
				b.Fatal(err)
			}
			// A 2s timeout: 64 goroutines on 2 cores can stall a round
			// trip past the 200ms default.
			st, err := memcached.Open("memcached://"+addr, memcached.WithTimeout(2*time.Second),
				memcached.WithKeyPrefix(fmt.Sprintf("bench%d:", time.Now().UnixNano())))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = st.Close() })
			populateStore(b, st, l, keys)
			before := st.Stats()
			var admitted, lease atomic.Int64
			var seq atomic.Int64
			ctx := b.Context()
			b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(seq.Add(1)*104729) % n
				reqs := []store.Request{{Limit: l, Cost: 1}}
				out := make([]algo.Decision, 1)
				for pb.Next() {
					i = (i + 7919) % n
					reqs[0].Key = keys[i]
					reqs[0].Lease = uint64(lease.Add(1))
					if _, err := st.Take(ctx, reqs, out); err != nil {
						b.Error(err)
						return
					}
					if !out[0].Allowed {
						continue
					}
					admitted.Add(1)
					if p.Algorithm == algo.Concurrency {
						if err := st.Release(ctx, reqs); err != nil {
							b.Error(err)
							return
						}
					}
				}
			})
			b.StopTimer()
			after := st.Stats()
			b.ReportMetric(float64(after.CASRetries-before.CASRetries)/float64(b.N), "casretries/op")
			b.ReportMetric(float64(admitted.Load())/float64(b.N), "admitted/op")
		})
	}
	b.Run("gomemcache-incr", func(b *testing.B) { benchBareIncr(b, addr, keys) })
}

// benchBareIncr is one gomemcache Increment per operation on the same keys.
func benchBareIncr(b *testing.B, addr string, keys []string) {
	mc := memcache.New(addr)
	mc.MaxIdleConns = 64
	mc.Timeout = 2 * time.Second
	prefix := fmt.Sprintf("bare%d:", time.Now().UnixNano())
	for _, k := range keys {
		if err := mc.Add(&memcache.Item{Key: prefix + k, Value: []byte("0"), Expiration: 3600}); err != nil {
			b.Fatal(err)
		}
	}
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = prefix + k
	}
	n := len(keys)
	var seq atomic.Int64
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(1)*104729) % n
		for pb.Next() {
			i = (i + 7919) % n
			if _, err := mc.Increment(full[i], 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// populateStore takes one unit from every key and checks, through Inspect,
// that each holds state: a benchmark over keys never stored would measure
// an empty server.
func populateStore(b *testing.B, st *memcached.Store, l *algo.Limit, keys []string) {
	ctx := b.Context()
	out := make([]algo.Decision, 1)
	for i, k := range keys {
		reqs := []store.Request{{Key: k, Limit: l, Cost: 1, Lease: uint64(i + 1)}}
		if _, err := st.Take(ctx, reqs, out); err != nil || !out[0].Allowed {
			b.Fatalf("populate %s: %+v, %v", k, out[0], err)
		}
	}
	if l.Algorithm() == algo.SmoothWarmup {
		return
	}
	for _, k := range keys {
		if _, ok, err := st.Inspect(ctx, k); err != nil || !ok {
			b.Fatalf("key %s holds no state after populating: %v", k, err)
		}
	}
}
