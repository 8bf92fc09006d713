package region_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testclock"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/region"
	"github.com/floodgate/floodgate/store/resilient"
	"github.com/floodgate/floodgate/store/storeurl"
)

// fakeClock is a clock that moves only when told to.
type fakeClock = testclock.Clock

func newClock() *fakeClock { return testclock.New() }

func compile(t testing.TB, p algo.Params) *algo.Limit {
	t.Helper()
	l, err := algo.Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// quota is a limit of n units that does not refill while a test runs: a
// day's worth of a token bucket, GCRA or sliding log (no window edge to
// cross, whatever the time of day).
func quota(t testing.TB, kind algo.Kind, n int64) *algo.Limit {
	return compile(t, algo.Params{Algorithm: kind, Limit: n, Period: 24 * time.Hour})
}

// noClose keeps a store shared by several region stores (the processes of
// one region) open until the test ends.
type noClose struct{ store.Store }

func (noClose) Close() error { return nil }

func openRedis(t testing.TB, addr string) store.Store {
	t.Helper()
	r, err := redis.Open("redis://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func take(t testing.TB, s store.Store, key string, l *algo.Limit, cost int64) (bool, algo.Decision) {
	t.Helper()
	out := make([]algo.Decision, 1)
	res, err := s.Take(context.Background(), []store.Request{{Key: key, Limit: l, Cost: cost}}, out)
	if err != nil {
		t.Fatalf("Take(%q): %v", key, err)
	}
	if res.Allowed != out[0].Allowed {
		t.Fatalf("Take(%q): Result.Allowed %v, decision %+v", key, res.Allowed, out[0])
	}
	return res.Allowed, out[0]
}

// TestSharesAddUp: every algorithm's limit divides into shares whose
// Limit (and Burst, InitialTokens and Delay where used) add up to the
// limit's, by weight, largest remainder first.
func TestSharesAddUp(t *testing.T) {
	clk := newClock()
	mem := func() store.Store {
		m, err := memory.New(memory.WithClock(clk.Now))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	weights := map[string]int{"ap": 1, "eu": 2, "us": 3}
	regions := map[string]*region.Store{}
	for _, self := range []string{"ap", "eu", "us"} {
		var peers []region.Peer
		for _, p := range []string{"ap", "eu", "us"} {
			if p != self {
				peers = append(peers, region.Peer{Name: p, Store: mem()})
			}
		}
		s, err := region.New(self, mem(), peers, region.WithWeights(weights))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		regions[self] = s
	}
	initial := int64(7)
	for _, p := range []algo.Params{
		{Algorithm: algo.FixedWindow, Limit: 100, Period: time.Minute},
		{Algorithm: algo.SlidingWindow, Limit: 7, Period: time.Minute},
		{Algorithm: algo.SlidingLog, Limit: 5, Period: time.Minute},
		{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second, Burst: 23, InitialTokens: &initial},
		{Algorithm: algo.GCRA, Limit: 10, Period: time.Second, Burst: 11},
		{Algorithm: algo.Shaper, Limit: 10, Period: time.Second, Burst: 8, Delay: 5},
		{Algorithm: algo.Concurrency, Limit: 9, LeaseTTL: time.Minute},
		{Algorithm: algo.SmoothBursty, Limit: 60, Period: time.Second},
	} {
		l := compile(t, p)
		var sum algo.Params
		var sumInitial int64
		parts := map[string]int64{}
		for name, s := range regions {
			sh := s.Share(l)
			if sh == nil {
				continue
			}
			q := sh.Params()
			parts[name] = q.Limit
			sum.Limit += q.Limit
			sum.Burst += q.Burst
			sum.Delay += q.Delay
			if q.InitialTokens != nil {
				sumInitial += *q.InitialTokens
			}
		}
		if sum.Limit != p.Limit || sum.Burst != p.Burst || sum.Delay != p.Delay {
			t.Errorf("%v: shares add up to Limit %d Burst %d Delay %d, want %d %d %d (parts %v)",
				p.Algorithm, sum.Limit, sum.Burst, sum.Delay, p.Limit, p.Burst, p.Delay, parts)
		}
		if p.InitialTokens != nil && sumInitial != *p.InitialTokens {
			t.Errorf("%v: initial tokens add up to %d, want %d", p.Algorithm, sumInitial, *p.InitialTokens)
		}
	}
	// 10 by weights 1, 2, 3 of 6: 1.67, 3.33, 5 → 2, 3, 5 (the larger
	// remainder gets the unit left).
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Minute})
	for name, want := range map[string]int64{"ap": 2, "eu": 3, "us": 5} {
		if got := regions[name].Share(l).Params().Limit; got != want {
			t.Errorf("%s's share of 10 by weights %v: %d, want %d", name, weights, got, want)
		}
	}
	// 2 over weights 1, 2, 3: 0.33, 0.67, 1 → 0, 1, 1: ap has none.
	two := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 2, Period: time.Minute})
	if sh := regions["ap"].Share(two); sh != nil {
		t.Errorf("ap's share of 2 by weights %v: %d, want none", weights, sh.Params().Limit)
	}
}

// TestNewRejects: a region list or option that cannot work is an error
// wrapping ErrInvalidOption, and New closes the stores it was given.
func TestNewRejects(t *testing.T) {
	for _, tc := range []struct {
		name  string
		self  string
		peers []string
		opts  []region.Option
		want  string
	}{
		{"no name", "", []string{"eu"}, nil, "this region has no name"},
		{"twice", "us", []string{"eu", "us"}, nil, `region "us" is named twice`},
		{"unnamed peer", "us", []string{""}, nil, "a peer region has no name"},
		{"unknown weight", "us", []string{"eu"}, []region.Option{region.WithWeights(map[string]int{"ap": 2})}, `weight for region "ap"`},
		{"zero weight", "us", []string{"eu"}, []region.Option{region.WithWeights(map[string]int{"eu": 0})}, `region "eu": weight 0`},
		{"slice 1", "us", []string{"eu"}, []region.Option{region.WithSlice(1)}, "slice 1"},
		{"timeout", "us", []string{"eu"}, []region.Option{region.WithTimeout(0)}, "timeout 0s"},
		{"prefetch without slices", "us", []string{"eu"}, []region.Option{region.WithPrefetch()}, "prefetch needs slices"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var closed atomic.Int64
			mk := func() store.Store {
				m, err := memory.New()
				if err != nil {
					t.Fatal(err)
				}
				return closeCounter{m, &closed}
			}
			var peers []region.Peer
			for _, p := range tc.peers {
				peers = append(peers, region.Peer{Name: p, Store: mk()})
			}
			_, err := region.New(tc.self, mk(), peers, tc.opts...)
			if !errors.Is(err, region.ErrInvalidOption) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want ErrInvalidOption saying %q", err, tc.want)
			}
			if n := closed.Load(); n != int64(len(peers)+1) {
				t.Fatalf("New closed %d of the %d stores it was given", n, len(peers)+1)
			}
		})
	}
}

type closeCounter struct {
	store.Store
	n *atomic.Int64
}

func (c closeCounter) Close() error { c.n.Add(1); return c.Store.Close() }

// fleet is several regions over real stores, each with several processes
// (region stores, each with its own connections to its region's store
// and to the peers').
type fleet struct {
	names []string
	addrs map[string]string
	procs map[string][]*region.Store
}

func newFleet(t *testing.T, procs map[string]int, opts ...region.Option) *fleet {
	t.Helper()
	f := &fleet{addrs: map[string]string{}, procs: map[string][]*region.Store{}}
	for name := range procs {
		f.names = append(f.names, name)
		srv := testserver.NewRedis(t)
		if srv == nil {
			t.Skip("no redis-server")
		}
		f.addrs[name] = srv.Addr
	}
	for self, n := range procs {
		for range n {
			var peers []region.Peer
			for _, p := range f.names {
				if p != self {
					peers = append(peers, region.Peer{Name: p, Store: openRedis(t, f.addrs[p])})
				}
			}
			s, err := region.New(self, openRedis(t, f.addrs[self]), peers, opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			f.procs[self] = append(f.procs[self], s)
		}
	}
	return f
}

// hammer runs goroutines per process of each region, each making up to
// attempts Takes of cost 1 on key under l, and returns how many each
// region admitted.
func (f *fleet) hammer(t *testing.T, key string, l *algo.Limit, goroutines int, attempts map[string]int) map[string]int64 {
	t.Helper()
	admitted := map[string]*atomic.Int64{}
	var wg sync.WaitGroup
	deadline := time.Now().Add(30 * time.Second)
	for name, procs := range f.procs {
		n := new(atomic.Int64)
		admitted[name] = n
		left := new(atomic.Int64)
		left.Store(int64(attempts[name]))
		for _, s := range procs {
			for range goroutines {
				wg.Go(func() {
					out := make([]algo.Decision, 1)
					for left.Add(-1) >= 0 && time.Now().Before(deadline) {
						res, err := s.Take(context.Background(), []store.Request{{Key: key, Limit: l, Cost: 1}}, out)
						if err != nil {
							t.Error(err)
							return
						}
						if res.Allowed != out[0].Allowed {
							t.Errorf("Result.Allowed %v, decision %+v", res.Allowed, out[0])
						}
						if res.Allowed {
							n.Add(1)
						}
					}
				})
			}
		}
	}
	wg.Wait()
	got := map[string]int64{}
	for name, n := range admitted {
		got[name] = n.Load()
	}
	return got
}

func sum(m map[string]int64) (n int64) {
	for _, v := range m {
		n += v
	}
	return n
}

// TestRegionsAdmitExactlyTheLimit: two regions, each its own
// redis-server, three processes in the busy one and one in the quiet one,
// eight goroutines each. The busy region asks for far more than its half,
// the quiet one for little: borrowing lends the quiet region's unused
// budget, and together they admit exactly the limit — not one more, and not
// one less while demand remains.
func TestRegionsAdmitExactlyTheLimit(t *testing.T) {
	for _, kind := range []algo.Kind{algo.TokenBucket, algo.GCRA, algo.SlidingLog} {
		t.Run(kind.String(), func(t *testing.T) {
			f := newFleet(t, map[string]int{"busy": 3, "quiet": 1})
			const limit = 400
			got := f.hammer(t, "k", quota(t, kind, limit), 8, map[string]int{"busy": 1200, "quiet": 40})
			if sum(got) != limit {
				t.Fatalf("admitted %v: %d in all, want exactly the limit %d", got, sum(got), limit)
			}
			var borrowed int64
			for _, s := range f.procs["busy"] {
				borrowed += s.Stats().Borrowed
			}
			if borrowed < got["busy"]-limit/2 {
				t.Fatalf("the busy region borrowed %d, admitted %d on a share of %d", borrowed, got["busy"], limit/2)
			}
		})
	}
}

// TestRegionsWithSlicesStayWithinTheQuota: borrowing slices of 8 units,
// a quota is still never exceeded; the slices held when the demand ends
// are all that may go unused.
func TestRegionsWithSlicesStayWithinTheQuota(t *testing.T) {
	const slice = 8
	for _, prefetch := range []bool{false, true} {
		t.Run(fmt.Sprintf("prefetch=%v", prefetch), func(t *testing.T) {
			opts := []region.Option{region.WithSlice(slice), region.WithSliceTTL(time.Hour)}
			if prefetch {
				opts = append(opts, region.WithPrefetch())
			}
			f := newFleet(t, map[string]int{"busy": 3, "quiet": 1, "idle": 1}, opts...)
			const limit = 600
			got := f.hammer(t, "k", quota(t, algo.TokenBucket, limit), 8, map[string]int{"busy": 2000, "quiet": 40, "idle": 0})
			if sum(got) > limit {
				t.Fatalf("admitted %v: %d in all, over the quota %d", got, sum(got), limit)
			}
			// Each busy process holds at most a slice from each of two peers.
			if held := int64(3 * 2 * slice); sum(got) < limit-held {
				t.Fatalf("admitted %v: %d in all, want at least %d (the quota less the %d units slices may hold)", got, sum(got), limit-held, held)
			}
		})
	}
}

// TestPeerDownKeepsTheShare: when the peer region's store stops
// answering (paused: a hang; killed: refused connections), a region
// limits on its own share, exactly, and each answer waits at most the
// borrowing timeout; the peer is left out for the backoff, then lends
// again.
func TestPeerDownKeepsTheShare(t *testing.T) {
	for _, mode := range []string{"paused", "killed"} {
		t.Run(mode, func(t *testing.T) {
			us := testserver.NewRedis(t)
			eu := testserver.NewRedis(t)
			if us == nil || eu == nil {
				t.Skip("no redis-server")
			}
			clk := newClock()
			const timeout = 300 * time.Millisecond
			s, err := region.New("us", openRedis(t, us.Addr), []region.Peer{{Name: "eu", Store: openRedis(t, eu.Addr)}},
				region.WithTimeout(timeout), region.WithBackoff(time.Minute), region.WithClock(clk.Now))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			l := quota(t, algo.TokenBucket, 20)
			if ok, _ := take(t, s, "warm", l, 1); !ok {
				t.Fatal("the first Take was refused")
			}
			switch mode {
			case "paused":
				if err := eu.Pause(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = eu.Resume() })
			case "killed":
				if err := eu.Kill(); err != nil {
					t.Fatal(err)
				}
			}
			var admitted int
			var slowest time.Duration
			for range 30 {
				start := time.Now()
				if ok, _ := take(t, s, "k", l, 1); ok {
					admitted++
				}
				slowest = max(slowest, time.Since(start))
			}
			if admitted != 10 {
				t.Fatalf("with the peer %s, admitted %d of 30, want exactly the share 10", mode, admitted)
			}
			if slowest > timeout+time.Second {
				t.Fatalf("with the peer %s, a Take took %v, want at most the timeout %v (and some slack)", mode, slowest, timeout)
			}
			if n := s.Stats().PeerFailures; n != 1 {
				t.Fatalf("%d peer failures, want 1: the peer is left out for the backoff after the first", n)
			}
			// Back, and past the backoff: the peer lends again.
			switch mode {
			case "paused":
				if err := eu.Resume(); err != nil {
					t.Fatal(err)
				}
			case "killed":
				if err := eu.Restart(); err != nil {
					t.Fatal(err)
				}
			}
			clk.Add(time.Minute + time.Second)
			deadline := time.Now().Add(10 * time.Second)
			for {
				ok, _ := take(t, s, "k", l, 1)
				if ok {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the peer did not lend again within 10s of its return (stats %+v)", s.Stats())
				}
				clk.Add(time.Minute + time.Second)
				time.Sleep(50 * time.Millisecond)
			}
			if s.Stats().Borrowed < 1 {
				t.Fatalf("admitted past the share without borrowing: %+v", s.Stats())
			}
		})
	}
}

// TestNothingShareBorrowsEverything: a limit of 1 over two regions leaves
// one with nothing; it borrows the other's unit, and then both refuse.
func TestNothingShareBorrowsEverything(t *testing.T) {
	clk := newClock()
	a, b := memStore(t, clk), memStore(t, clk)
	// "a" sorts first and gets the unit.
	rb, err := region.New("b", noClose{b}, []region.Peer{{Name: "a", Store: noClose{a}}})
	if err != nil {
		t.Fatal(err)
	}
	ra, err := region.New("a", noClose{a}, []region.Peer{{Name: "b", Store: noClose{b}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ra.Close(); _ = rb.Close() })
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Minute})
	if rb.Share(l) != nil {
		t.Fatal("b has a share of 1 over two regions; want a's")
	}
	if ok, d := take(t, rb, "k", l, 1); !ok {
		t.Fatalf("b's first Take refused (%+v); want it borrowed from a", d)
	}
	if ok, _ := take(t, rb, "k", l, 1); ok {
		t.Fatal("b admitted a second unit of a limit of 1")
	}
	if ok, _ := take(t, ra, "k", l, 1); ok {
		t.Fatal("a admitted the unit b borrowed")
	}
	// A bad request is the store's error, not a peer left out.
	_, err = rb.Take(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: -1}}, make([]algo.Decision, 1))
	if !errors.Is(err, store.ErrBadRequest) {
		t.Fatalf("a negative cost borrowed: %v, want store.ErrBadRequest", err)
	}
	if st := rb.Stats(); st.PeerFailures != 0 || st.Peers[0].Down {
		t.Fatalf("a bad request left the peer out: %+v", st)
	}
	// The refusal says when the next window opens, not "never": a's.
	if _, d := take(t, rb, "k", l, 1); d.IsNever() || d.RetryAfter <= 0 {
		t.Fatalf("b's refusal: %+v; want a's RetryAfter to the next window", d)
	}
}

// regionA returns region "a", deciding in own and borrowing from region
// "b"'s store peer, closed at the test's end.
func regionA(t *testing.T, own, peer store.Store, opts ...region.Option) *region.Store {
	t.Helper()
	s, err := region.New("a", own, []region.Peer{{Name: "b", Store: peer}}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// idle waits, 10 s at most, until none of stores has a borrowing ahead in
// flight: for the background goroutines, not for the math.
func idle(t *testing.T, stores ...*region.Store) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, s := range stores {
		for st := s.Stats(); st.Prefetching > 0; st = s.Stats() {
			if time.Now().After(deadline) {
				t.Fatalf("borrowing ahead still in flight after 10s: %+v", st)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

func memStore(t *testing.T, clk *fakeClock) store.Store {
	t.Helper()
	m, err := memory.New(memory.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// TestConcurrencyKeepsToItsShare: slots are not borrowed: a region holds
// its share of them and refuses the next while the other's are free.
func TestConcurrencyKeepsToItsShare(t *testing.T) {
	clk := newClock()
	a, b := memStore(t, clk), memStore(t, clk)
	ra := regionA(t, noClose{a}, noClose{b})
	l := compile(t, algo.Params{Algorithm: algo.Concurrency, Limit: 4, LeaseTTL: time.Minute})
	out := make([]algo.Decision, 1)
	for i := range 3 {
		res, err := ra.Take(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 1, Lease: uint64(i + 1)}}, out)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed != (i < 2) {
			t.Fatalf("slot %d: allowed %v, want %v (a's share is 2 of 4)", i+1, res.Allowed, i < 2)
		}
	}
	if err := ra.Release(context.Background(), []store.Request{{Key: "k", Limit: l, Lease: 1}}); err != nil {
		t.Fatal(err)
	}
	if res, err := ra.Take(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 1, Lease: 9}}, out); err != nil || !res.Allowed {
		t.Fatalf("after a release: %v %+v, want the slot", err, res)
	}
}

// TestSlicesOvershootWithinTheBound: fixed windows, two regions of two
// processes each, borrowing slices of 5 with a TTL longer than the
// window, with and without borrowing ahead. In every other window the demand stops while slices are held;
// their units, charged in that window, are admitted in the next, which
// may then admit up to P·(R−1)·n = 4·1·5 = 20 beyond the limit, never
// more.
func TestSlicesOvershootWithinTheBound(t *testing.T) {
	for _, prefetch := range []bool{false, true} {
		t.Run(fmt.Sprintf("prefetch=%v", prefetch), func(t *testing.T) { slicesOvershoot(t, prefetch) })
	}
}

func slicesOvershoot(t *testing.T, prefetch bool) {
	clk := newClock()
	const slice, limit, procs = 5, 40, 2
	stores := map[string]store.Store{"a": memStore(t, clk), "b": memStore(t, clk)}
	regions := map[string][]*region.Store{}
	for self, peer := range map[string]string{"a": "b", "b": "a"} {
		for range procs {
			opts := []region.Option{region.WithSlice(slice), region.WithSliceTTL(time.Hour), region.WithClock(clk.Now)}
			if prefetch {
				opts = append(opts, region.WithPrefetch())
			}
			s, err := region.New(self, noClose{stores[self]}, []region.Peer{{Name: peer, Store: noClose{stores[peer]}}}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			regions[self] = append(regions[self], s)
		}
	}
	all := append(append([]*region.Store{}, regions["a"]...), regions["b"]...)
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: limit, Period: time.Minute})
	bound := int64(limit + len(all)*1*slice)
	var most int64
	for w := range 6 {
		var admitted int64
		if w%2 == 0 {
			// a's first process uses a's share and one unit of a slice
			// borrowed from b, a's second one unit of another slice: 8
			// units stay held when the window ends.
			for range limit/2 + 1 {
				if ok, _ := take(t, regions["a"][0], "k", l, 1); ok {
					admitted++
				}
			}
			if ok, _ := take(t, regions["a"][1], "k", l, 1); ok {
				admitted++
			}
		} else {
			// Every process asks in turn, one unit at a time, until each
			// has been refused.
			for round := 0; round < 100; round++ {
				some := false
				for _, s := range all {
					if ok, _ := take(t, s, "k", l, 1); ok {
						admitted++
						some = true
					}
				}
				if !some {
					break
				}
			}
			if admitted < limit {
				t.Fatalf("window %d admitted %d, under the limit %d with demand left", w, admitted, limit)
			}
		}
		if admitted > bound {
			t.Fatalf("window %d admitted %d, over the bound %d (limit %d + P·(R−1)·slice)", w, admitted, bound, limit)
		}
		most = max(most, admitted)
		idle(t, all...) // borrowings ahead end in this window, not the next
		clk.Add(time.Minute)
	}
	if most <= limit {
		t.Fatalf("no window admitted past the limit %d: the held slices were not carried over, and the test shows nothing", limit)
	}
	t.Logf("most admitted in a window: %d (limit %d, bound %d)", most, limit, bound)
}

func ExampleNew() {
	us, _ := memory.New()
	eu, _ := memory.New()
	s, err := region.New("us", us, []region.Peer{{Name: "eu", Store: eu}}, region.WithWeights(map[string]int{"us": 3, "eu": 1}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	l, _ := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Period: time.Minute})
	fmt.Println("us share:", s.Share(l).Params().Limit)
	out := make([]algo.Decision, 1)
	var admitted int
	for range 120 {
		res, _ := s.Take(context.Background(), []store.Request{{Key: "user:42", Limit: l, Cost: 1}}, out)
		if res.Allowed {
			admitted++
		}
	}
	fmt.Println("admitted in us:", admitted, "borrowed:", s.Stats().Borrowed)
	// Output:
	// us share: 75
	// admitted in us: 100 borrowed: 25
}

// TestRegionsOnEveryKindOfStore: three regions on three kinds of store —
// a Redis Cluster, a memcached and a standalone Redis — two processes
// each, eight goroutines each: the busy region borrows the others'
// unused budget, and together they admit exactly the quota.
func TestRegionsOnEveryKindOfStore(t *testing.T) {
	cluster := testserver.RedisCluster(t)
	mc := testserver.Memcached(t)
	rd := testserver.Redis(t)
	if len(cluster) == 0 || mc == "" || rd == "" {
		t.Skip("no redis-server or memcached")
	}
	urls := map[string]string{
		"cluster":   "redis-cluster://" + strings.Join(cluster, ","),
		"memcached": "memcached://" + mc,
		"redis":     "redis://" + rd,
	}
	open := func(name string) store.Store {
		st, err := storeurl.Open(urls[name])
		if err != nil {
			t.Fatalf("%s: %v", urls[name], err)
		}
		return st
	}
	// The servers may be shared by the whole run: a key of this test's own.
	key := fmt.Sprintf("region-kinds-%d", time.Now().UnixNano())
	f := &fleet{procs: map[string][]*region.Store{}}
	for self := range urls {
		for range 2 {
			var peers []region.Peer
			for p := range urls {
				if p != self {
					peers = append(peers, region.Peer{Name: p, Store: open(p)})
				}
			}
			s, err := region.New(self, open(self), peers)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			f.procs[self] = append(f.procs[self], s)
		}
	}
	const limit = 300 // 100 a region
	for _, kind := range []algo.Kind{algo.TokenBucket, algo.GCRA} {
		got := f.hammer(t, key+kind.String(), quota(t, kind, limit), 8, map[string]int{"redis": 900, "memcached": 20, "cluster": 20})
		if sum(got) != limit {
			t.Fatalf("%v: admitted %v: %d in all, want exactly the quota %d", kind, got, sum(got), limit)
		}
	}
}

// counting counts the Takes a store is asked.
type counting struct {
	store.Store
	takes atomic.Int64
}

func (c *counting) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	c.takes.Add(1)
	return c.Store.Take(ctx, reqs, out)
}

// TestSpentShareGoesStraightToThePeers: once this region's share of a key
// has refused, the next Takes on the key borrow without asking this
// region's store again, until that refusal's RetryAfter (a second at
// most); a Refund through the Store forgets the refusal at once.
func TestSpentShareGoesStraightToThePeers(t *testing.T) {
	clk := newClock()
	own := &counting{Store: memStore(t, clk)}
	s := regionA(t, noClose{own}, noClose{memStore(t, clk)}, region.WithClock(clk.Now))
	// 20 a minute, 10 a region; a unit of each region's share back every 6 s.
	l := compile(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 20, Period: time.Minute})
	for i := range 10 {
		if ok, _ := take(t, s, "k", l, 1); !ok {
			t.Fatalf("Take %d on the share refused", i)
		}
	}
	if ok, _ := take(t, s, "k", l, 1); !ok { // the share refuses, b lends
		t.Fatal("the 11th Take was not lent")
	}
	asked := own.takes.Load()
	for i := range 9 {
		if ok, _ := take(t, s, "k", l, 1); !ok {
			t.Fatalf("borrowed Take %d refused", i)
		}
	}
	if n := own.takes.Load() - asked; n != 0 {
		t.Fatalf("the spent share's store was asked %d more times; want none until its RetryAfter", n)
	}
	// Both shares spent: refused, with this region's RetryAfter counted
	// down (6 s at the refusal, 1 s later 5 s).
	clk.Add(500 * time.Millisecond)
	ok, d := take(t, s, "k", l, 1)
	if ok || d.RetryAfter <= 0 || d.RetryAfter > 6*time.Second {
		t.Fatalf("with both shares spent: allowed %v, %+v; want a refusal within 6 s", ok, d)
	}
	// Past a second, this region's store is asked again.
	clk.Add(time.Second)
	asked = own.takes.Load()
	take(t, s, "k", l, 1)
	if own.takes.Load() == asked {
		t.Fatal("a second after the refusal, the store was not asked again")
	}
	// A refund here frees a unit: the store is asked at once, and admits.
	if err := s.Refund(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 1}}); err != nil {
		t.Fatal(err)
	}
	if ok, d := take(t, s, "k", l, 1); !ok {
		t.Fatalf("after a refund, refused: %+v", d)
	}
}

// TestDecisionsReportTheWholeLimit: a decision's Limit is the limit as
// configured, not the share that decided it; Peek answers what Take
// would, a peer's lending included.
func TestDecisionsReportTheWholeLimit(t *testing.T) {
	clk := newClock()
	a, b := memStore(t, clk), memStore(t, clk)
	s := regionA(t, noClose{a}, noClose{b}, region.WithClock(clk.Now))
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Minute})
	peek := func() algo.Decision {
		out := make([]algo.Decision, 1)
		if err := s.Peek(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 1}}, out); err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	for i := range 10 {
		ok, d := take(t, s, "k", l, 1)
		if !ok || d.Limit != 10 {
			t.Fatalf("Take %d: allowed %v, Limit %d; want admitted against the whole limit 10", i, ok, d.Limit)
		}
		if p := peek(); i < 9 && (!p.Allowed || p.Limit != 10) {
			t.Fatalf("Peek after Take %d: %+v; want allowed (the share, then the peer, has units), Limit 10", i, p)
		}
	}
	ok, d := take(t, s, "k", l, 1)
	if ok || d.Limit != 10 || d.RetryAfter <= 0 {
		t.Fatalf("the 11th Take: allowed %v, %+v; want refused against the whole limit 10", ok, d)
	}
	if p := peek(); p.Allowed || p.Limit != 10 {
		t.Fatalf("Peek with both shares spent: %+v; want refused, Limit 10", p)
	}
}

// TestBorrowingEndsBeforeTheCallersDeadline: with a peer that hangs and a
// caller's deadline sooner than the borrowing timeout, Take answers this
// region's refusal before the deadline, not the deadline's error (which
// a failure policy above would answer, fail-open admitting).
func TestBorrowingEndsBeforeTheCallersDeadline(t *testing.T) {
	us, eu := testserver.NewRedis(t), testserver.NewRedis(t)
	if us == nil || eu == nil {
		t.Skip("no redis-server")
	}
	s, err := region.New("us", openRedis(t, us.Addr), []region.Peer{{Name: "eu", Store: openRedis(t, eu.Addr)}},
		region.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	l := quota(t, algo.TokenBucket, 2)
	if ok, _ := take(t, s, "k", l, 1); !ok {
		t.Fatal("the share's unit was refused")
	}
	if err := eu.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eu.Resume() })
	const deadline = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	out := make([]algo.Decision, 1)
	start := time.Now()
	res, err := s.Take(ctx, []store.Request{{Key: "k", Limit: l, Cost: 1}}, out)
	took := time.Since(start)
	if err != nil || res.Allowed || took >= deadline-50*time.Millisecond {
		t.Fatalf("Take with a hung peer: %v, allowed %v, after %v; want this region's refusal a tenth of the caller's %v before its end", err, res.Allowed, took, deadline)
	}
}

// TestPrefetchBorrowsAhead: with WithPrefetch, a decision that leaves
// this region's share fewer units than a slice starts a borrowing in the
// background; the Takes the share then refuses are admitted from that
// slice in process, with no call to the peer, and the one that uses its
// last unit starts the next slice's borrowing in the background; the two
// regions still admit exactly the limit.
func TestPrefetchBorrowsAhead(t *testing.T) {
	clk := newClock()
	own, lender := memStore(t, clk), &counting{Store: memStore(t, clk)}
	a := regionA(t, noClose{own}, noClose{lender}, region.WithSlice(5), region.WithPrefetch(), region.WithClock(clk.Now))
	b, err := region.New("b", noClose{lender.Store}, []region.Peer{{Name: "a", Store: noClose{own}}}, region.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 40, Period: time.Minute}) // 20 a region
	admitted := 0
	for i := range 20 {
		if ok, _ := take(t, a, "k", l, 1); !ok {
			t.Fatalf("Take %d on a's share refused", i)
		}
		admitted++
	}
	// The share went down to 4, then 0: a slice was borrowed ahead.
	idle(t, a)
	if st := a.Stats(); st.Prefetches < 1 {
		t.Fatalf("no slice borrowed ahead: %+v", st)
	}
	if n := lender.takes.Load(); n != 1 {
		t.Fatalf("the lender was asked %d times ahead, want once (one slice)", n)
	}
	// The slice's units are lent in process; the Take that uses its last
	// one starts the next slice's borrowing, in the background.
	for round := range 2 {
		for i := range 5 {
			if ok, d := take(t, a, "k", l, 1); !ok {
				t.Fatalf("round %d: borrowed Take %d refused: %+v", round, i, d)
			}
			admitted++
			if i < 4 {
				if n := lender.takes.Load(); n != int64(round+1) {
					t.Fatalf("round %d: the lender was asked %d times after Take %d; want no call while the slice lasts", round, n, i)
				}
			}
		}
		idle(t, a)
		if n := lender.takes.Load(); n != int64(round+2) {
			t.Fatalf("round %d: the lender was asked %d times; want the next slice borrowed ahead once the last was used", round, n)
		}
	}
	// a holds a third slice of b's share of 20: b's own traffic finds the
	// 5 left, a lends itself the 5 it holds, and then nothing is left.
	for range 10 {
		if ok, _ := take(t, b, "k", l, 1); ok {
			admitted++
		}
		if ok, _ := take(t, a, "k", l, 1); ok {
			admitted++
		}
	}
	if admitted != 40 {
		t.Fatalf("the two regions admitted %d of a limit of 40", admitted)
	}
}

// TestCloseDuringPrefetch: Takes that start borrowing ahead while another
// goroutine closes the Store neither race nor panic; Close waits for the
// borrowings in flight before it closes the stores.
func TestCloseDuringPrefetch(t *testing.T) {
	clk := newClock()
	s, err := region.New("a", noClose{memStore(t, clk)}, []region.Peer{{Name: "b", Store: noClose{memStore(t, clk)}}},
		region.WithSlice(4), region.WithPrefetch(), region.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 8, Period: time.Minute}) // 4 a region: every decision starts one
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			out := make([]algo.Decision, 1)
			for i := range 200 {
				_, _ = s.Take(context.Background(), []store.Request{{Key: fmt.Sprintf("k%d-%d", g, i), Limit: l, Cost: 1}}, out)
			}
		})
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if n := s.Stats().Prefetching; n != 0 {
		t.Fatalf("%d borrowings ahead in flight after Close", n)
	}
}

// TestBadRequests: what every store refuses is ErrBadRequest here too,
// before any share is computed: decisions that do not fit the requests,
// a request with no limit, a negative cost (also where this region's
// share is nothing, which calls no store), for Take, Peek, Refund and
// Release; and no panic.
func TestBadRequests(t *testing.T) {
	clk := newClock()
	s, err := region.New("b", noClose{memStore(t, clk)}, []region.Peer{{Name: "a", Store: noClose{memStore(t, clk)}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	one := compile(t, algo.Params{Algorithm: algo.Concurrency, Limit: 1, LeaseTTL: time.Minute}) // b's share: nothing
	ten := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Minute})
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"Take, no decisions": func() error {
			_, err := s.Take(ctx, []store.Request{{Key: "k", Limit: ten, Cost: 1}}, nil)
			return err
		},
		"Take, too many decisions": func() error {
			_, err := s.Take(ctx, []store.Request{{Key: "k", Limit: one, Cost: 1}}, make([]algo.Decision, 3))
			return err
		},
		"Take, no limit": func() error {
			_, err := s.Take(ctx, []store.Request{{Key: "k", Cost: 1}}, make([]algo.Decision, 1))
			return err
		},
		"Take, negative cost, no share": func() error {
			_, err := s.Take(ctx, []store.Request{{Key: "k", Limit: one, Cost: -5}}, make([]algo.Decision, 1))
			return err
		},
		"Peek, too few decisions": func() error {
			return s.Peek(ctx, []store.Request{{Key: "k", Limit: one}, {Key: "j", Limit: ten}}, make([]algo.Decision, 1))
		},
		"Refund, no limit":           func() error { return s.Refund(ctx, []store.Request{{Key: "k", Cost: 1}}) },
		"Refund, negative, no share": func() error { return s.Refund(ctx, []store.Request{{Key: "k", Limit: one, Cost: -1}}) },
		"Release, no limit":          func() error { return s.Release(ctx, []store.Request{{Key: "k", Lease: 1}}) },
		"Take, empty key": func() error {
			_, err := s.Take(ctx, []store.Request{{Limit: ten, Cost: 1}}, make([]algo.Decision, 1))
			return err
		},
	} {
		if err := call(); !errors.Is(err, store.ErrBadRequest) {
			t.Errorf("%s: %v, want store.ErrBadRequest", name, err)
		}
	}
	if st := s.Stats(); st.PeerFailures != 0 {
		t.Errorf("bad requests left a peer out: %+v", st)
	}
}

// slow delays each Take of a real store, as a store across an ocean does.
type slow struct {
	store.Store
	by time.Duration
}

func (s slow) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	select {
	case <-time.After(s.by):
	case <-ctx.Done():
		return store.Result{}, ctx.Err()
	}
	return s.Store.Take(ctx, reqs, out)
}

// TestCallersDeadlineLeavesNoPeerOut: a caller whose deadline is shorter
// than a healthy peer's answer gets this region's refusal, and the peer
// is not left out: the next caller, with time, borrows from it.
func TestCallersDeadlineLeavesNoPeerOut(t *testing.T) {
	clk := newClock()
	s := regionA(t, noClose{memStore(t, clk)}, slow{memStore(t, clk), 100 * time.Millisecond}, region.WithTimeout(5*time.Second))
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 2, Period: time.Minute})
	if ok, _ := take(t, s, "k", l, 1); !ok {
		t.Fatal("the share's unit was refused")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	res, err := s.Take(ctx, []store.Request{{Key: "k", Limit: l, Cost: 1}}, make([]algo.Decision, 1))
	if err != nil || res.Allowed {
		t.Fatalf("a hasty Take: %v, %+v; want this region's refusal", err, res)
	}
	if st := s.Stats(); st.PeerFailures != 0 || st.Peers[0].Down {
		t.Fatalf("a caller's deadline left a healthy peer out: %+v", st)
	}
	if ok, d := take(t, s, "k", l, 1); !ok {
		t.Fatalf("a Take with time was refused (%+v): the peer was left out", d)
	}
}

// TestFallbackIsNoLoan: a peer store wrapped in a fail-open policy
// answers for a store it cannot reach, charging nothing: that is no loan.
// The region keeps to its share and leaves the peer out.
func TestFallbackIsNoLoan(t *testing.T) {
	clk := newClock()
	down, err := storeurl.OpenRetrying("redis://127.0.0.1:1", storeurl.WithRetryBackoff(time.Hour, time.Hour)) // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	open, err := resilient.New(down, resilient.WithPolicy(resilient.FailOpen))
	if err != nil {
		t.Fatal(err)
	}
	s := regionA(t, noClose{memStore(t, clk)}, open)
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Minute})
	admitted := admitted(t, s, "k", l, 20)
	if admitted != 5 || s.Stats().Borrowed != 0 {
		t.Fatalf("with the peer's store down behind fail-open, admitted %d (borrowed %d); want the share, 5, and no loan", admitted, s.Stats().Borrowed)
	}
}

// TestPrefetchKeepsToOnePeerAndSlices: with three regions, a key borrows
// ahead from one peer while it lends (not a slice from each); the sliding
// log, which is not sliced, is not borrowed ahead; and Peek counts the
// slice held here.
func TestPrefetchKeepsToOnePeerAndSlices(t *testing.T) {
	clk := newClock()
	b, c := &counting{Store: memStore(t, clk)}, &counting{Store: memStore(t, clk)}
	s, err := region.New("a", noClose{memStore(t, clk)}, []region.Peer{{Name: "b", Store: noClose{b}}, {Name: "c", Store: noClose{c}}},
		region.WithSlice(4), region.WithPrefetch(), region.WithSliceTTL(time.Hour), region.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 30, Period: time.Minute}) // 10 a region
	for i := range 9 {
		take(t, s, "k", l, 1)
		if i >= 6 {
			idle(t, s) // one round at a time: each may find the slice of the last
		}
	}
	if nb, nc := b.takes.Load(), c.takes.Load(); nb+nc != 1 {
		t.Fatalf("borrowing ahead asked b %d and c %d times; want one slice from one peer", nb, nc)
	}
	out := make([]algo.Decision, 1)
	take(t, s, "k", l, 1) // the share's last unit
	idle(t, s)
	if err := s.Peek(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 1}}, out); err != nil || !out[0].Allowed {
		t.Fatalf("Peek with the share spent and a slice held: %v %+v; want allowed", err, out[0])
	}
	before := s.Stats().Prefetches
	log := compile(t, algo.Params{Algorithm: algo.SlidingLog, Limit: 30, Period: time.Minute})
	for range 10 {
		take(t, s, "log", log, 1)
	}
	idle(t, s)
	if n := s.Stats().Prefetches; n != before {
		t.Fatalf("the sliding log was borrowed ahead %d times; want never (it is not sliced)", n-before)
	}
}

// TestResetForgetsEveryRegion: Reset forgets the key in this region's
// store and in every peer's, and the refusal this region remembered.
func TestResetForgetsEveryRegion(t *testing.T) {
	clk := newClock()
	a, b := memStore(t, clk), memStore(t, clk)
	s := regionA(t, noClose{a}, noClose{b}, region.WithClock(clk.Now))
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 4, Period: time.Minute}) // 2 a region
	for range 4 {
		if ok, _ := take(t, s, "k", l, 1); !ok {
			t.Fatal("refused within the limit")
		}
	}
	if ok, _ := take(t, s, "k", l, 1); ok {
		t.Fatal("admitted past the limit")
	}
	if err := s.Reset(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	for _, st := range []store.Store{a, b} {
		out := make([]algo.Decision, 1)
		share := s.Share(l) // both shares are 2
		if err := st.Peek(context.Background(), []store.Request{{Key: "k", Limit: share}}, out); err != nil || out[0].Remaining != 2 {
			t.Fatalf("a region's store after Reset: %v %+v; want the key forgotten (2 left)", err, out[0])
		}
	}
	for i := range 4 {
		if ok, _ := take(t, s, "k", l, 1); !ok {
			t.Fatalf("after Reset, Take %d refused", i)
		}
	}
}

// TestPeerDownUntilItAnswers: a peer that failed reads Down until a call
// answers, not only for the backoff: past the backoff, with no borrowing
// to try it, a dead peer is still Down. A probe in the background finds
// it back (no Take needed), and probes count no failures.
func TestPeerDownUntilItAnswers(t *testing.T) {
	us, eu := testserver.NewRedis(t), testserver.NewRedis(t)
	if us == nil || eu == nil {
		t.Skip("no redis-server")
	}
	clk := newClock()
	s, err := region.New("us", openRedis(t, us.Addr), []region.Peer{{Name: "eu", Store: openRedis(t, eu.Addr)}},
		region.WithTimeout(300*time.Millisecond), region.WithBackoff(200*time.Millisecond), region.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	l := quota(t, algo.FixedWindow, 2) // a share of 1
	if err := eu.Kill(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		take(t, s, "k", l, 1) // the share's unit, then a borrowing that fails
	}
	if st := s.Stats(); st.PeerFailures != 1 || !st.Peers[0].Down {
		t.Fatalf("after a failed borrowing: %+v, want one failure and the peer Down", st)
	}
	clk.Add(time.Minute)               // far past the backoff
	time.Sleep(700 * time.Millisecond) // three probes, or so, of a dead peer
	if st := s.Stats(); st.PeerFailures != 1 || !st.Peers[0].Down {
		t.Fatalf("past the backoff, the peer still dead: %+v, want it Down and the probes not counted as failures", st)
	}
	if err := eu.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().Peers[0].Down {
		if time.Now().After(deadline) {
			t.Fatalf("the peer is back, and still Down 10s later: %+v", s.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ok, _ := take(t, s, "k", l, 1); !ok {
		t.Fatalf("the peer is back and up, and did not lend: %+v", s.Stats())
	}
	if st := s.Stats(); st.PeerFailures != 1 || st.Borrowed != 1 {
		t.Fatalf("%+v, want the one failure and one borrowed", st)
	}
}

// takeAt takes one unit of key, which must be admitted, and returns the
// Result's At (for a Refund).
func takeAt(t testing.TB, s store.Store, key string, l *algo.Limit) int64 {
	t.Helper()
	res, err := s.Take(context.Background(), []store.Request{{Key: key, Limit: l, Cost: 1}}, make([]algo.Decision, 1))
	if err != nil || !res.Allowed {
		t.Fatalf("take %q: %v %+v, want an admission", key, err, res)
	}
	return res.At
}

// refundAt refunds one unit of key taken at at.
func refundAt(t testing.TB, s store.Store, key string, l *algo.Limit, at int64) {
	t.Helper()
	if err := s.Refund(context.Background(), []store.Request{{Key: key, Limit: l, Cost: 1, At: at}}); err != nil {
		t.Fatal(err)
	}
}

// admitted takes one unit of key n times and returns how many passed.
func admitted(t testing.TB, s store.Store, key string, l *algo.Limit, n int) int {
	t.Helper()
	ok := 0
	for range n {
		if a, _ := take(t, s, key, l, 1); a {
			ok++
		}
	}
	return ok
}
