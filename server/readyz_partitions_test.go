package server_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/metrics"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/server"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
	"github.com/floodgate/floodgate/store/resilient"
)

// readyzRing is a server on a ring of three memcached through
// store/resilient (one breaker per server, opened by 5 failures in a row,
// cool-down 1 h), with its admin handler.
type readyzRing struct {
	mcs   []*testserver.Server
	inner *memcached.Store
	st    *resilient.Store
	admin *httptest.Server
}

func newReadyzRing(t *testing.T) *readyzRing {
	t.Helper()
	e := &readyzRing{}
	var addrs []string
	for range 3 {
		mc := testserver.NewMemcached(t)
		if mc == nil {
			t.Skip("no memcached")
		}
		e.mcs = append(e.mcs, mc)
		addrs = append(addrs, mc.Addr)
	}
	var err error
	if e.inner, err = memcached.Open("memcached://"+strings.Join(addrs, ","), memcached.WithTimeout(time.Second)); err != nil {
		t.Fatal(err)
	}
	if e.st, err = resilient.New(e.inner, resilient.WithBreaker(5, time.Hour), resilient.WithTimeout(time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.st.Close() })
	cfg, err := policy.Parse("test.yaml", []byte(storeLogConfig))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.NewEngine(cfg, e.st)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(eng, e.st, server.WithMetrics(metrics.New()), server.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	e.admin = httptest.NewServer(srv.AdminHandler())
	t.Cleanup(e.admin.Close)
	if code, body := e.readyz(t); code != 200 || body != "ready\n" {
		t.Fatalf("/readyz with the ring up: %d %q, want 200 \"ready\\n\"", code, body)
	}
	return e
}

func (e *readyzRing) readyz(t *testing.T) (int, string) {
	t.Helper()
	code, body, _ := do(t, "GET", e.admin.URL+"/readyz", "", nil)
	return code, string(body)
}

// server returns the ring's memcached that the ping key is on (ping) or,
// with ping false, one it is not on.
func (e *readyzRing) server(t *testing.T, ping bool) *testserver.Server {
	t.Helper()
	on := e.inner.ServerFor(resilient.PingKey)
	for _, mc := range e.mcs {
		if (mc.Addr == on) == ping {
			return mc
		}
	}
	t.Fatalf("no server of the ring with ping %v (the ping key is on %s)", ping, on)
	return nil
}

// openBreaker kills mc and fails 5 decisions of a key on it, which opens
// its breaker.
func (e *readyzRing) openBreaker(t *testing.T, mc *testserver.Server) {
	t.Helper()
	key := ""
	for i := range 10_000 {
		if k := "readyz:" + strconv.Itoa(i); e.inner.ServerFor(k) == mc.Addr {
			key = k
			break
		}
	}
	if key == "" {
		t.Fatalf("no key on %s in 10,000", mc.Addr)
	}
	l, err := algo.Compile(algo.Params{Algorithm: algo.TokenBucket, Limit: 1000, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := mc.Kill(); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		e.st.Take(context.Background(), []store.Request{{Key: key, Limit: l, Cost: 1}}, make([]algo.Decision, 1))
	}
	open := 0
	for _, b := range e.st.Breakers() {
		if b != resilient.Closed {
			open++
		}
	}
	if open != 1 {
		t.Fatalf("breakers after 5 failures on %s: %v, want one open", mc.Addr, e.st.Breakers())
	}
}

// TestReadyzNamesOpenPartitions: with one memcached of a ring of three
// dead, /readyz stays 200 when the ping key is on another (readiness as
// documented: one dead node of many does not take the fleet out), and its
// body says which server's breaker is open. It used to say "ready" alone.
func TestReadyzNamesOpenPartitions(t *testing.T) {
	e := newReadyzRing(t)
	dead := e.server(t, false)
	e.openBreaker(t, dead)
	code, body := e.readyz(t)
	want := "ready; 1 of 3 store partitions' breakers open (server " + dead.Addr + ")\n"
	if code != 200 || body != want {
		t.Fatalf("/readyz with %s dead, its breaker open: %d %q, want 200 %q", dead.Addr, code, body, want)
	}
}

// TestReadyzNotReadySaysOtherPartitionsAnswer: with the ping key's own
// memcached dead, /readyz is 503 (at the third failed ping in a row, as
// documented) and says that the ping reaches that server only and that
// the other two servers' breakers are closed; once the ping's breaker has
// opened, that it is the one open. It used to give the ping's error alone,
// as if the whole store were down.
func TestReadyzNotReadySaysOtherPartitionsAnswer(t *testing.T) {
	e := newReadyzRing(t)
	dead := e.server(t, true)
	if err := dead.Kill(); err != nil {
		t.Fatal(err)
	}
	for range server.DefaultReadyFailures - 1 {
		if code, body := e.readyz(t); code != 200 {
			t.Fatalf("/readyz before %d failed pings: %d %s, want 200", server.DefaultReadyFailures, code, body)
		}
	}
	others := "the readiness ping reaches server " + dead.Addr + " only, and 2 of the other 2 store partitions' breakers are closed; "
	code, body := e.readyz(t)
	want := others + `0 of 3 store partitions' breakers open"}`
	if code != 503 || !strings.HasPrefix(body, `{"error":"not ready: store does not answer: `) || !strings.HasSuffix(strings.TrimSpace(body), want) {
		t.Fatalf("/readyz with %s (the ping's) dead: %d %s, want 503 ending %s", dead.Addr, code, body, want)
	}
	// Two more failed pings open the ping's breaker (5 in a row).
	for range 2 {
		e.readyz(t)
	}
	code, body = e.readyz(t)
	want = others + "1 of 3 store partitions' breakers open (server " + dead.Addr + `)"}`
	if code != 503 || !strings.HasSuffix(strings.TrimSpace(body), want) {
		t.Fatalf("/readyz with %s (the ping's) dead, its breaker open: %d %s, want 503 ending %s", dead.Addr, code, body, want)
	}
}
