package memcached_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
)

// keyOn returns a fresh key the store places on server p.
func keyOn(t *testing.T, s *memcached.Store, p int, name string) string {
	for range 1000 {
		if k := uniqueKey(t, name); s.Partition(k) == p {
			return k
		}
	}
	t.Fatalf("no key on server %d in 1000 tries", p)
	return ""
}

// TestStalledServerDoesNotHoldOthers: a Take over a key of a stalled
// server (one that stopped answering) and a key of a live one must not
// keep the live server's key from being decided by another caller of the
// same store within that caller's deadline.
func TestStalledServerDoesNotHoldOthers(t *testing.T) {
	stalled := newFaultProxy(t, testserver.NewMemcached(t).Addr)
	live := testserver.NewMemcached(t).Addr
	s, err := memcached.Open("memcached://"+stalled.Addr()+","+live, memcached.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, p := range []algo.Params{
		{Algorithm: algo.TokenBucket, Limit: 100, Period: time.Hour},
		{Algorithm: algo.FixedWindow, Limit: 100, Period: time.Hour},
	} {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			l := compile(t, p)
			ka, kb := keyOn(t, s, 0, "a"), keyOn(t, s, 1, "b")
			var released atomic.Bool
			stalled.stall.Store(true)
			done := make(chan struct{})
			go func() {
				defer close(done)
				out := make([]algo.Decision, 2)
				s.Take(context.Background(), []store.Request{{Key: ka, Limit: l, Cost: 1}, {Key: kb, Limit: l, Cost: 1}}, out)
			}()
			time.Sleep(300 * time.Millisecond) // the Take is waiting for the stalled server
			release := time.AfterFunc(4*time.Second, func() { released.Store(true); stalled.stall.Store(false) })
			defer release.Stop()
			c, cancel := context.WithTimeout(context.Background(), time.Second)
			out := make([]algo.Decision, 1)
			_, err := s.Take(c, []store.Request{{Key: kb, Limit: l, Cost: 1}}, out)
			cancel()
			if released.Load() {
				t.Errorf("a Take of the live server's key waited for the stalled server (err %v)", err)
			} else if err != nil || !out[0].Allowed {
				t.Errorf("a Take of the live server's key: %+v, %v", out[0], err)
			}
			released.Store(true)
			stalled.stall.Store(false)
			<-done
		})
	}
}
