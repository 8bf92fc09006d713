package storetest

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// BenchLimit is the limit Bench takes from: so large that it never refuses,
// so every operation does the same admitted work, and with a window so long
// (1000 hours) that a populated key stays visibly charged while the
// benchmark runs. (A bucket that large would refill within a microsecond.)
var BenchLimit = algo.Params{Algorithm: algo.FixedWindow, Limit: 1 << 52, Period: 1000 * time.Hour}

// BenchKey returns the i-th key of Bench's key space: 16 bytes, the size
// the footprint targets are stated for.
func BenchKey(i int) string { return fmt.Sprintf("bench:%010d", i) }

// Bench measures Take of one unit on one key at a time, in parallel
// (b.RunParallel), for each key cardinality of Harness.BenchKeys
// (sub-benchmarks keys=1, keys=10000, keys=1000000). Before timing, it
// takes from every key once and checks through Peek that a sample of them
// (all, up to 10 000) hold state, so the figures are those of a store that
// really holds that many keys. Stores are created with a nil clock (their
// own).
func Bench(b *testing.B, h Harness) {
	h.defaults(b)
	l, err := algo.Compile(BenchLimit)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range h.BenchKeys {
		// The store is populated once per cardinality, outside the timed
		// runs: b.Run calls its function again for every b.N.
		st := h.open(b, nil)
		keys := make([]string, n)
		for i := range keys {
			keys[i] = BenchKey(i)
		}
		Populate(b, st, l, keys)
		b.Run("keys="+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			var seq atomic.Uint64
			b.RunParallel(func(pb *testing.PB) {
				reqs := []store.Request{{Limit: l, Cost: 1}}
				out := make([]algo.Decision, 1)
				// Each goroutine walks the keys from its own start with a
				// stride prime to any power of two, so goroutines rarely
				// meet on a key and the access pattern defeats prefetching.
				i := int(seq.Add(1)*7919) % n
				ctx := b.Context()
				for pb.Next() {
					reqs[0].Key = keys[i]
					if _, err := st.Take(ctx, reqs, out); err != nil {
						b.Error(err)
						return
					}
					if !out[0].Allowed {
						b.Error("the bench limit refused a take")
						return
					}
					if i += 104729; i >= n {
						i %= n
					}
				}
			})
		})
		_ = st.Close()
	}
}

// Populate takes one unit from every key and then checks, with Peek, that
// a sample of the keys (every key up to 10 000, an even spread beyond) holds
// the charge: a benchmark over keys that were never stored would measure an
// empty store.
func Populate(tb testing.TB, st store.Store, l *algo.Limit, keys []string) {
	tb.Helper()
	ctx := tb.Context()
	out := make([]algo.Decision, 1)
	for _, k := range keys {
		if _, err := st.Take(ctx, []store.Request{{Key: k, Limit: l, Cost: 1}}, out); err != nil {
			tb.Fatalf("populate %s: %v", k, err)
		}
	}
	step := max(1, len(keys)/10_000)
	for i := 0; i < len(keys); i += step {
		if err := st.Peek(ctx, []store.Request{{Key: keys[i], Limit: l, Cost: 0}}, out); err != nil {
			tb.Fatalf("check %s: %v", keys[i], err)
		}
		if out[0].Remaining >= l.Capacity() {
			tb.Fatalf("key %s was not populated: Remaining %d is the full capacity", keys[i], out[0].Remaining)
		}
	}
}
