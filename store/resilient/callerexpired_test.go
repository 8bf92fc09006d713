package resilient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/resilient"
)

// TestTinyCallerDeadlineIsTheCallers: a caller whose deadline leaves too
// little time for a store call (3 ms) keeps it, and its passing counts
// for no breaker: a client sending such deadlines must not open the
// breaker for the others.
func TestTinyCallerDeadlineIsTheCallers(t *testing.T) {
	srv, ss := sharedRedis(t, 1, resilient.WithPolicy(resilient.FailClosed), resilient.WithBreaker(1, time.Hour))
	s := ss[0]
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Hour})
	pause(t, srv)
	defer srv.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Millisecond)
	defer cancel()
	_, err := s.Take(ctx, []store.Request{{Key: "tiny", Limit: l, Cost: 1}}, make([]algo.Decision, 1))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Take with a 3 ms deadline: %v, want context.DeadlineExceeded", err)
	}
	if s.Breaker() != resilient.Closed {
		t.Fatalf("breaker %v after a tiny caller deadline, want closed", s.Breaker())
	}
}
