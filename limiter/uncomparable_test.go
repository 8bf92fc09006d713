package limiter_test

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store"
)

// tagged is a store wrapper passed by value whose type is not comparable
// (it holds a slice), as a user's wrapper can be.
type tagged struct {
	store.Store
	tags []string
}

// TestAllowAllUncomparableStore: AllowAll over hits whose limiters share a
// store value of an uncomparable type decides them (taken in turn, rolled
// back on a refusal) instead of panicking with "comparing uncomparable
// type" when it grouped the hits by store.
func TestAllowAllUncomparableStore(t *testing.T) {
	ctx := t.Context()
	st := tagged{newStore(t), []string{"eu"}}
	p := algo.Params{Algorithm: algo.FixedWindow, Limit: 5, Period: time.Minute}
	a := newLimiter(t, st, "a", p)
	b := newLimiter(t, st, "b", algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Minute})
	hits := []limiter.Hit{{Limiter: a, Key: "k"}, {Limiter: b, Key: "k"}}
	res, err := limiter.AllowAll(ctx, hits)
	if err != nil || !res.Allowed {
		t.Fatalf("first AllowAll = %+v, %v; want admitted", res, err)
	}
	res, err = limiter.AllowAll(ctx, hits)
	if err != nil || res.Allowed || !res.Decisions[0].Allowed || res.Decisions[1].Allowed {
		t.Fatalf("second AllowAll = %+v, %v; want refused by b alone", res, err)
	}
	if d, err := a.Peek(ctx, "k", 0); err != nil || d.Remaining != 4 {
		t.Fatalf("a after the refusal: %+v, %v; want Remaining 4 (the refused take rolled back)", d, err)
	}
}

// TestAllowAllUncomparableInsideComparable: the check of comparability is
// of the values, not only of their type: two hits over one opaque{tagged}
// are decided (taken in turn, rolled back on a refusal) instead of
// panicking with "comparing uncomparable type limiter_test.tagged": opaque
// is a comparable type (its one field is an interface), and == on two of
// its values holding one uncomparable dynamic type panics all the same.
func TestAllowAllUncomparableInsideComparable(t *testing.T) {
	ctx := t.Context()
	st := opaque{tagged{newStore(t), []string{"eu"}}}
	a := newLimiter(t, st, "a", algo.Params{Algorithm: algo.FixedWindow, Limit: 5, Period: time.Minute})
	b := newLimiter(t, st, "b", algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Minute})
	hits := []limiter.Hit{{Limiter: a, Key: "k"}, {Limiter: b, Key: "k"}}
	res, err := limiter.AllowAll(ctx, hits)
	if err != nil || !res.Allowed {
		t.Fatalf("first AllowAll = %+v, %v; want admitted", res, err)
	}
	res, err = limiter.AllowAll(ctx, hits)
	if err != nil || res.Allowed || !res.Decisions[0].Allowed || res.Decisions[1].Allowed {
		t.Fatalf("second AllowAll = %+v, %v; want refused by b alone", res, err)
	}
	if d, err := a.Peek(ctx, "k", 0); err != nil || d.Remaining != 4 {
		t.Fatalf("a after the refusal: %+v, %v; want Remaining 4 (the refused take rolled back)", d, err)
	}
}
