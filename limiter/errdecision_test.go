package limiter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/resilient"
)

// placeholderStore fails every call after writing an admission into out,
// as a store that fails part-way may.
type placeholderStore struct{ store.Store }

var errPlaceholder = errors.New("placeholder store: failed")

func (placeholderStore) Take(_ context.Context, _ []store.Request, out []algo.Decision) (store.Result, error) {
	for i := range out {
		out[i] = algo.Decision{Allowed: true, Limit: 5, Remaining: 4}
	}
	return store.Result{Allowed: true, At: 1}, errPlaceholder
}

func (placeholderStore) Peek(_ context.Context, _ []store.Request, out []algo.Decision) error {
	for i := range out {
		out[i] = algo.Decision{Allowed: true, Limit: 5, Remaining: 5}
	}
	return errPlaceholder
}

// checkErrorMeansRefusal calls every verb of l whose store fails and
// wants, with each error, the zero Decision: a caller that reads Allowed
// before the error must not proceed.
func checkErrorMeansRefusal(t *testing.T, ctx context.Context, l *limiter.Limiter, key string) {
	t.Helper()
	if d, err := l.Allow(ctx, key); err == nil || d != (algo.Decision{}) {
		t.Errorf("Allow = %+v, %v; want the zero Decision with an error", d, err)
	}
	if d, err := l.AllowN(ctx, key, 1); err == nil || d != (algo.Decision{}) {
		t.Errorf("AllowN = %+v, %v; want the zero Decision with an error", d, err)
	}
	if d, err := l.Peek(ctx, key, 1); err == nil || d != (algo.Decision{}) {
		t.Errorf("Peek = %+v, %v; want the zero Decision with an error", d, err)
	}
	if r, err := l.Reserve(ctx, key, 1); err == nil || r != nil {
		t.Errorf("Reserve = %+v, %v; want no reservation with an error", r, err)
	}
	if err := l.Wait(ctx, key, 1); err == nil {
		t.Errorf("Wait = nil; want an error")
	}
	if res, err := limiter.AllowAll(ctx, []limiter.Hit{{Limiter: l, Key: key}}); err == nil || res.Allowed || res.Decisions != nil {
		t.Errorf("AllowAll = %+v, %v; want the zero Result with an error", res, err)
	}
}

// TestErrorMeansRefusal: with an error, every verb returns the zero
// Decision, never a store's placeholder admission. Through store/resilient
// (its default FailOpen policy and over-limit cache) the placeholder was
// Allowed: true with "context canceled" and "store: closed".
func TestErrorMeansRefusal(t *testing.T) {
	p := algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Minute}
	t.Run("placeholder", func(t *testing.T) {
		checkErrorMeansRefusal(t, t.Context(), newLimiter(t, placeholderStore{newStore(t)}, "p", p), "k")
	})
	resilientOver := func(t *testing.T) (*limiter.Limiter, *memory.Store) {
		inner, err := memory.New(memory.WithSweepInterval(0))
		if err != nil {
			t.Fatal(err)
		}
		rs, err := resilient.New(inner)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rs.Close() })
		l := newLimiter(t, rs, "r", p)
		// A refusal puts "k" in the over-limit cache, which is then
		// consulted for every key.
		if d, err := l.AllowN(t.Context(), "k", 2); err != nil || d.Allowed {
			t.Fatalf("AllowN over the limit = %+v, %v; want refused", d, err)
		}
		return l, inner
	}
	t.Run("resilient/cancelled", func(t *testing.T) {
		l, _ := resilientOver(t)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		checkErrorMeansRefusal(t, ctx, l, "fresh")
	})
	t.Run("resilient/closed", func(t *testing.T) {
		l, inner := resilientOver(t)
		_ = inner.Close()
		checkErrorMeansRefusal(t, t.Context(), l, "fresh")
	})
}
