package memcached_test

import (
	"context"
	"errors"
	"reflect"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
)

// TestQueuedTakeHonoursContext: a Take of a compare-and-swap key whose
// context ends while it waits for the key's local lock, behind another
// caller's round trip to a server that hangs, returns its context's error
// once it has the lock, and neither reads nor charges the key. It went on
// to read and charge it: each queued caller made a round trip of its own
// to the hung server (up to WithTimeout each, one after the other) long
// after its caller had given up, and when the server came back, charged
// units that no caller was admitted with (its failure policy had answered
// it already).
func TestQueuedTakeHonoursContext(t *testing.T) {
	srv := testserver.NewMemcached(t)
	if srv == nil {
		t.Skip("no memcached")
	}
	clock := newClock(t0)
	s := openURL(t, "memcached://"+srv.Addr, clock, memcached.WithTimeout(10*time.Second))
	type keyed struct {
		name, key, twin string
		l               *algo.Limit
	}
	var keys []keyed
	for _, lim := range limits {
		switch lim.p.Algorithm {
		case algo.FixedWindow, algo.SlidingWindow:
			continue // counters: no local lock
		}
		keys = append(keys, keyed{lim.name, uniqueKey(t, lim.name), uniqueKey(t, lim.name+"-twin"), compile(t, lim.p)})
	}
	take := func(c context.Context, key string, l *algo.Limit, lease uint64) error {
		out := make([]algo.Decision, 1)
		_, err := s.Take(c, []store.Request{{Key: key, Limit: l, Cost: 1, Lease: lease}}, out)
		if err == nil && !out[0].Allowed {
			err = errors.New("refused")
		}
		return err
	}
	// Each twin gets the one Take each key should see, at the same
	// instant (the clock does not move).
	for _, k := range keys {
		if err := take(ctx(t), k.twin, k.l, 1); err != nil {
			t.Fatalf("%s: Take of the twin: %v", k.name, err)
		}
	}

	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := srv.Resume(); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(resume)
	before := memcached.RoundTrips(s)[0]
	// The first caller of each key holds its lock through a round trip
	// the hung server does not answer.
	var wg sync.WaitGroup
	holders := make([]error, len(keys))
	for i, k := range keys {
		wg.Go(func() { holders[i] = take(context.Background(), k.key, k.l, 1) })
	}
	for memcached.RoundTrips(s)[0] < before+int64(len(keys)) {
		runtime.Gosched()
	}
	// The second caller of each key gets past the Take's first look at
	// its context and queues on the lock; its context has ended by the
	// time it has the lock (its deadline passed while it waited).
	queued := make([]error, len(keys))
	var qwg sync.WaitGroup
	for i, k := range keys {
		qwg.Go(func() { queued[i] = take(flipAfter(context.Background(), 1), k.key, k.l, 2) })
	}
	resume() // the server comes back: the holders' round trips are answered
	wg.Wait()
	qwg.Wait()
	trips := memcached.RoundTrips(s)[0] - before
	for i, k := range keys {
		if holders[i] != nil {
			t.Fatalf("%s: the first Take: %v", k.name, holders[i])
		}
		if !errors.Is(queued[i], context.DeadlineExceeded) || errors.Is(queued[i], store.ErrUnavailable) {
			t.Errorf("%s: a Take whose context ended while it waited for the key: %v; want context.DeadlineExceeded", k.name, queued[i])
		}
		got, _, err := s.Inspect(ctx(t), k.key)
		if err != nil {
			t.Fatal(err)
		}
		want, _, err := s.Inspect(ctx(t), k.twin)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: state %+v after one Take and one whose context had ended, want %+v (the one Take's alone)", k.name, got, want)
		}
	}
	// Each holder: a gets, then an add. The queued Takes: none.
	if most := int64(2 * len(keys)); trips > most {
		t.Errorf("%d round trips for %d Takes admitted, want at most %d: the Takes whose context had ended went to the server", trips, len(keys), most)
	}
}
