package resilient_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/resilient"
)

type clock struct{ us atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.us.Store(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro())
	return c
}
func (c *clock) Now() time.Time          { return time.UnixMicro(c.us.Load()) }
func (c *clock) Advance(d time.Duration) { c.us.Add(int64(d / time.Microsecond)) }

func compile(t testing.TB, p algo.Params) *algo.Limit {
	t.Helper()
	l, err := algo.Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func memStore(t testing.TB, c *clock) *memory.Store {
	m, err := memory.New(memory.WithClock(c.Now), memory.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func take(t testing.TB, s store.Store, key string, l *algo.Limit, cost int64) algo.Decision {
	t.Helper()
	out := make([]algo.Decision, 1)
	if _, err := s.Take(context.Background(), []store.Request{{Key: key, Limit: l, Cost: cost}}, out); err != nil {
		t.Fatalf("Take(%s, %d): %v", key, cost, err)
	}
	return out[0]
}

// counting wraps a real store and counts the Takes that reach it.
type counting struct {
	store.Store
	takes atomic.Int64
}

func (c *counting) Take(ctx context.Context, r []store.Request, out []algo.Decision) (store.Result, error) {
	c.takes.Add(1)
	return c.Store.Take(ctx, r, out)
}

func TestOverLimitCacheSavesStoreCalls(t *testing.T) {
	c := newClock()
	inner := &counting{Store: memStore(t, c)}
	hits := 0
	// A TTL longer than the window: the cache holds the refusal until its
	// retry time (TestOverLimitCacheTTL checks the default's cap).
	s, err := resilient.New(inner, resilient.WithClock(c.Now), resilient.WithOverLimitCacheTTL(time.Hour),
		resilient.WithHooks(resilient.Hooks{CacheHit: func() { hits++ }}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 3, Period: time.Minute})
	for i := range 3 {
		if d := take(t, s, "k", l, 1); !d.Allowed {
			t.Fatalf("take %d refused", i+1)
		}
	}
	d := take(t, s, "k", l, 1) // refused by the store: cached until the window ends
	if d.Allowed || d.RetryAfter != time.Minute {
		t.Fatalf("4th take = %+v, want refused with RetryAfter 1m", d)
	}
	calls := inner.takes.Load()
	type row struct {
		advance   time.Duration
		cost      int64
		allowed   bool
		retry     time.Duration
		storeCall bool
	}
	for i, r := range []row{
		{10 * time.Second, 1, false, 50 * time.Second, false},
		{0, 2, false, 50 * time.Second, false}, // a larger cost is refused too
		{49 * time.Second, 1, false, time.Second, false},
		{time.Second, 1, true, 0, true}, // the window reset: the store decides again
	} {
		c.Advance(r.advance)
		before := inner.takes.Load()
		d := take(t, s, "k", l, r.cost)
		called := inner.takes.Load() > before
		if d.Allowed != r.allowed || d.RetryAfter != r.retry || called != r.storeCall {
			t.Fatalf("row %d: Take(cost %d) = allowed %v retry %v store call %v, want %v %v %v",
				i, r.cost, d.Allowed, d.RetryAfter, called, r.allowed, r.retry, r.storeCall)
		}
	}
	if hits != 3 {
		t.Fatalf("cache hits %d, want 3", hits)
	}
	if inner.takes.Load() != calls+1 {
		t.Fatalf("store calls %d after the refusal, want 1", inner.takes.Load()-calls)
	}
}

// TestOverLimitCacheTTL: two instances share a store; a monthly quota is
// spent on A, which caches the refusal (retry: next month). B resets the
// key. A keeps refusing from its cache for at most the TTL (1 s by
// default), then asks the store and admits: a reset is fleet-wide within
// the TTL. Meanwhile a key far over its limit costs A one store call per
// TTL, however often it is asked.
func TestOverLimitCacheTTL(t *testing.T) {
	c := newClock()
	shared := &counting{Store: memStore(t, c)}
	a, err := resilient.New(shared, resilient.WithClock(c.Now))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := resilient.New(nopClose{shared}, resilient.WithClock(c.Now))
	if err != nil {
		t.Fatal(err)
	}
	month := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 2, Calendar: algo.CalendarMonth})
	take(t, a, "q", month, 1)
	take(t, a, "q", month, 1)
	if d := take(t, a, "q", month, 1); d.Allowed || d.RetryAfter < 24*time.Hour {
		t.Fatalf("3rd take of a 2/month quota = %+v, want refused until next month", d)
	}
	// Many asks within the TTL: one store call per TTL.
	calls := shared.takes.Load()
	for range 300 {
		c.Advance(10 * time.Millisecond) // 3 s in all
		if d := take(t, a, "q", month, 1); d.Allowed {
			t.Fatal("a spent quota was admitted")
		}
	}
	if n := shared.takes.Load() - calls; n != 3 {
		t.Fatalf("300 takes over 3 s of a key over its limit: %d store calls, want 3 (one per 1 s TTL)", n)
	}
	// Just refused and cached at t0; B resets the key right after.
	if err := b.Reset(context.Background(), "q"); err != nil {
		t.Fatal(err)
	}
	type row struct {
		at        time.Duration // since the reset
		allowed   bool
		storeCall bool
	}
	t0 := c.Now()
	for i, r := range []row{
		{0, false, false},                       // cached on A: not yet seen
		{500 * time.Millisecond, false, false},  // still within the TTL
		{time.Second, true, true},               // the cached refusal has lapsed: the store admits
		{time.Second, true, true},               // the quota's 2nd unit
		{time.Second, false, true},              // spent again: the store refuses
		{1500 * time.Millisecond, false, false}, // and that refusal is cached
	} {
		c.us.Store(t0.Add(r.at).UnixMicro())
		before := shared.takes.Load()
		d := take(t, a, "q", month, 1)
		if called := shared.takes.Load() > before; d.Allowed != r.allowed || called != r.storeCall {
			t.Fatalf("row %d at reset+%v: allowed %v, store call %v; want %v, %v", i, r.at, d.Allowed, called, r.allowed, r.storeCall)
		}
	}
}

// nopClose is a store whose Close does nothing: a second wrapper of a
// store the first one closes.
type nopClose struct{ store.Store }

func (nopClose) Close() error { return nil }

func TestOverLimitCacheSmallerCostAsksTheStore(t *testing.T) {
	c := newClock()
	inner := &counting{Store: memStore(t, c)}
	s, _ := resilient.New(inner, resilient.WithClock(c.Now))
	defer s.Close()
	l := compile(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: 10 * time.Second})
	take(t, s, "k", l, 8)
	if d := take(t, s, "k", l, 5); d.Allowed {
		t.Fatal("cost 5 with 2 tokens left was admitted")
	}
	if d := take(t, s, "k", l, 2); !d.Allowed {
		t.Fatal("cost 2 with 2 tokens left was refused: the cache must only refuse costs >= the refused one")
	}
}

func TestResetAndRefundDropCachedKeys(t *testing.T) {
	c := newClock()
	s, _ := resilient.New(memStore(t, c), resilient.WithClock(c.Now))
	defer s.Close()
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Hour})
	take(t, s, "k", l, 1)
	if take(t, s, "k", l, 1).Allowed {
		t.Fatal("second take admitted")
	}
	if err := s.Reset(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	if !take(t, s, "k", l, 1).Allowed {
		t.Fatal("after Reset the cached refusal still answered")
	}
	take(t, s, "k", l, 1)
	if err := s.Refund(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 1}}); err != nil {
		t.Fatal(err)
	}
	if !take(t, s, "k", l, 1).Allowed {
		t.Fatal("after Refund the cached refusal still answered")
	}
}

// TestExactThroughTheWrapper: the cache never admits what the store would
// refuse, under 64 goroutines. The deadline is long: on a busy machine
// (and under -race) a call past the default 50 ms is answered by the
// failure policy, which is not what this test is about.
func TestExactThroughTheWrapper(t *testing.T) {
	m, _ := memory.New()
	s, _ := resilient.New(m, resilient.WithTimeout(time.Minute))
	defer s.Close()
	for _, k := range []algo.Kind{algo.FixedWindow, algo.TokenBucket, algo.SlidingLog, algo.GCRA} {
		l := compile(t, algo.Params{Algorithm: k, Limit: 1000, Period: time.Hour})
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for g := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out := make([]algo.Decision, 1)
				for i := g; i < 1200; i += 64 {
					res, err := s.Take(context.Background(), []store.Request{{Key: "exact-" + k.String(), Limit: l, Cost: 1}}, out)
					if err != nil {
						t.Error(err)
						return
					}
					if res.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if n := admitted.Load(); n != 1000 {
			t.Fatalf("%s: admitted %d of 1200, want exactly 1000", k, n)
		}
	}
}

func TestBadRequestIsTheCallers(t *testing.T) {
	fallbacks := 0
	s, _ := resilient.New(memStore(t, newClock()), resilient.WithPolicy(resilient.FailOpen),
		resilient.WithHooks(resilient.Hooks{Fallback: func(string, resilient.Policy, error) { fallbacks++ }}))
	defer s.Close()
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Second})
	for _, reqs := range [][]store.Request{{{Key: "", Limit: l, Cost: 1}}, {{Key: "k", Cost: 1}}} {
		_, err := s.Take(context.Background(), reqs, make([]algo.Decision, 1))
		if !errors.Is(err, store.ErrBadRequest) {
			t.Fatalf("Take(%+v) error %v, want ErrBadRequest", reqs, err)
		}
	}
	if fallbacks != 0 {
		t.Fatalf("a bad request triggered the failure policy %d times", fallbacks)
	}
}

// down is a store that cannot be reached.
type down struct{ store.Store }

func (down) Take(context.Context, []store.Request, []algo.Decision) (store.Result, error) {
	return store.Result{}, store.ErrUnavailable
}

func (down) Peek(context.Context, []store.Request, []algo.Decision) error {
	return store.ErrUnavailable
}

// TestFailOpenNeverAdmitsTheImpossible: a cost above the limit's MaxCost
// can never pass, whatever the store holds (the store answers RetryAfter
// Never), so FailOpen, which answers for a store it cannot reach, refuses
// it too rather than admit it: all or nothing, the other requests of the
// Take are not charged. Peek says the same.
func TestFailOpenNeverAdmitsTheImpossible(t *testing.T) {
	s, err := resilient.New(down{memStore(t, newClock())}, resilient.WithPolicy(resilient.FailOpen))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for _, p := range []algo.Params{
		{Algorithm: algo.TokenBucket, Limit: 5, Period: time.Minute},
		{Algorithm: algo.SmoothBursty, Limit: 5, Period: time.Second},
		{Algorithm: algo.FixedWindow, Limit: 5, Period: time.Minute},
	} {
		l := compile(t, p)
		ok := store.Request{Key: "ok", Limit: l, Cost: 1}
		for _, cost := range []int64{l.MaxCost() + 1, math.MaxInt64} {
			never := store.Request{Key: "never", Limit: l, Cost: cost}
			out := make([]algo.Decision, 2)
			res, err := s.Take(ctx, []store.Request{ok, never}, out)
			if err != nil {
				t.Fatalf("%s: Take(cost 1, cost %d): %v", l, cost, err)
			}
			if res.Allowed || !out[0].Allowed || out[1].Allowed || !out[1].IsNever() {
				t.Errorf("%s: FailOpen Take(cost 1, cost %d) = %v, %+v; want refused, the second never", l, cost, res.Allowed, out)
			}
			if out[0].Remaining != l.Capacity() {
				t.Errorf("%s: FailOpen refused Take: the first request's Remaining %d, want %d (nothing charged)", l, out[0].Remaining, l.Capacity())
			}
			if err := s.Peek(ctx, []store.Request{never}, out[:1]); err != nil || out[0].Allowed || !out[0].IsNever() {
				t.Errorf("%s: FailOpen Peek(cost %d) = %+v, %v; want never", l, cost, out[0], err)
			}
		}
		out := make([]algo.Decision, 1)
		if err := s.Peek(ctx, []store.Request{{Key: "max", Limit: l, Cost: l.MaxCost()}}, out); err != nil || !out[0].Allowed {
			t.Errorf("%s: FailOpen Peek(MaxCost %d) = %+v, %v; want allowed", l, l.MaxCost(), out[0], err)
		}
	}
}

func TestOptionsValidated(t *testing.T) {
	m := memStore(t, newClock())
	defer m.Close()
	for _, o := range []resilient.Option{
		resilient.WithTimeout(0), resilient.WithInstances(0), resilient.WithBreaker(0, time.Second),
		resilient.WithBreaker(1, 0), resilient.WithOverLimitCache(-1), resilient.WithPolicy(9),
		resilient.WithOverLimitCacheTTL(0), resilient.WithOverLimitCacheTTL(-time.Second),
	} {
		if _, err := resilient.New(m, o); !errors.Is(err, resilient.ErrInvalidOption) {
			t.Errorf("New with a bad option: error %v, want ErrInvalidOption", err)
		}
	}
	if _, err := resilient.New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
	for in, want := range map[string]resilient.Policy{"open": resilient.FailOpen, "CLOSED": resilient.FailClosed, " local": resilient.FailLocal} {
		if p, err := resilient.ParsePolicy(in); err != nil || p != want {
			t.Errorf("ParsePolicy(%q) = %v, %v, want %v", in, p, err, want)
		}
	}
	if _, err := resilient.ParsePolicy("sometimes"); err == nil {
		t.Error(`ParsePolicy("sometimes") succeeded`)
	}
}

func TestShare(t *testing.T) {
	ten := int64(10)
	for _, r := range []struct {
		p                 algo.Params
		n                 int
		wantLimit, wantCp int64
	}{
		{algo.Params{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Hour}, 4, 250, 250},
		{algo.Params{Algorithm: algo.FixedWindow, Limit: 1001, Period: time.Hour}, 4, 250, 250},
		{algo.Params{Algorithm: algo.FixedWindow, Limit: 3, Period: time.Hour}, 4, 1, 1},
		{algo.Params{Algorithm: algo.TokenBucket, Limit: 100, Burst: 40, Period: time.Second, InitialTokens: &ten}, 4, 25, 10},
		{algo.Params{Algorithm: algo.GCRA, Limit: 100, Period: time.Second}, 3, 33, 33},
		{algo.Params{Algorithm: algo.Shaper, Limit: 100, Burst: 9, Delay: 3, Period: time.Second}, 4, 25, 3},
		{algo.Params{Algorithm: algo.Concurrency, Limit: 8}, 2, 4, 4},
		{algo.Params{Algorithm: algo.SlidingWindow, Limit: 60, SubWindows: 6, Period: time.Minute}, 1, 60, 60},
	} {
		l := compile(t, r.p)
		d := resilient.Share(l, r.n)
		if d.Params().Limit != r.wantLimit || d.Capacity() != r.wantCp {
			t.Errorf("Share(%v, %d) = limit %d capacity %d, want %d %d", l, r.n, d.Params().Limit, d.Capacity(), r.wantLimit, r.wantCp)
		}
	}
}

// pause stops srv with SIGSTOP and waits until the kernel reports it
// stopped: the signal is asynchronous, and a call racing it would be
// answered.
func pause(t *testing.T, srv *testserver.Server) {
	t.Helper()
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", srv.PID()))
		if err != nil {
			return // not Linux: the signal has had its chance
		}
		if f := strings.Fields(string(b)); len(f) > 2 && f[2] == "T" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) not stopped 2s after SIGSTOP", srv, srv.PID())
		}
		time.Sleep(time.Millisecond) // waiting for a real process
	}
}

// outage starts a private memcached and a store on it.
func outage(t *testing.T) (*testserver.Server, store.Store) {
	t.Helper()
	srv := testserver.NewMemcached(t)
	if srv == nil {
		t.Skip("no memcached")
	}
	st, err := memcached.Open("memcached://"+srv.Addr, memcached.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return srv, st
}

// TestPoliciesWhenTheStoreDies kills a real memcached and checks each
// policy's answers, their latency, the breaker and the recovery.
func TestPoliciesWhenTheStoreDies(t *testing.T) {
	srv, inner := outage(t)
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Period: time.Hour})
	var states []string
	var mu sync.Mutex
	mk := func(p resilient.Policy) *resilient.Store {
		s, err := resilient.New(inner, resilient.WithPolicy(p), resilient.WithInstances(4),
			resilient.WithBreaker(3, 200*time.Millisecond),
			resilient.WithHooks(resilient.Hooks{State: func(from, to resilient.BreakerState) {
				mu.Lock()
				states = append(states, p.String()+":"+to.String())
				mu.Unlock()
			}}))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	open, closed, local := mk(resilient.FailOpen), mk(resilient.FailClosed), mk(resilient.FailLocal)
	defer inner.Close()
	key := "outage-" + t.Name()
	if d := take(t, open, key, l, 1); !d.Allowed {
		t.Fatal("first take refused with the store up")
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	// local admits its share (100 ÷ 4) of the window, then refuses.
	admittedLocal := 0
	for i := range 40 {
		start := time.Now()
		dOpen, dClosed, dLocal := take(t, open, key, l, 1), take(t, closed, key, l, 1), take(t, local, key, l, 1)
		if el := time.Since(start); el > 600*time.Millisecond {
			t.Fatalf("round %d took %v with the store down", i, el)
		}
		if !dOpen.Allowed {
			t.Fatalf("round %d: open refused", i)
		}
		if dClosed.Allowed || dClosed.RetryAfter <= 0 {
			t.Fatalf("round %d: closed answered %+v, want a refusal with a retry", i, dClosed)
		}
		if dLocal.Allowed {
			admittedLocal++
		}
	}
	if admittedLocal != 25 {
		t.Fatalf("local admitted %d with the store down, want its share 25", admittedLocal)
	}
	for _, s := range []*resilient.Store{open, closed, local} {
		if s.Breaker() != resilient.Open {
			t.Fatalf("%v: breaker %v after the failures, want open", s.Policy(), s.Breaker())
		}
		if err := s.Ping(context.Background()); !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("%v: Ping with the store down: %v", s.Policy(), err)
		}
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, s := range []*resilient.Store{open, closed, local} {
		for s.Breaker() != resilient.Closed {
			if time.Now().After(deadline) {
				t.Fatalf("%v: breaker still %v 5s after the store came back", s.Policy(), s.Breaker())
			}
			take(t, s, key, l, 1)
			time.Sleep(20 * time.Millisecond) // waiting for a real process, not for math
		}
	}
	if d := take(t, closed, key+"-after", l, 1); !d.Allowed {
		t.Fatal("closed refuses after recovery")
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("breaker changes: %v", states)
}

// TestTimeoutOnAHungStore pauses memcached (SIGSTOP): calls must come back
// at the wrapper's deadline, not the client's.
func TestTimeoutOnAHungStore(t *testing.T) {
	srv, inner := outage(t)
	defer inner.Close()
	var timeouts atomic.Int64
	s, _ := resilient.New(inner, resilient.WithTimeout(50*time.Millisecond), resilient.WithPolicy(resilient.FailClosed),
		resilient.WithBreaker(1000, time.Second),
		resilient.WithHooks(resilient.Hooks{Call: func(op string, _ time.Duration, err error) {
			if errors.Is(err, store.ErrUnavailable) {
				timeouts.Add(1)
			}
		}}))
	l := compile(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second})
	pause(t, srv)
	defer srv.Resume()
	for i := range 5 {
		start := time.Now()
		d := take(t, s, "hung", l, 1)
		el := time.Since(start)
		if d.Allowed {
			t.Fatalf("call %d: closed policy admitted", i)
		}
		if el > 300*time.Millisecond {
			t.Fatalf("call %d took %v on a hung store, want about the 50ms timeout", i, el)
		}
	}
	if timeouts.Load() != 5 {
		t.Fatalf("%d timeouts reported, want 5", timeouts.Load())
	}
}

func TestCallerCancellationIsNotAFailure(t *testing.T) {
	srv, inner := outage(t)
	defer inner.Close()
	fallbacks := 0
	s, _ := resilient.New(inner, resilient.WithBreaker(1, time.Second),
		resilient.WithHooks(resilient.Hooks{Fallback: func(string, resilient.Policy, error) { fallbacks++ }}))
	l := compile(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second})
	pause(t, srv)
	defer srv.Resume()
	// Cancelled, not a deadline: a deadline sooner than the timeout cuts
	// the call before it (TestShortCallerDeadlineOnAHungStore; a tiny one
	// is the caller's: TestTinyCallerDeadlineIsTheCallers).
	ctx, cancel := context.WithCancel(context.Background())
	defer time.AfterFunc(10*time.Millisecond, cancel).Stop()
	defer cancel()
	_, err := s.Take(ctx, []store.Request{{Key: "c", Limit: l, Cost: 1}}, make([]algo.Decision, 1))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Take cancelled by its caller: %v, want context.Canceled", err)
	}
	if fallbacks != 0 || s.Breaker() != resilient.Closed {
		t.Fatalf("the caller's cancellation caused %d fallbacks and breaker %v", fallbacks, s.Breaker())
	}
}

// TestReleaseWhenTheStoreIsDown stops a real Redis holding a concurrency
// slot: the release cannot be answered by a policy, so it must fail with
// store.ErrUnavailable (the slot stays held until its lease TTL) rather than
// report success. Under FailLocal the local store's leases are released
// all the same.
func TestReleaseWhenTheStoreIsDown(t *testing.T) {
	srv, open, local, releaseErrs := onStoppableRedis(t, "release")
	l := compile(t, algo.Params{Algorithm: algo.Concurrency, Limit: 2, LeaseTTL: time.Minute})
	key := "release-" + t.Name()
	lease := func(id uint64) store.Request { return store.Request{Key: key, Limit: l, Cost: 1, Lease: id} }
	takeLease := func(s store.Store, id uint64) bool {
		t.Helper()
		out := make([]algo.Decision, 1)
		if _, err := s.Take(context.Background(), []store.Request{lease(id)}, out); err != nil {
			t.Fatalf("Take(lease %d): %v", id, err)
		}
		return out[0].Allowed
	}
	if !takeLease(open, 1) {
		t.Fatal("the first slot was refused with the store up")
	}
	if err := open.Release(context.Background(), []store.Request{lease(1)}); err != nil {
		t.Fatalf("Release with the store up: %v", err)
	}
	if !takeLease(open, 2) {
		t.Fatal("the released slot was not free")
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}

	err := open.Release(context.Background(), []store.Request{lease(2)})
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "release failed") {
		t.Fatalf("Release with the store down = %v, want an error wrapping store.ErrUnavailable saying the release failed", err)
	}

	// FailLocal decides on its local store while Redis is down: its two
	// slots are taken there, and a release frees one of them even though
	// it fails on Redis.
	if !takeLease(local, 3) || !takeLease(local, 4) || takeLease(local, 5) {
		t.Fatal("the local store did not admit exactly its 2 slots")
	}
	err = local.Release(context.Background(), []store.Request{lease(3)})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("FailLocal: Release with the store down = %v, want an error wrapping store.ErrUnavailable", err)
	}
	if !takeLease(local, 6) {
		t.Fatal("FailLocal: the local slot was not released along with the failed store release")
	}
	if n := releaseErrs.Load(); n != 2 {
		t.Fatalf("%d failed release calls reported to the hooks, want 2", n)
	}
}

// TestRenew checks that Renew reaches the store: a slot renewed at 0.9 TTL
// is still held at 1.5 TTL.
func TestRenew(t *testing.T) {
	c := newClock()
	m := memStore(t, c)
	s, err := resilient.New(m, resilient.WithClock(c.Now))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := compile(t, algo.Params{Algorithm: algo.Concurrency, Limit: 1, LeaseTTL: time.Minute})
	q := store.Request{Key: "renew", Limit: l, Cost: 1, Lease: 7}
	if _, err := s.Take(context.Background(), []store.Request{q}, make([]algo.Decision, 1)); err != nil {
		t.Fatal(err)
	}
	c.Advance(54 * time.Second)
	if err := s.Renew(context.Background(), []store.Request{q}); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	c.Advance(36 * time.Second)
	if d := take(t, s, "renew", l, 1); d.Allowed {
		t.Fatalf("at 1.5 TTL after a renewal at 0.9 TTL, Take = %+v, want refused", d)
	}
	if err := s.Renew(context.Background(), []store.Request{{Key: "", Limit: l, Lease: 7}}); !errors.Is(err, store.ErrBadRequest) {
		t.Fatalf("Renew of an empty key = %v, want store.ErrBadRequest", err)
	}
}

// TestRenewKeepsLocalLeases: under FailLocal, a slot taken on the local
// store while the store is down lives there, and Renew extends it there
// even though the store's renewal fails: renewed at 0.9 TTL, it is still
// held at 1.5 TTL, while an unrenewed one has expired by then.
func TestRenewKeepsLocalLeases(t *testing.T) {
	for _, renew := range []bool{true, false} {
		c := newClock()
		srv, down := outage(t)
		defer down.Close()
		if err := srv.Stop(); err != nil { // every call fails: the local store decides
			t.Fatal(err)
		}
		s, err := resilient.New(down, resilient.WithPolicy(resilient.FailLocal), resilient.WithClock(c.Now),
			resilient.WithTimeout(200*time.Millisecond), resilient.WithLocalStore(memStore(t, c)),
			resilient.WithBreaker(1000, time.Second))
		if err != nil {
			t.Fatal(err)
		}
		l := compile(t, algo.Params{Algorithm: algo.Concurrency, Limit: 1, LeaseTTL: time.Minute})
		slot := func(id uint64) bool {
			out := make([]algo.Decision, 1)
			if _, err := s.Take(context.Background(), []store.Request{{Key: "held", Limit: l, Cost: 1, Lease: id}}, out); err != nil {
				t.Fatalf("Take(lease %d): %v", id, err)
			}
			return out[0].Allowed
		}
		if !slot(1) {
			t.Fatal("the local store refused the first slot")
		}
		c.Advance(54 * time.Second)
		if renew {
			err := s.Renew(context.Background(), []store.Request{{Key: "held", Limit: l, Cost: 1, Lease: 1}})
			if !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("Renew with the store down = %v, want an error wrapping store.ErrUnavailable", err)
			}
		}
		c.Advance(36 * time.Second)
		if got := slot(2); got == renew {
			t.Fatalf("renewed %v: a second slot at 1.5 TTL admitted = %v, want %v", renew, got, !renew)
		}
		s.Close()
	}
}

// TestRenewWhenTheStoreIsDown: a renewal the store did not do is an error
// wrapping store.ErrUnavailable, as a release is, under every policy.
func TestRenewWhenTheStoreIsDown(t *testing.T) {
	srv, open, local, renewErrs := onStoppableRedis(t, "renew")
	l := compile(t, algo.Params{Algorithm: algo.Concurrency, Limit: 2, LeaseTTL: time.Minute})
	q := store.Request{Key: "renew-" + t.Name(), Limit: l, Cost: 1, Lease: 1}
	if _, err := open.Take(context.Background(), []store.Request{q}, make([]algo.Decision, 1)); err != nil {
		t.Fatal(err)
	}
	if err := open.Renew(context.Background(), []store.Request{q}); err != nil {
		t.Fatalf("Renew with the store up: %v", err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*resilient.Store{"FailOpen": open, "FailLocal": local} {
		err := s.Renew(context.Background(), []store.Request{q})
		if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "renew failed") {
			t.Fatalf("%s: Renew with the store down = %v, want an error wrapping store.ErrUnavailable saying the renewal failed", name, err)
		}
	}
	if n := renewErrs.Load(); n != 2 {
		t.Fatalf("%d failed renew calls reported to the hooks, want 2", n)
	}
}

// onStoppableRedis starts a private Redis for the test and returns it with
// two resilient stores over it, FailOpen and FailLocal (200 ms timeout, a
// breaker that does not trip during the test), and the count of the
// calls of op (release, renew) that failed. It skips without redis-server.
func onStoppableRedis(t *testing.T, op string) (*testserver.Server, *resilient.Store, *resilient.Store, *atomic.Int64) {
	t.Helper()
	srv := testserver.NewRedis(t)
	if srv == nil {
		t.Skip("no redis-server")
	}
	inner, err := redis.Open("redis://"+srv.Addr, redis.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close() })
	failed := new(atomic.Int64)
	mk := func(p resilient.Policy) *resilient.Store {
		s, err := resilient.New(inner, resilient.WithPolicy(p), resilient.WithTimeout(200*time.Millisecond),
			resilient.WithBreaker(1000, time.Second),
			resilient.WithHooks(resilient.Hooks{Call: func(name string, _ time.Duration, err error) {
				if name == op && err != nil {
					failed.Add(1)
				}
			}}))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	return srv, mk(resilient.FailOpen), mk(resilient.FailLocal), failed
}
