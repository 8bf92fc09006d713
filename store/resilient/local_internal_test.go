package resilient

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/redis"
)

// downRedis returns a FailLocal Store for instances instances over a
// private redis-server that is stopped once the store is open, with a
// breaker that opens at the first failure: every decision is the local
// store's. It skips without redis-server.
func downRedis(t *testing.T, instances int) *Store {
	t.Helper()
	srv := testserver.NewRedis(t)
	if srv == nil {
		t.Skip("no redis-server")
	}
	inner, err := redis.Open("redis://"+srv.Addr, redis.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(inner, WithPolicy(FailLocal), WithInstances(instances), WithBreaker(1, time.Hour))
	if err != nil {
		inner.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	return s
}

// limits compiles p n times, each a limit of its own as a reload compiles
// the same rule anew.
func limits(tb testing.TB, n int, p algo.Params) []*algo.Limit {
	tb.Helper()
	lims := make([]*algo.Limit, n)
	for i := range lims {
		l, err := algo.Compile(p)
		if err != nil {
			tb.Fatal(err)
		}
		lims[i] = l
	}
	return lims
}

// takeLocal takes 1 on key under l and checks that the local store decided
// it under l's share, whose limit is want.
func takeLocal(t *testing.T, s *Store, key string, l *algo.Limit, want int64) algo.Decision {
	t.Helper()
	out := make([]algo.Decision, 1)
	res, err := s.Take(context.Background(), []store.Request{{Key: key, Limit: l, Cost: 1}}, out)
	if err != nil {
		t.Fatalf("Take(%q): %v", key, err)
	}
	if !res.Fallback || out[0].Limit != want {
		t.Fatalf("Take(%q): fallback %v, limit %d; want the local share %d", key, res.Fallback, out[0].Limit, want)
	}
	return out[0]
}

// sharesKept returns the number of shares in s's current and previous
// generations.
func sharesKept(s *Store) (cur, prev int) {
	return s.shares.Kept()
}

// TestSharesStayBounded: FailLocal compiles each limit's local share once
// and keeps it, keyed by the limit. A server compiles new limits on every
// reload and override, and a request-carried limit past the policy's
// per-configuration cache is compiled per request: the shares of limits
// long gone were kept for as long as the process ran (12288 after 12288
// reloads' worth of limits). Each of the two generations holds at most
// maxShares, so after 20000 limits at most 2·maxShares are kept, and the
// shares still answer right.
func TestSharesStayBounded(t *testing.T) {
	s := downRedis(t, 2)
	const n = 20000
	for i, l := range limits(t, n, algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Hour}) {
		takeLocal(t, s, "k"+strconv.Itoa(i%100), l, 5)
	}
	cur, prev := sharesKept(s)
	if cur > maxShares || prev > maxShares || cur+prev > 2*maxShares {
		t.Fatalf("%d + %d shares kept after %d limits, want at most %d in each generation", cur, prev, n, maxShares)
	}
	if cur+prev < maxShares {
		t.Fatalf("%d + %d shares kept after %d limits, want at least the %d of a full generation", cur, prev, n, maxShares)
	}
}

// TestWorkingSetStaysCompiled: with more live limits than maxShares in an
// outage, the one map of shares was cleared each time it filled, so that
// after a pass over 6000 limits a second pass compiled every share again
// (all 4096 of a working set of maxShares of them, then all 6000), at 11
// allocations each: the cache thrashed exactly when a large deployment was
// in an outage. Kept in two generations, limits that have had one pass
// keep their shares: a second pass over the working set, then over all
// 6000 live limits, compiles none (share returns the same *algo.Limit),
// and a lookup allocates nothing.
func TestWorkingSetStaysCompiled(t *testing.T) {
	s := downRedis(t, 4)
	lims := limits(t, 6000, algo.Params{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Hour})
	compiled := make([]*algo.Limit, len(lims))
	for i, l := range lims { // the warm-up pass
		takeLocal(t, s, "k"+strconv.Itoa(i), l, 250)
		compiled[i] = s.share(l)
	}
	for _, n := range []int{maxShares, len(lims)} {
		again := 0
		for i, l := range lims[:n] {
			takeLocal(t, s, "k"+strconv.Itoa(i), l, 250)
			if s.share(l) != compiled[i] {
				again++
			}
		}
		if again > 0 {
			t.Fatalf("a second pass over %d live limits compiled %d of their shares again, want 0", n, again)
		}
	}
	pass := func() {
		for _, l := range lims {
			s.share(l)
		}
	}
	if a := testing.AllocsPerRun(3, pass); a != 0 {
		t.Fatalf("a pass over %d live limits: %v allocations, want 0", len(lims), a)
	}
}

// TestLiveSetSettles: after 10000 limits no longer in use (a reload's
// worth, say), a set of 2·maxShares live limits turns the generations at
// most twice more: its second pass compiles only the shares its first pass
// lost to the second turn, and its third pass compiles none.
func TestLiveSetSettles(t *testing.T) {
	s := downRedis(t, 4)
	p := algo.Params{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Hour}
	for i, l := range limits(t, 10000, p) {
		takeLocal(t, s, "gone"+strconv.Itoa(i), l, 250)
	}
	live := limits(t, 2*maxShares, p)
	shares := make([]*algo.Limit, len(live))
	again := 0
	for pass := range 3 {
		again = 0
		for i, l := range live {
			takeLocal(t, s, "k"+strconv.Itoa(i), l, 250)
			if d := s.share(l); d != shares[i] {
				shares[i] = d
				again++
			}
		}
		if pass == 0 && again != len(live) {
			t.Fatalf("the first pass compiled %d of %d new shares", again, len(live))
		}
		if pass == 1 && again > maxShares {
			t.Fatalf("the second pass over %d live limits compiled %d of their shares again, want at most the %d of one generation", len(live), again, maxShares)
		}
	}
	if again > 0 {
		t.Fatalf("the third pass over %d live limits compiled %d of their shares again, want 0", len(live), again)
	}
}

// TestDroppedShareKeepsItsCount: a share is the divided limit and holds no
// count; what the local store counted lives under the request's key. A
// share dropped from the cache (two turns of the generations without a
// use) and compiled again therefore gives no fresh budget: a key that spent
// its share (5 of 10 for two instances, refilling one per 4.8 hours) is
// still refused under the recompiled share.
func TestDroppedShareKeepsItsCount(t *testing.T) {
	s := downRedis(t, 2)
	p := algo.Params{Algorithm: algo.GCRA, Limit: 10, Period: 24 * time.Hour}
	l := limits(t, 1, p)[0]
	for i := range 5 {
		if !takeLocal(t, s, "spent", l, 5).Allowed {
			t.Fatalf("take %d of the share of 5 refused", i+1)
		}
	}
	if takeLocal(t, s, "spent", l, 5).Allowed {
		t.Fatal("a 6th take admitted under a share of 5")
	}
	first := s.share(l)
	for i, o := range limits(t, 2*maxShares, p) {
		takeLocal(t, s, "other"+strconv.Itoa(i), o, 5)
	}
	if takeLocal(t, s, "spent", l, 5).Allowed {
		t.Fatal("the spent key admitted after its limit's share was dropped and compiled again")
	}
	if s.share(l) == first {
		t.Fatal("the share was not dropped by 2·maxShares other limits: the test shows nothing")
	}
}

// TestSharesConcurrent: callers that look up shares while others turn the
// generations get each limit's right share, and the bound holds.
func TestSharesConcurrent(t *testing.T) {
	m, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(m, WithPolicy(FailLocal), WithInstances(4))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hot := limits(t, 100, algo.Params{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Hour})
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for w := range 4 {
		cold := limits(t, 3000, algo.Params{Algorithm: algo.FixedWindow, Limit: 400 + int64(w)*4, Period: time.Hour})
		wg.Go(func() {
			for i, l := range cold {
				if got := s.share(l).Params().Limit; got != 100+int64(w) {
					errs <- "cold share limit " + strconv.FormatInt(got, 10) + ", want " + strconv.Itoa(100+w)
					return
				}
				if got := s.share(hot[i%len(hot)]).Params().Limit; got != 250 {
					errs <- "hot share limit " + strconv.FormatInt(got, 10) + ", want 250"
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if cur, prev := sharesKept(s); cur > maxShares || prev > maxShares {
		t.Fatalf("%d + %d shares kept, want at most %d in each generation", cur, prev, maxShares)
	}
}

// BenchmarkShare measures share alone, the lookup of a limit's local share
// that every FailLocal decision makes, with the number of distinct limits
// in use in turn as the dimension: 1, maxShares, 6000, 2·maxShares (all
// fit in the two generations) and 12000 (they do not: each is compiled
// again at its turn). A warm-up pass before the timer compiles the shares.
func BenchmarkShare(b *testing.B) {
	m, err := memory.New()
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(m, WithPolicy(FailLocal), WithInstances(4))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, n := range []int{1, maxShares, 6000, 2 * maxShares, 12000} {
		b.Run("limits="+strconv.Itoa(n), func(b *testing.B) {
			lims := make([]*algo.Limit, n)
			for i := range lims {
				if lims[i], err = algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Hour}); err != nil {
					b.Fatal(err)
				}
			}
			for _, l := range lims {
				if d := s.share(l); d.Params().Limit != 250 {
					b.Fatalf("share limit %d, want 250", d.Params().Limit)
				}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				s.share(lims[i%n])
				i++
			}
		})
	}
}
