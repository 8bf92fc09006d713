package redis

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// Takes over keys in several hash slots of a Cluster: reserved slot by
// slot, rolled back in reverse order when any refuses.

// slotKeys returns n keys of distinct hash slots under prefix.
func slotKeys(t testing.TB, prefix string, n int) []string {
	t.Helper()
	seen := map[int]bool{}
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("%s{%d}", prefix, i)
		if sl := Slot(k); !seen[sl] {
			seen[sl] = true
			keys = append(keys, k)
		}
	}
	return keys
}

// smallParams is a limit of budget 5 per hour for algorithm k.
func smallParams(k algo.Kind) algo.Params {
	p := algo.Params{Algorithm: k, Limit: 5, Period: time.Hour}
	switch k {
	case algo.Shaper:
		p.Burst = 4
	case algo.SmoothBursty:
		p.MaxWait = time.Hour
	case algo.SmoothWarmup:
		p.WarmupPeriod, p.MaxWait = time.Hour, time.Hour
	case algo.Concurrency:
		p.Period, p.LeaseTTL = 0, time.Hour
	}
	return p
}

// TestCrossSlotAllOrNothing takes three keys of three slots whose third
// is spent: the other two must be left uncharged, and the decisions must
// say who would have passed alone.
func TestCrossSlotAllOrNothing(t *testing.T) {
	url := clusterURL(t)
	for _, k := range algo.Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			t.Parallel()
			l, err := algo.Compile(smallParams(k))
			if err != nil {
				t.Fatal(err)
			}
			ck := new(clock)
			ck.us.Store(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC).UnixMicro())
			s := openT(t, url, WithTestClock(ck.Now))
			keys := slotKeys(t, fmt.Sprintf("xs:%s:%s:", runID, k), 4)
			a, b, c, fresh := keys[0], keys[1], keys[2], keys[3]
			out := make([]algo.Decision, 3)
			// Spend c.
			for range l.Capacity() {
				if _, err := s.Take(t.Context(), []store.Request{{Key: c, Limit: l, Cost: 1}}, out[:1]); err != nil {
					t.Fatal(err)
				}
			}
			reqs := []store.Request{{Key: a, Limit: l, Cost: 2, Lease: 7}, {Key: b, Limit: l, Cost: 1, Lease: 7}, {Key: c, Limit: l, Cost: 1, Lease: 7}}
			res, err := s.Take(t.Context(), reqs, out)
			if err != nil {
				t.Fatal(err)
			}
			if k == algo.SmoothBursty || k == algo.SmoothWarmup {
				// A smooth limiter admits by making the caller wait: c
				// still admits within MaxWait.
				if !res.Allowed {
					t.Fatalf("Take = %+v %+v, want admitted", res, out)
				}
				return
			}
			if res.Allowed || out[2].Allowed || !out[0].Allowed || !out[1].Allowed {
				t.Fatalf("Take(a 2, b 1, spent c 1) = %v %+v; want refused, a and b admitted alone, c refused", res.Allowed, out)
			}
			peek := make([]algo.Decision, 3)
			if err := s.Peek(t.Context(), []store.Request{{Key: a, Limit: l, Cost: 1}, {Key: b, Limit: l, Cost: 1}, {Key: fresh, Limit: l, Cost: 1}}, peek); err != nil {
				t.Fatal(err)
			}
			if peek[0] != peek[2] || peek[1] != peek[2] {
				t.Errorf("after the refused take, Peek a = %+v, b = %+v; want both as a fresh key %+v", peek[0], peek[1], peek[2])
			}
			if out[0].Remaining != peek[2].Remaining+1 || out[1].Remaining != peek[2].Remaining+1 {
				t.Errorf("refused take reports remaining a=%d b=%d, want %d (nothing charged)", out[0].Remaining, out[1].Remaining, peek[2].Remaining+1)
			}
		})
	}
}

// TestCrossSlotConcurrent has 64 goroutines take pairs of keys of
// different slots and budgets: no key may be charged past its budget, and
// what each key holds must be exactly what the admitted takes charged it.
func TestCrossSlotConcurrent(t *testing.T) {
	url := clusterURL(t)
	s := openT(t, url)
	keys := slotKeys(t, fmt.Sprintf("xc:%s:", runID), 4)
	budgets := []int64{40, 70, 110, 160}
	limits := make([]*algo.Limit, len(keys))
	for i, b := range budgets {
		l, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: b, Period: 1000 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		limits[i] = l
	}
	var charged [4]atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 42))
			out := make([]algo.Decision, 2)
			for n := 0; n < 20; n++ {
				i := rng.IntN(len(keys))
				j := (i + 1 + rng.IntN(len(keys)-1)) % len(keys)
				ci, cj := 1+rng.Int64N(2), 1+rng.Int64N(2)
				reqs := []store.Request{{Key: keys[i], Limit: limits[i], Cost: ci}, {Key: keys[j], Limit: limits[j], Cost: cj}}
				res, err := s.Take(t.Context(), reqs, out)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					charged[i].Add(ci)
					charged[j].Add(cj)
				}
			}
		})
	}
	wg.Wait()
	out := make([]algo.Decision, 1)
	for i, key := range keys {
		if err := s.Peek(t.Context(), []store.Request{{Key: key, Limit: limits[i]}}, out); err != nil {
			t.Fatal(err)
		}
		held, c := budgets[i]-out[0].Remaining, charged[i].Load()
		if c > budgets[i] {
			t.Errorf("key %d: admitted takes charged %d over a budget of %d", i, c, budgets[i])
		}
		if held != c {
			t.Errorf("key %d: the store holds a charge of %d, the admitted takes charged %d", i, held, c)
		}
	}
}

// TestCrossSlotRollbackFailure cuts the store off between a reservation
// that was refused and its rollback: Take must report the failure, and the
// stranded charge must lapse by the algorithm's own rules within the
// documented bound, its key's TTL no later.
func TestCrossSlotRollbackFailure(t *testing.T) {
	url := clusterURL(t)
	for _, tc := range []struct {
		p     algo.Params
		bound time.Duration // when the stranded charge of cost 2 has lapsed
	}{
		{algo.Params{Algorithm: algo.FixedWindow, Limit: 5, Period: time.Minute}, time.Minute},
		{algo.Params{Algorithm: algo.SlidingLog, Limit: 5, Period: time.Minute}, time.Minute},
		{algo.Params{Algorithm: algo.SlidingWindow, Limit: 5, Period: time.Minute, SubWindows: 2}, time.Minute + 30*time.Second},
		{algo.Params{Algorithm: algo.TokenBucket, Limit: 5, Period: time.Minute}, 2 * time.Minute / 5},
		{algo.Params{Algorithm: algo.GCRA, Limit: 5, Period: time.Minute}, 2 * time.Minute / 5},
		{algo.Params{Algorithm: algo.Shaper, Limit: 5, Period: time.Minute, Burst: 4}, 2 * time.Minute / 5},
		// Cost × the stable interval, then MaxBurstSeconds (1s) to refill
		// the stored permits.
		{algo.Params{Algorithm: algo.SmoothBursty, Limit: 5, Period: time.Minute}, 2*time.Minute/5 + time.Second},
		{algo.Params{Algorithm: algo.Concurrency, Limit: 5, LeaseTTL: time.Minute}, time.Minute},
	} {
		t.Run(tc.p.Algorithm.String(), func(t *testing.T) {
			l, err := algo.Compile(tc.p)
			if err != nil {
				t.Fatal(err)
			}
			ck := new(clock)
			t0 := time.Date(2025, 3, 1, 12, 0, 10, 0, time.UTC)
			ck.us.Store(t0.UnixMicro())
			keys := slotKeys(t, fmt.Sprintf("xf:%s:%s:", runID, tc.p.Algorithm), 2)
			a, b := keys[0], keys[1]
			// b refuses: a cost over its capacity is never admitted.
			reqs := []store.Request{{Key: a, Limit: l, Cost: 2, Lease: 3}, {Key: b, Limit: l, Cost: l.Capacity() + 1, Lease: 3}}
			if tc.p.Algorithm == algo.SmoothBursty {
				// A smooth limiter admits any cost by waiting; refuse by
				// making b's ticket wait past MaxWait (0).
				checker := openT(t, url, WithTestClock(ck.Now))
				spend := []store.Request{{Key: b, Limit: l, Cost: 3}}
				if _, err := checker.Take(t.Context(), spend, make([]algo.Decision, 1)); err != nil {
					t.Fatal(err)
				}
				reqs[1].Cost = 1
			}
			s := openT(t, url, WithTestClock(ck.Now))
			// The connection dies between the reservation and its
			// rollback: the rollback never reaches Redis.
			s.beforeRollback = func() error { return errors.New("connection killed") }
			out := make([]algo.Decision, 2)
			_, err = s.Take(t.Context(), reqs, out)
			if !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("Take with the rollback cut off: error %v, want one wrapping store.ErrUnavailable", err)
			}
			if !out[0].Allowed || out[1].Allowed {
				t.Fatalf("decisions %+v: want a reserved, b refused", out)
			}
			check := openT(t, url, WithTestClock(ck.Now))
			ttl, ok := pttl(t, check, a)
			if !ok {
				t.Fatalf("the reservation of %s is not there: nothing to strand", a)
			}
			// A smooth_bursty key, whose fresh form stores no permits, is
			// kept Retain after its permits are full (algo.Params.Retain).
			if ttl > tc.bound+l.Params().Retain+time.Millisecond {
				t.Errorf("the stranded charge's key TTL is %v, over the bound %v (+ Retain %v)", ttl, tc.bound, l.Params().Retain)
			}
			// At the bound the charge has lapsed: the key decides as one
			// that took nothing at t0 — fresh, or for smooth_bursty full.
			idle := algo.State{}
			if tc.p.Algorithm == algo.SmoothBursty {
				l.Take(&idle, t0.UnixMicro(), 0)
			}
			peek := make([]algo.Decision, 1)
			want := l.Peek(&idle, t0.Add(tc.bound).UnixMicro(), 1)
			ck.us.Store(t0.Add(tc.bound).UnixMicro())
			if err := check.Peek(t.Context(), []store.Request{{Key: a, Limit: l, Cost: 1}}, peek); err != nil {
				t.Fatal(err)
			}
			if peek[0] != want {
				t.Errorf("at the bound (%v later), Peek = %+v, want an uncharged key's %+v", tc.bound, peek[0], want)
			}
		})
	}
}
