package memcached_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
)

// TestCASDisabled: a memcached started with -C (compare-and-swap off)
// answers every gets with CAS id 0 and lands no cas. Every bucket-family
// Take used to fail as "17 compare-and-swap attempts lost to concurrent
// writers" (store.ErrContention, which opens no breaker: the failure policy
// answered every decision, under a wrong diagnosis). Open now refuses such
// a server, and a store that opened before it came back with -C names the
// cause.
func TestCASDisabled(t *testing.T) {
	srv := testserver.NewMemcached(t, "-C")
	_, err := memcached.Open("memcached://" + srv.Addr)
	if err == nil || !strings.Contains(err.Error(), "-C") || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Open on a memcached with -C: %v; want an error naming -C, not ErrUnavailable (retrying does not help)", err)
	}
	t.Logf("Open: %v", err)

	s, err := memcached.Open("memcached://"+srv.Addr, memcached.WithoutServerCheck(), memcached.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := ctx(t)
	l := compile(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Hour, Burst: 50})
	key := uniqueKey(t, "k")
	out := make([]algo.Decision, 1)
	var errs []error
	for range 3 {
		if _, err := s.Take(c, []store.Request{{Key: key, Limit: l, Cost: 1}}, out); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		t.Fatal("Takes on a memcached with -C all passed")
	}
	for _, err := range errs {
		if errors.Is(err, store.ErrContention) || !strings.Contains(err.Error(), "-C") || !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("Take on a memcached with -C: %v; want ErrUnavailable naming -C, not contention", err)
		}
	}
	if st := s.Stats(); st.Contention != 0 || st.CASRetries != 0 {
		t.Fatalf("Stats %+v: the -C refusals were counted as contention", st)
	}
}

// TestItemSizeFromServer: a server with a smaller item size limit (-I
// 512k) than the store's default (1 MiB). Its refusal ("SERVER_ERROR
// object too large for cache") was an ErrUnavailable that counted against
// the server's breaker and was answered by the failure policy (FailOpen
// admitting a request the store could never hold); now Open keeps to the
// server's -I, and a refusal by a server whose -I was lowered since Open
// is ErrBadRequest naming the key, the server and what to do.
func TestItemSizeFromServer(t *testing.T) {
	srv := testserver.NewMemcached(t, "-I", "512k")
	c := ctx(t)
	l := compile(t, algo.Params{Algorithm: algo.SlidingLog, Limit: 200_000, Period: time.Hour})
	conc := compile(t, algo.Params{Algorithm: algo.Concurrency, Limit: 200_000, LeaseTTL: time.Hour})
	out := make([]algo.Decision, 1)
	for _, check := range []bool{true, false} {
		opts := []memcached.Option{memcached.WithClock(newClock(t0).Now), memcached.WithTimeout(5 * time.Second)}
		if !check {
			opts = append(opts, memcached.WithoutServerCheck())
		}
		s, err := memcached.Open("memcached://"+srv.Addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if got := s.MaxItemSize(); check && got != 512<<10 {
			t.Errorf("item size limit %d after Open, want the server's 524288", got)
		}
		for _, lim := range []*algo.Limit{l, conc} {
			// 70 000 units: 560-630 kB, over 512 KiB.
			_, err = s.Take(c, []store.Request{{Key: uniqueKey(t, "big"), Limit: lim, Cost: 70_000, Lease: 7}}, out)
			if !errors.Is(err, store.ErrBadRequest) || errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "item size limit") || !strings.Contains(err.Error(), "-I") {
				t.Fatalf("checked=%v: %v of 70 000 units on a server with -I 512k: %v; want ErrBadRequest naming the item size limit and -I", check, lim.Algorithm(), err)
			}
			t.Logf("checked=%v: %v", check, err)
		}
		// What fits is stored.
		if _, err := s.Take(c, []store.Request{{Key: uniqueKey(t, "fits"), Limit: l, Cost: 50_000}}, out); err != nil || !out[0].Allowed {
			t.Fatalf("50 000 units (400 kB): %+v, %v", out[0], err)
		}
	}
}

// TestBinaryOnlyServer: a memcached speaking only the binary protocol (-B
// binary, or SASL) does not answer the text protocol this store speaks;
// Open's error says so instead of a bare i/o timeout.
func TestBinaryOnlyServer(t *testing.T) {
	srv := testserver.NewMemcachedBinary(t)
	_, err := memcached.Open("memcached://"+srv.Addr, memcached.WithTimeout(300*time.Millisecond))
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "binary protocol") || !strings.Contains(err.Error(), srv.Addr) {
		t.Fatalf("Open on a binary-only memcached: %v; want ErrUnavailable naming the server and the binary protocol", err)
	}
	t.Logf("Open: %v", err)
}
