package memory_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/storetest"
)

// endsAfter is a context whose Err is nil for its first n calls and
// context.Canceled after: a Take over several keys calls it once before it
// looks the keys up and once before each attempt to lock them, so with n =
// 2 it ends exactly when a removed key makes the Take look its keys up again.
type endsAfter struct {
	context.Context
	n atomic.Int32
}

func (c *endsAfter) Err() error {
	if c.n.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}

// TestTakeEndedLeavesNoPendingKeys: an all-or-nothing Take whose context
// ends while it looks its keys up again (one was removed between lookup and
// lock) leaves none of the keys it created behind. Those keys are pending
// (neither eviction nor Sweep removes them) until a Take saves them; one
// left so stayed in the store for good, past its key cap.
func TestTakeEndedLeavesNoPendingKeys(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	st := mustStore(t, memory.WithClock(clock.Now), memory.WithShards(1), memory.WithSweepInterval(0))
	l := mustLimit(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second, Burst: 10})
	reqs := make([]store.Request, 40)
	for i := range reqs {
		reqs[i] = store.Request{Key: fmt.Sprintf("k-%d", i), Limit: l, Cost: 1}
	}
	out := make([]algo.Decision, len(reqs))

	// Reset removes k-0 over and over, so that a Take sometimes finds it
	// removed when it locks its keys.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := st.Reset(context.Background(), "k-0"); err != nil {
				t.Error(err)
				return
			}
		}
	})
	ended := false
	for range 20000 {
		ctx := &endsAfter{Context: context.Background()}
		ctx.n.Store(2)
		if _, err := st.Take(ctx, reqs, out); err != nil {
			ended = true
			break
		}
		// Admitted: start again from an empty store.
		keys := make([]string, len(reqs))
		for i := range reqs {
			keys[i] = reqs[i].Key
		}
		if err := st.Reset(context.Background(), keys...); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if !ended {
		t.Skip("no Take found a key removed under it in 20 000 tries")
	}
	clock.Advance(time.Hour)
	st.Sweep()
	if got := st.Stats().Keys; got != 0 {
		t.Fatalf("%d keys left an hour after a Take that ended with its context, want 0", got)
	}
}
