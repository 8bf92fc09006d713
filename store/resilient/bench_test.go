package resilient_test

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/resilient"
)

// benchParts is a memory store that reports partitions as a Cluster
// (CRC16 of the key, 64 ranges) or a memcached ring of three (MD5 of the
// key) does, for the wrapper's cost of a Partition per decision.
type benchParts struct {
	*memory.Store
	md5 bool
}

func (p benchParts) Partitions() int { return 64 }

func (p benchParts) Partition(key string) int {
	if !p.md5 {
		return redis.Slot(key) / 256
	}
	var buf [256]byte
	sum := md5.Sum(append(append(buf[:0], "fg:"...), key...))
	return int(binary.LittleEndian.Uint32(sum[:4]) % 3)
}

func (p benchParts) PartitionName(n int) string { return "" }

// BenchmarkTake measures the wrapper's own cost over the memory store: bare
// store, wrapped store, and a wrapped over-limit key answered by the cache.
func BenchmarkTake(b *testing.B) {
	l, _ := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 1 << 50, Period: time.Hour})
	over, _ := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Hour})
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	run := func(b *testing.B, s store.Store, lim *algo.Limit) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			out := make([]algo.Decision, 1)
			reqs := make([]store.Request, 1)
			i := 0
			for pb.Next() {
				reqs[0] = store.Request{Key: keys[i%len(keys)], Limit: lim, Cost: 1}
				if _, err := s.Take(context.Background(), reqs, out); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
	b.Run("memory", func(b *testing.B) {
		m, _ := memory.New()
		defer m.Close()
		run(b, m, l)
	})
	b.Run("resilient-memory", func(b *testing.B) {
		m, _ := memory.New()
		s, _ := resilient.New(m)
		defer s.Close()
		run(b, s, l)
	})
	for _, md5 := range []bool{false, true} {
		name := "resilient-partitioned-crc16"
		if md5 {
			name = "resilient-partitioned-md5"
		}
		b.Run(name, func(b *testing.B) {
			m, _ := memory.New()
			s, _ := resilient.New(benchParts{Store: m, md5: md5})
			defer s.Close()
			run(b, s, l)
		})
	}
	b.Run("resilient-cached-refusal", func(b *testing.B) {
		m, _ := memory.New()
		// A long deadline: on a busy machine a fill call past the default
		// 50 ms would be answered by the policy and its key not cached.
		s, _ := resilient.New(m, resilient.WithTimeout(10*time.Second))
		defer s.Close()
		for _, k := range keys { // fill every key and get it refused once
			for range 2 {
				s.Take(context.Background(), []store.Request{{Key: k, Limit: over, Cost: 1}}, make([]algo.Decision, 1))
			}
		}
		if s.CachedKeys() != len(keys) {
			b.Fatalf("%d keys cached, want %d", s.CachedKeys(), len(keys))
		}
		run(b, s, over)
	})
}

// BenchmarkFailLocal measures a Take that FailLocal decides while the store
// is down (a stopped redis-server, the breaker open), with the number of
// distinct limits in use in turn as the dimension: 1, 4096 (one generation
// of local shares) and 6000 (past one, within two). A warm-up pass before
// the timer compiles their local shares; BenchmarkShare measures the
// lookup alone.
func BenchmarkFailLocal(b *testing.B) {
	srv := testserver.NewRedis(b)
	if srv == nil {
		b.Skip("no redis-server")
	}
	inner, err := redis.Open("redis://"+srv.Addr, redis.WithTimeout(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	s, err := resilient.New(inner, resilient.WithPolicy(resilient.FailLocal), resilient.WithInstances(4),
		resilient.WithBreaker(1, time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := srv.Stop(); err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 4096, 6000} {
		b.Run("limits="+strconv.Itoa(n), func(b *testing.B) {
			lims := make([]*algo.Limit, n)
			for i := range lims {
				l, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 1 << 50, Period: time.Hour})
				if err != nil {
					b.Fatal(err)
				}
				lims[i] = l
			}
			out := make([]algo.Decision, 1)
			for _, l := range lims {
				res, err := s.Take(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 1}}, out)
				if err != nil {
					b.Fatal(err)
				}
				if !res.Fallback || out[0].Limit != 1<<48 {
					b.Fatalf("fallback %v, limit %d; want the local share %d", res.Fallback, out[0].Limit, 1<<48)
				}
			}
			b.ReportAllocs()
			reqs := make([]store.Request, 1)
			i := 0
			for b.Loop() {
				reqs[0] = store.Request{Key: "k", Limit: lims[i%n], Cost: 1}
				if _, err := s.Take(context.Background(), reqs, out); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
