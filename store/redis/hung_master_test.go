package redis

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
)

// TestClusterHungMasterHoldsUpItsRangesOnly pauses (SIGSTOP) one master of
// a Redis Cluster while 8 callers keep taking its keys under 300 ms
// deadlines, and takes keys of the other masters meanwhile, with the
// store's default batching (two batches in flight) and a 2 s store
// timeout. The paused master's calls coalesce into batches that keep
// their places until the store's timeout, long after their callers left;
// the other masters' keys must still be decided by Redis, each well within
// its 1 s deadline. With one batcher for the whole Cluster they queued
// behind the paused master's batches and failed unsent (queued behind
// batches in flight) for as long as the master stayed paused.
func TestClusterHungMasterHoldsUpItsRangesOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and pauses a Redis Cluster")
	}
	c := testserver.NewRedisCluster(t)
	if c == nil {
		return
	}
	s := openT(t, "redis-cluster://"+strings.Join(c.Addrs(), ","), WithTimeout(2*time.Second))
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
		t.Fatal("no master with slots in CLUSTER NODES")
	}
	srv := c.Node(victim.Addr)
	if srv == nil {
		t.Fatalf("no node at %s", victim.Addr)
	}
	// The victim's keys, and keys of partitions (ranges of 256 slots)
	// the victim has no slot of.
	prefix := runKey() + ":hung:"
	var theirs, ours []string
	for i := 0; len(theirs) < 32 || len(ours) < 16; i++ {
		if i > 100_000 {
			t.Fatalf("found %d keys of the victim and %d others", len(theirs), len(ours))
		}
		k := prefix + strconv.Itoa(i)
		p := Slot(k) / slotsPerPartition
		lo, hi := p*slotsPerPartition, (p+1)*slotsPerPartition-1
		switch {
		case victim.ServesSlot(Slot(k)):
			if len(theirs) < 32 {
				theirs = append(theirs, k)
			}
		case !victim.ServesSlot(lo) && !victim.ServesSlot(hi):
			if len(ours) < 16 {
				ours = append(ours, k)
			}
		}
	}
	l, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	take := func(k string, dl time.Duration) (store.Result, time.Duration, error) {
		ctx, cancel := context.WithTimeout(t.Context(), dl)
		defer cancel()
		start := time.Now()
		res, err := s.Take(ctx, []store.Request{{Key: k, Limit: l, Cost: 1}}, make([]algo.Decision, 1))
		return res, time.Since(start), err
	}
	for _, k := range append(append([]string(nil), theirs...), ours...) {
		if res, _, err := take(k, 5*time.Second); err != nil || !res.Allowed {
			t.Fatalf("%s with the cluster healthy: %+v, %v", k, res, err)
		}
	}

	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var hungErrs []error
	for g := range 8 {
		wg.Go(func() {
			for i := 0; i < 20; i++ { // at most 20 × 300 ms
				select {
				case <-stop:
					return
				default:
				}
				_, _, err := take(theirs[(g*20+i)%len(theirs)], 300*time.Millisecond)
				mu.Lock()
				hungErrs = append(hungErrs, err)
				mu.Unlock()
			}
		})
	}
	// Let the paused master's calls fill their batches' places.
	time.Sleep(400 * time.Millisecond)
	var failures []string
	for range 2 {
		for _, k := range ours {
			res, took, err := take(k, time.Second)
			if err != nil || !res.Allowed {
				failures = append(failures, k+": "+errString(err)+" after "+took.Round(time.Millisecond).String())
			}
		}
	}
	close(stop)
	wg.Wait()
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	if len(failures) > 0 {
		t.Fatalf("%d of %d takes of live masters' keys failed while another master was paused; the first: %s",
			len(failures), 2*len(ours), failures[0])
	}
	// The paused master's takes did fail, as outages (the test's premise).
	mu.Lock()
	defer mu.Unlock()
	if len(hungErrs) == 0 {
		t.Fatal("no take of the paused master's keys ran")
	}
	for _, err := range hungErrs {
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("a take of the paused master's key: %v, want store.ErrUnavailable", err)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return "refused"
	}
	return err.Error()
}
