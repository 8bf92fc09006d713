package redis

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
)

// partitionKeys returns n keys under prefix in n distinct partitions
// (ranges of 256 slots) of a Cluster.
func partitionKeys(prefix string, n int) []string {
	seen := map[int]bool{}
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("%s{%d}", prefix, i)
		if p := Slot(k) / slotsPerPartition; !seen[p] {
			seen[p] = true
			keys = append(keys, k)
		}
	}
	return keys
}

// placed returns the partitions err names as failed and skipped, failing
// t when it is not a *store.PartitionError.
func placed(t *testing.T, err error) (failed, skipped []int) {
	t.Helper()
	var pe *store.PartitionError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) names no partition, want a *store.PartitionError", err, err)
	}
	if !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("error %v does not wrap store.ErrUnavailable", err)
	}
	if pe.Error() != pe.Err.Error() {
		t.Errorf("PartitionError text %q, want its Err's %q", pe.Error(), pe.Err.Error())
	}
	return pe.Failed, pe.Skipped
}

// dialThrough is the option that has a Store dial its nodes through f,
// whose nodes marked down are dead to it.
func dialThrough(f *testserver.DeadNodes) Option {
	return WithClientOption(func(o *rueidis.ClientOption) { o.DialCtxFn = f.Dial })
}

// TestCrossSlotFailurePlaced: on a Cluster, a Take over a key of a live
// node and a key of a dead one names the dead key's partition as failed
// and not the live key's, whose reservation was admitted and rolled back
// (the live node did its part); with the dead key first, its reservation
// (sent first) fails and the live key is looked at (a peek, for a key
// that would refuse the take all the same: see
// TestCrossSlotRefusalBesideDeadNode), its partition doing its part. A
// Peek over the two names the dead one. store/resilient then counts the
// failure against the dead node's breaker only.
func TestCrossSlotFailurePlaced(t *testing.T) {
	seeds := testserver.RedisCluster(t)
	f := new(testserver.DeadNodes)
	s := openT(t, "redis-cluster://"+strings.Join(seeds, ","), dialThrough(f), WithTimeout(time.Second))
	l, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("pe:%d:", time.Now().UnixNano())
	dead := prefix + "dead"
	deadAddr := testserver.ClusterMaster(t, seeds, dead)
	var live string
	for i := 0; live == ""; i++ {
		k := prefix + strconv.Itoa(i)
		if s.Partition(k) != s.Partition(dead) && testserver.ClusterMaster(t, seeds, k) != deadAddr {
			live = k
		}
	}
	f.Down(deadAddr)
	defer f.Up(deadAddr)
	pl, pd := s.Partition(live), s.Partition(dead)
	reqs := []store.Request{{Key: live, Limit: l, Cost: 1}, {Key: dead, Limit: l, Cost: 1}}
	_, err = s.Take(t.Context(), reqs, make([]algo.Decision, 2))
	if failed, skipped := placed(t, err); !slices.Equal(failed, []int{pd}) || skipped != nil {
		t.Errorf("Take(live, dead): failed %v, skipped %v; want failed [%d], none skipped", failed, skipped, pd)
	}
	peek := make([]algo.Decision, 1)
	if err := s.Peek(t.Context(), []store.Request{{Key: live, Limit: l}}, peek); err != nil || peek[0].Remaining != 100 {
		t.Fatalf("Peek(live) = %+v, %v: want the reservation rolled back (100 remaining)", peek[0], err)
	}
	_, err = s.Take(t.Context(), []store.Request{reqs[1], reqs[0]}, make([]algo.Decision, 2))
	if failed, skipped := placed(t, err); !slices.Equal(failed, []int{pd}) || skipped != nil {
		t.Errorf("Take(dead, live): failed %v, skipped %v; want failed [%d], none skipped (%d looked at for a refusal)", failed, skipped, pd, pl)
	}
	err = s.Peek(t.Context(), reqs, make([]algo.Decision, 2))
	if failed, skipped := placed(t, err); !slices.Equal(failed, []int{pd}) || skipped != nil {
		t.Errorf("Peek: failed %v, skipped %v; want failed [%d]", failed, skipped, pd)
	}
	err = s.Reset(t.Context(), live, dead)
	if failed, _ := placed(t, err); !slices.Equal(failed, []int{pd}) {
		t.Errorf("Reset: failed %v, want [%d]", failed, pd)
	}
}

// TestCrossSlotRollbackFailurePlaced: a roll-back that fails on a live
// node is that node's failure: the refused key's partition did its part
// (it refused), the admitted key's failed to give its units back.
func TestCrossSlotRollbackFailurePlaced(t *testing.T) {
	s := openT(t, clusterURL(t))
	l, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 5, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	keys := partitionKeys(fmt.Sprintf("rb:%d:", time.Now().UnixNano()), 2)
	a, b := keys[0], keys[1]
	s.beforeRollback = func() error { return errors.New("connection killed") }
	reqs := []store.Request{{Key: a, Limit: l, Cost: 1}, {Key: b, Limit: l, Cost: 6}}
	_, err = s.Take(t.Context(), reqs, make([]algo.Decision, 2))
	if failed, skipped := placed(t, err); !slices.Equal(failed, []int{s.Partition(a)}) || skipped != nil {
		t.Errorf("failed %v, skipped %v; want failed [%d] (%s's roll-back), none skipped", failed, skipped, s.Partition(a), a)
	}
}

// TestStandaloneErrorsUnplaced: outside a Cluster there is one partition
// and errors stay as they were.
func TestStandaloneErrorsUnplaced(t *testing.T) {
	f := new(testserver.DeadNodes)
	url := redisURL(t)
	s := openT(t, url, dialThrough(f), WithTimeout(time.Second))
	l, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 5, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	f.Down(strings.TrimPrefix(url, "redis://"))
	err = s.Peek(t.Context(), []store.Request{{Key: "su:a", Limit: l}, {Key: "su:b", Limit: l}}, make([]algo.Decision, 2))
	var pe *store.PartitionError
	if err == nil || errors.As(err, &pe) {
		t.Fatalf("Peek on a dead server: %v, want an error that is no *store.PartitionError", err)
	}
}

// TestCrossSlotErrorCarriesEveryGroup: on a Cluster, a call over a key
// the ACL refuses (NOPERM, no outage) and a key of a dead node (an
// outage), the refused key first (after a key of a live node, which a
// Take reserves first), fails with an error that carries both: errors.Is
// finds store.ErrUnavailable, so that store/resilient takes it for the
// outage it is (its failure policy answers, the dead node's breaker
// counts it), and ErrPermission. Err held the first failed group's error
// only, the refusal, which hid the outage. Both partitions are named as
// failed, and the live key's is not.
func TestCrossSlotErrorCarriesEveryGroup(t *testing.T) {
	nodes := testserver.RedisCluster(t)
	user, pass := aclUser(t, nodes, append([]string{"~fg:*"}, ACLRules...)...)
	f := new(testserver.DeadNodes)
	s := openT(t, "redis-cluster://"+user+":"+pass+"@"+strings.Join(nodes, ","), dialThrough(f), WithTimeout(time.Second))
	l, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	rid := runKey()
	dead := "fg:" + rid + ":dead"
	deadAddr := testserver.ClusterMaster(t, nodes, dead)
	var refused, live string
	for i := 0; refused == "" || live == ""; i++ {
		k := "app:" + rid + ":" + strconv.Itoa(i)
		if refused == "" && s.Partition(k) != s.Partition(dead) && testserver.ClusterMaster(t, nodes, k) != deadAddr {
			refused = k
		}
		k = "fg:" + rid + ":" + strconv.Itoa(i)
		if live == "" && s.Partition(k) != s.Partition(dead) && s.Partition(k) != s.Partition(refused) && refused != "" && testserver.ClusterMaster(t, nodes, k) != deadAddr {
			live = k
		}
	}
	f.Down(deadAddr)
	defer f.Up(deadAddr)
	want := []int{s.Partition(refused), s.Partition(dead)}
	slices.Sort(want)
	reqs := []store.Request{{Key: live, Limit: l, Cost: 1}, {Key: refused, Limit: l, Cost: 1}, {Key: dead, Limit: l, Cost: 1}}
	check := func(op string, err error) {
		t.Helper()
		if failed, _ := placed(t, err); !slices.Equal(failed, want) {
			t.Errorf("%s: failed %v, want %v", op, failed, want)
		}
		if !errors.Is(err, ErrPermission) {
			t.Errorf("%s: %v does not wrap ErrPermission (the refused key's error)", op, err)
		}
	}
	_, err = s.Take(t.Context(), reqs, make([]algo.Decision, 3))
	check("Take", err)
	check("Peek", s.Peek(t.Context(), reqs, make([]algo.Decision, 3)))
	check("Refund", s.Refund(t.Context(), reqs))
	check("Reset", s.Reset(t.Context(), live, refused, dead))
}
