package resilient

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
)

// TestSharesStayBounded: FailLocal compiles each limit's local share once
// and keeps it, keyed by the limit. A server compiles new limits on every
// reload and override, and a request-carried limit past the policy's
// per-configuration cache is compiled per request: the shares of limits
// long gone were kept for as long as the process ran (12288 after 12288
// reloads' worth of limits). They are bounded by maxShares, and the shares
// still answer right.
func TestSharesStayBounded(t *testing.T) {
	srv := testserver.NewMemcached(t)
	if srv == nil {
		t.Skip("no memcached")
	}
	inner, err := memcached.Open("memcached://"+srv.Addr, memcached.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(inner, WithPolicy(FailLocal), WithInstances(2), WithBreaker(1, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	out := make([]algo.Decision, 1)
	for i := range 3 * maxShares {
		// A limit compiled anew, as a reload compiles the same rule.
		l, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Take(ctx, []store.Request{{Key: "k", Limit: l, Cost: 1}}, out)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Fallback || out[0].Limit != 5 {
			t.Fatalf("take %d: fallback %v, limit %d; want the local share 5", i, res.Fallback, out[0].Limit)
		}
	}
	n := 0
	s.divided.Range(func(any, any) bool { n++; return true })
	if n > maxShares {
		t.Fatalf("%d shares kept after %d limits, want at most %d", n, 3*maxShares, maxShares)
	}
}
