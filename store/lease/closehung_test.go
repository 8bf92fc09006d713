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

// TestCloseBoundedWhenStoreHangs: Close returns within its 5 s bound
// (and the give-back in flight then) when the shared store hangs (a
// memcached that stopped answering, its round trips cut at 1 s by its own
// timeout) while the Store holds slices of 15 keys, whether the janitor is
// idle or giving back expired slices at the time. Close waited for the
// janitor to go through every expired slice first, one store timeout per
// key whatever Close's bound (15 s here; floodgate serve's memcached and
// Redis timeouts are at least 1 s, so minutes for a few hundred hot keys,
// past a service manager's stop timeout). Close's own sweep kept to its
// bound only by chance: past it, each further key was given back or not
// as a select between the key's lock and the deadline chose.
func TestCloseBoundedWhenStoreHangs(t *testing.T) {
	const keys = 15
	for _, tc := range []struct {
		name    string
		janitor bool
	}{{"janitor idle", false}, {"janitor giving back", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := testserver.NewMemcached(t)
			if srv == nil {
				t.Skip("no memcached")
			}
			mc, err := memcached.Open("memcached://"+srv.Addr, memcached.WithTimeout(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			clk := newClock()
			opts := []lease.Option{lease.WithSlice(10), lease.WithTTL(time.Hour)}
			if tc.janitor {
				// Slices expire by clk; the janitor looks every 25 ms.
				opts = []lease.Option{lease.WithSlice(10), lease.WithTTL(50 * time.Millisecond), lease.WithClock(clk.Now)}
			}
			s, err := lease.New(mc, opts...)
			if err != nil {
				t.Fatal(err)
			}
			l := quota(t, algo.FixedWindow, 1000)
			for i := range keys {
				out := make([]algo.Decision, 1)
				if _, err := s.Take(context.Background(), []store.Request{{Key: fmt.Sprint(t.Name(), "/", time.Now().UnixNano(), "/", i), Limit: l, Cost: 1}}, out); err != nil || !out[0].Allowed {
					t.Fatalf("Take: %+v, %v", out[0], err)
				}
			}
			if err := srv.Pause(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Resume() })
			if tc.janitor {
				clk.Add(time.Hour) // every slice has expired
				// Not a wait for a result: time for the janitor's next
				// tick to begin giving the slices back to the hung
				// server (if it has not, Close gives them back itself,
				// and its bound is the same).
				time.Sleep(200 * time.Millisecond)
			}
			start := time.Now()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			// 5 s, the give-back in flight when it ends (1 s), and slack
			// for a loaded machine.
			if took := time.Since(start); took > 8*time.Second {
				t.Errorf("Close took %v with the shared store hung and %d slices held, want at most about its 5 s bound", took.Round(100*time.Millisecond), keys)
			}
		})
	}
}
