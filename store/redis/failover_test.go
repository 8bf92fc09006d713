package redis

import (
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
)

// TestClusterFailover kills (SIGKILL) the master of some keys under a
// bounded load. The store must keep deciding once the replica is promoted
// (errors are allowed only during the failover window, and are reported),
// and no key may admit past its budget. The keys start near their budgets
// so that their last units are contested across the failover.
func TestClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a cluster master")
	}
	c := testserver.NewRedisCluster(t)
	if c == nil {
		return
	}
	s := openT(t, "redis-cluster://"+strings.Join(c.Addrs(), ","), WithTimeout(time.Second))
	const (
		budget     = 300
		headroom   = 40 // units left per key when the load starts
		goroutines = 16
		maxOps     = 200_000
		maxTime    = 60 * time.Second
	)
	limits := map[algo.Kind]*algo.Limit{}
	for _, k := range []algo.Kind{algo.FixedWindow, algo.TokenBucket, algo.SlidingLog, algo.Concurrency} {
		l, err := algo.Compile(withLimit(exactParams(k), budget))
		if err != nil {
			t.Fatal(err)
		}
		limits[k] = l
	}
	type keyState struct {
		name     string
		limit    *algo.Limit
		admitted atomic.Int64
		victim   bool
	}
	var keys []*keyState
	for i, name := range slotKeys(t, fmt.Sprintf("fo:%s:", runID), 24) {
		kinds := []algo.Kind{algo.FixedWindow, algo.TokenBucket, algo.SlidingLog, algo.Concurrency}
		keys = append(keys, &keyState{name: name, limit: limits[kinds[i%len(kinds)]]})
	}
	victim, err := c.MasterFor(keys[0].name)
	if err != nil {
		t.Fatal(err)
	}
	victims := 0
	for _, k := range keys {
		m, err := c.MasterFor(k.name)
		if err != nil {
			t.Fatal(err)
		}
		if k.victim = m == victim; k.victim {
			victims++
		}
	}
	// Spend all but headroom units of every key.
	out := make([]algo.Decision, 1)
	for _, k := range keys {
		res, err := s.Take(t.Context(), []store.Request{{Key: k.name, Limit: k.limit, Cost: budget - headroom}}, out)
		if err != nil || !res.Allowed {
			t.Fatalf("pre-spend %s: %v %+v", k.name, err, out[0])
		}
		k.admitted.Store(budget - headroom)
	}

	var (
		stop       atomic.Bool
		ops        atomic.Int64
		mu         sync.Mutex
		errTimes   []time.Time
		lastErr    error
		afterHeal  atomic.Int64 // decisions on victim keys after the cluster healed
		healed     atomic.Bool
		wg         sync.WaitGroup
		start      = time.Now()
		leaseCount atomic.Uint64
	)
	for g := 0; g < goroutines; g++ {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			out := make([]algo.Decision, 1)
			for !stop.Load() && ops.Add(1) <= maxOps && time.Since(start) < maxTime {
				k := keys[rng.IntN(len(keys))]
				res, err := s.Take(t.Context(), []store.Request{{Key: k.name, Limit: k.limit, Cost: 1, Lease: leaseCount.Add(1)}}, out)
				if err != nil {
					mu.Lock()
					errTimes = append(errTimes, time.Now())
					lastErr = err
					mu.Unlock()
					time.Sleep(10 * time.Millisecond) // back off while the cluster fails over
					continue
				}
				if res.Allowed {
					k.admitted.Add(1)
				}
				if k.victim && healed.Load() {
					afterHeal.Add(1)
				}
				time.Sleep(time.Millisecond) // pace the load
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	killAt := time.Now()
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(45 * time.Second); err != nil {
		stop.Store(true)
		wg.Wait()
		t.Fatalf("the cluster did not fail over: %v", err)
	}
	healAt := time.Now()
	healed.Store(true)
	// Keep the load on until the victim's keys have been decided again
	// (bounded).
	for deadline := time.Now().Add(15 * time.Second); afterHeal.Load() < 50 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()

	t.Logf("killed master %s (%d of %d keys) %v into the load; cluster healthy %v later; %d operations",
		victim.Addr, victims, len(keys), killAt.Sub(start).Round(time.Millisecond), healAt.Sub(killAt).Round(time.Millisecond), ops.Load())
	if n := len(errTimes); n > 0 {
		t.Logf("%d errors from %v to %v after the kill; last: %v", n,
			errTimes[0].Sub(killAt).Round(time.Millisecond), errTimes[n-1].Sub(killAt).Round(time.Millisecond), lastErr)
		grace := 5 * time.Second
		for _, e := range errTimes {
			if e.Before(killAt) || e.After(healAt.Add(grace)) {
				t.Errorf("an error %v after the kill, outside the failover window (healthy at %v, + %v grace)", e.Sub(killAt), healAt.Sub(killAt), grace)
				break
			}
		}
	}
	if afterHeal.Load() == 0 {
		t.Errorf("no decision on the failed master's keys after the replica was promoted")
	}
	for _, k := range keys {
		if got := k.admitted.Load(); got > budget {
			t.Errorf("key %s (%s, victim %v): admitted %d over a budget of %d", k.name, k.limit, k.victim, got, budget)
		}
	}
}

// withLimit returns p with another budget.
func withLimit(p algo.Params, limit int64) algo.Params {
	p.Limit = limit
	if p.Algorithm == algo.Shaper {
		p.Burst = limit - 1
	}
	return p
}

// TestSentinelFailover kills the master of a Sentinel set: once the
// sentinels promote the replica, the store (which asks the sentinels where
// the master is) decides again, on the state the replica received.
func TestSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a master")
	}
	set := testserver.NewRedisSentinel(t)
	if set == nil {
		return
	}
	s := openT(t, "redis-sentinel://"+set.MasterName+"@"+strings.Join(set.Addrs(), ","), WithTimeout(time.Second))
	l, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 50, Period: 1000 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	key := "sentinel:" + runID
	out := make([]algo.Decision, 1)
	take := func() error {
		_, err := s.Take(t.Context(), []store.Request{{Key: key, Limit: l, Cost: 1}}, out)
		return err
	}
	for i := 0; i < 20; i++ {
		if err := take(); err != nil || !out[0].Allowed {
			t.Fatalf("take %d before the failover: %+v %v", i, out[0], err)
		}
	}
	// Let the replica catch up before the master dies (synchronising with
	// replication, not testing time).
	want, err := testserver.RedisDo(set.Master.Addr, time.Second, "GET", key)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		if got, _ := testserver.RedisDo(set.Replica.Addr, time.Second, "GET", key); got == want {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	killAt := time.Now()
	if err := set.Master.Kill(); err != nil {
		t.Fatal(err)
	}
	errs, deadline := 0, time.Now().Add(60*time.Second)
	for {
		err := take()
		if err == nil {
			break
		}
		errs++
		if time.Now().After(deadline) {
			t.Fatalf("no decision %v after the master was killed (%d errors, last %v)", time.Since(killAt), errs, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("decisions resumed %v after the kill, %d errors meanwhile", time.Since(killAt).Round(time.Millisecond), errs)
	if !out[0].Allowed || out[0].Remaining != 50-21 {
		t.Errorf("first take after the failover = %+v, want admitted with %d remaining (the 20 earlier units kept)", out[0], 50-21)
	}
	if addr, err := set.MasterAddr(); err != nil || addr == set.Master.Addr {
		t.Errorf("the sentinels' master is %s (%v); want the promoted replica", addr, err)
	}
}
