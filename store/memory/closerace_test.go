package memory_test

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
)

// TestCloseDuringCallsExt closes the store while callers decide keys whose
// state has a variable part (a concurrency limit's leases, a sliding log's
// stamps, kept in the shard's side map): every call returns a decision or
// an error matching store.ErrClosed, and none panics.
func TestCloseDuringCallsExt(t *testing.T) {
	ctx := t.Context()
	c := mustLimit(t, algo.Params{Algorithm: algo.Concurrency, Limit: 1 << 20, LeaseTTL: time.Minute})
	lg := mustLimit(t, algo.Params{Algorithm: algo.SlidingLog, Limit: 1 << 20, Period: time.Minute})
	for round := range 100 {
		st, err := memory.New(memory.WithShards(1), memory.WithSweepInterval(0))
		if err != nil {
			t.Fatal(err)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		var calls atomic.Int64
		for g := range 4 {
			wg.Go(func() {
				<-start
				out := make([]algo.Decision, 2)
				for i := range 200 {
					k := fmt.Sprint("k", i%4)
					reqs := []store.Request{{Key: k, Limit: c, Cost: 1, Lease: uint64(g*1000 + i + 1)}}
					if g%2 == 1 {
						reqs = []store.Request{{Key: "l" + k, Limit: lg, Cost: 1}, {Key: "m" + k, Limit: lg, Cost: 1}}
					}
					_, err := st.Take(ctx, reqs, out[:len(reqs)])
					calls.Add(1)
					if err != nil {
						if !errors.Is(err, store.ErrClosed) {
							errs <- err
						}
						return
					}
				}
			})
		}
		close(start)
		// Close once the callers are under way, at a point that varies
		// by round (bounded: a caller that ended early ends the wait).
		for i := 0; calls.Load() < int64(round%40+1) && i < 1e6; i++ {
			runtime.Gosched()
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: a call during Close: %v, want a decision or store.ErrClosed", round, err)
		}
	}
}
