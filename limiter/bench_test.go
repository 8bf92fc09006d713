package limiter_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memory"
)

// neverRefuses is a token bucket no benchmark can spend (burst 1e9) that
// refills slowly enough for per-key state to stay live.
var neverRefuses = algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Second, Burst: 1_000_000_000}

// BenchmarkAllow is Limiter.Allow on the memory store, in parallel, over 1,
// 10 000 and 1 000 000 keys, populated before timing. The peer comparison
// is in bench/. The store has no key cap (WithMaxKeys(0)): under
// DefaultMaxKeys the fullest shards evict before a million keys are in
// (see memory.WithMaxKeys), and the million-key run stopped at its check
// of the keys it populated.
func BenchmarkAllow(b *testing.B) {
	for _, n := range []int{1, 10_000, 1_000_000} {
		b.Run("keys="+strconv.Itoa(n), func(b *testing.B) {
			st := newStore(b, memory.WithMaxKeys(0))
			l := newLimiter(b, st, "b", neverRefuses)
			keys := make([]string, n)
			for i := range keys {
				keys[i] = fmt.Sprintf("user:%011d", i)
				if d, err := l.Allow(b.Context(), keys[i]); err != nil || !d.Allowed {
					b.Fatal("populate refused", err)
				}
			}
			if got := st.Stats().Keys; got != int64(n) {
				b.Fatalf("the store holds %d keys, want %d", got, n)
			}
			ctx := b.Context()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if d, err := l.Allow(ctx, keys[i]); err != nil || !d.Allowed {
						b.Error("refused", err)
						return
					}
					if i += 7919; i >= n {
						i %= n
					}
				}
			})
		})
	}
}

// BenchmarkLocalAllow is Local.Allow, serially and shared by every
// goroutine.
func BenchmarkLocalAllow(b *testing.B) {
	l, err := limiter.NewLocal(neverRefuses)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !l.Allow() {
				b.Fatal("refused")
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !l.Allow() {
					b.Error("refused")
					return
				}
			}
		})
	})
}

// BenchmarkWait is Wait when the first take is admitted, the path that
// must cost what AllowN costs: one store call, no queue. Memory store, in
// parallel over 10 000 keys; Local serially.
func BenchmarkWait(b *testing.B) {
	b.Run("limiter", func(b *testing.B) {
		st := newStore(b)
		l := newLimiter(b, st, "b", neverRefuses)
		keys := make([]string, 10_000)
		for i := range keys {
			keys[i] = fmt.Sprintf("user:%011d", i)
			if err := l.Wait(b.Context(), keys[i], 1); err != nil {
				b.Fatal("populate:", err)
			}
		}
		ctx := b.Context()
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if err := l.Wait(ctx, keys[i], 1); err != nil {
					b.Error(err)
					return
				}
				if i += 7919; i >= len(keys) {
					i %= len(keys)
				}
			}
		})
	})
	b.Run("local", func(b *testing.B) {
		l, err := limiter.NewLocal(neverRefuses)
		if err != nil {
			b.Fatal(err)
		}
		ctx := b.Context()
		b.ReportAllocs()
		for b.Loop() {
			if err := l.Wait(ctx, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
}
