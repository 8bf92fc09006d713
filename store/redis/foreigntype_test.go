package redis

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
)

// TestPeekOnAKeyOfAnotherType holds a peek with a sorted-set algorithm
// (sliding log, concurrency) on a key of another Redis type to what a take
// does there: the key reads as fresh (lua/zset.lua), so the peek reports
// the decision of a take on a fresh state, and leaves the key as it is. It
// failed with Redis' WRONGTYPE.
func TestPeekOnAKeyOfAnotherType(t *testing.T) {
	rid := runKey()
	addr := testserver.Redis(t)
	s := openT(t, "redis://"+addr)
	do := func(args ...string) any {
		t.Helper()
		v, err := testserver.RedisDo(addr, 2*time.Second, args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return v
	}
	for _, k := range []algo.Kind{algo.SlidingLog, algo.Concurrency} {
		l, err := algo.Compile(withLimit(exactParams(k), 5))
		if err != nil {
			t.Fatal(err)
		}
		for _, typ := range []struct {
			name  string
			write []string // the command that leaves the key, after its name
		}{
			{"string", []string{"SET", "", "x"}},
			{"hash", []string{"HSET", "", "f", "v"}},
			{"list", []string{"RPUSH", "", "a"}},
		} {
			t.Run(k.String()+"/"+typ.name, func(t *testing.T) {
				key := "foreign:" + rid + ":" + k.String() + ":" + typ.name
				cmd := append([]string{typ.write[0], key}, typ.write[2:]...)
				do(cmd...)
				reqs := []store.Request{{Key: key, Limit: l, Cost: 2, Lease: 7}}
				peek := make([]algo.Decision, 1)
				if err := s.Peek(t.Context(), reqs, peek); err != nil {
					t.Fatalf("Peek(cost 2) on a %s key: %v; want the decision on a fresh state", typ.name, err)
				}
				if got := do("TYPE", key); got != typ.name {
					t.Errorf("after the peek the key is a %v, want the %s left as it was", got, typ.name)
				}
				take := make([]algo.Decision, 1)
				res, err := s.Take(t.Context(), reqs, take)
				if err != nil || !res.Allowed {
					t.Fatalf("Take(cost 2) on the %s key = %+v, %v; want admitted on a fresh state", typ.name, take[0], err)
				}
				if peek[0].Allowed != take[0].Allowed || peek[0].Remaining != take[0].Remaining {
					t.Errorf("Peek(cost 2) = %+v, want what the take then decided: %+v", peek[0], take[0])
				}
				if peek[0].Remaining != 3 {
					t.Errorf("Peek(cost 2) remaining %d, want 3 (a fresh budget of 5)", peek[0].Remaining)
				}
			})
		}
	}
}
