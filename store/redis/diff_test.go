package redis

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/storetest"
)

// The differential test: traces run through the Go reference
// (storetest.Reference: algo's pure functions on local states, with the
// store rules storetest documents)
// and through the Lua scripts with explicit times, and every decision,
// every Result and every state read back by Inspect must be identical.

// clock is a settable test clock.
type clock struct{ us atomic.Int64 }

func (c *clock) Now() time.Time { return time.UnixMicro(c.us.Load()) }

// diffParams are the limits of the differential test: every algorithm,
// with the options that change its math.
func diffParams() []algo.Params {
	sec, ms := time.Second, time.Millisecond
	three, zero := int64(3), int64(0)
	return []algo.Params{
		{Algorithm: algo.FixedWindow, Limit: 5, Period: sec},
		{Algorithm: algo.FixedWindow, Limit: 3, Period: 700 * ms},
		{Algorithm: algo.FixedWindow, Limit: 4, Calendar: algo.CalendarMonth},
		{Algorithm: algo.FixedWindow, Limit: 4, Calendar: algo.CalendarYear},
		{Algorithm: algo.SlidingLog, Limit: 5, Period: sec},
		{Algorithm: algo.SlidingLog, Limit: 2, Period: 333 * ms},
		{Algorithm: algo.SlidingWindow, Limit: 7, Period: sec},
		{Algorithm: algo.SlidingWindow, Limit: 10, Period: sec, SubWindows: 4},
		{Algorithm: algo.SlidingWindow, Limit: 9, Period: 2800 * ms, SubWindows: 7},
		{Algorithm: algo.TokenBucket, Limit: 5, Period: sec},
		{Algorithm: algo.TokenBucket, Limit: 3, Period: sec, Burst: 6, InitialTokens: &three},
		{Algorithm: algo.TokenBucket, Limit: 7, Period: 3 * sec, Burst: 2, InitialTokens: &zero},
		{Algorithm: algo.TokenBucket, Limit: 4, Period: sec, Burst: 3, InitialTokens: &zero, Retain: 700 * ms},
		{Algorithm: algo.GCRA, Limit: 4, Period: sec, Burst: 2},
		{Algorithm: algo.GCRA, Limit: 1000, Period: 7 * sec},
		{Algorithm: algo.Shaper, Limit: 5, Period: sec, Burst: 3, Delay: 1},
		{Algorithm: algo.Shaper, Limit: 3, Period: 900 * ms, Burst: 4},
		{Algorithm: algo.SmoothBursty, Limit: 5, Period: sec, MaxWait: 300 * ms},
		{Algorithm: algo.SmoothBursty, Limit: 7, Period: 3 * sec, MaxBurstSeconds: 2.5},
		{Algorithm: algo.SmoothBursty, Limit: 4, Period: sec, MaxBurstSeconds: 0.5, Retain: 400 * ms},
		{Algorithm: algo.SmoothWarmup, Limit: 5, Period: sec, WarmupPeriod: 2 * sec, MaxWait: 500 * ms},
		{Algorithm: algo.SmoothWarmup, Limit: 3, Period: 700 * ms, WarmupPeriod: 1300 * ms, ColdFactor: 4.5, MaxWait: sec},
		{Algorithm: algo.Concurrency, Limit: 3, LeaseTTL: 800 * ms},
		{Algorithm: algo.Concurrency, Limit: 5, Period: 2 * sec},
	}
}

func TestDifferentialRandom(t *testing.T) {
	url := redisURL(t)
	ops := 1500
	if testing.Short() {
		ops = 300
	}
	for i, p := range diffParams() {
		l, err := algo.Compile(p)
		if err != nil {
			t.Fatalf("Compile(%+v): %v", p, err)
		}
		type variant struct {
			name string
			opts []Option
		}
		variants := []variant{{"", nil}}
		if loneSpec(l) != "" {
			// A lone take runs lua/take.lua; as part of a batch, a single-key
			// take of these algorithms runs lua/takes.lua: hold both to algo.
			variants = append(variants, variant{"_batched", []Option{withoutLoneTake()}})
		}
		for _, v := range variants {
			t.Run(fmt.Sprintf("%d_%s%s", i, l, v.name), func(t *testing.T) {
				t.Parallel()
				seed := uint64(time.Now().UnixNano())
				if v, err := strconv.ParseUint(os.Getenv("FLOODGATE_DIFF_SEED"), 10, 64); err == nil {
					seed = v
				}
				t.Logf("seed %d (set FLOODGATE_DIFF_SEED to replay)", seed)
				runDiff(t, url, l, rand.New(rand.NewPCG(seed, uint64(i))), ops, v.opts...)
			})
		}
	}
}

// runDiff runs one random trace of takes on one or several keys (same hash
// tag), peeks, refunds, releases, renewals, resets and clock steps (forward, zero
// and sometimes backward) and compares everything.
func runDiff(t *testing.T, url string, l *algo.Limit, rng *rand.Rand, ops int, opts ...Option) {
	trace := os.Getenv("FLOODGATE_DIFF_TRACE") != ""
	ck := new(clock)
	start := time.Date(2025, time.December, 31, 23, 59, 58, 0, time.UTC).UnixMicro()
	ck.us.Store(start + rng.Int64N(2e6))
	s := openT(t, url, append([]Option{WithTestClock(ck.Now), withTestTTLFloor(time.Hour)}, opts...)...)
	ns := fmt.Sprintf("{diff%s/%s}:", runID, t.Name())
	keys := []string{ns + "a", ns + "b", ns + "c"}
	ref := storetest.NewReference()
	lastAt := map[string]int64{}
	capacity := l.Capacity()
	cost := func() int64 {
		switch n := rng.IntN(20); {
		case n == 0:
			return 0
		case n == 1:
			// Past what can ever pass: the capacity, or the Smooth
			// algorithms' MaxCost, by up to 3.
			return max(capacity, l.MaxCost()) + 1 + rng.Int64N(3)
		case n == 2:
			return l.MaxCost() - rng.Int64N(2) // at the bound
		case n < 12:
			return 1
		default:
			return 1 + rng.Int64N(max(capacity, 1))
		}
	}
	period := int64(l.Window(ck.us.Load()) / time.Microsecond)
	for i := 0; i < ops; i++ {
		now := ck.us.Load()
		where := fmt.Sprintf("op %d at +%dµs", i, now-start)
		if trace {
			t.Logf("%s", where)
			for _, key := range keys {
				st, _, _ := s.Inspect(t.Context(), key)
				refState, _ := ref.Stored(key)
				t.Logf("    %s store %+v ref %+v", key[len(ns):], st, refState)
			}
		}
		switch n := rng.IntN(100); {
		case n < 40:
			q := store.Request{Key: keys[rng.IntN(len(keys))], Limit: l, Cost: cost(), Lease: uint64(rng.IntN(4))}
			ok, want := ref.Take([]store.Request{q}, now)
			if trace {
				t.Logf("  take %s cost %d lease %d -> %v", q.Key[len(ns):], q.Cost, q.Lease, ok)
			}
			out := make([]algo.Decision, 1)
			res, err := s.Take(t.Context(), []store.Request{q}, out)
			if err != nil {
				t.Fatalf("%s: Take: %v", where, err)
			}
			if res.At != now || res.Allowed != ok || out[0] != want[0] {
				t.Fatalf("%s: Take(%s, cost %d, lease %d) = %+v %+v, reference %v %+v", where, q.Key, q.Cost, q.Lease, res, out[0], ok, want[0])
			}
			if ok {
				lastAt[q.Key] = now
			}
		case n < 55:
			m := 2 + rng.IntN(3)
			reqs := make([]store.Request, m)
			for j := range reqs {
				reqs[j] = store.Request{Key: keys[rng.IntN(len(keys))], Limit: l, Cost: cost() % (capacity + 1), Lease: uint64(rng.IntN(4))}
			}
			ok, want := ref.Take(reqs, now)
			if trace {
				for _, q := range reqs {
					t.Logf("  multi %s cost %d lease %d", q.Key[len(ns):], q.Cost, q.Lease)
				}
				t.Logf("  -> %v", ok)
			}
			out := make([]algo.Decision, m)
			res, err := s.Take(t.Context(), reqs, out)
			if err != nil {
				t.Fatalf("%s: Take: %v", where, err)
			}
			if res.Allowed != ok || !slices.Equal(out, want) {
				t.Fatalf("%s: Take(%+v) = %v %+v, reference %v %+v", where, reqs, res.Allowed, out, ok, want)
			}
			if ok {
				for _, q := range reqs {
					lastAt[q.Key] = now
				}
			}
		case n < 65:
			q := store.Request{Key: keys[rng.IntN(len(keys))], Limit: l, Cost: cost()}
			out := make([]algo.Decision, 1)
			if err := s.Peek(t.Context(), []store.Request{q}, out); err != nil {
				t.Fatalf("%s: Peek: %v", where, err)
			}
			if want := ref.Peek(q, now); out[0] != want {
				t.Fatalf("%s: Peek(%s, cost %d) = %+v, reference %+v", where, q.Key, q.Cost, out[0], want)
			}
		case n < 72:
			key := keys[rng.IntN(len(keys))]
			q := store.Request{Key: key, Limit: l, Cost: 1 + rng.Int64N(3), At: lastAt[key]}
			ref.Refund(q, now)
			if trace {
				t.Logf("  refund %s cost %d at %d", q.Key[len(ns):], q.Cost, q.At)
			}
			if err := s.Refund(t.Context(), []store.Request{q}); err != nil {
				t.Fatalf("%s: Refund: %v", where, err)
			}
		case n < 77:
			q := store.Request{Key: keys[rng.IntN(len(keys))], Limit: l, Lease: uint64(rng.IntN(4))}
			ref.Release(q, now)
			if err := s.Release(t.Context(), []store.Request{q}); err != nil {
				t.Fatalf("%s: Release: %v", where, err)
			}
		case n < 80:
			q := store.Request{Key: keys[rng.IntN(len(keys))], Limit: l, Lease: uint64(rng.IntN(4))}
			ref.Renew(q, now)
			if trace {
				t.Logf("  renew %s lease %d", q.Key[len(ns):], q.Lease)
			}
			if err := s.Renew(t.Context(), []store.Request{q}); err != nil {
				t.Fatalf("%s: Renew: %v", where, err)
			}
		case n < 82:
			key := keys[rng.IntN(len(keys))]
			ref.Reset(key)
			delete(lastAt, key)
			if err := s.Reset(t.Context(), key); err != nil {
				t.Fatalf("%s: Reset: %v", where, err)
			}
		default:
			var d int64
			switch rng.IntN(12) {
			case 0:
				d = period + rng.Int64N(period)
			case 1, 2:
				d = 0
			case 3:
				d = -rng.Int64N(period / 3) // the clock steps back
			case 4:
				d = rng.Int64N(5)
			default:
				d = rng.Int64N(period / 4)
			}
			ck.us.Add(d)
			continue
		}
		for _, key := range keys {
			compareState(t, where, s, ref, key, l, ck.us.Load())
		}
	}
}

// compareState checks that Inspect reads back the reference's state.
func compareState(t *testing.T, where string, s *Store, ref *storetest.Reference, key string, l *algo.Limit, now int64) {
	t.Helper()
	got, found, err := s.Inspect(t.Context(), key)
	if err != nil {
		t.Fatalf("%s: Inspect(%s): %v", where, key, err)
	}
	want, live := ref.Stored(key)
	if live && l.ExpiresAt(want) <= now {
		live = false
	}
	if !live {
		if found && l.ExpiresAt(&got) > now {
			t.Fatalf("%s: %s: the store holds live state %+v, the reference none", where, key, got)
		}
		return
	}
	if !found {
		t.Fatalf("%s: %s: the store holds no state, the reference %+v", where, key, *want)
	}
	w := want.Clone()
	if l.Algorithm() == algo.Concurrency {
		sortPairs(got.Ext)
		sortPairs(w.Ext)
	}
	if l.Algorithm() == algo.SlidingWindow && len(w.Ext) == 0 {
		w.Ext = nil
	}
	if got.A != w.A || got.B != w.B || got.C != w.C || !slices.Equal(got.Ext, w.Ext) {
		t.Fatalf("%s: %s: store state %+v, reference %+v", where, key, got, w)
	}
}

// sortPairs orders (lease, expiry) pairs by expiry, then lease.
func sortPairs(ext []int64) {
	type pair struct{ lease, exp int64 }
	ps := make([]pair, len(ext)/2)
	for i := range ps {
		ps[i] = pair{ext[2*i], ext[2*i+1]}
	}
	slices.SortFunc(ps, func(a, b pair) int {
		if a.exp != b.exp {
			return int(a.exp - b.exp)
		}
		return int(a.lease - b.lease)
	})
	for i, p := range ps {
		ext[2*i], ext[2*i+1] = p.lease, p.exp
	}
}

// TestDifferentialScripted runs hand-picked traces at the edges of the
// arithmetic through the reference and the scripts: calendar boundaries (leap
// years, December to January), times past 2^53µs and before the epoch
// (clamped), levels near 2^53 unit·µs, and refusals whose retry lies in a
// later sub-window.
func TestDifferentialScripted(t *testing.T) {
	url := redisURL(t)
	day := 24 * time.Hour
	at := func(y int, m time.Month, d, h int) int64 {
		return time.Date(y, m, d, h, 0, 0, 0, time.UTC).UnixMicro()
	}
	const maxT = 1<<53 - 1
	type step struct {
		now, cost int64
	}
	steps := func(start, every int64, n int, cost int64) []step {
		var s []step
		for i := 0; i < n; i++ {
			s = append(s, step{start + int64(i)*every, cost})
		}
		return s
	}
	for _, tc := range []struct {
		name  string
		p     algo.Params
		steps []step
	}{
		{"month_leap_february", algo.Params{Algorithm: algo.FixedWindow, Limit: 3, Calendar: algo.CalendarMonth},
			steps(at(2028, time.February, 28, 0), int64(12*time.Hour/time.Microsecond), 8, 1)},
		{"month_december_january", algo.Params{Algorithm: algo.FixedWindow, Limit: 2, Calendar: algo.CalendarMonth},
			steps(at(2027, time.December, 30, 12), int64(day/time.Microsecond), 5, 1)},
		{"year_boundary", algo.Params{Algorithm: algo.FixedWindow, Limit: 2, Calendar: algo.CalendarYear},
			steps(at(2099, time.December, 31, 22), int64(time.Hour/time.Microsecond), 5, 1)},
		{"end_of_time", algo.Params{Algorithm: algo.TokenBucket, Limit: 3, Period: time.Second},
			[]step{{maxT - 10, 1}, {maxT, 1}, {maxT + 5_000_000, 1}, {1 << 62, 2}, {maxT, 1}}},
		{"before_epoch", algo.Params{Algorithm: algo.SlidingLog, Limit: 2, Period: time.Second},
			[]step{{-5_000_000, 1}, {0, 1}, {-1, 1}, {1_000_000, 1}, {1_000_001, 2}}},
		// capacity × period = 8.64e15 unit·µs, just under 2^53.
		{"huge_level", algo.Params{Algorithm: algo.GCRA, Limit: 1, Period: 1000 * time.Hour, Burst: 2400},
			steps(at(2030, time.May, 5, 5), 1, 6, 500)},
		{"window_retry_later_subwindow", algo.Params{Algorithm: algo.SlidingWindow, Limit: 10, Period: 7 * time.Second, SubWindows: 7},
			append(steps(at(2026, time.July, 1, 0), 900_000, 10, 1), step{at(2026, time.July, 1, 0) + 9_000_001, 3})},
		// Remaining as the admission test sees it, where floor(limit −
		// est) rounds one off: 2277450 at the last instant, though 2277451
		// is admitted; likewise at a limit near 2^52 (…921 for …922).
		{"window_remaining_rounding", algo.Params{Algorithm: algo.SlidingWindow, Limit: 5_325_637, Period: 168 * time.Hour},
			[]step{{1703721600000000, 184}, {1704326400000000, 3_048_186}, {1704931199999998, 2_277_452}, {1704931199999998, 2_277_451}, {1704931199999998, 1}}},
		{"window_remaining_rounding_2^52", algo.Params{Algorithm: algo.SlidingWindow, Limit: 4588007469977432, Period: 1047037539973 * time.Microsecond},
			[]step{{3680190245432463, 4588007469977432}, {3680723766269922, 1694974707934923}, {3680723766269922, 1694974707934922}, {3680723766269922, 1}}},
		{"smooth_cold_start", algo.Params{Algorithm: algo.SmoothWarmup, Limit: 10, Period: time.Second, WarmupPeriod: 3 * time.Second, ColdFactor: 7, MaxWait: 2 * time.Second},
			steps(at(2026, time.March, 3, 3), 37_000, 12, 1)},
		// A window ending past 2^53µs: 3 × 3002399751580331 = 2^53+1,
		// which a double rounds to 2^53 (Reset and RetryAfter 1µs short).
		{"window_end_past_2^53", algo.Params{Algorithm: algo.FixedWindow, Limit: 2, Period: 3002399751580331 * time.Microsecond},
			steps(2*3002399751580331+10, 1000, 3, 1)},
		// A rate past 2^52 units per µs: the ceiling divisions' a + rate - 1
		// lies past 2^53, where a double rounds it.
		{"rate_past_2^52", algo.Params{Algorithm: algo.TokenBucket, Limit: 1<<52 + 2, Period: time.Microsecond},
			[]step{{1_000_000, 1<<52 + 2}, {1_000_000, 1<<52 + 2}, {1_000_001, 1<<52 + 2}, {1_000_001, 3}}},
		// A ticket pushed 136 years ahead. (One pushed past 2^53µs, which
		// algo saturates at 2^53-1, reports a reset beyond 2^53 that a
		// double cannot hold to the µs: not a trace this test can hold
		// Lua to.)
		{"smooth_huge_cost", algo.Params{Algorithm: algo.SmoothBursty, Limit: 2, Period: time.Second, MaxWait: time.Hour},
			[]step{{1_000_000, 1 << 33}, {2_000_000, 1}, {3_000_000_000_000, 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := algo.Compile(tc.p)
			if err != nil {
				t.Fatal(err)
			}
			ck := new(clock)
			s := openT(t, url, WithTestClock(ck.Now), withTestTTLFloor(time.Hour))
			key := fmt.Sprintf("{scripted%s}:%s", runID, tc.name)
			ref := storetest.NewReference()
			for i, st := range tc.steps {
				ck.us.Store(st.now)
				now := min(max(st.now, 0), maxT)
				q := store.Request{Key: key, Limit: l, Cost: st.cost}
				ok, want := ref.Take([]store.Request{q}, now)
				out := make([]algo.Decision, 1)
				res, err := s.Take(t.Context(), []store.Request{q}, out)
				if err != nil {
					t.Fatalf("step %d: Take: %v", i, err)
				}
				if res.Allowed != ok || out[0] != want[0] {
					t.Fatalf("step %d at %d: Take(cost %d) = %v %+v, reference %v %+v", i, st.now, st.cost, res.Allowed, out[0], ok, want[0])
				}
				compareState(t, fmt.Sprintf("step %d", i), s, ref, key, l, now)
				// A peek runs lua/main.lua, where a lone take of a fixed
				// window or a bucket runs lua/take.lua.
				peek := make([]algo.Decision, 1)
				if err := s.Peek(t.Context(), []store.Request{q}, peek); err != nil {
					t.Fatalf("step %d: Peek: %v", i, err)
				}
				if want := ref.Peek(q, now); peek[0] != want {
					t.Fatalf("step %d at %d: Peek(cost %d) = %+v, reference %+v", i, st.now, st.cost, peek[0], want)
				}
			}
		})
	}
}

// TestDifferentialTTL: a key that idled past the instant it was full and
// is taken again gets the TTL algo's ExpiresAt gives, from every script
// that writes it (take.lua, takes.lua, main.lua's handlers): for a limit
// whose fresh state is short, the time until full plus Retain; for the
// others, the time until full.
func TestDifferentialTTL(t *testing.T) {
	url := redisURL(t)
	zero := int64(0)
	sec := time.Second
	for _, p := range []algo.Params{
		{Algorithm: algo.TokenBucket, Limit: 10, Period: sec, InitialTokens: &zero}, // Retain: an hour
		{Algorithm: algo.TokenBucket, Limit: 10, Period: sec, Burst: 20, InitialTokens: &zero, Retain: 90 * sec},
		{Algorithm: algo.SmoothBursty, Limit: 5, Period: sec}, // Retain: an hour
		{Algorithm: algo.SmoothBursty, Limit: 5, Period: sec, Retain: 90 * sec},
		{Algorithm: algo.GCRA, Limit: 10, Period: sec, Burst: 20}, // fresh is full: nothing retained
	} {
		l, err := algo.Compile(p)
		if err != nil {
			t.Fatal(err)
		}
		type variant struct {
			name string
			opts []Option
			pair bool // a take over two keys: main.lua
		}
		variants := []variant{{"main", nil, true}}
		if loneSpec(l) != "" {
			variants = append(variants, variant{"lone", nil, false}, variant{"batched", []Option{withoutLoneTake()}, false})
		}
		for _, v := range variants {
			t.Run(fmt.Sprintf("%s_retain_%v_%s", l, l.Params().Retain, v.name), func(t *testing.T) {
				t.Parallel()
				ck := new(clock)
				start := time.Date(2026, time.May, 4, 3, 2, 1, 0, time.UTC).UnixMicro()
				s := openT(t, url, append([]Option{WithTestClock(ck.Now)}, v.opts...)...)
				ns := fmt.Sprintf("{ttl%s/%s}:", runID, t.Name())
				ref := storetest.NewReference()
				take := func(now int64) {
					t.Helper()
					ck.us.Store(now)
					reqs := []store.Request{{Key: ns + "k", Limit: l, Cost: 1}}
					if v.pair {
						reqs = append(reqs, store.Request{Key: ns + "other", Limit: l, Cost: 0})
					}
					ok, want := ref.Take(reqs, now)
					out := make([]algo.Decision, len(reqs))
					res, err := s.Take(t.Context(), reqs, out)
					if err != nil {
						t.Fatalf("Take at +%dµs: %v", now-start, err)
					}
					if res.Allowed != ok || !slices.Equal(out, want) {
						t.Fatalf("Take at +%dµs = %v %+v, reference %v %+v", now-start, res.Allowed, out, ok, want)
					}
				}
				take(start)
				now := start + 2_500_000 // idle 2.5s: full since 1s (1.2s for smooth_bursty)
				take(now)
				if d := ref.Peek(store.Request{Key: ns + "k", Limit: l}, now); d.Remaining != l.Capacity()-1 {
					t.Fatalf("after idling and a take of 1, the reference has Remaining %d, want %d", d.Remaining, l.Capacity()-1)
				}
				exp := ref.ExpiresAt(ns+"k", l)
				// The script's TTL: whole ms up from ExpiresAt - now, at
				// least WithTestClock's floor of 1s.
				want := max(time.Duration((exp-now+999)/1000)*time.Millisecond, time.Second)
				ttl, ok := pttl(t, s, ns+"k")
				if !ok || ttl > want || ttl < want-time.Second {
					t.Errorf("TTL = %v (exists %v), want %v (ExpiresAt - now, at least 1s)", ttl, ok, want)
				}
				if r := l.Params().Retain; ttl < r {
					t.Errorf("TTL = %v, shorter than Retain %v: the key would be forgotten while it is full", ttl, r)
				}
			})
		}
	}
}
