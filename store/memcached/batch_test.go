package memcached_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
)

// TestManyKeysFewRoundTrips: a Take of 1000 keys over three servers used
// to charge them one after the other, a round trip each (two for a fresh
// window counter: an incr that missed, then an add), so that a request
// with many descriptors outlasted the store timeout and the failure
// policy answered it (fail open: admitted, the victim's key not charged).
// Each server now sees a handful of round trips whatever the number of
// keys, for an admission (fresh and existing keys) and a refusal (its roll
// back and the decisions alone included), and the decisions stay those
// of the keys one by one.
func TestManyKeysFewRoundTrips(t *testing.T) {
	var addrs []string
	for range 3 {
		addrs = append(addrs, testserver.NewMemcached(t).Addr)
	}
	clock := newClock(t0)
	s, err := memcached.Open("memcached://"+addrs[0]+","+addrs[1]+","+addrs[2],
		memcached.WithTimeout(5*time.Second), memcached.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := ctx(t)
	const n = 1000
	for _, p := range []algo.Params{
		{Algorithm: algo.FixedWindow, Limit: 3, Period: time.Hour},
		{Algorithm: algo.SlidingWindow, Limit: 3, Period: time.Hour, SubWindows: 4},
		{Algorithm: algo.TokenBucket, Limit: 3, Period: time.Hour},
		{Algorithm: algo.Concurrency, Limit: 3, LeaseTTL: time.Hour},
	} {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			l := compile(t, p)
			pre := uniqueKey(t, "k")
			reqs := make([]store.Request, n)
			for i := range reqs {
				reqs[i] = store.Request{Key: pre + strconv.Itoa(i), Limit: l, Cost: 1, Lease: 7}
			}
			out := make([]algo.Decision, n)
			take := func(what string, wantAllowed bool, maxTrips int64) {
				t.Helper()
				before := memcached.RoundTrips(s)
				res, err := s.Take(c, reqs, out)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if res.Allowed != wantAllowed {
					t.Fatalf("%s: allowed %v, want %v", what, res.Allowed, wantAllowed)
				}
				after := memcached.RoundTrips(s)
				for i := range after {
					if d := after[i] - before[i]; d > maxTrips {
						t.Errorf("%s of %d keys: %d round trips to server %d, want at most %d", what, n, d, i, maxTrips)
					} else {
						t.Logf("%s of %d keys: %d round trips to server %d", what, n, d, i)
					}
				}
			}
			take("Take of fresh keys", true, 4)
			for i, d := range out {
				if !d.Allowed || d.Remaining != 2 {
					t.Fatalf("fresh key %d: %+v, want allowed with 2 remaining", i, d)
				}
			}
			take("Take of existing keys", true, 4)
			// The last key is now used up: a Take over all is refused, and
			// charges nothing; the others alone would pass.
			reqs[n-1].Cost = 1
			if _, err := s.Take(c, reqs[n-1:], out[:1]); err != nil || !out[0].Allowed || out[0].Remaining != 0 {
				t.Fatalf("using up the last key: %+v, %v", out[0], err)
			}
			for i := range reqs[:n-1] {
				reqs[i].Lease = 8 // a refused Take's leases are not kept
			}
			take("Refused Take", false, 6)
			for i, d := range out {
				if d.Allowed != (i < n-1) || i < n-1 && d.Remaining != 1 {
					t.Fatalf("refused Take: request %d: %+v, want allowed %v (1 remaining with nothing charged)", i, d, i < n-1)
				}
			}
			// Nothing of the refused Take stayed charged.
			peek := make([]algo.Decision, n)
			for i := range reqs {
				reqs[i].Cost = 0
			}
			if err := s.Peek(c, reqs, peek); err != nil {
				t.Fatal(err)
			}
			for i, d := range peek {
				if want := map[bool]int64{true: 0, false: 1}[i == n-1]; d.Remaining != want {
					t.Fatalf("after the refused Take, key %d has %d remaining, want %d", i, d.Remaining, want)
				}
			}
		})
	}
}

// TestManyKeysOneKey: the requests of one key in a Take are decided in
// order, each after the previous one's charge, whatever the key's
// algorithm and whether its counter exists: 5 requests of a key with a
// budget of 3 refuse the Take at the fourth, and nothing stays charged.
func TestManyKeysOneKey(t *testing.T) {
	s := open(t, newClock(t0))
	c := ctx(t)
	for _, p := range []algo.Params{
		{Algorithm: algo.FixedWindow, Limit: 3, Period: time.Hour},
		{Algorithm: algo.SlidingWindow, Limit: 3, Period: time.Hour},
		{Algorithm: algo.SlidingLog, Limit: 3, Period: time.Hour},
		{Algorithm: algo.TokenBucket, Limit: 3, Period: time.Hour},
		{Algorithm: algo.GCRA, Limit: 3, Period: time.Hour, Burst: 3},
		{Algorithm: algo.Concurrency, Limit: 3, LeaseTTL: time.Hour},
	} {
		l := compile(t, p)
		name := p.Algorithm.String()
		key, other := uniqueKey(t, name), uniqueKey(t, name+"o")
		reqs := []store.Request{{Key: other, Limit: l, Cost: 1}}
		for range 5 {
			reqs = append(reqs, store.Request{Key: key, Limit: l, Cost: 1})
		}
		out := make([]algo.Decision, len(reqs))
		res, err := s.Take(c, reqs, out)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			t.Errorf("%s: 5 units of a budget of 3 on one key admitted", name)
		}
		peek := make([]algo.Decision, 2)
		if err := s.Peek(c, []store.Request{{Key: key, Limit: l}, {Key: other, Limit: l}}, peek); err != nil {
			t.Fatal(err)
		}
		for i, d := range peek {
			if d.Remaining != l.Capacity() {
				t.Errorf("%s: after the refused Take, key %d: %s, want nothing charged", name, i, fmt.Sprintf("%+v", d))
			}
		}
	}
}
