package redis

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// BenchmarkTakeAllocs reports the client's allocations per decision: one
// caller (lone calls, under each kind of context), and 32 goroutines
// (batches).
func BenchmarkTakeAllocs(b *testing.B) {
	s := openT(b, redisURL(b))
	l, err := algo.Compile(algo.Params{Algorithm: algo.GCRA, Limit: 1, Period: time.Hour, Burst: 2_000_000})
	if err != nil {
		b.Fatal(err)
	}
	serial := func(b *testing.B, ctx func() (context.Context, context.CancelFunc)) {
		reqs := []store.Request{{Key: runID + ":alloc:serial", Limit: l, Cost: 1}}
		out := make([]algo.Decision, 1)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			c, cancel := ctx()
			if _, err := s.Take(c, reqs, out); err != nil {
				b.Fatal(err)
			}
			cancel()
		}
	}
	b.Run("serial-background", func(b *testing.B) {
		serial(b, func() (context.Context, context.CancelFunc) { return context.Background(), func() {} })
	})
	b.Run("serial-deadline", func(b *testing.B) {
		// The caller's deadline, as store/resilient sets it.
		serial(b, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Second)
		})
	})
	for _, name := range []string{"parallel32-background", "parallel32-cancel"} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(32)
			var n atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				reqs := []store.Request{{Key: runID + ":alloc:p" + strconv.FormatInt(n.Add(1), 10), Limit: l, Cost: 1}}
				out := make([]algo.Decision, 1)
				ctx := context.Background()
				if name == "parallel32-cancel" {
					var cancel context.CancelFunc
					ctx, cancel = context.WithCancel(ctx)
					defer cancel()
				}
				for pb.Next() {
					if _, err := s.Take(ctx, reqs, out); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
