package memory_test

import (
	"errors"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// TestClosedErrorText: after Close every method's error matches
// store.ErrClosed and says "memory store: closed", not the stutter
// "memory: store: closed" of "memory: " before the sentinel's text.
func TestClosedErrorText(t *testing.T) {
	st := mustStore(t)
	l := mustLimit(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second})
	c := mustLimit(t, algo.Params{Algorithm: algo.Concurrency, Limit: 2, LeaseTTL: time.Minute})
	ctx := t.Context()
	take(t, st, "k", l, 1)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	reqs := []store.Request{{Key: "k", Limit: l, Cost: 1}}
	leases := []store.Request{{Key: "c", Limit: c, Cost: 1, Lease: 7}}
	two := []store.Request{{Key: "k", Limit: l, Cost: 1}, {Key: "j", Limit: l, Cost: 1}}
	out := make([]algo.Decision, 2)
	var d algo.Decision
	_, take1 := st.Take(ctx, reqs, out[:1])
	_, take2 := st.Take(ctx, two, out)
	_, takeKey := st.TakeKey(ctx, &d, "fg:p:", "k", l, 1, 0)
	_, _, inspect := st.Inspect(ctx, "k")
	for _, c := range []struct {
		name string
		err  error
	}{
		{"Take", take1},
		{"Take of two", take2},
		{"TakeKey", takeKey},
		{"Peek", st.Peek(ctx, reqs, out[:1])},
		{"Refund", st.Refund(ctx, reqs)},
		{"Release", st.Release(ctx, leases)},
		{"Renew", st.Renew(ctx, leases)},
		{"Reset", st.Reset(ctx, "k")},
		{"Inspect", inspect},
	} {
		if !errors.Is(c.err, store.ErrClosed) || c.err.Error() != "memory store: closed" {
			t.Errorf("%s after Close: %v; want \"memory store: closed\" matching store.ErrClosed", c.name, c.err)
		}
	}
}
