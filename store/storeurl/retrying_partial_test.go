package storeurl_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
	"github.com/floodgate/floodgate/store/resilient"
	"github.com/floodgate/floodgate/store/storeurl"
)

// memcachedRing starts n memcached servers and returns them with their URL.
func memcachedRing(t *testing.T, n int) ([]*testserver.Server, string) {
	t.Helper()
	var srvs []*testserver.Server
	var addrs []string
	for range n {
		s := testserver.NewMemcached(t)
		srvs = append(srvs, s)
		addrs = append(addrs, s.Addr)
	}
	return srvs, "memcached://" + strings.Join(addrs, ",")
}

// keysOf returns n keys of the server at addr and n of the others, as the
// ring of url places them.
func keysOf(t *testing.T, url, addr string, n int) (theirs, others []string) {
	t.Helper()
	mc, err := memcached.Open(url, memcached.WithPartialStart())
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	base := "fg:partial:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	for i := 0; len(theirs) < n || len(others) < n; i++ {
		k := base + strconv.Itoa(i)
		if mc.ServerFor(k) == addr {
			if len(theirs) < n {
				theirs = append(theirs, k)
			}
		} else if len(others) < n {
			others = append(others, k)
		}
	}
	return theirs, others
}

// peekRemaining is the Remaining of key seen by a store of url opened
// with every server up (Open).
func peekRemaining(t *testing.T, url, key string) int64 {
	t.Helper()
	st, err := storeurl.Open(url, storeurl.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	out := make([]algo.Decision, 1)
	if err := st.Peek(context.Background(), []store.Request{{Key: key, Limit: retryLimit}}, out); err != nil {
		t.Fatal(err)
	}
	return out[0].Remaining
}

// One memcached server of three down at start: Open still fails naming
// it, but OpenRetrying opens the ring at once on the two that answer, with
// a WARN naming the third. Behind store/resilient the live servers' keys
// are the store's, the dead one's fail with ErrUnavailable naming it and
// open its server's breaker alone; once it is back its keys are decided
// by the store again, on it, and counted once.
func TestOpenRetryingMemcachedOneDown(t *testing.T) {
	srvs, url := memcachedRing(t, 3)
	victim := srvs[1]
	theirs, ours := keysOf(t, url, victim.Addr, 4)
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	if st, err := storeurl.Open(url, storeurl.WithTimeout(time.Second)); err == nil {
		st.Close()
		t.Fatal("Open with one memcached server of three down succeeded; want the error naming it")
	} else if !storeurl.Transient(err) || !strings.Contains(err.Error(), victim.Addr) {
		t.Fatalf("Open with one memcached server of three down: %v; want a transient error naming %s", err, victim.Addr)
	}

	logs := new(syncBuffer)
	st, err := storeurl.OpenRetrying(url, storeurl.WithTimeout(time.Second), storeurl.WithRetryBackoff(20*time.Millisecond, 200*time.Millisecond),
		storeurl.WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	if err != nil {
		t.Fatalf("OpenRetrying with one memcached server of three down: %v", err)
	}
	defer st.Close()
	if _, ok := st.(*memcached.Store); !ok {
		t.Fatalf("OpenRetrying with one memcached server of three down = %T, want the *memcached.Store, opened at once", st)
	}
	l := logs.String()
	if strings.Count(l, "level=WARN") != 1 || !strings.Contains(l, `msg="memcached server not answering when the store opened (1 of 3)`) ||
		!strings.Contains(l, "server="+victim.Addr) {
		t.Errorf("logs: want one WARN naming %s, got:\n%s", victim.Addr, l)
	}
	if err := take(st, theirs[0], 1); !errors.Is(err, store.ErrUnavailable) || errors.Is(err, storeurl.ErrNotOpen) ||
		!strings.Contains(err.Error(), victim.Addr) {
		t.Fatalf("Take of a key of the server down: %v; want ErrUnavailable naming %s (not ErrNotOpen)", err, victim.Addr)
	}

	var mu sync.Mutex
	var tripped []string
	const cooldown = 100 * time.Millisecond
	rs, err := resilient.New(st, resilient.WithPolicy(resilient.FailClosed), resilient.WithTimeout(2*time.Second),
		resilient.WithBreaker(3, cooldown), resilient.WithOverLimitCache(0),
		resilient.WithHooks(resilient.Hooks{Tripped: func(e *resilient.CircuitOpenError) {
			mu.Lock()
			defer mu.Unlock()
			tripped = append(tripped, e.Partition)
		}}))
	if err != nil {
		t.Fatal(err)
	}
	out := make([]algo.Decision, 1)
	decide := func(k string) (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := rs.Take(ctx, []store.Request{{Key: k, Limit: retryLimit, Cost: 1}}, out)
		return out[0].Allowed, err
	}
	taken := map[string]int64{}
	for round := range 3 {
		for _, k := range theirs {
			if ok, err := decide(k); err != nil || ok {
				t.Fatalf("round %d: key %s of the server down: allowed=%v, %v; want refused by FailClosed", round, k, ok, err)
			}
		}
		for _, k := range ours {
			if ok, err := decide(k); err != nil || !ok {
				t.Fatalf("round %d: key %s of a live server: allowed=%v, %v; want admitted by the store", round, k, ok, err)
			}
			taken[k]++
		}
	}
	mu.Lock()
	if want := "server " + victim.Addr; len(tripped) != 1 || tripped[0] != want {
		t.Errorf("breakers tripped: %q; want the one of %q alone", tripped, want)
	}
	mu.Unlock()

	if err := victim.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, err := decide(theirs[0])
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			taken[theirs[0]]++
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("key of the restarted server still refused 10s after its restart (breaker %v)", rs.Breaker())
		}
		time.Sleep(cooldown / 10) // waiting out the breaker's real-time cool-down
	}
	for _, k := range append(theirs, ours...) {
		if ok, err := decide(k); err != nil || !ok {
			t.Fatalf("key %s after the restart: allowed=%v, %v; want admitted by the store", k, ok, err)
		}
		taken[k]++
	}
	for _, k := range append(theirs, ours...) {
		if got, want := peekRemaining(t, url, k), 100-taken[k]; got != want {
			t.Errorf("key %s: Remaining %d seen by a store opened with the three servers up, want %d", k, got, want)
		}
	}
}

// No memcached server of three answers at start: the store is not opened
// (a *Retrying, ErrNotOpen) as before. When one comes back a retry opens
// the ring on it, logged "store opened; 2 of 3 memcached servers not
// answering" with a WARN naming each of the two; that server's keys are
// the store's.
func TestOpenRetryingMemcachedNoneThenOne(t *testing.T) {
	srvs, url := memcachedRing(t, 3)
	first := srvs[0]
	theirs, _ := keysOf(t, url, first.Addr, 1)
	for _, s := range srvs {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	st, _, logs := openDegraded(t, url, "connection refused", slog.LevelInfo)
	if err := first.Restart(); err != nil {
		t.Fatal(err)
	}
	waitOpened(t, st, theirs[0], 10*time.Second)
	mc, ok := st.(*storeurl.Retrying).Unwrap().(*memcached.Store)
	if !ok {
		t.Fatalf("opened store %T, want *memcached.Store", st.(*storeurl.Retrying).Unwrap())
	}
	if u := mc.Unanswered(); len(u) != 2 || u[0].Addr != srvs[1].Addr || u[1].Addr != srvs[2].Addr {
		t.Errorf("Unanswered() = %v; want %s and %s", u, srvs[1].Addr, srvs[2].Addr)
	}
	l := logs.String()
	if !strings.Contains(l, `level=INFO msg="store opened; 2 of 3 memcached servers not answering"`) {
		t.Errorf("logs: want the INFO saying 2 of 3 servers do not answer, got:\n%s", l)
	}
	for _, s := range srvs[1:] {
		if !strings.Contains(l, "server="+s.Addr) {
			t.Errorf("logs: want a WARN naming %s, got:\n%s", s.Addr, l)
		}
	}
	if n := strings.Count(l, `msg="memcached server not answering when the store opened (2 of 3)`); n != 2 {
		t.Errorf("logs: %d WARN records of servers not answering, want 2:\n%s", n, l)
	}
}
