package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/storetest"
)

// opaque hides the memory store's type, so that the limiter takes its
// generic path, the one every other store gets.
type opaque struct{ store.Store }

func newStore(tb testing.TB, opts ...memory.Option) *memory.Store {
	tb.Helper()
	st, err := memory.New(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = st.Close() })
	return st
}

func newLimiter(tb testing.TB, st store.Store, name string, p algo.Params, opts ...limiter.Option) *limiter.Limiter {
	tb.Helper()
	l, err := limiter.New(st, name, p, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// both runs f with the memory store seen as itself (the allocation-free
// path) and behind an interface (the path of every other store).
func both(t *testing.T, f func(t *testing.T, st store.Store, clock *storetest.Clock)) {
	for _, name := range []string{"memory", "generic"} {
		t.Run(name, func(t *testing.T) {
			clock := storetest.NewClock(storetest.Epoch)
			var st store.Store = newStore(t, memory.WithClock(clock.Now))
			if name == "generic" {
				st = opaque{st}
			}
			f(t, st, clock)
		})
	}
}

func TestNewErrors(t *testing.T) {
	st := newStore(t)
	good := algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Second}
	if _, err := limiter.New(nil, "x", good); err == nil {
		t.Error("New with a nil store: no error")
	}
	if _, err := limiter.New(st, "", good); err == nil {
		t.Error("New with an empty name: no error")
	}
	if _, err := limiter.New(st, "x", algo.Params{Algorithm: algo.TokenBucket}); !errors.Is(err, algo.ErrInvalid) {
		t.Errorf("New with a bad limit: %v, want ErrInvalid", err)
	}
	if _, err := limiter.New(st, "x", good, limiter.WithStoreTimeout(-1)); err == nil {
		t.Error("New with a negative timeout: no error")
	}
}

// TestAllowN is a step table: a token bucket of 3, one unit back every
// 100ms.
func TestAllowN(t *testing.T) {
	both(t, func(t *testing.T, st store.Store, clock *storetest.Clock) {
		l := newLimiter(t, st, "api", algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second, Burst: 3})
		ctx := t.Context()
		steps := []struct {
			at        time.Duration
			n         int64
			allowed   bool
			remaining int64
			retry     time.Duration
		}{
			{0, 1, true, 2, 0},
			{0, 2, true, 0, 0},
			{0, 1, false, 0, 100 * time.Millisecond},
			{50 * time.Millisecond, 1, false, 0, 50 * time.Millisecond},
			{100 * time.Millisecond, 1, true, 0, 0},
			{100 * time.Millisecond, 4, false, 0, algo.Never},
			{time.Second, 3, true, 0, 0},
		}
		for i, s := range steps {
			clock.Set(storetest.Epoch.Add(s.at))
			d, err := l.AllowN(ctx, "alice", s.n)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != s.allowed || d.Remaining != s.remaining || d.RetryAfter != s.retry {
				t.Errorf("step %d: AllowN(t+%v, %d) = allowed %v remaining %d retry %v; want %v %d %v",
					i, s.at, s.n, d.Allowed, d.Remaining, d.RetryAfter, s.allowed, s.remaining, s.retry)
			}
		}
		// Another key and another name have their own state.
		if d, _ := l.Allow(ctx, "bob"); !d.Allowed {
			t.Error("bob shares alice's state")
		}
		other := newLimiter(t, st, "other", algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second, Burst: 3})
		if d, _ := other.AllowN(ctx, "alice", 3); !d.Allowed {
			t.Error("a limiter of another name shares alice's state")
		}
		if _, err := l.AllowN(ctx, "alice", -1); !errors.Is(err, store.ErrBadRequest) {
			t.Errorf("AllowN(-1): %v, want ErrBadRequest", err)
		}
		if got := l.StoreKey("alice"); got != "fg:api:alice" {
			t.Errorf("StoreKey = %q, want fg:api:alice", got)
		}
	})
}

func TestPeekAndReset(t *testing.T) {
	both(t, func(t *testing.T, st store.Store, clock *storetest.Clock) {
		l := newLimiter(t, st, "p", algo.Params{Algorithm: algo.FixedWindow, Limit: 5, Period: time.Minute})
		ctx := t.Context()
		if _, err := l.AllowN(ctx, "k", 4); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if d, err := l.Peek(ctx, "k", 1); err != nil || !d.Allowed || d.Remaining != 0 {
				t.Fatalf("Peek(1) = %+v, %v; want allowed with 0 left after it", d, err)
			}
		}
		if d, _ := l.Peek(ctx, "k", 2); d.Allowed {
			t.Error("Peek(2) with 1 left: allowed")
		}
		if err := l.Reset(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if d, _ := l.AllowN(ctx, "k", 5); !d.Allowed {
			t.Error("after Reset, AllowN(5) refused")
		}
	})
}

func TestReserveCancel(t *testing.T) {
	both(t, func(t *testing.T, st store.Store, clock *storetest.Clock) {
		l := newLimiter(t, st, "r", algo.Params{Algorithm: algo.SlidingLog, Limit: 3, Period: time.Minute})
		ctx := t.Context()
		r, err := l.Reserve(ctx, "k", 2)
		if err != nil || !r.OK() {
			t.Fatalf("Reserve(2) = %v, %v", r, err)
		}
		clock.Advance(time.Second)
		if r2, _ := l.Reserve(ctx, "k", 2); r2.OK() || r2.Delay() != algo.Never || r2.Decision().RetryAfter != 59*time.Second {
			t.Errorf("second Reserve(2) = OK %v delay %v retry %v; want refused, delay Never, retry in 59s", r2.OK(), r2.Delay(), r2.Decision().RetryAfter)
		} else if err := r2.Cancel(ctx); err != nil {
			t.Errorf("Cancel of a refused reservation: %v", err)
		}
		if err := r.Cancel(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.Cancel(ctx); err != nil {
			t.Fatal(err)
		}
		if d, _ := l.Peek(ctx, "k", 0); d.Remaining != 3 {
			t.Errorf("after Cancel (twice), Remaining = %d, want all 3 back once", d.Remaining)
		}
	})
}

func TestAcquireRelease(t *testing.T) {
	both(t, func(t *testing.T, st store.Store, clock *storetest.Clock) {
		l := newLimiter(t, st, "c", algo.Params{Algorithm: algo.Concurrency, Limit: 2, LeaseTTL: time.Minute})
		ctx := t.Context()
		a, err := l.Acquire(ctx, "db")
		if err != nil {
			t.Fatal(err)
		}
		b, err := l.Acquire(ctx, "db")
		if err != nil {
			t.Fatal(err)
		}
		if a.ID() == b.ID() || a.ID() == 0 {
			t.Errorf("lease IDs %d and %d: want distinct and non-zero", a.ID(), b.ID())
		}
		clock.Advance(10 * time.Second)
		_, err = l.Acquire(ctx, "db")
		var re *limiter.RetryError
		if !errors.As(err, &re) || !errors.Is(err, limiter.ErrLimited) || re.After != 50*time.Second || re.Slots != 2 {
			t.Fatalf("third Acquire: %v, want a RetryError after 50s with 2 slots", err)
		}
		// It says the slots are taken, not that a rate was passed.
		if want := `limiter "c": all 2 concurrency slots in use; the oldest lease expires in 50s at the latest`; err.Error() != want {
			t.Errorf("third Acquire: %q, want %q", err, want)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		c, err := l.Acquire(ctx, "db")
		if err != nil {
			t.Fatalf("Acquire after a release: %v", err)
		}
		if c.Decision().Remaining != 0 {
			t.Errorf("Remaining = %d, want 0", c.Decision().Remaining)
		}
		// A holder that dies: its lease expires after LeaseTTL.
		clock.Advance(time.Minute)
		if _, err := l.Acquire(ctx, "db"); err != nil {
			t.Errorf("Acquire after the leases expired: %v", err)
		}
		tb := newLimiter(t, st, "t", algo.Params{Algorithm: algo.TokenBucket, Limit: 2, Period: time.Second})
		if _, err := tb.Acquire(ctx, "db"); !errors.Is(err, limiter.ErrNotConcurrency) {
			t.Errorf("Acquire on a token bucket: %v, want ErrNotConcurrency", err)
		}
	})
}

// TestWait runs Wait in synctest's fake time: it must sleep exactly the
// retry time, fail at once when the deadline is too near, and give up on
// costs beyond the capacity.
func TestWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore(t, memory.WithSweepInterval(0))
		l := newLimiter(t, st, "w", algo.Params{Algorithm: algo.GCRA, Limit: 2, Period: time.Second, Burst: 1})
		ctx := t.Context()
		start := time.Now()
		for i := range 3 {
			if err := l.Wait(ctx, "k", 1); err != nil {
				t.Fatalf("Wait %d: %v", i, err)
			}
		}
		if got := time.Since(start); got != time.Second {
			t.Errorf("three Waits at 2/s with burst 1 took %v, want 1s", got)
		}
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		before := time.Now()
		err := l.Wait(short, "k", 1)
		var re *limiter.RetryError
		if !errors.As(err, &re) || re.After != 500*time.Millisecond {
			t.Errorf("Wait with 100ms left for a 500ms wait: %v, want RetryError{500ms}", err)
		}
		if time.Since(before) != 0 {
			t.Errorf("the refused Wait slept %v, want 0", time.Since(before))
		}
		if err := l.Wait(ctx, "k", 2); !errors.Is(err, limiter.ErrNever) {
			t.Errorf("Wait(2) over a burst of 1: %v, want ErrNever", err)
		}
		cctx, ccancel := context.WithCancel(ctx)
		go func() {
			time.Sleep(100 * time.Millisecond)
			ccancel()
		}()
		if err := l.Wait(cctx, "k", 1); !errors.Is(err, context.Canceled) {
			t.Errorf("Wait cancelled while sleeping: %v, want context.Canceled", err)
		}
	})
}

// TestWaitShaper checks that Wait waits out a shaper's Delay, and gives
// the units back when it cannot.
func TestWaitShaper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore(t, memory.WithSweepInterval(0))
		l := newLimiter(t, st, "s", algo.Params{Algorithm: algo.Shaper, Limit: 10, Period: time.Second, Burst: 5})
		ctx := t.Context()
		start := time.Now()
		for range 3 {
			if err := l.Wait(ctx, "k", 1); err != nil {
				t.Fatal(err)
			}
		}
		if got := time.Since(start); got != 200*time.Millisecond {
			t.Errorf("three shaped Waits at 10/s took %v, want 200ms", got)
		}
		before, _ := l.Peek(ctx, "k", 0)
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		var re *limiter.RetryError
		if err := l.Wait(short, "k", 1); !errors.As(err, &re) {
			t.Fatalf("shaped Wait with a near deadline: %v, want a RetryError", err)
		}
		if after, _ := l.Peek(ctx, "k", 0); after.Remaining != before.Remaining {
			t.Errorf("after the shaped Wait gave up: Remaining %d, want %d as before", after.Remaining, before.Remaining)
		}
	})
}

func TestAllowAllOneStore(t *testing.T) {
	both(t, func(t *testing.T, st store.Store, clock *storetest.Clock) {
		tenant := newLimiter(t, st, "tenant", algo.Params{Algorithm: algo.FixedWindow, Limit: 3, Period: time.Minute})
		user := newLimiter(t, st, "user", algo.Params{Algorithm: algo.TokenBucket, Limit: 2, Period: time.Minute})
		ctx := t.Context()
		hits := []limiter.Hit{{Limiter: tenant, Key: "acme", Cost: 1}, {Limiter: user, Key: "alice", Cost: 1}}
		for i := range 2 {
			if res, err := limiter.AllowAll(ctx, hits); err != nil || !res.Allowed {
				t.Fatalf("AllowAll %d = %+v, %v", i, res, err)
			}
		}
		res, err := limiter.AllowAll(ctx, hits)
		if err != nil || res.Allowed {
			t.Fatalf("AllowAll with alice spent = %+v, %v; want refused", res, err)
		}
		if res.Decisions[0].Remaining != 1 || !res.Decisions[0].Allowed || res.Decisions[1].Allowed {
			t.Errorf("decisions = %+v; want the tenant passing with 1 left, alice refused", res.Decisions)
		}
		if res.RetryAfter() != 30*time.Second {
			t.Errorf("RetryAfter = %v, want 30s", res.RetryAfter())
		}
		if d, _ := tenant.Peek(ctx, "acme", 0); d.Remaining != 1 {
			t.Errorf("the refused AllowAll charged the tenant: %d left, want 1", d.Remaining)
		}
		if _, err := limiter.AllowAll(ctx, []limiter.Hit{{Key: "x", Cost: 1}}); !errors.Is(err, store.ErrBadRequest) {
			t.Errorf("AllowAll with a nil limiter: %v, want ErrBadRequest", err)
		}
	})
}

// TestAllowAllAcrossStores checks reserve-then-roll-back: a refusal in the
// second store gives back what the first took, and Cancel gives back an
// admitted acquisition, leases included.
func TestAllowAllAcrossStores(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	st1 := newStore(t, memory.WithClock(clock.Now))
	st2 := newStore(t, memory.WithClock(clock.Now))
	global := newLimiter(t, st1, "global", algo.Params{Algorithm: algo.SlidingLog, Limit: 10, Period: time.Minute})
	conc := newLimiter(t, st1, "conc", algo.Params{Algorithm: algo.Concurrency, Limit: 5, LeaseTTL: time.Minute})
	user := newLimiter(t, st2, "user", algo.Params{Algorithm: algo.GCRA, Limit: 1, Period: time.Minute})
	ctx := t.Context()
	hits := []limiter.Hit{{Limiter: global, Key: "all", Cost: 2}, {Limiter: conc, Key: "db", Cost: 1}, {Limiter: user, Key: "alice", Cost: 1}}
	res, err := limiter.AllowAll(ctx, hits)
	if err != nil || !res.Allowed {
		t.Fatalf("first AllowAll = %+v, %v", res, err)
	}
	res2, err := limiter.AllowAll(ctx, hits)
	if err != nil || res2.Allowed {
		t.Fatalf("second AllowAll with alice spent = %+v, %v; want refused", res2, err)
	}
	if !res2.Decisions[0].Allowed || res2.Decisions[0].Remaining != 8 || res2.Decisions[1].Remaining != 4 {
		t.Errorf("decisions after the roll-back = %+v; want global passing with 8 left, 4 slots", res2.Decisions)
	}
	if d, _ := global.Peek(ctx, "all", 0); d.Remaining != 8 {
		t.Errorf("global after the roll-back: %d left, want 8", d.Remaining)
	}
	if d, _ := conc.Peek(ctx, "db", 0); d.Remaining != 4 {
		t.Errorf("slots after the roll-back: %d left, want 4", d.Remaining)
	}
	if err := res.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if d, _ := global.Peek(ctx, "all", 0); d.Remaining != 10 {
		t.Errorf("global after Cancel: %d left, want 10", d.Remaining)
	}
	if d, _ := conc.Peek(ctx, "db", 0); d.Remaining != 5 {
		t.Errorf("slots after Cancel: %d left, want 5", d.Remaining)
	}
	if d, _ := user.Peek(ctx, "alice", 1); !d.Allowed {
		t.Errorf("alice after Cancel: %+v, want admitted", d)
	}
}

// TestAllowAllConcurrent has 64 goroutines take a tenant budget and one of
// four user budgets at once, in two stores, while the clock stands still:
// no budget may be exceeded, and each budget's charge must equal the
// admitted acquisitions' costs (a roll-back that leaked would show).
func TestAllowAllConcurrent(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	for _, name := range []string{"one store", "two stores"} {
		t.Run(name, func(t *testing.T) {
			st1 := newStore(t, memory.WithClock(clock.Now))
			st2 := st1
			if name == "two stores" {
				st2 = newStore(t, memory.WithClock(clock.Now))
			}
			tenant := newLimiter(t, st1, "tenant", algo.Params{Algorithm: algo.TokenBucket, Limit: 150, Period: time.Hour})
			users := newLimiter(t, st2, "user", algo.Params{Algorithm: algo.FixedWindow, Limit: 50, Period: time.Hour})
			var tenantCharged atomic.Int64
			userCharged := make([]atomic.Int64, 4)
			var attempts atomic.Int64
			var wg sync.WaitGroup
			for g := range 64 {
				wg.Go(func() {
					for attempts.Add(1) <= 1200 {
						u := (g + int(attempts.Load())) % 4
						cost := int64(1 + g%3)
						res, err := limiter.AllowAll(t.Context(), []limiter.Hit{
							{Limiter: tenant, Key: "acme", Cost: cost},
							{Limiter: users, Key: fmt.Sprint("u", u), Cost: cost},
						})
						if err != nil {
							t.Error(err)
							return
						}
						if res.Allowed {
							tenantCharged.Add(cost)
							userCharged[u].Add(cost)
						}
					}
				})
			}
			wg.Wait()
			ctx := t.Context()
			d, _ := tenant.Peek(ctx, "acme", 0)
			if got := tenantCharged.Load(); got > 150 || 150-d.Remaining != got {
				t.Errorf("tenant: admitted %d of a budget of 150, the store holds a charge of %d", got, 150-d.Remaining)
			}
			for u := range userCharged {
				d, _ := users.Peek(ctx, fmt.Sprint("u", u), 0)
				if got := userCharged[u].Load(); got > 50 || 50-d.Remaining != got {
					t.Errorf("user %d: admitted %d of a budget of 50, the store holds a charge of %d", u, got, 50-d.Remaining)
				}
			}
		})
	}
}

// TestExactUnderConcurrency: 64 goroutines, 1200 attempts, budget 1000
// that cannot refill: exactly 1000 admitted, through the facade.
func TestExactUnderConcurrency(t *testing.T) {
	both(t, func(t *testing.T, st store.Store, clock *storetest.Clock) {
		l := newLimiter(t, st, "x", algo.Params{Algorithm: algo.GCRA, Limit: 1000, Period: time.Hour})
		var attempts, admitted atomic.Int64
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				for attempts.Add(1) <= 1200 {
					d, err := l.Allow(t.Context(), "k")
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if got := admitted.Load(); got != 1000 {
			t.Errorf("admitted %d of 1200 on a budget of 1000", got)
		}
	})
}

// TestAllowAllocs holds the memory-store path to zero allocations.
func TestAllowAllocs(t *testing.T) {
	st := newStore(t)
	l := newLimiter(t, st, "a", storetest.BenchLimit)
	ctx := t.Context()
	if _, err := l.Allow(ctx, "user-1"); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = l.Allow(ctx, "user-1") }); n != 0 {
		t.Errorf("Allow allocates %v times per call, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = l.AllowN(ctx, "user-1", 2) }); n != 0 {
		t.Errorf("AllowN allocates %v times per call, want 0", n)
	}
	loc, err := limiter.NewLocal(storetest.BenchLimit)
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { loc.Allow() }); n != 0 {
		t.Errorf("Local.Allow allocates %v times per call, want 0", n)
	}
}

// slowStore answers after its context is done, like a store that hangs.
type slowStore struct{ store.Store }

func (s slowStore) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	<-ctx.Done()
	return store.Result{}, fmt.Errorf("slow: %w", ctx.Err())
}

func TestStoreTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := slowStore{newStore(t, memory.WithSweepInterval(0))}
		l := newLimiter(t, st, "slow", algo.Params{Algorithm: algo.GCRA, Limit: 1, Period: time.Second}, limiter.WithStoreTimeout(50*time.Millisecond))
		start := time.Now()
		_, err := l.Allow(t.Context(), "k")
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 50*time.Millisecond {
			t.Errorf("Allow on a hanging store = %v after %v; want DeadlineExceeded after 50ms", err, time.Since(start))
		}
	})
}

// TestAllowAllRefusalResetAfter: after a refusal, a hit that would have
// passed is reported with nothing charged, ResetAfter included: a fresh
// key at full capacity has nothing to reset, as its Peek says. One store
// (the store's own unwinding) and three (roll back, then peek).
func TestAllowAllRefusalResetAfter(t *testing.T) {
	check := func(t *testing.T, a, s, b *limiter.Limiter) {
		ctx := t.Context()
		if d, err := b.AllowN(ctx, "k", 3); err != nil || !d.Allowed {
			t.Fatalf("spending b: %+v, %v", d, err)
		}
		res, err := limiter.AllowAll(ctx, []limiter.Hit{{Limiter: a, Key: "k", Cost: 1}, {Limiter: s, Key: "k", Cost: 1}, {Limiter: b, Key: "k", Cost: 1}})
		if err != nil || res.Allowed {
			t.Fatalf("AllowAll with b spent = %+v, %v; want refused", res, err)
		}
		for i, l := range []*limiter.Limiter{a, s} {
			peek, err := l.Peek(ctx, "k", 0)
			if err != nil {
				t.Fatal(err)
			}
			got := res.Decisions[i]
			if !got.Allowed || got.Remaining != peek.Remaining || got.ResetAfter != peek.ResetAfter || got.ResetAfter != 0 {
				t.Errorf("%s after the refusal: %+v; want allowed, Remaining %d, ResetAfter %v as Peek(0) says", l.Name(), got, peek.Remaining, peek.ResetAfter)
			}
		}
	}
	pa := algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Minute}
	ps := algo.Params{Algorithm: algo.SlidingWindow, Limit: 5, Period: time.Minute}
	pb := algo.Params{Algorithm: algo.FixedWindow, Limit: 3, Period: time.Minute}
	both(t, func(t *testing.T, st store.Store, clock *storetest.Clock) {
		check(t, newLimiter(t, st, "a", pa), newLimiter(t, st, "s", ps), newLimiter(t, st, "b", pb))
	})
	t.Run("stores", func(t *testing.T) {
		clock := storetest.NewClock(storetest.Epoch)
		st1 := newStore(t, memory.WithClock(clock.Now))
		st2 := newStore(t, memory.WithClock(clock.Now))
		st3 := newStore(t, memory.WithClock(clock.Now))
		check(t, newLimiter(t, st1, "a", pa), newLimiter(t, st3, "s", ps), newLimiter(t, st2, "b", pb))
	})
}

// TestAllowAllZeroCost: a Hit without a Cost is charged one unit, as
// middleware.WithCost and policy descriptors read 0.
func TestAllowAllZeroCost(t *testing.T) {
	both(t, func(t *testing.T, st store.Store, clock *storetest.Clock) {
		global := newLimiter(t, st, "global", algo.Params{Algorithm: algo.FixedWindow, Limit: 2, Period: time.Minute})
		ctx := t.Context()
		hits := []limiter.Hit{{Limiter: global, Key: "c0"}}
		res, err := limiter.AllowAll(ctx, hits)
		if err != nil || !res.Allowed || res.Decisions[0].Remaining != 1 {
			t.Fatalf("AllowAll(cost 0) = %+v, %v; want admitted with 1 left", res, err)
		}
		if d, _ := global.Peek(ctx, "c0", 0); d.Remaining != 1 {
			t.Errorf("after AllowAll(cost 0): %d left, want 1 (one unit charged)", d.Remaining)
		}
		if err := res.Cancel(ctx); err != nil {
			t.Fatal(err)
		}
		if d, _ := global.Peek(ctx, "c0", 0); d.Remaining != 2 {
			t.Errorf("after Cancel: %d left, want 2", d.Remaining)
		}
		for range 2 {
			if res, err := limiter.AllowAll(ctx, hits); err != nil || !res.Allowed {
				t.Fatalf("AllowAll(cost 0) = %+v, %v", res, err)
			}
		}
		if res, err := limiter.AllowAll(ctx, hits); err != nil || res.Allowed {
			t.Errorf("third AllowAll(cost 0) on a limit of 2 = %+v, %v; want refused", res, err)
		}
		if _, err := limiter.AllowAll(ctx, []limiter.Hit{{Limiter: global, Key: "c0", Cost: -1}}); !errors.Is(err, store.ErrBadRequest) {
			t.Errorf("AllowAll(cost -1): %v, want ErrBadRequest", err)
		}
	})
}

// TestWaitShaperDeadline: a refused shaped request is admitted after its
// RetryAfter and must then wait its queue Delay; a deadline that cannot
// cover both fails at once, one that can is met.
func TestWaitShaperDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore(t, memory.WithSweepInterval(0))
		l := newLimiter(t, st, "s", algo.Params{Algorithm: algo.Shaper, Limit: 5, Period: time.Second, Burst: 3})
		ctx := t.Context()
		for i := range 4 {
			if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
				t.Fatalf("Allow %d = %+v, %v", i, d, err)
			}
		}
		// Refused for 200ms, then admitted behind 3 units: 600ms more.
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		before := time.Now()
		var re *limiter.RetryError
		if err := l.Wait(short, "k", 1); !errors.As(err, &re) || re.After != 200*time.Millisecond {
			t.Errorf("Wait with 300ms left for 200ms + a 600ms queue: %v, want RetryError{200ms}", err)
		}
		if got := time.Since(before); got != 0 {
			t.Errorf("the refused Wait slept %v, want 0", got)
		}
		enough, cancel2 := context.WithTimeout(ctx, 900*time.Millisecond)
		defer cancel2()
		if err := l.Wait(enough, "k", 1); err != nil {
			t.Errorf("Wait with 900ms left for 800ms: %v", err)
		}
		if got := time.Since(before); got != 800*time.Millisecond {
			t.Errorf("the Wait took %v, want 800ms", got)
		}
	})
}

// TestLeaseIDZero: a WithLeaseIDs function that returns 0, an ID no
// release can name, makes Acquire, Reserve and AllowAll fail instead of
// holding a slot until its lease expires.
func TestLeaseIDZero(t *testing.T) {
	st, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c, err := limiter.New(st, "c", algo.Params{Algorithm: algo.Concurrency, Limit: 2}, limiter.WithLeaseIDs(func() uint64 { return 0 }))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := c.Acquire(ctx, "k"); !errors.Is(err, store.ErrBadRequest) {
		t.Errorf("Acquire with lease ID 0: %v, want store.ErrBadRequest", err)
	}
	if _, err := c.Reserve(ctx, "k", 1); !errors.Is(err, store.ErrBadRequest) {
		t.Errorf("Reserve with lease ID 0: %v, want store.ErrBadRequest", err)
	}
	if _, err := limiter.AllowAll(ctx, []limiter.Hit{{Limiter: c, Key: "k"}}); !errors.Is(err, store.ErrBadRequest) {
		t.Errorf("AllowAll with lease ID 0: %v, want store.ErrBadRequest", err)
	}
	if d, err := c.Peek(ctx, "k", 0); err != nil || d.Remaining != 2 {
		t.Errorf("after the refused calls: Peek = %+v, %v; want both slots free", d, err)
	}
}

// TestResultCancelOnce: Result.Cancel gives back once, like
// Reservation.Cancel and Lease.Release, also when called on a copy: a
// second Cancel must not hand out units nobody paid for.
func TestResultCancelOnce(t *testing.T) {
	both(t, func(t *testing.T, st store.Store, clock *storetest.Clock) {
		l := newLimiter(t, st, "f", algo.Params{Algorithm: algo.FixedWindow, Limit: 3, Period: time.Minute})
		c := newLimiter(t, st, "c", algo.Params{Algorithm: algo.Concurrency, Limit: 1})
		ctx := t.Context()
		if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("Allow = %+v, %v", d, err)
		}
		res, err := limiter.AllowAll(ctx, []limiter.Hit{{Limiter: l, Key: "k"}, {Limiter: c, Key: "k"}})
		if err != nil || !res.Allowed {
			t.Fatalf("AllowAll = %+v, %v", res, err)
		}
		copied := res
		for i, r := range []limiter.Result{res, res, copied} {
			if err := r.Cancel(ctx); err != nil {
				t.Fatalf("Cancel %d: %v", i, err)
			}
		}
		if d, _ := l.Peek(ctx, "k", 0); d.Remaining != 2 {
			t.Errorf("after Allow, AllowAll and three Cancels: Remaining %d, want 2", d.Remaining)
		}
		if d, _ := c.Peek(ctx, "k", 0); d.Remaining != 1 {
			t.Errorf("concurrency slots after the Cancels: Remaining %d, want 1", d.Remaining)
		}
		if err := (limiter.Result{}).Cancel(ctx); err != nil {
			t.Errorf("Cancel of the zero Result: %v", err)
		}
	})
}
