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

// TestCloseDuringCallsNoAdmission: a call that runs while Close drops the
// keys decides on the key's whole state or returns store.ErrClosed: it
// never reads a state whose variable part Close has already dropped. A
// concurrency limit with its one slot held refuses every Take, by several
// keys at once or alone, up to Close and during it.
func TestCloseDuringCallsNoAdmission(t *testing.T) {
	ctx := t.Context()
	c := mustLimit(t, algo.Params{Algorithm: algo.Concurrency, Limit: 1, LeaseTTL: time.Hour})
	for round := range 100 {
		st, err := memory.New(memory.WithShards(1), memory.WithSweepInterval(0))
		if err != nil {
			t.Fatal(err)
		}
		for k := range 4 {
			take(t, st, fmt.Sprint("k", k), c, 1) // the slot, held
		}
		var wg sync.WaitGroup
		var calls atomic.Int64
		admitted := make(chan string, 8)
		for g := range 4 {
			wg.Go(func() {
				out := make([]algo.Decision, 2)
				for i := range 200 {
					k := fmt.Sprint("k", i%4)
					reqs := []store.Request{{Key: k, Limit: c, Cost: 1, Lease: uint64(g*1000 + i + 1)}}
					if g%2 == 1 {
						reqs = append(reqs, store.Request{Key: fmt.Sprint("k", (i+1)%4), Limit: c, Cost: 1, Lease: uint64(g*1000 + i + 1)})
					}
					res, err := st.Take(ctx, reqs, out[:len(reqs)])
					calls.Add(1)
					if err != nil {
						return
					}
					if res.Allowed {
						admitted <- fmt.Sprintf("take %d of caller %d", i, g)
						return
					}
				}
			})
		}
		for i := 0; calls.Load() < int64(round%40+1) && i < 1e6; i++ {
			runtime.Gosched()
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(admitted)
		for a := range admitted {
			t.Fatalf("round %d: %s admitted on a concurrency limit whose slot is held, during Close", round, a)
		}
	}
}
