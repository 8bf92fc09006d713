package bench

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/time/rate"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memory"
)

// One limiter per key (a user, an IP), keys spread over every goroutine.
func BenchmarkKeys10kParallel(b *testing.B) { benchKeysParallel(b, 10_000) }

// The same over a million keys: the state no longer fits in the caches.
// B/key is the heap each key costs, its copy of the key included.
func BenchmarkKeys1mParallel(b *testing.B) { benchKeysParallel(b, 1_000_000) }

func benchKeysParallel(b *testing.B, n int) {
	keys := benchKeys(n)
	keysFloodgate(b, keys)
	keysXTimeRate(b, keys)
}

// runKeys times allow over the keys in parallel. Each contender is
// populated once before, outside the timed runs (b.Run calls its function
// again for every b.N), and its footprint measured then.
func runKeys(b *testing.B, name string, keys []string, bpk float64, allow func(string) bool) {
	b.Run(name, func(b *testing.B) {
		var seq atomic.Int64
		b.ReportAllocs()
		measureCPU(b, func() {
			b.RunParallel(func(pb *testing.PB) {
				s := stride{i: int(seq.Add(1)*104729) % len(keys), n: len(keys)}
				for pb.Next() {
					if !allow(keys[s.next()]) {
						b.Error("refused")
						return
					}
				}
			})
		})
		b.ReportMetric(bpk, "B/key")
	})
}

// keysFloodgate: the memory store through the limiter.
func keysFloodgate(b *testing.B, keys []string) {
	var st *memory.Store
	var l *limiter.Limiter
	bpk := perKey(len(keys), func() {
		var err error
		// No cap: under memory.New's default (DefaultMaxKeys, a million)
		// the fullest shards would evict before the million keys are in.
		if st, err = memory.New(memory.WithMaxKeys(0)); err != nil {
			b.Fatal(err)
		}
		if l, err = limiter.New(st, "b", neverParams); err != nil {
			b.Fatal(err)
		}
		for _, k := range keys {
			if d, err := l.Allow(b.Context(), k); err != nil || !d.Allowed {
				b.Fatal("populate refused", err)
			}
		}
	})
	if got := st.Stats().Keys; got != int64(len(keys)) {
		b.Fatalf("the store holds %d keys, want %d", got, len(keys))
	}
	ctx := b.Context()
	runKeys(b, "floodgate", keys, bpk, func(k string) bool {
		d, err := l.Allow(ctx, k)
		return err == nil && d.Allowed
	})
	_ = st.Close()
}

// keysXTimeRate: the usual hand-rolled per-key limiter, a sync.Map of
// *rate.Limiter created on first use (keys copied, as a server's request
// keys would be).
func keysXTimeRate(b *testing.B, keys []string) {
	var m sync.Map
	get := func(k string) *rate.Limiter {
		if v, ok := m.Load(k); ok {
			return v.(*rate.Limiter)
		}
		v, _ := m.LoadOrStore(strings.Clone(k), rate.NewLimiter(neverRate, neverBurst))
		return v.(*rate.Limiter)
	}
	bpk := perKey(len(keys), func() {
		for _, k := range keys {
			if !get(k).Allow() {
				b.Fatal("populate refused")
			}
		}
	})
	count := 0
	m.Range(func(_, _ any) bool { count++; return true })
	if count != len(keys) {
		b.Fatalf("the map holds %d limiters, want %d", count, len(keys))
	}
	runKeys(b, "x-time-rate", keys, bpk, func(k string) bool { return get(k).Allow() })
}
