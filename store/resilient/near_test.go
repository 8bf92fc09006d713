package resilient_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/lease"
	"github.com/floodgate/floodgate/store/resilient"
)

// switchable answers through its store until it is taken down, then fails
// every Take as an unreachable store does; it counts the Takes it gets.
type switchable struct {
	store.Store
	down  atomic.Bool
	takes atomic.Int64
}

func (s *switchable) Take(ctx context.Context, r []store.Request, out []algo.Decision) (store.Result, error) {
	s.takes.Add(1)
	if s.down.Load() {
		return store.Result{}, store.ErrUnavailable
	}
	return s.Store.Take(ctx, r, out)
}

// TestLeasedUnitsNeedNoStoreCall: over store/lease, a Take that a leased
// slice answers is not a store call. Of 25 decisions on one key with
// slices of 10, three take a slice; the other 22 are answered in process,
// without the timed call (its goroutine and timer) and without the Call
// hook, which reports store calls alone. During an outage, with the
// breaker open and the policy failing closed, the units the slice still
// holds keep admitting (the store charged them), and the decision that
// needs the store again is the policy's.
func TestLeasedUnitsNeedNoStoreCall(t *testing.T) {
	c := newClock()
	inner := &switchable{Store: memStore(t, c)}
	ls, err := lease.New(inner, lease.WithSlice(10), lease.WithClock(c.Now))
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	s, err := resilient.New(ls, resilient.WithClock(c.Now), resilient.WithPolicy(resilient.FailClosed),
		resilient.WithHooks(resilient.Hooks{Call: func(op string, _ time.Duration, _ error) {
			if op == "take" {
				calls.Add(1)
			}
		}}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := compile(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 1000, Period: time.Hour, Burst: 1000})
	for i := range 25 {
		if d := take(t, s, "a", l, 1); !d.Allowed {
			t.Fatalf("take %d refused: %+v", i+1, d)
		}
	}
	if n := inner.takes.Load(); n != 3 {
		t.Errorf("the store got %d Takes for 25 decisions with slices of 10, want 3", n)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("the Call hook saw %d store calls for 25 decisions with slices of 10, want 3 (the slices' takes)", n)
	}

	// The outage: key a's slice holds 5 units (30 taken, 25 admitted).
	inner.down.Store(true)
	for i := 0; s.Breaker() != resilient.Open; i++ {
		if i == 100 {
			t.Fatal("the breaker did not open after 100 failed calls")
		}
		if d := take(t, s, fmt.Sprint("b", i), l, 1); d.Allowed {
			t.Fatalf("FailClosed admitted a decision the store could not make: %+v", d)
		}
	}
	before := inner.takes.Load()
	for i := range 5 {
		if d := take(t, s, "a", l, 1); !d.Allowed {
			t.Fatalf("leased unit %d of 5 refused during the outage: %+v", i+1, d)
		}
	}
	if d := take(t, s, "a", l, 1); d.Allowed {
		t.Fatalf("a 6th decision was admitted with the slice empty and the store down: %+v", d)
	}
	if n := inner.takes.Load() - before; n != 0 {
		t.Errorf("the store got %d Takes with the breaker open, want 0", n)
	}
}
