package lease_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/lease"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/resilient"
)

// Two slices of a key taken at one store instant (a store clock that
// stands still, or one coarser than a slice's round trip) share their At:
// a refund of a unit the first slice admitted, made while the second is
// in use, was capped at what the second had admitted and the rest
// dropped, so the shared store kept units charged that nobody held (here
// 2 of a budget of 100, for good: a quota's budget shrank with each such
// refund).
func TestAdversaryRefundAcrossSlicesOfOneInstant(t *testing.T) {
	for _, kind := range []algo.Kind{algo.FixedWindow, algo.TokenBucket} {
		t.Run(kind.String(), func(t *testing.T) {
			clk := newClock() // stands still: every slice is taken at one instant
			m := shared(t, clk)
			l := quota(t, kind, 100)
			s, err := lease.New(noClose{m}, lease.WithSlice(5), lease.WithClock(clk.Now))
			if err != nil {
				t.Fatal(err)
			}
			_, first := take(t, s, "k", l, 3)  // slice A: 5 charged, 3 admitted
			take(t, s, "k", l, 2)              // A spent
			_, second := take(t, s, "k", l, 1) // slice B: 5 charged, 1 admitted
			if first.At != second.At {
				t.Fatalf("the slices' At differ (%d, %d): the clock moved", first.At, second.At)
			}
			if err := s.Refund(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 3, At: first.At}}); err != nil {
				t.Fatal(err)
			}
			// Held now: 2 (A) + 1 (B) admitted; nothing else may stay
			// charged once the instance gives its slice back.
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if got := 100 - remaining(t, m, "k", l); got != 3 {
				t.Fatalf("after the refund of 3 and Close, the shared store holds %d charged; want 3, the units still admitted", got)
			}
		})
	}
}

// resetHook is the shared store with a hook that runs inside its Reset,
// before the state is forgotten.
type resetHook struct {
	store.Store
	during func()
}

func (r *resetHook) Reset(ctx context.Context, keys ...string) error {
	if r.during != nil {
		r.during()
	}
	return r.Store.Reset(ctx, keys...)
}

// A Take that met a Reset of its key between the instance dropping the
// key's slice and the shared store forgetting the key took a new slice
// that the shared store then forgot: its units were admitted in process,
// charged nowhere, beyond the budget the reset key starts with. The
// Reset now holds the key until the shared store has forgotten it.
func TestAdversaryResetRacesATake(t *testing.T) {
	clk := newClock()
	m := shared(t, clk)
	l := quota(t, algo.FixedWindow, 10)
	hook := &resetHook{Store: m}
	s, err := lease.New(noClose{hook}, lease.WithSlice(5), lease.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	take(t, s, "k", l, 1) // a slice: 5 charged
	admitted, decided := 0, false
	done := make(chan bool, 1)
	hook.during = func() {
		go func() {
			out := make([]algo.Decision, 1)
			_, err := s.Take(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 1}}, out)
			done <- err == nil && out[0].Allowed
		}()
		select {
		case ok := <-done: // decided before the shared store forgot the key
			decided = true
			if ok {
				admitted++
			}
		case <-time.After(200 * time.Millisecond): // held until the reset is done
		}
	}
	if err := s.Reset(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	hook.during = nil
	if !decided {
		select {
		case ok := <-done:
			if ok {
				admitted++
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the Take racing the Reset never returned")
		}
	}
	for range 20 {
		if d, _ := take(t, s, "k", l, 1); d.Allowed {
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("after the reset the key admitted %d; want its budget of 10", admitted)
	}
}

// A refund at the instant of an expired slice goes to the shared store;
// those units are then not the instant's to take back into a slice taken
// at that instant later, or a refund of more than was admitted (a
// caller's mistake) could put them into it a second time and the
// instance admit units the shared store never charged.
func TestAdversaryRefundAfterExpiryKeepsTheBound(t *testing.T) {
	storeClock, leaseClock := newClock(), newClock() // the store's stands still
	m := shared(t, storeClock)
	l := quota(t, algo.FixedWindow, 10)
	s, err := lease.New(noClose{m}, lease.WithSlice(5), lease.WithTTL(time.Minute), lease.WithClock(leaseClock.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	_, first := take(t, s, "k", l, 3) // slice A: 5 charged, 3 admitted
	leaseClock.Add(2 * time.Minute)   // A expires
	if err := s.Refund(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 3, At: first.At}}); err != nil {
		t.Fatal(err)
	}
	_, second := take(t, s, "k", l, 1) // A's 2 go back; slice B: 5 charged, 1 admitted
	if second.At != first.At {
		t.Fatalf("the slices' At differ (%d, %d)", first.At, second.At)
	}
	if err := s.Refund(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 1e12, At: second.At}}); err != nil {
		t.Fatal(err)
	}
	admitted := 0
	for range 20 {
		if d, _ := take(t, s, "k", l, 1); d.Allowed {
			admitted++
		}
	}
	if admitted > 10 {
		t.Fatalf("after the refunds the instance admitted %d; want at most the budget of 10", admitted)
	}
}

// A Store placed above a failure policy (store/resilient, against the
// package documentation) kept the rest of a slice FailOpen admitted while
// the shared store was down, then gave it back to the store once it was
// back: units the store never charged, so its key admitted past its
// budget. An answer marked store.Result.Fallback keeps no slice.
func TestAdversaryFallbackAnswerKeepsNoSlice(t *testing.T) {
	srv := testserver.NewRedis(t)
	clock := func() time.Time { return time.Date(2026, 3, 1, 10, 30, 0, 0, time.UTC) }
	inner, err := redis.Open("redis://"+srv.Addr, redis.WithTestClock(clock), redis.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inner.Close() })
	rs, err := resilient.New(noClose{inner}, resilient.WithPolicy(resilient.FailOpen), resilient.WithTimeout(2*time.Second),
		resilient.WithBreaker(1000, time.Millisecond), resilient.WithOverLimitCache(0), resilient.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	s, err := lease.New(rs, lease.WithSlice(5), lease.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	l := quota(t, algo.FixedWindow, 3)
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if d, _ := take(t, s, "k", l, 1); !d.Allowed {
		t.Fatalf("with the store down, FailOpen = %+v; want admitted", d)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	live := func() algo.Decision {
		t.Helper()
		out := make([]algo.Decision, 1)
		var err error
		for range 50 { // the first calls may meet the connection the restart broke
			if _, err = inner.Take(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 1}}, out); err == nil {
				return out[0]
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("Take on the live store: %v", err)
		return algo.Decision{}
	}
	for i := range 3 {
		if d := live(); !d.Allowed {
			t.Fatalf("take #%d on the live store = %+v; want admitted", i+1, d)
		}
	}
	if err := s.Close(); err != nil { // gives back what the instance holds
		t.Fatal(err)
	}
	if d := live(); d.Allowed {
		t.Fatalf("after the instance closed, a take = %+v; want refused: the budget of 3 is spent, and the slice FailOpen answered was given back to the store", d)
	}
}

// Resets of overlapping key sets, in any order, race takes and refunds on
// those keys: nothing deadlocks, and once the last Reset returns every
// key admits exactly its budget.
func TestAdversaryResetStorm(t *testing.T) {
	clk := newClock()
	m := shared(t, clk)
	l := quota(t, algo.FixedWindow, 20)
	s, err := lease.New(noClose{m}, lease.WithSlice(4), lease.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	keys := []string{"a", "b", "c", "d"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Go(func() {
			out := make([]algo.Decision, 1)
			for i := range 200 {
				k := keys[(g+i)%len(keys)]
				switch {
				case g%4 == 0:
					set := []string{keys[(g+i)%4], keys[(g+i+1)%4], keys[(g+i)%4]}
					if i%2 == 1 {
						set = []string{keys[(g+i+1)%4], keys[(g+i)%4]}
					}
					if err := s.Reset(ctx, set...); err != nil {
						t.Error(err)
						return
					}
				default:
					res, err := s.Take(ctx, []store.Request{{Key: k, Limit: l, Cost: 1 + int64(i%2)}}, out)
					if err != nil {
						t.Error(err)
						return
					}
					if res.Allowed && i%3 == 0 {
						if err := s.Refund(ctx, []store.Request{{Key: k, Limit: l, Cost: 1 + int64(i%2), At: res.At}}); err != nil {
							t.Error(err)
							return
						}
					}
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if err := s.Reset(ctx, keys...); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		admitted := 0
		for range 30 {
			if d, _ := take(t, s, k, l, 1); d.Allowed {
				admitted++
			}
		}
		if admitted != 20 {
			t.Errorf("key %s after the last Reset admitted %d; want its budget of 20", k, admitted)
		}
	}
}
