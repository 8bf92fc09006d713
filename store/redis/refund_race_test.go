package redis

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// TestCrossSlotRefundRace: on a Cluster, 16 goroutines on two clients
// (two Stores, as two instances) each take a unit of one sliding-log key
// and refund it at the take's Result.At, 100 times: half alone, half
// together with a key of another slot (a cross-slot take), the sliding
// log first in one run and second in the other. Every unit is given back,
// so the key ends with its whole budget. A cross-slot take reserved every
// slot at a TIME read one round trip before: a take of the key that ran
// in between left its state at a later time, the reservation was stamped
// at that time (a state's time never moves back), and the refund at
// Result.At found nothing: 584 of 1600 refunds were lost (416 of 1000
// left), 704 with the sliding log second.
func TestCrossSlotRefundRace(t *testing.T) {
	url := clusterURL(t)
	a, b := openT(t, url), openT(t, url)
	l, err := algo.Compile(algo.Params{Algorithm: algo.SlidingLog, Limit: 1000, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	other, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, second := range []bool{false, true} {
		t.Run(fmt.Sprintf("second=%v", second), func(t *testing.T) {
			rid := runKey()
			key := "rr:{" + rid + "}:log"
			var wg sync.WaitGroup
			var admitted atomic.Int64
			for g := range 16 {
				s := a
				if g%2 == 1 {
					s = b
				}
				wg.Go(func() {
					out := make([]algo.Decision, 2)
					for i := range 100 {
						reqs := []store.Request{{Key: key, Limit: l, Cost: 1}}
						if g%4 < 2 { // a key of its own, in another slot than key's (most likely)
							o := store.Request{Key: fmt.Sprintf("rr:%s:%d:%d", rid, g, i), Limit: other, Cost: 1}
							if second {
								reqs = []store.Request{o, reqs[0]}
							} else {
								reqs = append(reqs, o)
							}
						}
						res, err := s.Take(t.Context(), reqs, out[:len(reqs)])
						if err != nil || !res.Allowed {
							t.Errorf("Take: %+v, %v; want admitted (at most 16 units are out at once)", res, err)
							return
						}
						admitted.Add(1)
						if err := s.Refund(t.Context(), []store.Request{{Key: key, Limit: l, Cost: 1, At: res.At}}); err != nil {
							t.Errorf("Refund: %v", err)
							return
						}
					}
				})
			}
			wg.Wait()
			out := make([]algo.Decision, 1)
			if err := a.Peek(t.Context(), []store.Request{{Key: key, Limit: l}}, out); err != nil {
				t.Fatal(err)
			}
			if out[0].Remaining != 1000 {
				t.Errorf("after %d takes each refunded: %d of 1000 remaining, want 1000 (%d refunds lost)", admitted.Load(), out[0].Remaining, 1000-out[0].Remaining)
			}
		})
	}
}
