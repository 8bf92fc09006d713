package resilient_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/resilient"
)

// TestShortCallerDeadlineOnAHungStore: callers whose deadline comes
// before the store timeout (Envoy's rate limit filter gives a call 20 ms,
// the timeout is 50 ms) on a hung redis-server (SIGSTOP, as a network
// partition that drops packets). Each call is answered by the failure
// policy before the caller's deadline, and the breaker opens after its
// five failures. Before, each call waited out the caller's deadline and
// failed with it, counted for no breaker: the policy never answered
// (under FailClosed or FailLocal, Envoy's failure_mode_deny decided
// instead, admitting every request by default).
func TestShortCallerDeadlineOnAHungStore(t *testing.T) {
	srv, ss := sharedRedis(t, 1, resilient.WithPolicy(resilient.FailClosed), resilient.WithBreaker(5, time.Hour))
	s := ss[0]
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Hour})
	reqs := []store.Request{{Key: "deadline-" + t.Name(), Limit: l, Cost: 1}}
	take(t, s, reqs[0].Key, l, 1)
	pause(t, srv)
	defer srv.Resume()
	for i := range 8 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		out := make([]algo.Decision, 1)
		start := time.Now()
		res, err := s.Take(ctx, reqs, out)
		el := time.Since(start)
		cancel()
		if err != nil {
			t.Fatalf("call %d: Take = %v after %v, want the policy's answer", i, err, el)
		}
		if el >= 20*time.Millisecond {
			// The call was cut 2 ms before the caller's deadline; a
			// loaded machine may take longer to answer.
			t.Logf("call %d answered after %v, past the caller's 20 ms", i, el)
		}
		if res.Allowed || !res.Fallback {
			t.Fatalf("call %d: %+v, want FailClosed's refusal", i, res)
		}
	}
	if s.Breaker() != resilient.Open {
		t.Fatalf("breaker %v after 8 calls the hung store did not answer, want open", s.Breaker())
	}
}
