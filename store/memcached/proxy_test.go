package memcached_test

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
)

// TestOpenThroughTwemproxy: a proxy speaking the text protocol (twemproxy
// here) forwards gets, cas and add but not "stats settings" (twemproxy
// closes the connection on it). Open read every server's settings and so
// refused such a proxy, which its version check (gomemcache's Ping) had
// let through; it must open, and decide by gets/cas through it.
func TestOpenThroughTwemproxy(t *testing.T) {
	mc := testserver.NewMemcached(t)
	proxy := testserver.NewTwemproxy(t, mc.Addr)
	s, err := memcached.Open("memcached://"+proxy.Addr, memcached.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatalf("Open through twemproxy: %v", err)
	}
	defer s.Close()
	c := ctx(t)
	l := compile(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 2, Period: time.Hour, Burst: 2})
	key := uniqueKey(t, "k")
	out := make([]algo.Decision, 1)
	for i, want := range []bool{true, true, false} {
		if _, err := s.Take(c, []store.Request{{Key: key, Limit: l, Cost: 1}}, out); err != nil {
			t.Fatalf("Take %d through twemproxy: %v", i, err)
		}
		if out[0].Allowed != want {
			t.Fatalf("Take %d through twemproxy: %+v, want allowed %v", i, out[0], want)
		}
	}
}
