package memcached_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
	"github.com/floodgate/floodgate/store/resilient"
)

// TestRefusalBesideDeadServerIsPartial: a multi-key Take over a key of a
// live server that is over its limit and a key of a dead server is refused
// by the live one whatever the dead one would say: it returns the dead
// server's failure with Result.Partial (store.Result's contract, as
// store/redis does), the refusing request's decision, the zero Decision
// for the dead server's request (not decided), and what the live server's
// admitting request alone would get, its charge rolled back.
// store/resilient answers such a Take as the refusal it is; as a plain
// error it went to the failure policy, which failing open admitted the
// request the live server refused.
func TestRefusalBesideDeadServerIsPartial(t *testing.T) {
	a, b := testserver.NewMemcached(t), testserver.NewMemcached(t)
	if a == nil || b == nil {
		t.Skip("no memcached")
	}
	clock := newClock(t0.Add(30 * time.Minute))
	s := openURL(t, "memcached://"+a.Addr+","+b.Addr, clock, memcached.WithTimeout(time.Second))
	var liveKeys []string
	dead := ""
	for i := 0; len(liveKeys) < 12 || dead == ""; i++ {
		k := uniqueKey(t, "p"+strconv.Itoa(i))
		if s.ServerFor(k) == a.Addr {
			liveKeys = append(liveKeys, k)
		} else if dead == "" {
			dead = k
		}
	}
	pd := s.Partition(dead)
	if err := b.Kill(); err != nil {
		t.Fatal(err)
	}
	// The breaker never opens here: each Take goes to the store.
	rs, err := resilient.New(s, resilient.WithPolicy(resilient.FailOpen), resilient.WithTimeout(5*time.Second), resilient.WithBreaker(1000, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	const limit = 5
	for _, p := range []algo.Params{
		{Algorithm: algo.TokenBucket, Limit: limit, Period: time.Hour},
		{Algorithm: algo.FixedWindow, Limit: limit, Period: time.Hour},
		{Algorithm: algo.SlidingWindow, Limit: limit, Period: time.Hour},
		{Algorithm: algo.SlidingLog, Limit: limit, Period: time.Hour},
	} {
		l := compile(t, p)
		full, free := liveKeys[0], liveKeys[1]
		liveKeys = liveKeys[2:]
		out := make([]algo.Decision, 1)
		if _, err := s.Take(ctx(t), []store.Request{{Key: full, Limit: l, Cost: limit}}, out); err != nil || !out[0].Allowed {
			t.Fatalf("%v: filling %q: %+v, %v", p.Algorithm, full, out[0], err)
		}
		for _, order := range [][3]int{{0, 1, 2}, {2, 1, 0}, {1, 2, 0}} {
			keys := [3]string{free, full, dead}
			reqs := make([]store.Request, 3)
			for j, o := range order {
				reqs[j] = store.Request{Key: keys[o], Limit: l, Cost: 1}
			}
			out := make([]algo.Decision, 3)
			res, err := s.Take(ctx(t), reqs, out)
			checkPlaced(t, "Take", p.Algorithm, []string{reqs[0].Key, reqs[1].Key, reqs[2].Key}, err, []int{pd}, nil)
			if res.Allowed || !res.Partial {
				t.Errorf("%v %v: Take = %+v, want refused with Partial (the live key over its limit refuses it whatever the dead server says)", p.Algorithm, order, res)
			}
			for j, o := range order {
				d := out[j]
				switch o {
				case 0: // free: alone it passes, nothing charged
					if !d.Allowed || d.Limit != limit || d.Remaining != limit {
						t.Errorf("%v %v: free key's decision %+v, want allowed with %d remaining (nothing charged)", p.Algorithm, order, d, limit)
					}
				case 1: // full: refused
					if d.Allowed || d.Limit != limit || d.Remaining != 0 {
						t.Errorf("%v %v: full key's decision %+v, want refused, limit %d", p.Algorithm, order, d, limit)
					}
				case 2: // dead: not decided
					if d != (algo.Decision{}) {
						t.Errorf("%v %v: dead key's decision %+v, want the zero Decision (not decided)", p.Algorithm, order, d)
					}
				}
			}
			// Behind store/resilient failing open, the refusal stands.
			if res, err := rs.Take(ctx(t), reqs, out); err != nil || res.Allowed || res.Fallback {
				t.Errorf("%v %v: through resilient.FailOpen: Take = %+v, %v; want refused by the store, not the policy's admission", p.Algorithm, order, res, err)
			}
			peek := make([]algo.Decision, 1)
			if err := s.Peek(ctx(t), []store.Request{{Key: free, Limit: l}}, peek); err != nil || peek[0].Remaining != limit {
				t.Errorf("%v %v: Peek(free) = %+v, %v; want %d remaining (the charge rolled back)", p.Algorithm, order, peek[0], err, limit)
			}
		}
	}
}
