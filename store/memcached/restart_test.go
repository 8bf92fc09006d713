package memcached_test

import (
	"errors"
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

// fillPool runs callers goroutines deciding at once, so that the store's
// pool holds up to that many idle connections to each server used.
func fillPool(t *testing.T, s store.Store, keys []string, l *algo.Limit, callers int) {
	t.Helper()
	c := ctx(t)
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			out := make([]algo.Decision, 1)
			for i := range 20 {
				if _, err := s.Take(c, []store.Request{{Key: keys[(g+i)%len(keys)], Limit: l, Cost: 1}}, out); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestRestartedServerReconnects: after a server restarts, the connections
// the store pooled to it are dead. Each used to fail one request (EOF)
// before being dropped; now a pooled connection the server closed is
// replaced before it carries a request, so the first request after the
// restart is answered.
func TestRestartedServerReconnects(t *testing.T) {
	srv := testserver.NewMemcached(t)
	s, err := memcached.Open("memcached://"+srv.Addr, memcached.WithTimeout(5*time.Second), memcached.WithMaxIdleConns(16))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := ctx(t)
	fixed := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1 << 20, Period: time.Hour})
	bucket := compile(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 1 << 20, Period: time.Hour})
	fillPool(t, s, []string{"a", "b", "c"}, bucket, 16)
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	out := make([]algo.Decision, 1)
	for i := range 32 {
		l := bucket
		if i%2 == 1 {
			l = fixed
		}
		if _, err := s.Take(c, []store.Request{{Key: "a", Limit: l, Cost: 1}}, out); err != nil {
			t.Fatalf("Take %d after the server restarted: %v; want an answer (a dead pooled connection was used)", i+1, err)
		}
	}
	// While the server is down, a pooled connection fails with the
	// reconnection's error, which names the server.
	fillPool(t, s, []string{"a", "b", "c"}, bucket, 16)
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	_, err = s.Take(c, []store.Request{{Key: "a", Limit: bucket, Cost: 1}}, out)
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Take with the server down: %v, want ErrUnavailable", err)
	}
	t.Logf("with the server down: %v", err)
}

// TestRingServerRestart kills one server of a ring of three under load,
// behind store/resilient with FailClosed: its keys are refused by the
// policy once its breaker opens, the other servers' keys are decided by
// memcached throughout, and once the server is back its breaker closes
// within a cool-down or two (not one cool-down per pooled connection).
func TestRingServerRestart(t *testing.T) {
	var srvs []*testserver.Server
	url := "memcached://"
	for i := range 3 {
		srv := testserver.NewMemcached(t)
		srvs = append(srvs, srv)
		if i > 0 {
			url += ","
		}
		url += srv.Addr
	}
	mc, err := memcached.Open(url, memcached.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	const cooldown = 100 * time.Millisecond
	var trips atomic.Int32
	rs, err := resilient.New(mc, resilient.WithPolicy(resilient.FailClosed), resilient.WithTimeout(2*time.Second),
		resilient.WithBreaker(5, cooldown), resilient.WithOverLimitCache(0),
		resilient.WithHooks(resilient.Hooks{Tripped: func(*resilient.CircuitOpenError) { trips.Add(1) }}))
	if err != nil {
		t.Fatal(err)
	}
	victim := srvs[1]
	var theirs, ours []string
	for i := 0; len(theirs) < 16 || len(ours) < 16; i++ {
		k := "ring:" + itoa(i)
		if mc.ServerFor(k) == victim.Addr {
			if len(theirs) < 16 {
				theirs = append(theirs, k)
			}
		} else if len(ours) < 16 {
			ours = append(ours, k)
		}
	}
	l := compile(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 1 << 20, Period: time.Hour})
	fillPool(t, rs, theirs, l, 48) // up to 48 idle connections to the victim
	fillPool(t, rs, ours, l, 16)
	c := ctx(t)
	out := make([]algo.Decision, 1)
	decide := func(k string) (bool, error) {
		_, err := rs.Take(c, []store.Request{{Key: k, Limit: l, Cost: 1}}, out)
		return out[0].Allowed, err
	}
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	// Down: the victim's keys are refused (the policy), the others admitted
	// by memcached.
	for round := range 10 {
		for _, k := range theirs[:4] {
			if ok, err := decide(k); err != nil || ok {
				t.Fatalf("round %d: victim's key %s with its server down: allowed=%v, %v; want refused by FailClosed", round, k, ok, err)
			}
		}
		for _, k := range ours {
			if ok, err := decide(k); err != nil || !ok {
				t.Fatalf("round %d: key %s of a live server: allowed=%v, %v; want admitted by memcached", round, k, ok, err)
			}
		}
	}
	if trips.Load() == 0 || rs.Breaker() == resilient.Closed {
		t.Fatalf("after 40 failures of the victim's keys: %d trips, breaker %v; want it open", trips.Load(), rs.Breaker())
	}
	if err := victim.Restart(); err != nil {
		t.Fatal(err)
	}
	// Back: within two cool-downs the victim's keys are admitted again.
	restarted := time.Now()
	deadline := restarted.Add(2*cooldown + 400*time.Millisecond)
	for {
		ok, err := decide(theirs[0])
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("victim's key still refused %v after its server restarted (breaker %v, %d trips); want it back within 2 cool-downs of %v",
				time.Since(restarted), rs.Breaker(), trips.Load(), cooldown)
		}
		time.Sleep(cooldown / 10) // waiting out the breaker's real-time cool-down
	}
	t.Logf("the victim's keys were decided by memcached again %v after its restart", time.Since(restarted))
	for _, k := range append(theirs, ours...) {
		if ok, err := decide(k); err != nil || !ok {
			t.Fatalf("key %s after the restart: allowed=%v, %v", k, ok, err)
		}
	}
	if rs.Breaker() != resilient.Closed {
		t.Fatalf("breaker %v after the restart, want closed", rs.Breaker())
	}
}
