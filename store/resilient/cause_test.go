package resilient_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/resilient"
)

// TestOpenCircuitNamesItsCause: a Redis that turns replica after the store
// opened (a failover behind a plain redis://) answers every take READONLY.
// Once the breaker opens, what callers get — Ping's error, which the
// server logs, and the Fallback cause — and the Tripped hook carry that
// READONLY and the number of failures, never the password.
func TestOpenCircuitNamesItsCause(t *testing.T) {
	const password = "Pw/s3cret@x"
	primary := testserver.NewRedis(t)
	if primary == nil {
		return
	}
	srv := testserver.NewRedis(t)
	// Set after the start: testserver's readiness check has no password.
	if _, err := testserver.RedisDo(srv.Addr, 2*time.Second, "CONFIG", "SET", "requirepass", password); err != nil {
		t.Fatal(err)
	}
	inner, err := redis.Open("redis://:"+password+"@"+srv.Addr, redis.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var tripped []*resilient.CircuitOpenError
	var causes []error
	s, err := resilient.New(inner, resilient.WithBreaker(5, time.Hour), resilient.WithHooks(resilient.Hooks{
		Tripped:  func(err *resilient.CircuitOpenError) { tripped = append(tripped, err) },
		Fallback: func(_ string, _ resilient.Policy, cause error) { causes = append(causes, cause) },
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	host, port, _ := strings.Cut(primary.Addr, ":")
	conn, err := testserver.DialRESP(srv.Addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, cmd := range [][]string{{"AUTH", password}, {"REPLICAOF", host, port}} {
		if _, err := conn.Do(cmd...); err != nil {
			t.Fatalf("%s: %v", cmd[0], err)
		}
	}

	l, _ := algo.Compile(algo.Params{Algorithm: algo.TokenBucket, Limit: 5, Period: time.Minute})
	out := make([]algo.Decision, 1)
	for i := range 6 {
		if _, err := s.Take(context.Background(), []store.Request{{Key: "fg:cause", Limit: l, Cost: 1}}, out); err != nil {
			t.Fatalf("take %d: %v (FailOpen answers)", i, err)
		}
	}
	if s.Breaker() != resilient.Open {
		t.Fatalf("breaker %v after 6 failed takes, want open", s.Breaker())
	}
	ping := s.Ping(context.Background())
	var coe *resilient.CircuitOpenError
	if !errors.As(ping, &coe) || !errors.Is(ping, resilient.ErrCircuitOpen) || !errors.Is(ping, store.ErrUnavailable) {
		t.Fatalf("Ping = %v, want a *CircuitOpenError wrapping ErrCircuitOpen", ping)
	}
	t.Logf("Ping: %v", ping)
	for what, msg := range map[string]string{
		"Ping":           ping.Error(),
		"Tripped":        errText(tripped),
		"Fallback cause": errText(causes[len(causes)-1:]),
	} {
		if !strings.Contains(msg, "circuit open after 5 consecutive failures; last: ") || !strings.Contains(msg, "READONLY") {
			t.Errorf("%s: %q, want the failures and the READONLY that opened the circuit", what, msg)
		}
		if strings.Contains(msg, "s3cret") {
			t.Errorf("%s: %q shows the password", what, msg)
		}
	}
	if len(tripped) != 1 {
		t.Errorf("Tripped called %d times, want 1", len(tripped))
	}
}

func errText[E error](errs []E) string {
	var b strings.Builder
	for _, e := range errs {
		b.WriteString(e.Error())
	}
	return b.String()
}
