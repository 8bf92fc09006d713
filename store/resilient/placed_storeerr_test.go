package resilient_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/resilient"
)

// refusedAndDown is a memory store seen as two partitions: "app:" keys on
// a live node whose ACL refuses them (a store error that is no outage),
// the others on a dead node. A call over both fails as a Redis Cluster's
// cross-slot call does when the refused group comes first: one
// *store.PartitionError carrying the refusal, placed on both partitions.
type refusedAndDown struct{ store.Store }

var (
	errRefused = errors.New("test: NOPERM this user has no permissions to access one of the keys used as arguments")
	errDead    = fmt.Errorf("test: %w: connection refused", store.ErrUnavailable)
)

func (refusedAndDown) Partitions() int { return 2 }

func (refusedAndDown) Partition(k string) int {
	if strings.HasPrefix(k, "app:") {
		return 0
	}
	return 1
}

func (refusedAndDown) PartitionName(p int) string { return fmt.Sprint("node ", p) }

func (r refusedAndDown) Take(_ context.Context, reqs []store.Request, _ []algo.Decision) (store.Result, error) {
	if len(reqs) > 1 {
		return store.Result{}, &store.PartitionError{Err: errRefused, Failed: []int{0, 1}}
	}
	if r.Partition(reqs[0].Key) == 1 {
		return store.Result{}, errDead
	}
	return store.Result{}, errRefused
}

// TestPlacedStoreErrorKeepsADeadPartitionOpen: a store error that is no
// outage counts as the store's answer, but not for the partitions the
// store placed it on, where another failure may hide behind it. A call over
// a refused and a dead partition, between the dead one's own failures, no
// longer resets its breaker (it opens at its fifth failure as if the call
// were not there), nor closes it when such a call is its half-open probe.
// Before, a reviewer's dead node stayed closed through 800 failures with
// such a call among every five.
func TestPlacedStoreErrorKeepsADeadPartitionOpen(t *testing.T) {
	m, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	c := newClock()
	s, err := resilient.New(refusedAndDown{m}, resilient.WithBreaker(5, time.Second), resilient.WithClock(c.Now))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Second})
	one := []store.Request{{Key: "fg:y", Limit: l, Cost: 1}}
	both := []store.Request{{Key: "app:x", Limit: l, Cost: 1}, {Key: "fg:y", Limit: l, Cost: 1}}
	out := make([]algo.Decision, 2)
	ctx := context.Background()
	for range 4 { // 4 failures of the dead key alone
		s.Take(ctx, one, out[:1])
	}
	if _, err := s.Take(ctx, both, out); !errors.Is(err, errRefused) {
		t.Fatalf("take over both: %v, want the refusal", err)
	}
	s.Take(ctx, one, out[:1]) // the fifth
	if got := s.Breakers()[1]; got != resilient.Open {
		t.Fatalf("the dead partition's breaker after 5 failures of its own and a refusal over both: %v, want open", got)
	}
	c.Advance(2 * time.Second) // the cool-down passed: the next call is its probe
	if _, err := s.Take(ctx, both, out); !errors.Is(err, errRefused) {
		t.Fatalf("the probe over both: %v, want the refusal", err)
	}
	if got := s.Breakers()[1]; got == resilient.Closed {
		t.Errorf("a probe over both partitions closed the dead one's breaker: the refusal placed on it says nothing of it")
	}
}
