package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testclock"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/lease"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/redis"
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

// quota is a budget that does not refill within any test: n per day.
func quota(t testing.TB, kind algo.Kind, n int64) *algo.Limit {
	return compile(t, algo.Params{Algorithm: kind, Limit: n, Period: 24 * time.Hour})
}

// shared is a memory store on clk: the "shared store" several lease
// Stores (instances) draw from. Closing an instance closes it, so tests
// hand each instance a wrapper that does not.
func shared(t testing.TB, clk *fakeClock) *memory.Store {
	t.Helper()
	m, err := memory.New(memory.WithClock(clk.Now), memory.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// noClose keeps an instance's Close from closing the shared store.
type noClose struct{ store.Store }

func (noClose) Close() error { return nil }

func instance(t testing.TB, inner store.Store, clk *fakeClock, opts ...lease.Option) *lease.Store {
	t.Helper()
	if clk != nil {
		opts = append(opts, lease.WithClock(clk.Now))
	}
	s, err := lease.New(noClose{inner}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func take(t testing.TB, s store.Store, key string, l *algo.Limit, cost int64) (algo.Decision, store.Result) {
	t.Helper()
	out := make([]algo.Decision, 1)
	res, err := s.Take(context.Background(), []store.Request{{Key: key, Limit: l, Cost: cost}}, out)
	if err != nil {
		t.Fatal(err)
	}
	return out[0], res
}

// remaining is what the shared store has left of key's budget.
func remaining(t testing.TB, s store.Store, key string, l *algo.Limit) int64 {
	t.Helper()
	out := make([]algo.Decision, 1)
	if err := s.Peek(context.Background(), []store.Request{{Key: key, Limit: l, Cost: 0}}, out); err != nil {
		t.Fatal(err)
	}
	return out[0].Remaining
}

func TestNewRejectsBadOptions(t *testing.T) {
	m := shared(t, newClock())
	for _, c := range []struct {
		name string
		opts []lease.Option
		want string
	}{
		{"slice 1", []lease.Option{lease.WithSlice(1)}, "slice 1: must be at least 2"},
		{"ttl 0", []lease.Option{lease.WithTTL(0)}, "ttl 0s: must be positive"},
		{"nil clock", []lease.Option{lease.WithClock(nil)}, "nil clock"},
	} {
		_, err := lease.New(m, c.opts...)
		if !errors.Is(err, lease.ErrInvalidOption) || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want ErrInvalidOption saying %q", c.name, err, c.want)
		}
	}
	if _, err := lease.New(nil); !errors.Is(err, lease.ErrInvalidOption) {
		t.Errorf("nil store: err %v", err)
	}
}

// One store call serves a slice: 100 requests at slice 10 cost 10 calls,
// and the shared store is charged exactly what was admitted plus what the
// instance holds.
func TestSliceServesRequestsLocally(t *testing.T) {
	clk := newClock()
	m := shared(t, clk)
	s := instance(t, m, clk, lease.WithSlice(10))
	l := quota(t, algo.TokenBucket, 1000)
	for i := range 95 {
		d, res := take(t, s, "k", l, 1)
		if !d.Allowed || !res.Allowed {
			t.Fatalf("request %d refused: %+v", i, d)
		}
		// The instance's Remaining counts the units it holds.
		held := int64(9 - i%10)
		if want := 1000 - int64(i) - 1; d.Remaining != want {
			t.Fatalf("request %d: Remaining %d, want %d (held %d)", i, d.Remaining, want, held)
		}
	}
	st := s.Stats()
	if st.Takes != 10 || st.Local != 85 {
		t.Fatalf("stats %+v: want 10 store takes and 85 local decisions", st)
	}
	if got := remaining(t, m, "k", l); got != 1000-100 {
		t.Fatalf("shared store has %d left, want 900 (95 admitted + 5 held)", got)
	}
	// Close gives the 5 held units back.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, m, "k", l); got != 1000-95 {
		t.Fatalf("after Close the shared store has %d left, want 905", got)
	}
}

// The exactness claim: K instances × many goroutines on one quota never
// admit more than the quota, and charged = admitted + held at every
// quiescent point; once the instances close, charged = admitted.
func TestInstancesNeverExceedQuota(t *testing.T) {
	for _, kind := range []algo.Kind{algo.TokenBucket, algo.GCRA, algo.FixedWindow, algo.SlidingWindow} {
		t.Run(kind.String(), func(t *testing.T) {
			clk := newClock()
			m := shared(t, clk)
			exactness(t, m, clk, quota(t, kind, 1000), 4, 16, 1200)
		})
	}
}

func exactness(t *testing.T, m store.Store, clk *fakeClock, l *algo.Limit, instances, goroutines, attempts int) {
	t.Helper()
	const key = "quota"
	var admitted, refused atomic.Int64
	var next atomic.Int64
	ss := make([]*lease.Store, instances)
	for i := range ss {
		ss[i] = instance(t, m, clk, lease.WithSlice(16), lease.WithTTL(time.Hour))
	}
	var wg sync.WaitGroup
	for i := range instances * goroutines {
		wg.Add(1)
		go func(s *lease.Store) {
			defer wg.Done()
			out := make([]algo.Decision, 1)
			for next.Add(1) <= int64(attempts) {
				res, err := s.Take(context.Background(), []store.Request{{Key: key, Limit: l, Cost: 1}}, out)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed != out[0].Allowed {
					t.Errorf("Result.Allowed %v, decision %+v", res.Allowed, out[0])
				}
				if out[0].Allowed {
					admitted.Add(1)
				} else {
					refused.Add(1)
				}
			}
		}(ss[i%instances])
	}
	wg.Wait()
	if admitted.Load() > 1000 {
		t.Fatalf("admitted %d of a quota of 1000", admitted.Load())
	}
	if admitted.Load()+refused.Load() != int64(attempts) {
		t.Fatalf("%d admitted + %d refused != %d attempts", admitted.Load(), refused.Load(), attempts)
	}
	charged := 1000 - remaining(t, m, key, l)
	var held int64
	for _, s := range ss {
		out := make([]algo.Decision, 1)
		if err := s.Peek(context.Background(), []store.Request{{Key: key, Limit: l, Cost: 0}}, out); err != nil {
			t.Fatal(err)
		}
		held += out[0].Remaining - (1000 - charged)
	}
	if charged != admitted.Load()+held {
		t.Fatalf("shared store charged %d, admitted %d + held %d", charged, admitted.Load(), held)
	}
	// The units held are at most slice-1 per instance, and nothing else is
	// lost: with 200 attempts more than the quota, all but those are used.
	if held > int64(instances*15) || admitted.Load() < 1000-int64(instances*15) {
		t.Fatalf("admitted %d, held %d: more under-admission than %d instances × 15", admitted.Load(), held, instances)
	}
	for _, s := range ss {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if got := 1000 - remaining(t, m, key, l); got != admitted.Load() {
		t.Fatalf("after Close the shared store is charged %d, admitted %d", got, admitted.Load())
	}
}

// The same over a real redis-server: four instances, each its own
// connection pool, one quota, the server's clock.
func TestInstancesNeverExceedQuotaRedis(t *testing.T) {
	addr := testserver.Redis(t)
	if addr == "" {
		return
	}
	prefix := fmt.Sprintf("lease-test-%d-", time.Now().UnixNano())
	for _, kind := range []algo.Kind{algo.TokenBucket, algo.FixedWindow} {
		t.Run(kind.String(), func(t *testing.T) {
			r, err := redis.Open("redis://" + addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = r.Close() })
			keyed := prefixed{r, prefix + kind.String() + ":"}
			exactness(t, keyed, nil, quota(t, kind, 1000), 4, 16, 1200)
		})
	}
}

// prefixed keeps each test's keys apart on a shared redis-server.
type prefixed struct {
	store.Store
	p string
}

func (p prefixed) with(reqs []store.Request) []store.Request {
	c := append([]store.Request(nil), reqs...)
	for i := range c {
		c[i].Key = p.p + c[i].Key
	}
	return c
}

func (p prefixed) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	return p.Store.Take(ctx, p.with(reqs), out)
}

func (p prefixed) Peek(ctx context.Context, reqs []store.Request, out []algo.Decision) error {
	return p.Store.Peek(ctx, p.with(reqs), out)
}

func (p prefixed) Refund(ctx context.Context, reqs []store.Request) error {
	return p.Store.Refund(ctx, p.with(reqs))
}

func (p prefixed) Close() error { return nil }

// Near the end of a budget an instance takes what is left, then one unit at
// a time, and a refusal carries the shared store's exact RetryAfter for the
// request's own cost.
func TestEndOfBudget(t *testing.T) {
	clk := newClock()
	m := shared(t, clk)
	// 25 units, refilled at one per second.
	l := compile(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Second, Burst: 25})
	a := instance(t, m, clk, lease.WithSlice(10), lease.WithTTL(time.Hour))
	b := instance(t, m, clk, lease.WithSlice(10), lease.WithTTL(time.Hour))
	take(t, a, "k", l, 1) // a holds 9, shared has 15
	take(t, b, "k", l, 1) // b holds 9, shared has 5
	if got := remaining(t, m, "k", l); got != 5 {
		t.Fatalf("shared has %d, want 5", got)
	}
	// a uses its 9, then takes the 5 left although a slice is 10.
	for range 10 {
		if d, _ := take(t, a, "k", l, 1); !d.Allowed {
			t.Fatalf("a refused with units left: %+v", d)
		}
	}
	if got := remaining(t, m, "k", l); got != 0 {
		t.Fatalf("shared has %d, want 0 (a took the last 5)", got)
	}
	// a holds 4; then it is refused by the shared store, exactly.
	for range 4 {
		take(t, a, "k", l, 1)
	}
	d, res := take(t, a, "k", l, 1)
	if d.Allowed || res.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("refusal %+v (%+v), want RetryAfter 1s", d, res)
	}
	// Repeated in process until then, counting down.
	before := a.Stats()
	clk.Add(400 * time.Millisecond)
	d, _ = take(t, a, "k", l, 1)
	if d.Allowed || d.RetryAfter != 600*time.Millisecond || a.Stats().Takes != before.Takes {
		t.Fatalf("cached refusal %+v, store takes %d -> %d", d, before.Takes, a.Stats().Takes)
	}
	// b still holds 9: leases trade exactness of who gets the units, not
	// how many.
	if d, _ := take(t, b, "k", l, 1); !d.Allowed {
		t.Fatalf("b refused with 9 units held: %+v", d)
	}
	// After the RetryAfter a gets the refilled unit.
	clk.Add(600 * time.Millisecond)
	if d, _ := take(t, a, "k", l, 1); !d.Allowed {
		t.Fatalf("a refused after RetryAfter: %+v", d)
	}
}

// Units left in a slice when it expires go back to the shared store, at
// the time they were charged.
func TestExpiredSliceIsGivenBack(t *testing.T) {
	clk := newClock()
	m := shared(t, clk)
	l := quota(t, algo.TokenBucket, 100)
	s := instance(t, m, clk, lease.WithSlice(10), lease.WithTTL(time.Second))
	take(t, s, "k", l, 1)
	if got := remaining(t, m, "k", l); got != 90 {
		t.Fatalf("shared has %d, want 90", got)
	}
	clk.Add(time.Second)
	// The next request finds the slice expired: its 9 units go back and a
	// new slice is taken.
	take(t, s, "k", l, 1)
	if got := remaining(t, m, "k", l); got != 89 {
		t.Fatalf("shared has %d, want 89 (2 admitted, 9 held)", got)
	}
	if st := s.Stats(); st.Returned != 9 || st.Takes != 2 {
		t.Fatalf("stats %+v: want 9 returned, 2 takes", st)
	}
}

// The janitor gives back expired slices of idle keys and forgets them.
func TestJanitorGivesBackIdleSlices(t *testing.T) {
	m := shared(t, newClock()) // the shared store's clock does not matter here
	l := quota(t, algo.TokenBucket, 100)
	s := instance(t, m, nil, lease.WithSlice(10), lease.WithTTL(20*time.Millisecond))
	take(t, s, "k", l, 1)
	deadline := time.Now().Add(5 * time.Second)
	for remaining(t, m, "k", l) != 99 || s.Stats().Keys != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after 5 s shared has %d (want 99) and %d keys are held", remaining(t, m, "k", l), s.Stats().Keys)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A fixed window's slice taken in one window and given back in the next
// gives nothing to the new window: it is refunded at its own time.
func TestGiveBackAfterWindowEnds(t *testing.T) {
	clk := newClock()
	m := shared(t, clk)
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Period: time.Minute})
	s := instance(t, m, clk, lease.WithSlice(10), lease.WithTTL(2*time.Minute))
	take(t, s, "k", l, 1) // 10 charged to this window
	clk.Add(time.Minute)  // the next window
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, m, "k", l); got != 100 {
		t.Fatalf("new window has %d left, want 100 (nothing charged, nothing given)", got)
	}
}

// Refunding a take served from a slice puts the units back in the slice.
func TestRefundToSlice(t *testing.T) {
	clk := newClock()
	m := shared(t, clk)
	l := quota(t, algo.TokenBucket, 100)
	s := instance(t, m, clk, lease.WithSlice(10))
	_, res := take(t, s, "k", l, 3)
	if err := s.Refund(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 3, At: res.At}}); err != nil {
		t.Fatal(err)
	}
	d, _ := take(t, s, "k", l, 10)
	if !d.Allowed || s.Stats().Takes != 1 {
		t.Fatalf("cost 10 after the refund: %+v, %d store takes (want admitted from the slice, 1 take)", d, s.Stats().Takes)
	}
	if got := remaining(t, m, "k", l); got != 90 {
		t.Fatalf("shared has %d, want 90", got)
	}
}

// A refund of more than a slice's admitted units (a caller's mistake, or
// a cost as large as math.MaxInt64) puts back into the slice only what was
// admitted from it: the instance may not then admit units the shared store
// never charged, nor overflow its count of them. The rest is dropped:
// given to the shared store, it would refill the units the slice holds.
func TestRefundBeyondSlice(t *testing.T) {
	for _, over := range []int64{4, 1e12, math.MaxInt64} {
		clk := newClock()
		m := shared(t, clk)
		l := quota(t, algo.TokenBucket, 100)
		s := instance(t, m, clk, lease.WithSlice(10))
		_, res := take(t, s, "k", l, 3) // a slice of 10: 3 admitted, 7 left
		if err := s.Refund(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: over, At: res.At}}); err != nil {
			t.Fatal(err)
		}
		admitted := int64(0)
		for range 120 {
			if d, _ := take(t, s, "k", l, 1); d.Allowed {
				admitted++
			}
		}
		if admitted != 100 {
			t.Errorf("refund of %d after a take of 3: the instance then admits %d, want the budget of 100", over, admitted)
		}
	}
}

// Requests that are not leased go to the shared store unchanged.
func TestPassThrough(t *testing.T) {
	clk := newClock()
	m := shared(t, clk)
	s := instance(t, m, clk, lease.WithSlice(10))
	bucket := quota(t, algo.TokenBucket, 100)
	conc := compile(t, algo.Params{Algorithm: algo.Concurrency, Limit: 2, Period: time.Minute})
	log := compile(t, algo.Params{Algorithm: algo.SlidingLog, Limit: 100, Period: time.Minute})
	cases := []struct {
		name string
		reqs []store.Request
	}{
		{"two requests", []store.Request{{Key: "a", Limit: bucket, Cost: 1}, {Key: "b", Limit: bucket, Cost: 1}}},
		{"cost above slice", []store.Request{{Key: "c", Limit: bucket, Cost: 11}}},
		{"cost zero", []store.Request{{Key: "d", Limit: bucket, Cost: 0}}},
		{"concurrency", []store.Request{{Key: "e", Limit: conc, Cost: 1, Lease: 7}}},
		{"sliding log", []store.Request{{Key: "f", Limit: log, Cost: 1}}},
	}
	for _, c := range cases {
		out := make([]algo.Decision, len(c.reqs))
		if _, err := s.Take(context.Background(), c.reqs, out); err != nil {
			t.Fatal(c.name, err)
		}
		for i, r := range c.reqs {
			if r.Cost == 0 {
				continue
			}
			if got := remaining(t, m, r.Key, r.Limit); got != r.Limit.Capacity()-r.Cost {
				t.Errorf("%s: shared %s has %d left, want %d (charged the cost only)", c.name, r.Key, got, r.Limit.Capacity()-r.Cost)
			}
			if out[i].Remaining != r.Limit.Capacity()-r.Cost {
				t.Errorf("%s: decision %+v", c.name, out[i])
			}
		}
	}
	if st := s.Stats(); st.Takes != 0 || st.Local != 0 || st.Keys != 0 {
		t.Fatalf("pass-through calls touched leases: %+v", st)
	}
	if _, err := s.Take(context.Background(), []store.Request{{Key: "", Limit: bucket, Cost: 1}}, make([]algo.Decision, 1)); !errors.Is(err, store.ErrBadRequest) {
		t.Fatalf("empty key: err %v, want ErrBadRequest from the shared store", err)
	}
}

// Reset forgets the held units here and the state in the shared store.
func TestReset(t *testing.T) {
	clk := newClock()
	m := shared(t, clk)
	l := quota(t, algo.TokenBucket, 100)
	s := instance(t, m, clk, lease.WithSlice(10))
	take(t, s, "k", l, 1)
	if err := s.Reset(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, m, "k", l); got != 100 {
		t.Fatalf("shared has %d after Reset, want 100", got)
	}
	d, _ := take(t, s, "k", l, 1)
	if d.Remaining != 99 || s.Stats().Takes != 2 {
		t.Fatalf("after Reset: %+v, %d takes (want a fresh slice)", d, s.Stats().Takes)
	}
}

// A request waiting for its key's lock gives up with its context.
func TestWaitingRequestHonoursContext(t *testing.T) {
	clk := newClock()
	slow := &gate{Store: shared(t, clk), enter: make(chan struct{}), release: make(chan struct{})}
	s := instance(t, slow, clk, lease.WithSlice(10))
	l := quota(t, algo.TokenBucket, 100)
	first := make(chan error, 1)
	go func() { // takes the key's lock, then blocks in the store
		_, err := s.Take(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 1}}, make([]algo.Decision, 1))
		first <- err
	}()
	<-slow.enter
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := s.Take(ctx, []store.Request{{Key: "k", Limit: l, Cost: 1}}, make([]algo.Decision, 1))
	close(slow.release)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the context's deadline", err)
	}
	if err := <-first; err != nil {
		t.Fatalf("the first request, once released: %v", err)
	}
}

// gate holds the first Take until released.
type gate struct {
	store.Store
	once           sync.Once
	enter, release chan struct{}
}

func (g *gate) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	g.once.Do(func() { close(g.enter); <-g.release })
	return g.Store.Take(ctx, reqs, out)
}

// Inspect and Ping reach the shared store.
func TestInspectAndPing(t *testing.T) {
	clk := newClock()
	m := shared(t, clk)
	s, err := lease.New(m, lease.WithClock(clk.Now)) // owns m: Inspect stays visible
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	l := quota(t, algo.TokenBucket, 100)
	take(t, s, "k", l, 1)
	st, ok, err := s.Inspect(context.Background(), "k")
	want, _, _ := m.Inspect(context.Background(), "k")
	if err != nil || !ok || st.A != want.A || st.B != want.B {
		t.Fatalf("Inspect: %+v %v %v, the shared store has %+v", st, ok, err, want)
	}
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	bare := instance(t, noInspect{m}, clk)
	if _, _, err := bare.Inspect(context.Background(), "k"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Inspect without an Inspector below: %v", err)
	}
}

// noInspect hides the memory store's Inspect.
type noInspect struct{ store.Store }

// When the shared store goes away, a slice already held keeps admitting;
// the next store call's error reaches the caller unchanged and no units
// are invented.
func TestStoreDown(t *testing.T) {
	srv := testserver.NewRedis(t)
	if srv == nil {
		return
	}
	r, err := redis.Open("redis://"+srv.Addr, redis.WithTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	s, err := lease.New(r, lease.WithSlice(10), lease.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := quota(t, algo.TokenBucket, 100)
	out := make([]algo.Decision, 1)
	req := []store.Request{{Key: "down", Limit: l, Cost: 1}}
	if _, err := s.Take(context.Background(), req, out); err != nil || !out[0].Allowed {
		t.Fatalf("first take: %v %+v", err, out[0])
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	for i := range 9 {
		if _, err := s.Take(context.Background(), req, out); err != nil || !out[0].Allowed {
			t.Fatalf("take %d from the slice with the store down: %v %+v", i, err, out[0])
		}
	}
	if _, err := s.Take(context.Background(), req, out); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("take past the slice with the store down: err %v, want store.ErrUnavailable", err)
	}
	if st := s.Stats(); st.Local != 9 || st.Takes != 2 {
		t.Fatalf("stats %+v: want 9 local decisions and 2 store takes", st)
	}
}

// Renew passes Concurrency leases to the shared store, which keeps the
// renewed slot past its first expiry.
func TestRenewPassesThrough(t *testing.T) {
	clk := newClock()
	m := shared(t, clk)
	s, err := lease.New(m, lease.WithClock(clk.Now), lease.WithSlice(10))
	if err != nil {
		t.Fatal(err)
	}
	var rn store.Renewer = s
	conc := compile(t, algo.Params{Algorithm: algo.Concurrency, Limit: 1, LeaseTTL: time.Minute})
	q := store.Request{Key: "conc", Limit: conc, Cost: 1, Lease: 7}
	if _, err := s.Take(context.Background(), []store.Request{q}, make([]algo.Decision, 1)); err != nil {
		t.Fatal(err)
	}
	clk.Add(54 * time.Second)
	if err := rn.Renew(context.Background(), []store.Request{q}); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	clk.Add(36 * time.Second) // 1.5 TTL
	if got := remaining(t, m, q.Key, conc); got != 0 {
		t.Fatalf("at 1.5 TTL after a renewal at 0.9 TTL, the shared store has %d slots left, want 0", got)
	}
	clk.Add(25 * time.Second) // past 1.9 TTL
	if got := remaining(t, m, q.Key, conc); got != 1 {
		t.Fatalf("past the renewed expiry, the shared store has %d slots left, want 1", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// interloper runs before its inner store's on-th Take: another instance's
// take between two of this one's.
type interloper struct {
	store.Store
	n, on  int
	before func()
}

func (s *interloper) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	if s.n++; s.n == s.on {
		s.before()
	}
	return s.Store.Take(ctx, reqs, out)
}

// TestEndOfBudgetTakenMeanwhile: near the end of a budget, when what the
// shared store had left is taken by another instance between the Store's
// refused slice and its take of what was left, the request is decided for
// its own cost: admitted from the 2 units still there. It was refused with
// the decision of the take of 5 (a refusal the shared store never made for
// a cost of 1), and that refusal remembered.
func TestEndOfBudgetTakenMeanwhile(t *testing.T) {
	clk := newClock()
	m := shared(t, clk)
	l := quota(t, algo.TokenBucket, 25)
	other := func(n int64) {
		out := make([]algo.Decision, 1)
		if _, err := m.Take(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: n}}, out); err != nil || !out[0].Allowed {
			t.Fatalf("the other instance's take of %d: %+v, %v", n, out[0], err)
		}
	}
	other(20) // 5 left
	// The slice of 10 is refused; before the take of the 5 left, another
	// instance takes 3 of them.
	in := &interloper{Store: m, on: 2, before: func() { other(3) }}
	s := instance(t, in, clk, lease.WithSlice(10))
	d, res := take(t, s, "k", l, 1)
	if !d.Allowed || !res.Allowed {
		t.Fatalf("take of 1 with 2 units left on the shared store: %+v, %+v; want allowed", d, res)
	}
	if got := remaining(t, m, "k", l); got != 1 {
		t.Fatalf("the shared store has %d left, want 1", got)
	}
}
