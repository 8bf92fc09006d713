package redis

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// BenchmarkScriptServerTime measures what one decision costs the Redis
// server itself, from INFO commandstats (usec per EVALSHA call), for a
// single-key GCRA take sent alone (lone: lua/take.lua, what the store
// sends for a lone call; batch1: lua/takes.lua with a batch of one) and
// in batches: the client, the network and the scheduler do not enter it.
// Metric: server-us/decision.
func BenchmarkScriptServerTime(b *testing.B) {
	s := openT(b, redisURL(b))
	c := s.client
	l, err := algo.Compile(algo.Params{Algorithm: algo.GCRA, Limit: 1, Period: time.Hour, Burst: 2_000_000})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	resetStats := func(b *testing.B) {
		if err := c.Do(ctx, c.B().ConfigResetstat().Build()).Error(); err != nil {
			b.Fatal(err)
		}
	}
	reportServer := func(b *testing.B, decisions int) {
		info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(usecPerCall(b, info, "evalsha")/float64(decisions), "server-us/decision")
	}
	b.Run("lone", func(b *testing.B) {
		keys := []string{runID + ":srv:lone"}
		args := []string{"1", "", s.ttlFloor, loneSpec(l)}
		resetStats(b)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := s.eval(ctx, loneTake, keys, args).Error(); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		reportServer(b, 1)
	})
	for _, n := range []int{1, 16, 64} {
		b.Run("batch"+strconv.Itoa(n), func(b *testing.B) {
			var sa scriptArgs
			for i := 0; i < n; i++ {
				s.appendGroup(&sa, opTake, "", []store.Request{{Key: runID + ":srv:" + strconv.Itoa(i), Limit: l, Cost: 1}}, nil, nil)
			}
			p, args := programFor(&sa), sa.argv(s.ttlFloor)
			resetStats(b)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := s.eval(ctx, p, sa.keys, args).Error(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportServer(b, n)
		})
	}
}

// usecPerCall extracts usec_per_call of cmd from INFO commandstats.
func usecPerCall(b *testing.B, info, cmd string) float64 {
	i := strings.Index(info, "cmdstat_"+cmd+":")
	if i < 0 {
		b.Fatalf("no %s in commandstats", cmd)
	}
	line := info[i:]
	j := strings.Index(line, "usec_per_call=")
	end := strings.IndexAny(line[j:], ",\r\n")
	v, err := strconv.ParseFloat(line[j+len("usec_per_call="):j+end], 64)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// BenchmarkClusterKeys10kParallel64: 64 goroutines taking over 10 000
// keys on the test Redis Cluster (3 masters), every take admitted, with
// the store's default batching (per range of 256 slots). Metric:
// decisions/s.
//
//	scripts/with-servers.sh go test -run '^$' -bench ClusterKeys10k ./store/redis/
func BenchmarkClusterKeys10kParallel64(b *testing.B) {
	s := openT(b, clusterURL(b))
	l, err := algo.Compile(algo.Params{Algorithm: algo.GCRA, Limit: 1, Period: time.Hour, Burst: 2_000_000})
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = runKey() + ":ck:" + strconv.Itoa(i)
	}
	var seq atomic.Int64
	b.SetParallelism(32) // 64 goroutines on 2 cores
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		reqs := []store.Request{{Limit: l, Cost: 1}}
		out := make([]algo.Decision, 1)
		i := int(seq.Add(1)) * 7919
		for pb.Next() {
			reqs[0].Key = keys[i%len(keys)]
			i++
			if _, err := s.Take(ctx, reqs, out); err != nil || !out[0].Allowed {
				b.Errorf("take %s: %v %+v", reqs[0].Key, err, out[0])
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
}
