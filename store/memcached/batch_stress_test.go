package memcached_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
)

// stressKey is one key of a multi-key stress run with its limit.
type stressKey struct {
	key   string
	l     *algo.Limit
	admit atomic.Int64 // units admitted by Takes that returned Allowed
}

// stressLimits are limits whose budget, at one fixed instant, is exactly
// budget units: nothing refills or expires during a run.
func stressLimits(t testing.TB, budget int64) []*algo.Limit {
	h := time.Hour
	return []*algo.Limit{
		compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: budget, Period: h}),
		compile(t, algo.Params{Algorithm: algo.SlidingWindow, Limit: budget, Period: h, SubWindows: 4}),
		compile(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: h, Burst: budget}),
		compile(t, algo.Params{Algorithm: algo.GCRA, Limit: 1, Period: h, Burst: budget}),
		compile(t, algo.Params{Algorithm: algo.Concurrency, Limit: budget, LeaseTTL: h}),
		compile(t, algo.Params{Algorithm: algo.SlidingLog, Limit: budget, Period: h}),
	}
}

// stressRun drives goroutines over stores taking random sets of keys
// (duplicates included, one to six requests, costs 1 or 2) until attempts
// run out, and counts what each key admitted. It returns the errors met.
func stressRun(t *testing.T, stores []*memcached.Store, keys []*stressKey, goroutines, attempts int, ctxFor func() (context.Context, context.CancelFunc)) (errs []error, admitted, refused int64) {
	var mu sync.Mutex
	var next atomic.Int64
	var nAdm, nRef atomic.Int64
	var wg sync.WaitGroup
	var lease atomic.Uint64
	for g := range goroutines {
		s := stores[g%len(stores)]
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for next.Add(1) <= int64(attempts) {
				n := 1 + rng.IntN(6)
				reqs := make([]store.Request, n)
				picked := make([]*stressKey, n)
				for i := range reqs {
					k := keys[rng.IntN(len(keys))]
					picked[i] = k
					reqs[i] = store.Request{Key: k.key, Limit: k.l, Cost: 1 + int64(rng.IntN(2)), Lease: lease.Add(1)}
				}
				out := make([]algo.Decision, n)
				c, cancel := ctxFor()
				res, err := s.Take(c, reqs, out)
				cancel()
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					continue
				}
				if res.Allowed {
					nAdm.Add(1)
					for i, k := range picked {
						k.admit.Add(reqs[i].Cost)
						if !out[i].Allowed {
							t.Errorf("admitted Take with request %d refused: %+v", i, out[i])
						}
					}
					continue
				}
				nRef.Add(1)
				refusing, dup := false, false
				for i := range out {
					refusing = refusing || !out[i].Allowed
					for j := range i {
						dup = dup || reqs[j].Key == reqs[i].Key
					}
				}
				if !refusing && !dup { // with a key twice, each alone may pass (storetest.Reference too)
					t.Errorf("refused Take of %d requests names none refused: %+v", n, out)
				}
			}
		})
	}
	wg.Wait()
	return errs, nAdm.Load(), nRef.Load()
}

// stressCheck compares what each key holds with what it admitted: never
// more admitted than the budget, and (exact) nothing more held either.
func stressCheck(t *testing.T, s *memcached.Store, keys []*stressKey, budget int64, exact bool) {
	t.Helper()
	c := ctx(t)
	out := make([]algo.Decision, 1)
	for _, k := range keys {
		if err := s.Peek(c, []store.Request{{Key: k.key, Limit: k.l}}, out); err != nil {
			t.Fatalf("Peek %s: %v", k.key, err)
		}
		held := budget - out[0].Remaining
		adm := k.admit.Load()
		if adm > budget {
			t.Errorf("%s (%s): admitted %d units, budget %d", k.key, k.l.Algorithm(), adm, budget)
		}
		if held < adm {
			t.Errorf("%s (%s): holds %d units, %d admitted: under-counted (over-admission)", k.key, k.l.Algorithm(), held, adm)
		} else if exact && held != adm {
			t.Errorf("%s (%s): holds %d units, %d admitted: refused or failed Takes left units charged", k.key, k.l.Algorithm(), held, adm)
		}
	}
}

func stressKeys(t *testing.T, budget int64, perAlgo int) []*stressKey {
	var keys []*stressKey
	for _, l := range stressLimits(t, budget) {
		for j := range perAlgo {
			keys = append(keys, &stressKey{key: uniqueKey(t, fmt.Sprintf("%s%d", l.Algorithm(), j)), l: l})
		}
	}
	return keys
}

// TestBatchStressExact: several store instances and many goroutines take
// overlapping random sets of keys of every kind at one instant; no key
// admits more than its budget, and every key holds exactly what the
// admitted Takes charged (refusals and contention left nothing).
func TestBatchStressExact(t *testing.T) {
	var addrs []string
	for range 3 {
		addrs = append(addrs, testserver.NewMemcached(t).Addr)
	}
	for _, tc := range []struct {
		name string
		url  string
	}{{"one server", addr}, {"three servers", strings.Join(addrs, ",")}} {
		t.Run(tc.name, func(t *testing.T) {
			const budget = 150
			clock := newClock(t0.Add(30 * time.Minute))
			var stores []*memcached.Store
			for range 3 {
				s, err := memcached.Open("memcached://"+tc.url, memcached.WithClock(clock.Now), memcached.WithTimeout(5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				stores = append(stores, s)
			}
			keys := stressKeys(t, budget, 2)
			errs, adm, ref := stressRun(t, stores, keys, 24, 3000, func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), time.Minute)
			})
			for _, err := range errs {
				if !errors.Is(err, store.ErrContention) {
					t.Errorf("Take: %v", err)
				}
			}
			t.Logf("admitted %d, refused %d, errors %d", adm, ref, len(errs))
			stressCheck(t, stores[0], keys, budget, true)
		})
	}
}

// TestBatchStressFaults: the same through proxies that cut connections in
// the middle of the servers' replies. Failed Takes may leave units charged
// (their outcome on the server is unknown), but no key ever admits more
// than its budget or holds less than it admitted, every failure is
// ErrUnavailable placed on the keys' servers, and once the faults stop the
// pooled connections decide exactly again (none went back to the pool out
// of step).
func TestBatchStressFaults(t *testing.T) {
	var proxies []*faultProxy
	var addrs []string
	for range 3 {
		p := newFaultProxy(t, testserver.NewMemcached(t).Addr)
		proxies = append(proxies, p)
		addrs = append(addrs, p.Addr())
	}
	const budget = 150
	clock := newClock(t0.Add(30 * time.Minute))
	var stores []*memcached.Store
	for range 3 {
		s, err := memcached.Open("memcached://"+strings.Join(addrs, ","), memcached.WithClock(clock.Now), memcached.WithTimeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stores = append(stores, s)
	}
	for _, p := range proxies {
		p.cutPct.Store(4)
	}
	keys := stressKeys(t, budget, 2)
	errs, adm, ref := stressRun(t, stores, keys, 24, 3000, func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), time.Minute)
	})
	var cuts int64
	for _, p := range proxies {
		cuts += p.cuts.Load()
		p.cutPct.Store(0)
	}
	var placedErrs int
	for _, err := range errs {
		if !errors.Is(err, store.ErrUnavailable) && !errors.Is(err, store.ErrContention) {
			t.Errorf("Take: %v, want ErrUnavailable", err)
		}
		var pe *store.PartitionError
		if errors.As(err, &pe) {
			placedErrs++
			if len(pe.Failed) == 0 || len(pe.Skipped) != 0 {
				t.Errorf("Take: %v placed as failed %v, skipped %v", err, pe.Failed, pe.Skipped)
			}
		}
	}
	t.Logf("%d cuts: admitted %d, refused %d, errors %d (%d placed)", cuts, adm, ref, len(errs), placedErrs)
	stressCheck(t, stores[0], keys, budget, false)
	// The faults are over: fresh keys decide exactly on the same pools.
	keys = stressKeys(t, budget, 2)
	errs, adm, ref = stressRun(t, stores, keys, 24, 2000, func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), time.Minute)
	})
	for _, err := range errs {
		if !errors.Is(err, store.ErrContention) {
			t.Errorf("Take after the faults: %v", err)
		}
	}
	t.Logf("after the faults: admitted %d, refused %d, errors %d", adm, ref, len(errs))
	stressCheck(t, stores[0], keys, budget, true)
}

// TestBatchStressKill: one server of three is killed while many
// goroutines take random sets of keys. Every failure names the dead
// server alone as failed (or is a plain error when the Take had only its
// keys), and the keys of the live servers never admit more than their
// budget nor hold less than they admitted.
func TestBatchStressKill(t *testing.T) {
	var srvs []*testserver.Server
	var addrs []string
	for range 3 {
		srv := testserver.NewMemcached(t)
		srvs = append(srvs, srv)
		addrs = append(addrs, srv.Addr)
	}
	const budget = 150
	clock := newClock(t0.Add(30 * time.Minute))
	var stores []*memcached.Store
	for range 3 {
		s, err := memcached.Open("memcached://"+strings.Join(addrs, ","), memcached.WithClock(clock.Now), memcached.WithTimeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stores = append(stores, s)
	}
	keys := stressKeys(t, budget, 3)
	const dead = 1
	var killed atomic.Bool
	var runs atomic.Int64
	errs, adm, ref := stressRun(t, stores, keys, 24, 3000, func() (context.Context, context.CancelFunc) {
		if runs.Add(1) == 600 {
			if err := srvs[dead].Kill(); err != nil {
				t.Error(err)
			}
			killed.Store(true)
		}
		return context.WithTimeout(context.Background(), time.Minute)
	})
	s := stores[0]
	for _, err := range errs {
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("Take: %v, want ErrUnavailable", err)
		}
		var pe *store.PartitionError
		if errors.As(err, &pe) && (len(pe.Failed) != 1 || pe.Failed[0] != dead || len(pe.Skipped) != 0) {
			t.Errorf("Take: %v placed as failed %v, skipped %v; want failed [%d]", err, pe.Failed, pe.Skipped, dead)
		}
	}
	t.Logf("admitted %d, refused %d, errors %d", adm, ref, len(errs))
	var live []*stressKey
	for _, k := range keys {
		if s.Partition(k.key) != dead {
			live = append(live, k)
		}
	}
	stressCheck(t, s, live, budget, true)
}
