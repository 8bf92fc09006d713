package memory_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/storetest"
)

func mustLimit(tb testing.TB, p algo.Params) *algo.Limit {
	tb.Helper()
	l, err := algo.Compile(p)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

func mustStore(tb testing.TB, opts ...memory.Option) *memory.Store {
	tb.Helper()
	st, err := memory.New(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = st.Close() })
	return st
}

func take(tb testing.TB, st store.Store, key string, l *algo.Limit, cost int64) algo.Decision {
	tb.Helper()
	out := make([]algo.Decision, 1)
	if _, err := st.Take(tb.Context(), []store.Request{{Key: key, Limit: l, Cost: cost}}, out); err != nil {
		tb.Fatal(err)
	}
	return out[0]
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, o := range []memory.Option{
		memory.WithShards(0),
		memory.WithShards(memory.MaxShards + 1),
		memory.WithMaxKeys(-1),
		memory.WithSweepInterval(-time.Second),
	} {
		if _, err := memory.New(o); !errors.Is(err, memory.ErrInvalidOption) {
			t.Errorf("New with a bad option: error %v, want one wrapping ErrInvalidOption", err)
		}
	}
}

// TestJanitor checks under synctest's fake time that the janitor removes a
// key once its state has expired, and that Close stops it (synctest fails
// the test if its goroutine outlives the bubble).
func TestJanitor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, err := memory.New(memory.WithSweepInterval(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		l := mustLimit(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 5, Period: 10 * time.Second})
		take(t, st, "a", l, 1)
		if got := st.Stats(); got.Keys != 1 {
			t.Fatalf("after one take: Stats = %+v, want 1 key", got)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got := st.Stats(); got.Keys != 1 || got.Expired != 0 {
			t.Fatalf("before the window ends: Stats = %+v, want the key kept", got)
		}
		time.Sleep(6 * time.Second) // past the window's end and one sweep
		synctest.Wait()
		if got := st.Stats(); got.Keys != 0 || got.Expired != 1 {
			t.Fatalf("after the window ended: Stats = %+v, want 0 keys, 1 expired", got)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		if err := st.Close(); err != nil {
			t.Errorf("second Close = %v, want nil", err)
		}
	})
}

func TestSweep(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	st := mustStore(t, memory.WithClock(clock.Now), memory.WithSweepInterval(0))
	short := mustLimit(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Second})
	long := mustLimit(t, algo.Params{Algorithm: algo.SlidingLog, Limit: 3, Period: time.Hour})
	for i := range 10 {
		take(t, st, fmt.Sprint("short", i), short, 1)
		take(t, st, fmt.Sprint("long", i), long, 1)
	}
	clock.Advance(time.Second)
	if n := st.Sweep(); n != 10 {
		t.Errorf("Sweep after 1s removed %d keys, want the 10 refilled buckets", n)
	}
	if got := st.Stats(); got.Keys != 10 || got.Expired != 10 {
		t.Errorf("Stats = %+v, want 10 keys, 10 expired", got)
	}
}

// TestEvictionPolicy fills a one-shard store capped at 4 keys, so that the
// sample of 5 sees every key: a new key must evict an expired key first,
// else the one whose state expires soonest.
func TestEvictionPolicy(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	st := mustStore(t, memory.WithClock(clock.Now), memory.WithShards(1), memory.WithMaxKeys(4), memory.WithSweepInterval(0))
	fw := mustLimit(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Hour})
	tb := mustLimit(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Hour})
	take(t, st, "window", fw, 1) // expires at the end of the hour
	take(t, st, "soon", tb, 1)   // refills in 6 minutes
	take(t, st, "later", tb, 5)  // refills in 30 minutes
	take(t, st, "latest", tb, 9) // refills in 54 minutes
	take(t, st, "new1", tb, 9)
	if got := st.Stats(); got.Keys != 4 || got.Evictions != 1 {
		t.Fatalf("Stats = %+v, want 4 keys, 1 eviction", got)
	}
	if d := take(t, st, "soon", tb, 1); d.Remaining != 9 {
		t.Errorf("the key closest to full should have been evicted: soon has %d remaining after 1, want 9 of a fresh 10", d.Remaining)
	}
	// "soon" came back and evicted the next closest to full: "later".
	if d := take(t, st, "later", tb, 0); d.Remaining != 10 {
		t.Errorf("later should have been evicted: Remaining %d, want a fresh 10", d.Remaining)
	}
	if d := take(t, st, "latest", tb, 0); d.Remaining != 1 {
		t.Errorf("latest was evicted: Remaining %d, want 1", d.Remaining)
	}
	if got := st.Stats(); got.Keys != 4 || got.Evictions != 2 {
		t.Fatalf("Stats = %+v, want 4 keys, 2 evictions", got)
	}
	// An expired key goes first, counted as expired, not evicted.
	clock.Advance(time.Hour)
	take(t, st, "new2", tb, 1)
	if got := st.Stats(); got.Evictions != 2 || got.Expired != 1 {
		t.Errorf("Stats = %+v, want 2 evictions and 1 expired", got)
	}
}

func TestTakeKeyMatchesTake(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	st := mustStore(t, memory.WithClock(clock.Now))
	l := mustLimit(t, algo.Params{Algorithm: algo.GCRA, Limit: 3, Period: time.Second})
	ctx := t.Context()
	for i := range 5 {
		var d algo.Decision
		at, err := st.TakeKey(ctx, &d, "api:", "alice", l, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if at != clock.Now().UnixMicro() {
			t.Errorf("TakeKey at = %d, want the clock's %d", at, clock.Now().UnixMicro())
		}
		if want := i < 3; d.Allowed != want {
			t.Errorf("TakeKey %d: allowed %v, want %v", i, d.Allowed, want)
		}
	}
	if d := take(t, st, "api:alice", l, 1); d.Allowed {
		t.Error("Take on the key TakeKey spent was admitted: they do not share state")
	}
	long := make([]byte, 300)
	for i := range long {
		long[i] = 'x'
	}
	var d algo.Decision
	if _, err := st.TakeKey(ctx, &d, "p:", string(long), l, 1, 0); err != nil || !d.Allowed {
		t.Errorf("TakeKey with a 302-byte key = %+v, %v", d, err)
	}
	if _, err := st.TakeKey(ctx, &d, "", "", l, 1, 0); !errors.Is(err, store.ErrBadRequest) {
		t.Errorf("TakeKey with an empty key: %v, want ErrBadRequest", err)
	}
	if _, err := st.TakeKey(ctx, &d, "a", "b", nil, 1, 0); !errors.Is(err, store.ErrBadRequest) {
		t.Errorf("TakeKey with a nil limit: %v, want ErrBadRequest", err)
	}
}

// TestReconfiguredKey checks that a key whose limit changes algorithm is
// read as fresh, not misread.
func TestReconfiguredKey(t *testing.T) {
	st := mustStore(t)
	tb := mustLimit(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 2, Period: time.Hour})
	log := mustLimit(t, algo.Params{Algorithm: algo.SlidingLog, Limit: 5, Period: time.Hour})
	take(t, st, "k", tb, 2)
	if d := take(t, st, "k", log, 1); !d.Allowed || d.Remaining != 4 {
		t.Errorf("first take under the new algorithm = %+v, want allowed with 4 remaining", d)
	}
	if d := take(t, st, "k", tb, 1); !d.Allowed {
		t.Errorf("back to the token bucket = %+v, want a fresh bucket", d)
	}
}

func TestInspect(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	st := mustStore(t, memory.WithClock(clock.Now))
	l := mustLimit(t, algo.Params{Algorithm: algo.SlidingLog, Limit: 5, Period: time.Second})
	take(t, st, "k", l, 2)
	s, ok, err := st.Inspect(t.Context(), "k")
	if err != nil || !ok || len(s.Ext) != 2 {
		t.Fatalf("Inspect = %+v, %v, %v; want a log of 2", s, ok, err)
	}
	s.Ext[0] = 0 // a copy: must not reach the store
	if d := take(t, st, "k", l, 0); d.Remaining != 3 {
		t.Errorf("after mutating Inspect's copy: Remaining %d, want 3", d.Remaining)
	}
	clock.Advance(time.Second)
	if _, ok, _ := st.Inspect(t.Context(), "k"); ok {
		t.Error("Inspect reports an expired key")
	}
	if _, _, err := st.Inspect(t.Context(), ""); !errors.Is(err, store.ErrBadRequest) {
		t.Errorf("Inspect of an empty key: %v, want ErrBadRequest", err)
	}
}

// TestHotPathAllocs holds the store to zero allocations per Take and
// TakeKey on a key that exists, for the fixed-size algorithms.
func TestHotPathAllocs(t *testing.T) {
	st := mustStore(t)
	ctx := t.Context()
	for _, k := range []algo.Kind{algo.FixedWindow, algo.SlidingWindow, algo.TokenBucket, algo.GCRA, algo.Shaper, algo.SmoothBursty} {
		p := algo.Params{Algorithm: k, Limit: 1 << 30, Period: time.Second}
		if k == algo.TokenBucket || k == algo.GCRA || k == algo.Shaper {
			p.Burst = 1 << 20
		}
		if k == algo.SmoothBursty {
			p.Limit = 1_000_000 // at most one permit per µs
		}
		l := mustLimit(t, p)
		reqs := []store.Request{{Key: "alloc:" + k.String(), Limit: l, Cost: 1}}
		out := make([]algo.Decision, 1)
		if _, err := st.Take(ctx, reqs, out); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(100, func() { _, _ = st.Take(ctx, reqs, out) }); n != 0 {
			t.Errorf("%s: Take allocates %v times per call, want 0", k, n)
		}
		if n := testing.AllocsPerRun(100, func() { var d algo.Decision; _, _ = st.TakeKey(ctx, &d, "alloc:", k.String(), l, 1, 0) }); n != 0 {
			t.Errorf("%s: TakeKey allocates %v times per call, want 0", k, n)
		}
		if n := testing.AllocsPerRun(100, func() { _ = st.Peek(ctx, reqs, out) }); n != 0 {
			t.Errorf("%s: Peek allocates %v times per call, want 0", k, n)
		}
	}
}

// BenchmarkTakeKey is the limiter's path: one key made of a prefix and a
// suffix, serially and in parallel on distinct keys.
func BenchmarkTakeKey(b *testing.B) {
	st := mustStore(b)
	l := mustLimit(b, storetest.BenchLimit)
	ctx := b.Context()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		var d algo.Decision
		for b.Loop() {
			if _, err := st.TakeKey(ctx, &d, "bench:", "user-000000001", l, 1, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%09d", i)
	}
	b.Run("keys=10000", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			var d algo.Decision
			for pb.Next() {
				if _, err := st.TakeKey(ctx, &d, "bench:", keys[i], l, 1, 0); err != nil {
					b.Fatal(err)
				}
				if i++; i == len(keys) {
					i = 0
				}
			}
		})
	})
}

// TestExactUnderChurn holds the lock-free index to exactness while it
// changes under the readers: goroutines take from 300 stable keys (5 each
// per hour, the clock standing still) while others create and reset
// thousands of other keys, which grows tables, leaves tombstones and
// rebuilds them, and sweep. Every stable key must admit exactly 5.
func TestExactUnderChurn(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	st := mustStore(t, memory.WithClock(clock.Now), memory.WithShards(4), memory.WithSweepInterval(0))
	l := mustLimit(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 5, Period: time.Hour})
	ctx := t.Context()
	const stable = 300
	admitted := make([]atomic.Int64, stable)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 { // churn
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("churn-%d-%d", g, i%2000)
				take(t, st, k, l, 1)
				if i%3 == 0 {
					_ = st.Reset(ctx, k)
				}
				if g == 0 && i%500 == 0 {
					st.Sweep()
				}
			}
		})
	}
	var takers sync.WaitGroup
	for g := range 8 {
		takers.Go(func() {
			out := make([]algo.Decision, 2)
			for i := range 20 * stable {
				k := (i*7 + g*31) % stable
				reqs := []store.Request{{Key: fmt.Sprint("stable-", k), Limit: l, Cost: 1}}
				if _, err := st.Take(ctx, reqs, out[:1]); err != nil {
					t.Error(err)
					return
				}
				if out[0].Allowed {
					admitted[k].Add(1)
				}
			}
		})
	}
	takers.Wait()
	close(stop)
	wg.Wait()
	for k := range admitted {
		if got := admitted[k].Load(); got != 5 {
			t.Errorf("stable key %d admitted %d, want exactly 5", k, got)
		}
	}
}

// TestSmallCapHoldsItsKeys: a cap of 100 keys without WithShards holds
// 100 keys. Spread over the default 256 shards (one key each) it held far
// fewer: a new key pushed out whichever key shared its shard.
func TestSmallCapHoldsItsKeys(t *testing.T) {
	st := mustStore(t, memory.WithMaxKeys(100), memory.WithSweepInterval(0))
	tb := mustLimit(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Hour})
	for i := range 100 {
		take(t, st, fmt.Sprintf("k%d", i), tb, 1)
	}
	if got := st.Stats(); got.Keys != 100 || got.Evictions != 0 {
		t.Fatalf("Stats = %+v after 100 keys under a cap of 100, want 100 keys and no eviction", got)
	}
	for i := range 100 {
		if d := take(t, st, fmt.Sprintf("k%d", i), tb, 0); d.Remaining != 9 {
			t.Fatalf("k%d: Remaining %d, want 9 (its state kept)", i, d.Remaining)
		}
	}
}
