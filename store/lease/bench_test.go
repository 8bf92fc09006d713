package lease_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/lease"
	"github.com/floodgate/floodgate/store/redis"
)

// BenchmarkRedisHotKeys64: 64 goroutines over 100 hot keys on a local
// redis-server, every request admitted, the Redis store alone against the
// same behind leases of 10 and 100 units. decisions/s and, per decision,
// the Takes that reached Redis.
//
//	go test -run '^$' -bench RedisHotKeys64 ./store/lease/
func BenchmarkRedisHotKeys64(b *testing.B) {
	addr := testserver.Redis(b)
	if addr == "" {
		return
	}
	l, err := algo.Compile(algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Hour, Burst: 2_000_000})
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = fmt.Sprintf("lease-bench-%d-%d", time.Now().UnixNano(), i)
	}
	for _, slice := range []int64{0, 10, 100} {
		name := "redis"
		if slice > 0 {
			name = fmt.Sprintf("lease-%d", slice)
		}
		b.Run(name, func(b *testing.B) {
			r, err := redis.Open("redis://" + addr)
			if err != nil {
				b.Fatal(err)
			}
			var st store.Store = r
			var ls *lease.Store
			if slice > 0 {
				if ls, err = lease.New(r, lease.WithSlice(slice)); err != nil {
					b.Fatal(err)
				}
				st = ls
			}
			defer st.Close()
			var seq atomic.Int64
			b.SetParallelism(32) // 64 goroutines on 2 cores
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				i := int(seq.Add(1))
				out := make([]algo.Decision, 1)
				reqs := []store.Request{{Limit: l, Cost: 1}}
				for pb.Next() {
					reqs[0].Key = keys[i%len(keys)]
					i++
					if _, err := st.Take(context.Background(), reqs, out); err != nil || !out[0].Allowed {
						b.Error("refused or failed:", err, out[0])
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
			if ls != nil {
				b.ReportMetric(float64(ls.Stats().Takes)/float64(b.N), "store-takes/op")
			} else {
				b.ReportMetric(1, "store-takes/op")
			}
		})
	}
}
