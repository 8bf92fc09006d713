package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
)

// hungStore answers Take from the store it wraps until hang is set, and
// every other call (and Take once hang is set) only when its context is
// done, like a store that stopped answering.
type hungStore struct {
	store.Store
	hang *atomic.Bool
}

func (s hungStore) wait(ctx context.Context) error {
	<-ctx.Done()
	return fmt.Errorf("hung: %w", ctx.Err())
}

func (s hungStore) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	if s.hang.Load() {
		return store.Result{}, s.wait(ctx)
	}
	return s.Store.Take(ctx, reqs, out)
}

func (s hungStore) Peek(ctx context.Context, _ []store.Request, _ []algo.Decision) error {
	return s.wait(ctx)
}
func (s hungStore) Refund(ctx context.Context, _ []store.Request) error  { return s.wait(ctx) }
func (s hungStore) Release(ctx context.Context, _ []store.Request) error { return s.wait(ctx) }
func (s hungStore) Renew(ctx context.Context, _ []store.Request) error   { return s.wait(ctx) }
func (s hungStore) Reset(ctx context.Context, _ ...string) error         { return s.wait(ctx) }

// TestStoreTimeoutBoundsEveryCall: WithStoreTimeout bounds each store
// call, as its doc says, not the decisions only: Peek, Reset, Cancel,
// Release and Renew on a store that stopped answering return
// DeadlineExceeded after the timeout, not when their context ends (here
// after 10s; never, for context.Background), and AllowAll's Take over a
// group of such limiters after the shortest of their timeouts.
func TestStoreTimeoutBoundsEveryCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		// long is the caller's context of each call: it ends after 10s.
		long := func() context.Context {
			c, cancel := context.WithTimeout(ctx, 10*time.Second)
			t.Cleanup(cancel)
			return c
		}
		hang := new(atomic.Bool)
		st := hungStore{newStore(t, memory.WithSweepInterval(0)), hang}
		opt := limiter.WithStoreTimeout(50 * time.Millisecond)
		tb := newLimiter(t, st, "tb", algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second}, opt)
		cc := newLimiter(t, st, "cc", algo.Params{Algorithm: algo.Concurrency, Limit: 2, LeaseTTL: time.Minute}, opt)
		slow := newLimiter(t, st, "slow", algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second}, limiter.WithStoreTimeout(time.Second))
		r, err := tb.Reserve(ctx, "k", 1)
		if err != nil || !r.OK() {
			t.Fatalf("Reserve: %v, %v", r, err)
		}
		ls, err := cc.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		calls := []struct {
			name string
			call func() error
		}{
			{"Peek", func() error { _, err := tb.Peek(long(), "k", 1); return err }},
			{"Reset", func() error { return tb.Reset(long(), "k") }},
			{"Cancel", func() error { return r.Cancel(long()) }},
			{"Renew", func() error { return ls.Renew(long()) }},
			{"Release", func() error { return ls.Release(long()) }},
			{"AllowAll", func() error {
				hang.Store(true)
				_, err := limiter.AllowAll(long(), []limiter.Hit{{Limiter: slow, Key: "k"}, {Limiter: tb, Key: "k"}})
				return err
			}},
		}
		for _, c := range calls {
			start := time.Now()
			err := c.call()
			if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took != 50*time.Millisecond {
				t.Errorf("%s on a hung store with a 50ms store timeout: %v after %v; want DeadlineExceeded after 50ms", c.name, err, took)
			}
		}
	})
}
