package lease_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/lease"
)

// TestCloseDuringTakes: Close gives every unused unit back, including
// those of slices taken by calls that ran while it did, and no Take
// decides from a slice once Close has begun: after it, the shared store
// holds charged exactly the units admitted, and a Take is an error
// matching store.ErrClosed. Before, a Take that took a slice after Close
// had given back its key kept the slice for good (charged, never
// admitted) and admitted from it after Close returned.
func TestCloseDuringTakes(t *testing.T) {
	ctx := context.Background()
	l := quota(t, algo.TokenBucket, 100000)
	for round := range 50 {
		clk := newClock()
		m := shared(t, clk)
		s, err := lease.New(noClose{m}, lease.WithClock(clk.Now), lease.WithSlice(10))
		if err != nil {
			t.Fatal(err)
		}
		var admitted, calls atomic.Int64
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				out := make([]algo.Decision, 1)
				for i := range 300 {
					key := fmt.Sprint("k", g, "-", i%8)
					_, err := s.Take(ctx, []store.Request{{Key: key, Limit: l, Cost: 1}}, out)
					calls.Add(1)
					if err != nil {
						return
					}
					if out[0].Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		for i := 0; calls.Load() < int64(round*4+1) && i < 1e6; i++ {
			runtime.Gosched()
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		var charged int64
		for g := range 4 {
			for k := range 8 {
				charged += 100000 - remaining(t, m, fmt.Sprint("k", g, "-", k), l)
			}
		}
		if charged != admitted.Load() {
			t.Fatalf("round %d: after Close the shared store holds %d units charged, %d admitted; want them equal (no slice kept)", round, charged, admitted.Load())
		}
		out := make([]algo.Decision, 1)
		if _, err := s.Take(ctx, []store.Request{{Key: "k0-0", Limit: l, Cost: 1}}, out); !errors.Is(err, store.ErrClosed) {
			t.Fatalf("round %d: Take after Close: %+v, %v; want an error matching store.ErrClosed", round, out[0], err)
		}
	}
}

// refundGate holds the first Refund that reaches the shared store until
// released.
type refundGate struct {
	store.Store
	once           sync.Once
	enter, release chan struct{}
}

func (g *refundGate) Refund(ctx context.Context, reqs []store.Request) error {
	g.once.Do(func() { close(g.enter); <-g.release })
	return g.Store.Refund(ctx, reqs)
}

// TestRefundWhileCloseGivesBack: a Refund of a unit admitted from a slice,
// made while Close gives that slice back (it found the key before Close
// removed it, and waited for its lock), goes to the shared store: the key
// is whole again afterwards. It went into the removed entry, which nothing
// gives back any more, so the unit stayed charged on the shared store.
func TestRefundWhileCloseGivesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		clk := newClock()
		m := shared(t, clk)
		g := &refundGate{Store: m, enter: make(chan struct{}), release: make(chan struct{})}
		s, err := lease.New(noClose{g}, lease.WithClock(clk.Now), lease.WithSlice(10))
		if err != nil {
			t.Fatal(err)
		}
		l := quota(t, algo.TokenBucket, 100)
		out := make([]algo.Decision, 1)
		res, err := s.Take(ctx, []store.Request{{Key: "k", Limit: l, Cost: 1}}, out)
		if err != nil || !out[0].Allowed {
			t.Fatalf("take: %+v, %v; want allowed", out[0], err)
		}
		closed := make(chan error, 1)
		go func() { closed <- s.Close() }()
		<-g.enter // Close holds the key, giving its 9 unused units back
		refunded := make(chan error, 1)
		go func() {
			refunded <- s.Refund(ctx, []store.Request{{Key: "k", Limit: l, Cost: 1, At: res.At}})
		}()
		synctest.Wait() // the Refund waits for the key
		close(g.release)
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		if err := <-refunded; err != nil {
			t.Fatal(err)
		}
		if got := remaining(t, m, "k", l); got != 100 {
			t.Fatalf("the shared store has %d left after Close and the refund of the one unit admitted, want 100", got)
		}
	})
}
