package server

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/resilient"
)

// TestStoreLogFallbackLines: decisions the failure policy answers because
// a paused Redis (SIGSTOP) does not answer within the 50 ms timeout make
// one WARN line per cause per StoreLogInterval, naming the policy, the
// next one saying how many more answers the policy gave; with the breaker
// never opening, nothing else was logged before. The breaker's line names
// the policy too, known from the server's store before any fallback.
func TestStoreLogFallbackLines(t *testing.T) {
	rs := testserver.NewRedis(t)
	if rs == nil {
		t.Skip("no redis-server")
	}
	inner, err := redis.Open("redis://"+rs.Addr, redis.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	buf := &lockedBuffer{}
	l := NewStoreLog(slog.New(slog.NewTextHandler(buf, nil)))
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	// A breaker that never opens in this test: every decision reaches the
	// store, times out and is answered by the policy.
	st, err := resilient.New(inner, resilient.WithTimeout(50*time.Millisecond), resilient.WithPolicy(resilient.FailClosed),
		resilient.WithBreaker(1000, time.Minute), resilient.WithHooks(l.Hooks(resilient.Hooks{})))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	lim, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	take := func() {
		t.Helper()
		out := make([]algo.Decision, 1)
		res, err := st.Take(context.Background(), []store.Request{{Key: "fg:user=alice", Limit: lim, Cost: 1}}, out)
		if err != nil || !res.Fallback || res.Allowed {
			t.Fatalf("Take on a paused store: %+v %v, want refused by the closed policy", res, err)
		}
	}
	if err := rs.Pause(); err != nil {
		t.Fatal(err)
	}
	defer rs.Resume()
	const line = "store did not answer a take, the failure policy (closed) answered: resilient: no answer within the timeout"
	for range 5 {
		take()
	}
	if n := strings.Count(buf.String(), line); n != 1 || strings.Count(buf.String(), "level=WARN") != 1 {
		t.Fatalf("5 answers of the policy at t0: %d lines %q, want that one WARN line:\n%s", n, line, buf)
	}
	now = now.Add(StoreLogInterval - time.Second)
	take()
	if n := strings.Count(buf.String(), line); n != 1 {
		t.Fatalf("t0+59s: %d lines, want still 1:\n%s", n, buf)
	}
	now = now.Add(time.Second)
	take()
	if n, m := strings.Count(buf.String(), line), strings.Count(buf.String(), "(5 more answers of the policy with this cause since the last report)"); n != 2 || m != 1 {
		t.Fatalf("t0+60s: %d lines, %d saying 5 more answers; want 2 and 1:\n%s", n, m, buf)
	}
	if strings.Contains(buf.String(), "alice") {
		t.Errorf("a line names the key:\n%s", buf)
	}

	// The breaker's line, before any answer of the policy: from the
	// server's store.
	buf2 := &lockedBuffer{}
	l2 := NewStoreLog(nil)
	l2.now = l.now
	st2, err := resilient.New(inner, resilient.WithTimeout(50*time.Millisecond), resilient.WithPolicy(resilient.FailLocal),
		resilient.WithBreaker(2, time.Minute), resilient.WithHooks(l2.Hooks(resilient.Hooks{})))
	if err != nil {
		t.Fatal(err)
	}
	l2.attach(&Server{store: st2, log: slog.New(slog.NewTextHandler(buf2, nil))})
	for range 2 {
		if err := st2.Ping(context.Background()); err == nil {
			t.Fatal("a paused store answered a ping")
		}
	}
	if !strings.Contains(buf2.String(), "store circuit breaker opened, the failure policy (local) answers until a probe succeeds: ") {
		t.Errorf("the breaker's line does not name the policy:\n%s", buf2)
	}
}

// lockedBuffer is a log destination safe to read while a store writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
