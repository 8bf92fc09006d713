package resilient_test

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/resilient"
)

// slotsPerRange is the width of the Redis store's partitions: 16384 hash
// slots in 64 ranges.
const slotsPerRange = 256

// TestClusterMasterPausedClosed pauses (SIGSTOP) one master of a real
// Redis Cluster under FailClosed. Its keys time out until their
// partition's breaker opens, then are refused by the policy without a
// store call; the keys of the other masters are decided by Redis all
// along (Allowed, not Fallback), which one breaker for the whole store
// did not do. Once the master resumes, its keys go back to Redis after
// the cool-down. The load is sequential and bounded; the pause ends
// within about two seconds, before the cluster would fail the master over
// (cluster-node-timeout 3 s), though a failover would change nothing
// here.
func TestClusterMasterPausedClosed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and pauses a Redis Cluster")
	}
	// The cause of each answer of the policy: once the breaker is open, a
	// *CircuitOpenError, given without a store call.
	var mu sync.Mutex
	var causes []error
	c, s, victim := pausableCluster(t, resilient.WithHooks(resilient.Hooks{Fallback: func(_ string, _ resilient.Policy, cause error) {
		mu.Lock()
		causes = append(causes, cause)
		mu.Unlock()
	}}))
	if c == nil {
		return
	}
	lastCause := func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(causes) == 0 {
			return nil
		}
		return causes[len(causes)-1]
	}
	// Keys of the victim, all in one slot range it owns whole (their
	// breaker opens after 5 timeouts), and keys of the other masters in
	// ranges the victim has no slot of.
	owns := func(slot int) bool { return victim.ServesSlot(slot) }
	var theirs, ours []string
	victimRange := -1
	for i := 0; len(theirs) < 3 || len(ours) < 12; i++ {
		if i > 100_000 {
			t.Fatalf("found %d keys of the victim and %d others", len(theirs), len(ours))
		}
		k := "e2e:" + strconv.Itoa(i)
		r := redis.Slot(k) / slotsPerRange
		lo, hi := r*slotsPerRange, r*slotsPerRange+slotsPerRange-1
		switch {
		case owns(lo) && owns(hi) && (victimRange < 0 || victimRange == r):
			if len(theirs) < 3 {
				victimRange = r
				theirs = append(theirs, k)
			}
		case !owns(lo) && !owns(hi) && !owns((lo+hi)/2):
			if len(ours) < 12 {
				ours = append(ours, k)
			}
		}
	}
	srv := c.Node(victim.Addr)
	if srv == nil {
		t.Fatalf("no node at %s", victim.Addr)
	}
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Hour})
	decide := func(k string) store.Result {
		t.Helper()
		res, err := s.Take(t.Context(), []store.Request{{Key: k, Limit: l, Cost: 1}}, make([]algo.Decision, 1))
		if err != nil {
			t.Fatalf("Take(%s): %v", k, err)
		}
		return res
	}
	for _, k := range append(append([]string(nil), theirs...), ours...) {
		if res := decide(k); !res.Allowed || res.Fallback {
			t.Fatalf("%s with the cluster healthy: %+v", k, res)
		}
	}

	pause(t, srv)
	defer srv.Resume()
	paused := time.Now()
	// The victim's keys fail (time out, mostly) until their breaker opens.
	for i := 0; s.Breaker() != resilient.Open; i++ {
		if i >= 10 {
			t.Fatalf("the paused master's breaker is not open after %d failures", i)
		}
		if res := decide(theirs[i%len(theirs)]); res.Allowed || !res.Fallback {
			t.Fatalf("take %d of a paused master's key: %+v, want the closed policy's refusal", i, res)
		}
	}
	for round := range 3 {
		for _, k := range ours {
			if res := decide(k); !res.Allowed || res.Fallback {
				t.Fatalf("round %d: %s of a live master, with the paused master's breaker open: %+v (cause %v), want Redis' admission", round, k, res, lastCause())
			}
		}
		for _, k := range theirs {
			res := decide(k)
			if res.Allowed || !res.Fallback {
				t.Fatalf("round %d: %s of the paused master: %+v, want the closed policy's refusal", round, k, res)
			}
			// Without a store call: refused for the open breaker, not
			// after a timeout. (It was timed against 100 ms, which a
			// loaded machine's scheduling alone can pass.)
			if coe := (*resilient.CircuitOpenError)(nil); !errors.As(lastCause(), &coe) {
				t.Fatalf("round %d: %s of the paused master refused for %v, want its open breaker (a *CircuitOpenError)", round, k, lastCause())
			}
		}
	}
	t.Logf("checks done %v after the pause", time.Since(paused))
	if time.Since(paused) > cooldown {
		t.Fatalf("the checks took %v, longer than the cool-down", time.Since(paused))
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(cooldown + 10*time.Second)
	for {
		if res := decide(theirs[0]); res.Allowed && !res.Fallback {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the resumed master's keys are still answered by the policy")
		}
		time.Sleep(50 * time.Millisecond) // waiting for a real process and the cool-down
	}
}

// TestMemcachedServerDeadClosed kills one memcached of a ring of two under
// FailClosed: the keys of the dead server are refused by the policy once
// its breaker opens, and the keys of the live one are still decided by
// memcached.
func TestMemcachedServerDeadClosed(t *testing.T) {
	a, b := testserver.NewMemcached(t), testserver.NewMemcached(t)
	if a == nil || b == nil {
		t.Skip("no memcached")
	}
	inner, err := memcached.Open("memcached://"+a.Addr+","+b.Addr, memcached.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s, err := resilient.New(inner, resilient.WithPolicy(resilient.FailClosed),
		resilient.WithTimeout(time.Second), resilient.WithBreaker(5, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var onA, onB []string
	for i := 0; len(onA) < 5 || len(onB) < 5; i++ {
		if i > 10_000 {
			t.Fatal("the ring put every key on one server")
		}
		k := "mc-e2e:" + strconv.Itoa(i)
		if inner.ServerFor(k) == b.Addr {
			onB = append(onB, k)
		} else {
			onA = append(onA, k)
		}
	}
	l := compile(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 1000, Period: time.Hour})
	decide := func(k string) store.Result {
		t.Helper()
		res, err := s.Take(t.Context(), []store.Request{{Key: k, Limit: l, Cost: 1}}, make([]algo.Decision, 1))
		if err != nil {
			t.Fatalf("Take(%s): %v", k, err)
		}
		return res
	}
	for _, k := range append(append([]string(nil), onA...), onB...) {
		if res := decide(k); !res.Allowed || res.Fallback {
			t.Fatalf("%s with both servers up: %+v", k, res)
		}
	}
	if err := b.Kill(); err != nil {
		t.Fatal(err)
	}
	for round := range 4 {
		for _, k := range onB {
			if res := decide(k); res.Allowed || !res.Fallback {
				t.Fatalf("round %d: %s of the dead server: %+v, want the closed policy's refusal", round, k, res)
			}
		}
		for _, k := range onA {
			if res := decide(k); !res.Allowed || res.Fallback {
				t.Fatalf("round %d: %s of the live server, after %d failures on the dead one: %+v, want memcached's admission",
					round, k, (round+1)*len(onB), res)
			}
		}
	}
	if s.Breaker() != resilient.Open {
		t.Fatalf("breaker %v after 20 failures on the dead server, want open", s.Breaker())
	}
}

// TestClusterSharedKeyMasterPaused is the review's scenario on a real
// Redis Cluster: every request takes a shared key (a hierarchy's global
// bucket, on a live master) and its user's key, in another slot, as one
// Take; one master is paused (SIGSTOP). The requests of the paused
// master's users time out until its partition's breaker opens, and are
// then refused by the policy without a store call; the shared key's
// breaker stays closed all along, so the users of the live masters are
// decided by Redis, before and after. Before the stores named the failed
// partitions, each timed-out request counted against the shared key's
// partition too and opened it: every user was refused.
func TestClusterSharedKeyMasterPaused(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and pauses a Redis Cluster")
	}
	c, s, victim := pausableCluster(t)
	if c == nil {
		return
	}
	owns := func(slot int) bool { return victim.ServesSlot(slot) }
	ownsNone := func(r int) bool {
		lo, hi := r*slotsPerRange, r*slotsPerRange+slotsPerRange-1
		return !owns(lo) && !owns(hi) && !owns((lo+hi)/2)
	}
	// The shared key and the live users' keys in ranges the victim has no
	// slot of, each user in a slot other than the shared key's; the
	// victim's users in one range it owns whole.
	var global string
	var theirs, ours []string
	victimRange := -1
	for i := 0; global == "" || len(theirs) < 3 || len(ours) < 6; i++ {
		if i > 100_000 {
			t.Fatalf("found %d keys of the victim and %d others", len(theirs), len(ours))
		}
		k := "e2e-shared:" + strconv.Itoa(i)
		r := redis.Slot(k) / slotsPerRange
		lo, hi := r*slotsPerRange, r*slotsPerRange+slotsPerRange-1
		switch {
		case global == "" && ownsNone(r):
			global = k
		case owns(lo) && owns(hi) && (victimRange < 0 || victimRange == r) && len(theirs) < 3:
			victimRange = r
			theirs = append(theirs, k)
		case ownsNone(r) && len(ours) < 6 && global != "" && redis.Slot(k) != redis.Slot(global):
			ours = append(ours, k)
		}
	}
	globalRange := redis.Slot(global) / slotsPerRange
	srv := c.Node(victim.Addr)
	if srv == nil {
		t.Fatalf("no node at %s", victim.Addr)
	}
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 100_000, Period: time.Hour})
	decide := func(keys ...string) store.Result {
		t.Helper()
		reqs := make([]store.Request, len(keys))
		for i, k := range keys {
			reqs[i] = store.Request{Key: k, Limit: l, Cost: 1}
		}
		res, err := s.Take(t.Context(), reqs, make([]algo.Decision, len(keys)))
		if err != nil {
			t.Fatalf("Take(%v): %v", keys, err)
		}
		return res
	}
	for _, k := range append(append([]string(nil), theirs...), ours...) {
		if res := decide(global, k); !res.Allowed || res.Fallback {
			t.Fatalf("%s with the cluster healthy: %+v", k, res)
		}
	}

	pause(t, srv)
	defer srv.Resume()
	paused := time.Now()
	// Requests of the victim's users, the shared key first or second,
	// between requests of the live masters' users, until the victim's
	// breaker opens (its failures are counted when Redis gives up, at the
	// deadline).
	for i := 0; s.Breakers()[victimRange] != resilient.Open; i++ {
		if i >= 40 {
			t.Fatalf("the paused master's breaker is not open after %d requests of its users; breakers %v", i, s.Breakers())
		}
		keys := []string{global, theirs[i%len(theirs)]}
		if i%2 == 1 {
			keys[0], keys[1] = keys[1], keys[0]
		}
		if res := decide(keys...); res.Allowed || !res.Fallback {
			t.Fatalf("request %d of a paused master's user: %+v, want the closed policy's refusal", i, res)
		}
		if res := decide(global, ours[i%len(ours)]); !res.Allowed || res.Fallback {
			t.Fatalf("request %d of a live master's user, breakers %v: %+v, want Redis' admission", i, s.Breakers(), res)
		}
		if st := s.Breakers()[globalRange]; st != resilient.Closed {
			t.Fatalf("the shared key's breaker is %v after %d requests of the paused master's users", st, i+1)
		}
	}
	t.Logf("the paused master's breaker opened %v after the pause", time.Since(paused))
	for round := range 1 {
		for _, k := range ours {
			if res := decide(global, k); !res.Allowed || res.Fallback {
				t.Fatalf("round %d: %s of a live master with the shared key, the paused master's breaker open: %+v, want Redis' admission", round, k, res)
			}
		}
		for _, k := range theirs {
			if res := decide(global, k); res.Allowed || !res.Fallback {
				t.Fatalf("round %d: %s of the paused master: %+v, want the closed policy's refusal", round, k, res)
			}
		}
	}
	time.Sleep(300 * time.Millisecond) // the last late answers are counted
	if st := s.Breakers()[globalRange]; st != resilient.Closed {
		t.Fatalf("the shared key's breaker is %v, want closed", st)
	}
	t.Logf("checks done %v after the pause", time.Since(paused))
	if time.Since(paused) > cooldown {
		t.Fatalf("the checks took %v, longer than the cool-down", time.Since(paused))
	}
}

// cooldown is the breakers' cool-down in the Cluster tests: it outlasts
// the checks made while a master is paused (5 timeouts of 300 ms before
// the breaker opens, then some 40 calls of live masters).
const cooldown = 4 * time.Second

// pausableCluster starts a Redis Cluster (nil when there is none to start)
// and returns it, a FailClosed resilient store on it — a timeout long
// enough for a healthy call under the race detector on a busy machine,
// short enough to trip within a few hundred ms, 5 failures, cooldown —
// closed at the test's end, and a master that serves slots, to pause.
func pausableCluster(t *testing.T, opts ...resilient.Option) (*testserver.Cluster, *resilient.Store, *testserver.ClusterNode) {
	t.Helper()
	c := testserver.NewRedisCluster(t)
	if c == nil {
		return nil, nil, nil
	}
	// The store's default batching: a call to the paused master keeps its
	// batch's place until the store's own timeout (2 s here), well after
	// resilient gave up on it (300 ms), but only in the batcher of its
	// range of 256 slots; the other masters' ranges batch apart
	// (store/redis TestClusterHungMasterHoldsUpItsRangesOnly).
	inner, err := redis.Open("redis-cluster://"+strings.Join(c.Addrs(), ","), redis.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// 300 ms: a live master's call past 150 ms on CI's loaded machine
	// was answered by the policy, failing the tests as if its partition's
	// breaker were the paused master's.
	s, err := resilient.New(inner, append([]resilient.Option{resilient.WithPolicy(resilient.FailClosed),
		resilient.WithTimeout(300 * time.Millisecond), resilient.WithBreaker(5, cooldown)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	nodes, err := c.ClusterNodes()
	if err != nil {
		t.Fatal(err)
	}
	for i := range nodes {
		if nodes[i].IsMaster() && len(nodes[i].Slots) > 0 {
			return c, s, &nodes[i]
		}
	}
	t.Fatal("no master in CLUSTER NODES")
	return nil, nil, nil
}
