package lease_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/lease"
	"github.com/floodgate/floodgate/store/memcached"
)

// TestRememberedRefusalBound: an instance repeats the shared store's
// refusal of a key in process for at most its TTL, with the store's exact
// RetryAfter, and then asks the store again, so that units the store has
// again without this instance knowing (a key reset through another
// instance, as the admin API does; the unused units another instance gave
// back) are admitted from then on. It repeated the refusal for the whole
// RetryAfter, the rest of the window: a daily quota reset through another
// instance stayed refused on this one until the window ended (12 h here),
// and the units another instance gave back stayed unused by every instance
// that had met the end of the budget (up to K × (Slice − 1) units of a
// quota in a fleet of K).
func TestRememberedRefusalBound(t *testing.T) {
	addr := testserver.Memcached(t)
	noon := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) // the day's window ends in 12 h
	open := func() *memcached.Store {
		mc, err := memcached.Open("memcached://"+addr, memcached.WithClock(func() time.Time { return noon }))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = mc.Close() })
		return mc
	}
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: 24 * time.Hour})
	ctx := context.Background()
	decide := func(s store.Store, key string) algo.Decision {
		t.Helper()
		out := make([]algo.Decision, 1)
		if _, err := s.Take(ctx, []store.Request{{Key: key, Limit: l, Cost: 1}}, out); err != nil {
			t.Fatal(err)
		}
		return out[0]
	}

	t.Run("reset through another instance", func(t *testing.T) {
		clk := newClock()
		a := instance(t, open(), clk, lease.WithSlice(5), lease.WithTTL(time.Second))
		mcb := open()
		b := instance(t, mcb, clk, lease.WithSlice(5), lease.WithTTL(time.Second))
		key := fmt.Sprint(t.Name(), "/", time.Now().UnixNano())
		for i := range 10 {
			if d := decide(a, key); !d.Allowed {
				t.Fatalf("take %d of 10: refused", i+1)
			}
		}
		if d := decide(a, key); d.Allowed || d.RetryAfter != 12*time.Hour {
			t.Fatalf("take 11 of 10: %+v, want refused with RetryAfter 12h (the window's end)", d)
		}
		clk.Add(time.Second / 2)
		if d := decide(a, key); d.Allowed || d.RetryAfter != 12*time.Hour-time.Second/2 {
			t.Fatalf("half a TTL later: %+v, want refused in process with the store's RetryAfter, 11h59m59.5s", d)
		}
		// The admin API's reset, through b: Reset, and the counters of
		// the key's window limit.
		if err := b.Reset(ctx, key); err != nil {
			t.Fatal(err)
		}
		if err := mcb.ResetRequests(ctx, []store.Request{{Key: key, Limit: l}}); err != nil {
			t.Fatal(err)
		}
		clk.Add(time.Second / 2) // a TTL after the refusal
		if d := decide(a, key); !d.Allowed {
			t.Fatalf("a TTL after the refusal, the key reset through another instance: %+v, want allowed (the store has its whole budget again)", d)
		}
	})

	t.Run("units another instance gave back", func(t *testing.T) {
		clk := newClock()
		a := instance(t, open(), clk, lease.WithSlice(5), lease.WithTTL(time.Second))
		b := instance(t, open(), clk, lease.WithSlice(5), lease.WithTTL(time.Second))
		key := fmt.Sprint(t.Name(), "/", time.Now().UnixNano())
		if d := decide(a, key); !d.Allowed {
			t.Fatal("a's take: refused") // a takes a slice of 5 and holds 4
		}
		for i := range 5 {
			if d := decide(b, key); !d.Allowed {
				t.Fatalf("b's take %d: refused", i+1)
			}
		}
		if d := decide(b, key); d.Allowed {
			t.Fatalf("b's sixth take: %+v, want refused (a holds the other 4)", d)
		}
		// a stops (a rolling restart): its 4 unused units go back.
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		clk.Add(time.Second) // a TTL after b's refusal
		admitted := 0
		for range 5 {
			if decide(b, key).Allowed {
				admitted++
			}
		}
		if admitted != 4 {
			t.Errorf("b admitted %d of 5 requests a TTL after its refusal, with the 4 units a gave back in the store; want 4", admitted)
		}
	})
}
