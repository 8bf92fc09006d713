package redis

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/storetest"
)

// TestCrossSlotAheadKeepsTTL: on a Cluster, a Take over several hash
// slots reserves the later slots at the time the first slot's node read
// (reserveCrossSlot). When that node's clock is ahead of this one's, the
// key is stamped ahead and the state expires, by the algorithm, at an
// instant this node's clock reaches only that much later; its TTL must
// last until then, or the key vanishes early and the next take on this
// node alone finds a fresh state (over-admission: a fixed window's second
// full limit in the last moments of its window). Played on one server
// with a reservation at its TIME + 10 s, for every algorithm: PTTL must be
// at least the state's ExpiresAt minus the server's time (less a second
// for the test's own round trips). It was ExpiresAt minus the stamp, 10 s
// short.
func TestCrossSlotAheadKeepsTTL(t *testing.T) {
	s := openT(t, redisURL(t))
	ctx := context.Background()
	const ahead = 10_000_000 // µs
	for _, p := range []algo.Params{
		{Algorithm: algo.FixedWindow, Limit: 3, Period: time.Minute},
		{Algorithm: algo.SlidingLog, Limit: 3, Period: time.Minute},
		{Algorithm: algo.SlidingWindow, Limit: 3, Period: time.Minute},
		{Algorithm: algo.TokenBucket, Limit: 3, Period: time.Minute},
		{Algorithm: algo.SmoothBursty, Limit: 3, Period: time.Minute},
		{Algorithm: algo.Concurrency, Limit: 3, LeaseTTL: time.Minute},
	} {
		l, err := algo.Compile(p)
		if err != nil {
			t.Fatal(err)
		}
		key := "{skew" + runKey() + "}:" + p.Algorithm.String()
		server, err := s.timeOf(ctx, s.client.B().Time().Build())
		if err != nil {
			t.Fatal(err)
		}
		stamp := server + ahead
		reqs := []store.Request{{Key: key, Limit: l, Cost: 2, Lease: 7}}
		out := make([]algo.Decision, 1)
		res, err := s.reserveCrossSlot(ctx, reqs, out, [][]int{{0}}, []int{s.Partition(key)}, stamp)
		if err != nil || !res.Allowed {
			t.Fatalf("%s: reservation at the server's time + 10s: %+v %+v, %v", p.Algorithm, res, out[0], err)
		}
		ref := storetest.NewReference()
		ref.Take(reqs, stamp)
		exp := ref.ExpiresAt(key, l)
		want := time.Duration((exp-server)/1000)*time.Millisecond - time.Second
		if ttl, ok := pttl(t, s, key); !ok || ttl < want {
			t.Errorf("%s: a key stamped 10s ahead of its server's clock has PTTL %v (exists %v), want at least %v: it expires before its state does", p.Algorithm, ttl, ok, want)
		}
	}
}
