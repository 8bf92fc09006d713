package server

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
	"github.com/floodgate/floodgate/store/resilient"
)

// TestStoreLogOneCauseOfSeveralKeys: a memcached server that went away
// fails a decision over n keys with n errors, one per key, each the same
// refused connection. The breaker's re-openings then carried that cause
// once, twice, three times joined ("connection refused; connection
// refused; …") as the probes had one, two or three keys, and each count
// was a cause of its own to the log: a soak with a killed memcached logged
// "still open, with another failure" three times in three seconds with
// the cause unchanged. The cause is told once, and it is one cause.
func TestStoreLogOneCauseOfSeveralKeys(t *testing.T) {
	srv := testserver.NewMemcached(t)
	if srv == nil {
		t.Skip("no memcached")
	}
	st, err := memcached.Open("memcached://"+srv.Addr, memcached.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	lim, err := algo.Compile(algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Burst: 10, Period: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// The store's own errors for a take over n keys.
	takeErr := func(n int) error {
		t.Helper()
		reqs := make([]store.Request, n)
		for i := range reqs {
			reqs[i] = store.Request{Key: fmt.Sprintf("fg:api|user=u%d#token_bucket:1000000", i), Limit: lim, Cost: 1}
		}
		_, err := st.Take(context.Background(), reqs, make([]algo.Decision, n))
		if err == nil {
			t.Fatalf("a take over %d keys succeeded on a killed memcached", n)
		}
		return err
	}
	var buf bytes.Buffer
	l := NewStoreLog(slog.New(slog.NewTextHandler(&buf, nil)))
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	h := l.Hooks(resilient.Hooks{})
	part := "server " + srv.Addr
	h.Tripped(&resilient.CircuitOpenError{Failures: 5, Last: takeErr(1), Partition: part})
	for n := 2; n <= 4; n++ { // a probe a second, over n keys
		now = now.Add(time.Second)
		h.Tripped(&resilient.CircuitOpenError{Failures: 4 + n, Last: takeErr(n), Reopened: true, Partition: part})
	}
	out := buf.String()
	if n := strings.Count(out, "store circuit breaker"); n != 1 {
		t.Errorf("%d breaker lines for an opening and 3 re-openings on one refused connection, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "connection refused"); n != 1 {
		t.Errorf("the refused connection told %d times, want once:\n%s", n, out)
	}
	ce := &resilient.CircuitOpenError{Failures: 5, Last: takeErr(3), Partition: part}
	if got := keyless(ce); strings.Count(got, "connection refused") != 1 {
		t.Errorf("keyless(circuit open over 3 keys) = %q, want the refused connection once", got)
	}
}
