package memory_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/storetest"
)

// TestCapTakeOverManyNewKeys: an all-or-nothing Take over more new keys
// than a full shard holds is decided, and the shard comes back under its
// cap afterwards. Before, each new key of the Take evicted the Take's own
// earlier new keys (a fresh state is the first to go), the Take found them
// gone, started again, and spun for ever: `serve --store
// 'memory://?max_keys=64'` hung on a /json request of 40 new descriptors.
func TestCapTakeOverManyNewKeys(t *testing.T) {
	for _, shards := range []int{1, 4} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			const limit = 8
			clock := storetest.NewClock(storetest.Epoch)
			st := mustStore(t, memory.WithClock(clock.Now), memory.WithShards(shards), memory.WithMaxKeys(limit), memory.WithSweepInterval(0))
			l := mustLimit(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second, Burst: 10})
			for i := range 2 * limit {
				if d := take(t, st, fmt.Sprintf("old-%d", i), l, 1); !d.Allowed {
					t.Fatalf("old-%d refused: %+v", i, d)
				}
			}
			reqs := make([]store.Request, 5*limit)
			for i := range reqs {
				reqs[i] = store.Request{Key: fmt.Sprintf("new-%d", i), Limit: l, Cost: 1}
			}
			out := make([]algo.Decision, len(reqs))
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				res, err := st.Take(ctx, reqs, out)
				if err == nil && !res.Allowed {
					err = fmt.Errorf("refused: %+v", out)
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("Take over 40 new keys of a full store did not return in 15s")
			}
			for i, d := range out {
				if !d.Allowed || d.Remaining != 9 {
					t.Errorf("request %d: %+v, want admitted with 9 remaining", i, d)
				}
			}
			if shards > 1 {
				return // which shard the next keys land in is the hash seed's
			}
			// The next new key evicts until its shard is back under its cap.
			if got := st.Stats().Keys; got <= limit {
				t.Fatalf("%d keys after the Take, want more than the cap %d (its keys are kept)", got, limit)
			}
			take(t, st, "later", l, 1)
			if got := st.Stats().Keys; got != limit {
				t.Errorf("%d keys after one more new key, want the cap %d", got, limit)
			}
		})
	}
}
