package memory_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/storetest"
)

// heapBytes is the live heap after a full collection.
func heapBytes() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// bytesPerKey populates a fresh store with n keys, prefix followed by a
// 16-byte key, under p and returns the heap it grew by, per key.
func bytesPerKey(tb testing.TB, p algo.Params, prefix string, n int) float64 {
	l, err := algo.Compile(p)
	if err != nil {
		tb.Fatal(err)
	}
	before := heapBytes()
	// No cap: the default's (DefaultMaxKeys) fullest shards would evict
	// before a million keys are in.
	st, err := memory.New(memory.WithSweepInterval(0), memory.WithMaxKeys(0))
	if err != nil {
		tb.Fatal(err)
	}
	reqs := []store.Request{{Limit: l, Cost: 1}}
	out := make([]algo.Decision, 1)
	for i := 0; i < n; i++ {
		reqs[0].Key = prefix + storetest.BenchKey(i)
		if _, err := st.Take(tb.Context(), reqs, out); err != nil {
			tb.Fatal(err)
		}
	}
	if got := st.Stats().Keys; got != int64(n) {
		tb.Fatalf("the store holds %d keys, want %d", got, n)
	}
	after := heapBytes()
	runtime.KeepAlive(st)
	return float64(after-before) / float64(n)
}

// BenchmarkFootprint reports the heap per key (B/key) at one million
// 16-byte keys for the fixed-size algorithms, and for a token bucket the
// same keys as a limiter stores them (limiter.New(st, "b", …) puts
// "fg:b:" before each: 21 bytes, one size class above 16 bytes). b.N does
// not matter: each run populates a store once.
func BenchmarkFootprint(b *testing.B) {
	for _, p := range []algo.Params{
		{Algorithm: algo.TokenBucket, Limit: 100, Period: time.Second},
		{Algorithm: algo.GCRA, Limit: 100, Period: time.Second},
		{Algorithm: algo.FixedWindow, Limit: 100, Period: time.Hour},
	} {
		b.Run(p.Algorithm.String(), func(b *testing.B) {
			var bpk float64
			for range b.N {
				bpk = bytesPerKey(b, p, "", 1_000_000)
			}
			b.ReportMetric(bpk, "B/key")
			b.ReportMetric(0, "ns/op")
		})
	}
	b.Run("token_bucket_limiter_key", func(b *testing.B) {
		var bpk float64
		for range b.N {
			bpk = bytesPerKey(b, algo.Params{Algorithm: algo.TokenBucket, Limit: 100, Period: time.Second}, "fg:b:", 1_000_000)
		}
		b.ReportMetric(bpk, "B/key")
		b.ReportMetric(0, "ns/op")
	})
}
