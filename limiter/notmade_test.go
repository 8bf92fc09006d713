package limiter_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/queue"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/resilient"
)

// TestNilOptionsIgnored: a nil option is skipped, as WithLeaseIDs(nil) is,
// instead of a nil dereference.
func TestNilOptionsIgnored(t *testing.T) {
	st, err := memory.New(nil, memory.WithSweepInterval(0), nil)
	if err != nil {
		t.Fatalf("memory.New(nil, ...): %v", err)
	}
	defer st.Close()
	p := algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Second}
	if _, err := limiter.New(st, "x", p, nil); err != nil {
		t.Errorf("limiter.New with a nil Option: %v", err)
	}
	if _, err := limiter.NewLocal(p, nil); err != nil {
		t.Errorf("limiter.NewLocal with a nil option: %v", err)
	}
	try := func(context.Context) (bool, time.Duration, error) { return true, 0, nil }
	if _, err := queue.New(try, nil); err != nil {
		t.Errorf("queue.New with a nil Option: %v", err)
	}
}

// TestLimiterNotMadeByNew: the zero Limiter and a nil *Limiter return an
// error from every method that returns one, instead of panicking.
func TestLimiterNotMadeByNew(t *testing.T) {
	ctx := t.Context()
	for name, l := range map[string]*limiter.Limiter{"zero": {}, "nil": nil} {
		t.Run(name, func(t *testing.T) {
			check := func(what string, err error) {
				t.Helper()
				if err == nil || !strings.Contains(err.Error(), "not made by New") {
					t.Errorf("%s: %v; want an error saying the Limiter was not made by New", what, err)
				}
			}
			d, err := l.Allow(ctx, "k")
			check("Allow", err)
			if d.Allowed {
				t.Error("Allow admitted")
			}
			_, err = l.AllowN(ctx, "k", 2)
			check("AllowN", err)
			_, err = l.Peek(ctx, "k", 1)
			check("Peek", err)
			check("Reset", l.Reset(ctx, "k"))
			r, err := l.Reserve(ctx, "k", 1)
			check("Reserve", err)
			if r != nil {
				t.Errorf("Reserve = %v, want nil", r)
			}
			_, err = l.Acquire(ctx, "k")
			check("Acquire", err)
			check("Wait", l.Wait(ctx, "k", 1))
			_, err = limiter.AllowAll(ctx, []limiter.Hit{{Limiter: l, Key: "k"}})
			if name == "zero" {
				check("AllowAll", err)
			} else if err == nil {
				t.Error("AllowAll with a nil Limiter: no error")
			}
			if l.Name() != "" || l.Limit() != nil || l.Store() != nil {
				t.Error("Name, Limit or Store not zero")
			}
		})
	}
}

// failing is a store whose Take fails.
type failing struct{ store.Store }

func (failing) Take(context.Context, []store.Request, []algo.Decision) (store.Result, error) {
	return store.Result{}, store.ErrUnavailable
}

// TestNilReservationAndLease: Reserve and Acquire return nil with their
// errors, and the nil Reservation and Lease are safe to use, so that a
// roll-back deferred before the error check does not crash.
func TestNilReservationAndLease(t *testing.T) {
	ctx := t.Context()
	st := failing{newStore(t)}
	l := newLimiter(t, st, "r", algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Second})
	r, err := l.Reserve(ctx, "k", 1)
	if err == nil || r != nil {
		t.Fatalf("Reserve on a failing store = %v, %v", r, err)
	}
	if err := r.Cancel(ctx); err != nil {
		t.Errorf("nil Reservation's Cancel: %v", err)
	}
	if r.OK() || r.Delay() != 0 || r.Decision() != (algo.Decision{}) {
		t.Error("nil Reservation: OK, Delay or Decision not zero")
	}
	c := newLimiter(t, st, "c", algo.Params{Algorithm: algo.Concurrency, Limit: 1, LeaseTTL: time.Minute})
	ls, err := c.Acquire(ctx, "k")
	if err == nil || ls != nil {
		t.Fatalf("Acquire on a failing store = %v, %v", ls, err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Errorf("nil Lease's Release: %v", err)
	}
	if ls.ID() != 0 || ls.Decision() != (algo.Decision{}) {
		t.Error("nil Lease: ID or Decision not zero")
	}
}

// TestAcquireRefusedByFailurePolicy: a refusal that store/resilient's
// FailClosed makes for a store that is down is no statement about the
// slots: the *RetryError has no Slots and reads as a rate refusal, not
// "all slots in use".
func TestAcquireRefusedByFailurePolicy(t *testing.T) {
	rs, err := resilient.New(failing{newStore(t)}, resilient.WithPolicy(resilient.FailClosed), resilient.WithOverLimitCache(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	l := newLimiter(t, rs, "db", algo.Params{Algorithm: algo.Concurrency, Limit: 3, LeaseTTL: time.Minute})
	_, err = l.Acquire(t.Context(), "k")
	var re *limiter.RetryError
	if !errors.As(err, &re) || !errors.Is(err, limiter.ErrLimited) || re.Slots != 0 || strings.Contains(err.Error(), "slots") {
		t.Errorf("Acquire refused by FailClosed: %v; want a RetryError without Slots", err)
	}
}
