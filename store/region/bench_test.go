package region_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/region"
)

// BenchmarkRegionTake: 64 goroutines deciding on 1000 keys, each far from
// its limit, side by side on one machine:
//
//   - redis: the Redis store alone, the baseline;
//   - share: a region store over the same Redis, every decision on the
//     region's share (what a region pays for its shares: the split's
//     lookup and a request copy);
//   - borrow: a region whose share is 1 unit, so that every decision is
//     borrowed from the peer region's Redis after its own refuses (two
//     store calls);
//   - borrow-slice10: the same borrowing slices of 10 units.
//
// Both Redis servers are on this machine: a real peer region adds its
// round trip to every borrowed call.
func BenchmarkRegionTake(b *testing.B) {
	own, peer := testserver.NewRedis(b), testserver.NewRedis(b)
	if own == nil || peer == nil {
		b.Skip("no redis-server")
	}
	l, err := algo.Compile(algo.Params{Algorithm: algo.TokenBucket, Limit: 1_000_000, Period: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	regionStore := func(b *testing.B, opts ...region.Option) store.Store {
		s, err := region.New("us", openRedis(b, own.Addr), []region.Peer{{Name: "eu", Store: openRedis(b, peer.Addr)}}, opts...)
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	// The peer's weight leaves "us" a share of one unit of the million.
	starved := region.WithWeights(map[string]int{"us": 1, "eu": region.MaxWeight})
	for _, c := range []struct {
		name string
		open func(*testing.B) store.Store
	}{
		{"redis", func(b *testing.B) store.Store { return openRedis(b, own.Addr) }},
		{"share", func(b *testing.B) store.Store { return regionStore(b) }},
		{"borrow", func(b *testing.B) store.Store {
			s := regionStore(b, starved)
			drain(b, s, l)
			return s
		}},
		{"borrow-slice10", func(b *testing.B) store.Store {
			s := regionStore(b, starved, region.WithSlice(10))
			drain(b, s, l)
			return s
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := c.open(b)
			defer s.Close()
			var n atomic.Int64
			b.SetParallelism(32) // 64 goroutines on 2 CPUs
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				out := make([]algo.Decision, 1)
				reqs := []store.Request{{Limit: l, Cost: 1}}
				for i := n.Add(1) * 7919; pb.Next(); i++ {
					reqs[0].Key = keys[i%int64(len(keys))]
					res, err := s.Take(context.Background(), reqs, out)
					if err != nil || !res.Allowed {
						b.Errorf("Take: %v %+v", err, out[0])
						return
					}
				}
			})
		})
	}
}

var keys = func() []string {
	k := make([]string, 1000)
	for i := range k {
		k[i] = fmt.Sprintf("bench:%d", i)
	}
	return k
}()

// drain spends the region's own share of every key, so that each Take of
// the benchmark borrows.
func drain(b *testing.B, s store.Store, l *algo.Limit) {
	rs := s.(*region.Store)
	share := rs.Share(l)
	if share == nil {
		return
	}
	out := make([]algo.Decision, 1)
	for _, k := range keys {
		for {
			res, err := rs.Unwrap().Take(context.Background(), []store.Request{{Key: k, Limit: share, Cost: 1}}, out)
			if err != nil {
				b.Fatal(err)
			}
			if !res.Allowed {
				break
			}
		}
	}
}

// BenchmarkRegionBorrowWaits: every decision is borrowed (this region's
// share is spent) from a peer whose store answers 2 ms late, as one in
// another region does; 64 goroutines over 1000 keys. It reports the share
// of decisions that took 1 ms or more (most of them waits on the peer;
// a CPU busy elsewhere counts too) and the p99
// latency, side by side: borrowing each request's cost, slices of 10,
// and slices of 10 borrowed ahead.
func BenchmarkRegionBorrowWaits(b *testing.B) {
	own, peer := testserver.NewRedis(b), testserver.NewRedis(b)
	if own == nil || peer == nil {
		b.Skip("no redis-server")
	}
	// An hour's worth: this region's share (one unit of the million)
	// refills no unit while the benchmark runs.
	l, err := algo.Compile(algo.Params{Algorithm: algo.TokenBucket, Limit: 1_000_000, Period: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	starved := region.WithWeights(map[string]int{"us": 1, "eu": region.MaxWeight})
	for _, c := range []struct {
		name string
		opts []region.Option
	}{
		{"exact", nil},
		{"slice10", []region.Option{region.WithSlice(10), region.WithSliceTTL(10 * time.Second)}},
		{"slice10-prefetch", []region.Option{region.WithSlice(10), region.WithSliceTTL(10 * time.Second), region.WithPrefetch()}},
	} {
		b.Run(c.name, func(b *testing.B) {
			lender := &counting{Store: slow{openRedis(b, peer.Addr), 2 * time.Millisecond}}
			s, err := region.New("us", openRedis(b, own.Addr), []region.Peer{{Name: "eu", Store: lender}},
				append([]region.Option{starved}, c.opts...)...)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			drain(b, s, l)
			calls := lender.takes.Load()
			var n, waited atomic.Int64
			lat := make(chan []time.Duration, 64)
			b.SetParallelism(4) // 8 goroutines: fewer waits for a CPU that would count as waits for the peer
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				out := make([]algo.Decision, 1)
				reqs := []store.Request{{Limit: l, Cost: 1}}
				var mine []time.Duration
				// Keys at random: walking them in order, the goroutines
				// would fall into step behind one waiting for a slice.
				r := rand.New(rand.NewPCG(uint64(n.Add(1)), 7919))
				for pb.Next() {
					reqs[0].Key = keys[r.IntN(len(keys))]
					start := time.Now()
					res, err := s.Take(context.Background(), reqs, out)
					d := time.Since(start)
					if err != nil || !res.Allowed {
						b.Errorf("Take: %v %+v", err, out[0])
						return
					}
					if d >= time.Millisecond {
						waited.Add(1)
					}
					mine = append(mine, d)
				}
				lat <- mine
			})
			b.StopTimer()
			close(lat)
			var all []time.Duration
			for l := range lat {
				all = append(all, l...)
			}
			slices.Sort(all)
			if len(all) > 0 {
				b.ReportMetric(float64(waited.Load())/float64(len(all)), "waited/op")
				b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
				b.ReportMetric(float64(lender.takes.Load()-calls)/float64(len(all)), "peer-calls/op")
			}
		})
	}
}
