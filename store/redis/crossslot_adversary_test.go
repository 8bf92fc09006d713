package redis

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// TestAdversaryCrossSlotMixedKindsRefund has 48 goroutines take two or
// three keys of different Cluster slots — each key its own algorithm (a
// window, a log, buckets, concurrency slots), so one reservation rolls
// back several algorithms' undo at once — and give a third of the
// admitted takes back at once (Refund, Release for the slots). At a
// standing clock every key must hold exactly what the admitted takes
// still charge, never more than its budget.
func TestAdversaryCrossSlotMixedKindsRefund(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	clock := func() time.Time { return time.Date(2026, 5, 1, 12, 0, 30, 0, time.UTC) }
	s := openT(t, clusterURL(t), WithTestClock(clock))
	kinds := []algo.Kind{algo.FixedWindow, algo.SlidingLog, algo.SlidingWindow, algo.TokenBucket, algo.GCRA, algo.Shaper, algo.Concurrency}
	budgets := []int64{30, 45, 60, 35, 50, 40, 25}
	keys := slotKeys(t, fmt.Sprintf("xadv:%s:", runKey()), len(kinds))
	limits := make([]*algo.Limit, len(kinds))
	for i, k := range kinds {
		p := algo.Params{Algorithm: k, Limit: budgets[i], Period: time.Hour}
		switch k {
		case algo.SlidingWindow:
			p.SubWindows = 6
		case algo.Shaper:
			p.Limit, p.Burst = 1, budgets[i]-1 // capacity Burst+1, refilled 1 per hour
		case algo.Concurrency:
			p.Period = 0
			p.LeaseTTL = time.Hour
		}
		l, err := algo.Compile(p)
		if err != nil {
			t.Fatal(err)
		}
		limits[i] = l
	}
	var charged [7]atomic.Int64
	var lease atomic.Uint64
	var wg sync.WaitGroup
	for g := range 48 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 99))
			for range 25 {
				pick := rng.Perm(len(keys))[:2+rng.IntN(2)]
				id := lease.Add(1)
				reqs := make([]store.Request, len(pick))
				for j, i := range pick {
					reqs[j] = store.Request{Key: keys[i], Limit: limits[i], Cost: 1 + rng.Int64N(2), Lease: id}
				}
				out := make([]algo.Decision, len(reqs))
				res, err := s.Take(t.Context(), reqs, out)
				if err != nil {
					t.Error(err)
					return
				}
				if !res.Allowed {
					continue
				}
				for j, i := range pick {
					charged[i].Add(reqs[j].Cost)
				}
				if rng.IntN(3) != 0 {
					continue
				}
				var refund, release []store.Request
				for j := range reqs {
					reqs[j].At = res.At
					if reqs[j].Limit.Algorithm() == algo.Concurrency {
						release = append(release, reqs[j])
					} else {
						refund = append(refund, reqs[j])
					}
				}
				if err := s.Refund(t.Context(), refund); err != nil {
					t.Error(err)
					return
				}
				if err := s.Release(t.Context(), release); err != nil {
					t.Error(err)
					return
				}
				for j, i := range pick {
					charged[i].Add(-reqs[j].Cost)
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	out := make([]algo.Decision, 1)
	for i, key := range keys {
		if err := s.Peek(t.Context(), []store.Request{{Key: key, Limit: limits[i]}}, out); err != nil {
			t.Fatal(err)
		}
		held, c := limits[i].Capacity()-out[0].Remaining, charged[i].Load()
		if c > limits[i].Capacity() {
			t.Errorf("%s: admitted takes charged %d over a budget of %d", kinds[i], c, limits[i].Capacity())
		}
		if held != c {
			t.Errorf("%s: the store holds a charge of %d, the admitted takes not given back charged %d", kinds[i], held, c)
		}
	}
}
