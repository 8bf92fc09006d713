package resilient_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/resilient"
)

// TestFailUnavailable hangs a real memcached (SIGSTOP) under
// FailUnavailable: a Take or Peek the store does not answer within the
// timeout fails with an error wrapping store.ErrUnavailable (not the
// caller's context error: a server answers UNAVAILABLE, not
// DEADLINE_EXCEEDED), nothing answers in the store's place, and once the
// breaker is open the call fails at once, naming the open breaker, without
// waiting for the timeout.
func TestFailUnavailable(t *testing.T) {
	if p, err := resilient.ParsePolicy(" Unavailable"); err != nil || p != resilient.FailUnavailable || p.String() != "unavailable" {
		t.Fatalf(`ParsePolicy(" Unavailable") = %v, %v; want unavailable`, p, err)
	}
	if _, err := resilient.ParsePolicy("fail"); err == nil || !strings.Contains(err.Error(), "want open, closed, local or unavailable") {
		t.Fatalf(`ParsePolicy("fail"): %v, want an error listing the four policies`, err)
	}
	srv, inner := outage(t)
	const timeout = time.Second
	var fallbacks []string
	var mu sync.Mutex
	s, err := resilient.New(inner, resilient.WithPolicy(resilient.FailUnavailable), resilient.WithTimeout(timeout),
		resilient.WithBreaker(1, time.Hour),
		resilient.WithHooks(resilient.Hooks{Fallback: func(op string, p resilient.Policy, _ error) {
			mu.Lock()
			fallbacks = append(fallbacks, op+":"+p.String())
			mu.Unlock()
		}}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Hour})
	reqs := []store.Request{{Key: "unavailable-" + t.Name(), Limit: l, Cost: 1}}
	out := make([]algo.Decision, 1)
	if res, err := s.Take(context.Background(), reqs, out); err != nil || !res.Allowed {
		t.Fatalf("Take with the store up: %+v, %v", res, err)
	}
	pause(t, srv)
	defer srv.Resume()
	res, err := s.Take(context.Background(), reqs, out)
	if !errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || res.Allowed {
		t.Fatalf("Take with the store hung: %+v, %v; want an error wrapping store.ErrUnavailable, not DeadlineExceeded", res, err)
	}
	if s.Breaker() != resilient.Open {
		t.Fatalf("breaker %v after a failure with threshold 1, want open", s.Breaker())
	}
	start := time.Now()
	_, err = s.Take(context.Background(), reqs, out)
	if el := time.Since(start); el >= timeout/2 {
		t.Errorf("Take with the breaker open took %v, want at once (the timeout is %v)", el, timeout)
	}
	if !errors.Is(err, resilient.ErrCircuitOpen) {
		t.Errorf("Take with the breaker open: %v, want ErrCircuitOpen", err)
	}
	if err := s.Peek(context.Background(), reqs, out); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Peek with the breaker open: %v, want an error wrapping store.ErrUnavailable", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"take:unavailable", "take:unavailable", "peek:unavailable"}; !slices.Equal(fallbacks, want) {
		t.Errorf("Fallback hooks %q, want %q", fallbacks, want)
	}
}
