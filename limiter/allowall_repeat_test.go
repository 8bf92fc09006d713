package limiter_test

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/storetest"
)

// checkRefusal checks that a refused Result names a refusing hit and
// that its RetryAfter is want: never the zero that would make a caller
// retry at once.
func checkRefusal(t *testing.T, res limiter.Result, err error, want time.Duration) {
	t.Helper()
	if err != nil || res.Allowed {
		t.Fatalf("AllowAll = %+v, %v; want refused", res, err)
	}
	refused := false
	for _, d := range res.Decisions {
		refused = refused || !d.Allowed
	}
	if !refused {
		t.Errorf("refused, but every decision is allowed: %+v", res.Decisions)
	}
	if got := res.RetryAfter(); got != want {
		t.Errorf("RetryAfter = %v, want %v", got, want)
	}
}

// TestAllowAllRepeatedKey: a store key named by several hits is charged
// the sum of their costs; a refusal of that sum says so, with its
// RetryAfter, or algo.Never when the sum exceeds the capacity.
func TestAllowAllRepeatedKey(t *testing.T) {
	fw := algo.Params{Algorithm: algo.FixedWindow, Limit: 5, Period: time.Minute}
	both(t, func(t *testing.T, st store.Store, clock *storetest.Clock) {
		ctx := t.Context()
		l := newLimiter(t, st, "u", fw)
		twin := newLimiter(t, st, "u", fw) // same name: same store keys

		// 3 + 3 > 5: never.
		res, err := limiter.AllowAll(ctx, []limiter.Hit{{Limiter: l, Key: "k", Cost: 3}, {Limiter: l, Key: "k", Cost: 3}})
		checkRefusal(t, res, err, algo.Never)
		res, err = limiter.AllowAll(ctx, []limiter.Hit{{Limiter: l, Key: "k", Cost: 3}, {Limiter: twin, Key: "k", Cost: 3}})
		checkRefusal(t, res, err, algo.Never)
		if d, _ := l.Peek(ctx, "k", 0); d.Remaining != 5 {
			t.Errorf("the refusals charged %d units", 5-d.Remaining)
		}

		// 2 + 2 fits the capacity but not the 3 left: the window's end.
		clock.Advance(15 * time.Second)
		if d, err := l.AllowN(ctx, "k", 2); err != nil || !d.Allowed {
			t.Fatalf("AllowN = %+v, %v", d, err)
		}
		hits := []limiter.Hit{{Limiter: l, Key: "k", Cost: 2}, {Limiter: twin, Key: "other"}, {Limiter: twin, Key: "k", Cost: 2}}
		res, err = limiter.AllowAll(ctx, hits)
		checkRefusal(t, res, err, 45*time.Second)
		if !res.Decisions[0].Allowed || !res.Decisions[1].Allowed || res.Decisions[2].Allowed || res.Decisions[2].Remaining != 3 {
			t.Errorf("decisions = %+v; want the second hit on k refused with 3 left", res.Decisions)
		}
		clock.Advance(45 * time.Second)
		if res, err := limiter.AllowAll(ctx, hits); err != nil || !res.Allowed {
			t.Errorf("AllowAll after its RetryAfter = %+v, %v; want admitted", res, err)
		}
	})
}

// TestAllowAllRepeatedKeyAcrossStores: the same in the roll-back path,
// for the store that refuses and for a store peeked after it.
func TestAllowAllRepeatedKeyAcrossStores(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	st1 := newStore(t, memory.WithClock(clock.Now))
	st2 := newStore(t, memory.WithClock(clock.Now))
	ctx := t.Context()
	global := newLimiter(t, st1, "global", algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Minute})
	user := newLimiter(t, st2, "user", algo.Params{Algorithm: algo.FixedWindow, Limit: 5, Period: time.Minute})
	res, err := limiter.AllowAll(ctx, []limiter.Hit{{Limiter: global, Key: "all"}, {Limiter: user, Key: "k", Cost: 3}, {Limiter: user, Key: "k", Cost: 3}})
	checkRefusal(t, res, err, algo.Never)
	if d, _ := global.Peek(ctx, "all", 0); d.Remaining != 10 {
		t.Errorf("global after the roll-back: %d left, want 10", d.Remaining)
	}

	// The first store refuses alone (6 s for one token); the second,
	// peeked, would refuse its repeated key until the window's end.
	if d, _ := global.AllowN(ctx, "all", 10); !d.Allowed {
		t.Fatal("could not spend global")
	}
	if d, _ := user.AllowN(ctx, "k", 1); !d.Allowed {
		t.Fatal("could not take from user")
	}
	res, err = limiter.AllowAll(ctx, []limiter.Hit{{Limiter: global, Key: "all"}, {Limiter: user, Key: "k", Cost: 2}, {Limiter: user, Key: "k", Cost: 3}})
	checkRefusal(t, res, err, time.Minute)
	if res.Decisions[0].RetryAfter != 6*time.Second || !res.Decisions[1].Allowed || res.Decisions[2].Allowed {
		t.Errorf("decisions = %+v; want global in 6s, the second hit on k refused", res.Decisions)
	}
}
