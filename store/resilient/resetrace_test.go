package resilient_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/resilient"
)

// resetting is a memory store that runs before, when set, as its Reset
// begins: a Take decided on the state the Reset is about to delete.
type resetting struct {
	*memory.Store
	before func()
}

func (r *resetting) Reset(ctx context.Context, keys ...string) error {
	if f := r.before; f != nil {
		r.before = nil
		f()
	}
	return r.Store.Reset(ctx, keys...)
}

// TestResetDuringTakeIsNotCached: a Take refused on a key's spent state
// whose refusal reaches the over-limit cache after a Reset of that key
// began does not cache it: the next Take goes to the store and is
// admitted, as the Reset promised. Two interleavings, each injected
// without sleeps: the whole Reset runs between the store's refusal and
// the cache's put (Hooks.Call of the Take), and a Take runs after the
// Reset dropped the cache but before the store deleted the state. Before
// the fix the refusal was put back, and the key was refused from the
// cache for the cache's TTL (1 s) on this instance although reset.
func TestResetDuringTakeIsNotCached(t *testing.T) {
	for _, during := range []string{"after the store's refusal", "before the store's reset"} {
		t.Run(during, func(t *testing.T) {
			ctx := context.Background()
			c := newClock()
			inner := &resetting{Store: memStore(t, c)}
			var hook func(op string)
			hits := 0
			s, err := resilient.New(inner, resilient.WithClock(c.Now), resilient.WithHooks(resilient.Hooks{
				Call: func(op string, _ time.Duration, _ error) {
					if f := hook; f != nil && op == "take" {
						hook = nil
						f(op)
					}
				},
				CacheHit: func() { hits++ },
			}))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Minute})
			if d := take(t, s, "k", l, 1); !d.Allowed {
				t.Fatalf("first Take refused: %+v", d)
			}
			reset := func() {
				if err := s.Reset(ctx, "k"); err != nil {
					t.Errorf("Reset: %v", err)
				}
			}
			switch during {
			case "after the store's refusal":
				hook = func(string) { reset() }
				if d := take(t, s, "k", l, 1); d.Allowed {
					t.Fatalf("second Take of a spent window admitted: %+v", d)
				}
			default:
				inner.before = func() {
					if d := take(t, s, "k", l, 1); d.Allowed {
						t.Errorf("Take before the store's reset admitted: %+v", d)
					}
				}
				reset()
			}
			if n := s.CachedKeys(); n != 0 {
				t.Errorf("after the Reset the over-limit cache holds %d keys, want 0", n)
			}
			if d := take(t, s, "k", l, 1); !d.Allowed {
				t.Errorf("Take after the Reset refused (RetryAfter %v, %d cache hits): refused from the cache although the key was reset", d.RetryAfter, hits)
			}
		})
	}
}
