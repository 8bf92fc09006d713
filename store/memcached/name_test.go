package memcached_test

import (
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
)

// TestDialsByName: a server named by a host name is dialed by that name at
// every connection, reconnections after a restart included, so that a
// server that comes back on another address (a Kubernetes pod) is found.
// Open resolved the name once and dialed that address for the store's
// life. The store names the server as written (Servers, PartitionName),
// and Open still refuses a host that does not resolve.
func TestDialsByName(t *testing.T) {
	srv := testserver.NewMemcached(t)
	_, port, err := net.SplitHostPort(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	name := "localhost:" + port
	s, err := memcached.Open("memcached://localhost:0"+port, memcached.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.Servers(); !slices.Equal(got, []string{name}) {
		t.Errorf("Servers() = %q, want [%q]: the server as written (port normalised), not an address resolved once", got, name)
	}
	c := ctx(t)
	bucket := compile(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 1 << 20, Period: time.Hour})
	fixed := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1 << 20, Period: time.Hour})
	take := func(when string) {
		t.Helper()
		for _, reqs := range [][]store.Request{
			{{Key: "n:a", Limit: bucket, Cost: 1}},
			{{Key: "n:b", Limit: fixed, Cost: 1}, {Key: "n:c", Limit: bucket, Cost: 1}},
		} {
			out := make([]algo.Decision, len(reqs))
			if res, err := s.Take(c, reqs, out); err != nil || !res.Allowed {
				t.Fatalf("Take of %d keys %s: %+v, %v", len(reqs), when, res, err)
			}
		}
	}
	take("before the restart")
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	take("after the restart")
	if _, err := memcached.Open("memcached://no-such-host.invalid:11211"); err == nil || !strings.Contains(err.Error(), "no-such-host.invalid") {
		t.Errorf("Open of a host that does not resolve: %v, want an error naming it", err)
	}
}
