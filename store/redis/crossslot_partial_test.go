package redis

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
)

// TestCrossSlotRefusalBesideDeadNode: on a Cluster, a Take over a key
// over its limit (refusing) on a live node and a key of a dead node is
// refused (Result.Partial), whichever slot comes first, with the dead
// node's failure as its error, naming its partition only: the refusal
// stands, so that store/resilient does not answer it as an outage (and
// admit it, failing open). The dead key's decision is the zero Decision
// (undecided), the refusing key's its refusal, the admitted live key's
// what remains with nothing charged, and nothing is charged. Before, each
// order failed as an outage; with the dead slot first, the others were
// not reached. Without a refusal it is still an outage, the live key
// looked at (not skipped). A roll-back that fails beside a refusal
// leaves it standing too.
func TestCrossSlotRefusalBesideDeadNode(t *testing.T) {
	seeds := testserver.RedisCluster(t)
	f := new(testserver.DeadNodes)
	s := openT(t, "redis-cluster://"+strings.Join(seeds, ","), dialThrough(f), WithTimeout(time.Second))
	spent, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	l, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Period: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	prefix := "csd:" + runKey() + ":"
	dead := prefix + "dead"
	deadAddr := testserver.ClusterMaster(t, seeds, dead)
	pd := s.Partition(dead)
	var keys []string // refusing, live, live2: on live nodes, in partitions of their own
	for i := 0; len(keys) < 3; i++ {
		if i > 100_000 {
			t.Fatal("no keys of live nodes found")
		}
		k := prefix + strconv.Itoa(i)
		if p := s.Partition(k); p != pd && testserver.ClusterMaster(t, seeds, k) != deadAddr &&
			!slices.ContainsFunc(keys, func(o string) bool { return s.Partition(o) == p }) {
			keys = append(keys, k)
		}
	}
	refusing, live, live2 := keys[0], keys[1], keys[2]
	if res, err := s.Take(t.Context(), []store.Request{{Key: refusing, Limit: spent, Cost: 1}}, make([]algo.Decision, 1)); err != nil || !res.Allowed {
		t.Fatalf("spend %s: %+v, %v", refusing, res, err)
	}
	f.Down(deadAddr)
	defer f.Up(deadAddr)

	R := store.Request{Key: refusing, Limit: spent, Cost: 1}
	L := store.Request{Key: live, Limit: l, Cost: 1}
	D := store.Request{Key: dead, Limit: l, Cost: 1}
	for _, tc := range []struct {
		name string
		reqs []store.Request
	}{
		{"live first, then refusing and dead", []store.Request{L, R, D}},
		{"refusing first", []store.Request{R, L, D}},
		{"dead first", []store.Request{D, R, L}},
	} {
		out := make([]algo.Decision, len(tc.reqs))
		res, err := s.Take(t.Context(), tc.reqs, out)
		if res.Allowed || !res.Partial {
			t.Errorf("%s: %+v, %v; want refused, Partial", tc.name, res, err)
		}
		if failed, skipped := placed(t, err); !slices.Equal(failed, []int{pd}) || skipped != nil {
			t.Errorf("%s: failed %v, skipped %v; want failed [%d] (the dead node's), none skipped", tc.name, failed, skipped, pd)
		}
		for i, r := range tc.reqs {
			switch r.Key {
			case dead:
				if out[i] != (algo.Decision{}) {
					t.Errorf("%s: the dead key's decision %+v, want the zero Decision (undecided)", tc.name, out[i])
				}
			case refusing:
				if out[i].Allowed || out[i].Limit != 1 || out[i].Remaining != 0 || out[i].RetryAfter <= 0 {
					t.Errorf("%s: the refusing key's decision %+v, want its refusal", tc.name, out[i])
				}
			case live:
				if !out[i].Allowed || out[i].Limit != 100 || out[i].Remaining != 100 {
					t.Errorf("%s: the live key's decision %+v, want it would pass, nothing charged (100 left)", tc.name, out[i])
				}
			}
		}
	}
	out := make([]algo.Decision, 2)
	res, err := s.Take(t.Context(), []store.Request{D, L}, out)
	if res.Partial || err == nil {
		t.Errorf("Take(dead, live), nothing over its limit: %+v, %v; want an outage", res, err)
	} else if failed, skipped := placed(t, err); !slices.Equal(failed, []int{pd}) || skipped != nil {
		t.Errorf("Take(dead, live): failed %v, skipped %v; want failed [%d], the live key looked at", failed, skipped, pd)
	}
	peek := make([]algo.Decision, 2)
	if err := s.Peek(t.Context(), []store.Request{{Key: live, Limit: l}, {Key: refusing, Limit: spent}}, peek); err != nil || peek[0].Remaining != 100 || peek[1].Remaining != 0 {
		t.Fatalf("Peek(live, refusing) = %+v, %v: want nothing charged (100 and 0 left)", peek, err)
	}

	s.beforeRollback = func() error { return errors.New("connection killed") }
	L2 := store.Request{Key: live2, Limit: l, Cost: 1}
	out = make([]algo.Decision, 2)
	res, err = s.Take(t.Context(), []store.Request{L2, R}, out)
	if res.Allowed || !res.Partial {
		t.Errorf("Take(live, refusing), the roll-back failing: %+v, %v; want refused, Partial", res, err)
	}
	if failed, _ := placed(t, err); !slices.Equal(failed, []int{s.Partition(live2)}) {
		t.Errorf("the roll-back failing: failed %v, want [%d] (%s's roll-back)", failed, s.Partition(live2), live2)
	}
	if !out[0].Allowed || out[0].Remaining != 99 || out[1].Allowed {
		t.Errorf("the roll-back failing: decisions %+v; want %s charged (99 left: the charge stays), %s refused", out, live2, refusing)
	}
}

// TestCrossSlotFailedFirstLookWithinTimeout: a cross-slot Take whose first
// slot's master is paused (SIGSTOP, a private Cluster) fails within about
// the store's timeout, not two: the look at the other slots for a refusal
// (failedFirst) shares the timeout with the first slot's reservation, and
// the first took it all, so a slot of the same paused master among them
// does not hold the Take for a second timeout. They are named skipped, not
// failed (not reached in time).
func TestCrossSlotFailedFirstLookWithinTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and pauses a Redis Cluster")
	}
	c := testserver.NewRedisCluster(t)
	if c == nil {
		return
	}
	const timeout = time.Second
	s := openT(t, "redis-cluster://"+strings.Join(c.Addrs(), ","), WithTimeout(timeout))
	nodes, err := c.ClusterNodes()
	if err != nil {
		t.Fatal(err)
	}
	var victim *testserver.ClusterNode
	for i := range nodes {
		if nodes[i].IsMaster() && len(nodes[i].Slots) > 0 {
			victim = &nodes[i]
			break
		}
	}
	if victim == nil {
		t.Fatal("no master in CLUSTER NODES")
	}
	l, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var hung []string // two keys of the victim, in two partitions
	var live string
	for i := 0; len(hung) < 2 || live == ""; i++ {
		if i > 100_000 {
			t.Fatal("keys not found")
		}
		k := "fl:" + runKey() + ":" + strconv.Itoa(i)
		switch {
		case victim.ServesSlot(Slot(k)) && len(hung) < 2 && (len(hung) == 0 || s.Partition(hung[0]) != s.Partition(k)):
			hung = append(hung, k)
		case !victim.ServesSlot(Slot(k)) && live == "":
			live = k
		}
	}
	srv := c.Node(victim.Addr)
	if srv == nil {
		t.Fatalf("no node at %s", victim.Addr)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer srv.Resume()
	reqs := []store.Request{{Key: hung[0], Limit: l, Cost: 1}, {Key: live, Limit: l, Cost: 1}, {Key: hung[1], Limit: l, Cost: 1}}
	start := time.Now()
	_, err = s.Take(context.Background(), reqs, make([]algo.Decision, 3))
	took := time.Since(start)
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if took > timeout*3/2 {
		t.Errorf("Take with its first slot's master paused took %v, want about the timeout %v", took, timeout)
	}
	failed, skipped := placed(t, err)
	if !slices.Equal(failed, []int{s.Partition(hung[0])}) || !slices.Contains(skipped, s.Partition(hung[1])) {
		t.Errorf("failed %v, skipped %v; want failed [%d], %d skipped", failed, skipped, s.Partition(hung[0]), s.Partition(hung[1]))
	}
}
