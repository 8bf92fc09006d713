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

// contendedAndDown is a memory store seen as two memcached servers: "hot:"
// keys on a live one where compare-and-swap runs out of retries, the
// others on a dead one. A Take over both fails as memcached's multi-key
// Take does when both servers' steps fail: the keys' errors joined in one
// *store.PartitionError placed on both servers.
type contendedAndDown struct{ store.Store }

var (
	errHot  = fmt.Errorf(`memcached take "hot:x": %w: key "hot:x" still changing after 1 attempts`, store.ErrContention)
	errGone = fmt.Errorf(`memcached take "fg:y": %w: dial tcp 127.0.0.1:1: connect: connection refused`, store.ErrUnavailable)
)

func (contendedAndDown) Partitions() int { return 2 }

func (contendedAndDown) Partition(k string) int {
	if strings.HasPrefix(k, "hot:") {
		return 0
	}
	return 1
}

func (contendedAndDown) PartitionName(p int) string { return fmt.Sprint("server ", p) }

func (c contendedAndDown) Take(_ context.Context, reqs []store.Request, _ []algo.Decision) (store.Result, error) {
	if len(reqs) > 1 {
		return store.Result{}, &store.PartitionError{Err: errors.Join(errHot, errGone), Failed: []int{0, 1}}
	}
	if c.Partition(reqs[0].Key) == 1 {
		return store.Result{}, errGone
	}
	return store.Result{}, errHot
}

// TestContentionBesideAnOutage: a Take that met contention on one key and
// an outage on another (a dead memcached server) is the outage's: the
// failure policy answers it (FailUnavailable fails it with an error
// wrapping store.ErrUnavailable, FailOpen admits it, with Result.Fallback)
// and the dead server's breaker counts it as a failure. Before, the
// contention won: the Take was refused with ContentionRetryAfter whatever
// the policy, and counted as the store's answer on both servers, so that
// such calls reset the dead server's count of failures and a call over
// both, as its half-open probe, closed its breaker.
func TestContentionBesideAnOutage(t *testing.T) {
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Second})
	one := []store.Request{{Key: "fg:y", Limit: l, Cost: 1}}
	both := []store.Request{{Key: "hot:x", Limit: l, Cost: 1}, {Key: "fg:y", Limit: l, Cost: 1}}
	ctx := context.Background()
	for _, p := range []resilient.Policy{resilient.FailUnavailable, resilient.FailOpen} {
		t.Run(p.String(), func(t *testing.T) {
			m, err := memory.New()
			if err != nil {
				t.Fatal(err)
			}
			c := newClock()
			s, err := resilient.New(contendedAndDown{m}, resilient.WithPolicy(p), resilient.WithBreaker(5, time.Second),
				resilient.WithClock(c.Now), resilient.WithOverLimitCache(0))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			out := make([]algo.Decision, 2)
			// The hot key alone is still refused, whatever the policy.
			if res, err := s.Take(ctx, both[:1], out[:1]); err != nil || res.Allowed || out[0].RetryAfter != resilient.ContentionRetryAfter {
				t.Fatalf("take of the hot key alone: %+v %+v, %v; want refused with ContentionRetryAfter", res, out[0], err)
			}
			for range 4 { // 4 failures of the dead key alone
				s.Take(ctx, one, out[:1])
			}
			res, err := s.Take(ctx, both, out)
			switch p {
			case resilient.FailUnavailable:
				if !errors.Is(err, store.ErrUnavailable) {
					t.Errorf("take over both: %+v %+v, %v; want an error wrapping store.ErrUnavailable", res, out, err)
				}
			case resilient.FailOpen:
				if err != nil || !res.Allowed || !res.Fallback {
					t.Errorf("take over both: %+v %+v, %v; want admitted by the policy (Fallback)", res, out, err)
				}
			}
			if got := s.Breakers()[1]; got != resilient.Open {
				t.Fatalf("the dead server's breaker after 4 failures of its own and a fifth over both: %v, want open", got)
			}
			c.Advance(2 * time.Second) // the cool-down passed: the next call is its probe
			s.Take(ctx, both, out)
			if got := s.Breakers()[1]; got != resilient.Open {
				t.Errorf("the dead server's breaker after a probe over both failed: %v, want open", got)
			}
		})
	}
}
