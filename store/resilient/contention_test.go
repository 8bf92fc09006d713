package resilient_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
	"github.com/floodgate/floodgate/store/resilient"
)

// TestContentionRefusesUnderFailOpen runs instances of a real memcached
// store (each with its own local locks, as separate processes would have)
// on one hot key, with no compare-and-swap retry, under FailOpen: a Take
// the store gave up on (store.ErrContention) is refused with
// ContentionRetryAfter, charges nothing and never reaches the failure
// policy or the breaker, so the instances together admit exactly the
// budget. FailOpen admitted every contended Take, beyond the budget.
func TestContentionRefusesUnderFailOpen(t *testing.T) {
	addr := testserver.Memcached(t)
	if addr == "" {
		t.Skip("no memcached")
	}
	const (
		instances = 8
		perInst   = 40 // 320 takes against a budget of 50
		budget    = 50
	)
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC) // no refill during the test
	l := compile(t, algo.Params{Algorithm: algo.TokenBucket, Limit: budget, Period: time.Hour, Burst: budget})
	var contentions, fallbacks atomic.Int64
	hooks := resilient.Hooks{
		Call: func(op string, _ time.Duration, err error) {
			if errors.Is(err, store.ErrContention) {
				contentions.Add(1)
			}
		},
		Fallback: func(string, resilient.Policy, error) { fallbacks.Add(1) },
	}
	stores := make([]*resilient.Store, instances)
	for i := range stores {
		inner, err := memcached.Open("memcached://"+addr, memcached.WithRetries(0), memcached.WithTimeout(2*time.Second),
			memcached.WithClock(func() time.Time { return now }))
		if err != nil {
			t.Fatal(err)
		}
		s, err := resilient.New(inner, resilient.WithPolicy(resilient.FailOpen), resilient.WithTimeout(2*time.Second),
			resilient.WithBreaker(1, time.Hour), resilient.WithOverLimitCache(0), resilient.WithHooks(hooks))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores[i] = s
	}
	// Rounds on fresh keys until one saw contention (the first does,
	// nearly always): a round without any proves nothing.
	for round := 0; round < 5 && contentions.Load() == 0; round++ {
		key := "contention-test:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":" + strconv.Itoa(round)
		var admitted, refusedContended atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, instances)
		for _, s := range stores {
			wg.Go(func() {
				out := make([]algo.Decision, 1)
				for range perInst {
					res, err := s.Take(context.Background(), []store.Request{{Key: key, Limit: l, Cost: 1}}, out)
					if err != nil {
						errs <- err
						return
					}
					if res.Allowed {
						admitted.Add(1)
					} else if out[0].RetryAfter == resilient.ContentionRetryAfter {
						refusedContended.Add(1)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("Take: %v", err)
		}
		if n := admitted.Load(); n > budget {
			t.Fatalf("round %d: %d admitted against a budget of %d (%d contentions)", round, n, budget, contentions.Load())
		}
		if c := contentions.Load(); c > 0 && refusedContended.Load() != c {
			t.Errorf("round %d: %d contentions, %d refusals with RetryAfter %v; want one each", round, c, refusedContended.Load(), resilient.ContentionRetryAfter)
		}
		// Nothing charged by a contended Take: what is left is the budget
		// less the admissions.
		d := make([]algo.Decision, 1)
		if err := stores[0].Peek(context.Background(), []store.Request{{Key: key, Limit: l, Cost: 1}}, d); err != nil {
			t.Fatal(err)
		}
		if want := budget - admitted.Load(); d[0].Remaining != want {
			t.Errorf("round %d: Remaining %d after %d admitted, want %d", round, d[0].Remaining, admitted.Load(), want)
		}
	}
	t.Logf("%d contended Takes", contentions.Load())
	if contentions.Load() == 0 {
		t.Skip("no compare-and-swap contention in 5 rounds: nothing shown")
	}
	if n := fallbacks.Load(); n != 0 {
		t.Errorf("%d answers of the failure policy, want 0: contention is no outage", n)
	}
	for i, s := range stores {
		if b := s.Breaker(); b != resilient.Closed {
			t.Errorf("instance %d: breaker %v after contention, want closed (threshold 1)", i, b)
		}
	}
}
