package memcached_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
)

// TestSlidingLogRefundRace: 16 goroutines on two clients (two Stores, as
// two instances) each take a unit of one sliding-log key and refund it at
// the take's Result.At, 100 times, on the real clock; every unit is given
// back, so the key ends with its whole budget. The clock was read once,
// before the item and before waiting behind the key's other callers: a
// take that found a state already stamped later by another caller
// decided (and stamped its unit) at that later time while Result.At kept
// the earlier one, and the refund found no unit there: 738 of 1600
// refunds were lost, the key left with 262 of 1000.
func TestSlidingLogRefundRace(t *testing.T) {
	// Retries enough that the two clients' races never give up
	// (ErrContention) under the race detector: the test is about what the
	// takes and refunds that land do.
	a, b := open(t, nil, memcached.WithRetries(1000)), open(t, nil, memcached.WithRetries(1000))
	l := compile(t, algo.Params{Algorithm: algo.SlidingLog, Limit: 1000, Period: time.Hour})
	key := uniqueKey(t, "k")
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for g := range 16 {
		s := a
		if g%2 == 1 {
			s = b
		}
		wg.Go(func() {
			out := make([]algo.Decision, 1)
			for range 100 {
				res, err := s.Take(ctx(t), []store.Request{{Key: key, Limit: l, Cost: 1}}, out)
				if err != nil || !res.Allowed {
					t.Errorf("Take: %+v, %v; want admitted (at most 16 units are out at once)", res, err)
					return
				}
				admitted.Add(1)
				if err := s.Refund(ctx(t), []store.Request{{Key: key, Limit: l, Cost: 1, At: res.At}}); err != nil {
					t.Errorf("Refund: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	out := make([]algo.Decision, 1)
	if err := a.Peek(ctx(t), []store.Request{{Key: key, Limit: l}}, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Remaining != 1000 {
		t.Errorf("after %d takes each refunded: %d of 1000 remaining, want 1000 (%d refunds lost)", admitted.Load(), out[0].Remaining, 1000-out[0].Remaining)
	}
}
