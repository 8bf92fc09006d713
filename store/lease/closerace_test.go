package lease_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

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
