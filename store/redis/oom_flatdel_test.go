package redis

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// TestFullServerFlatBatchDeleteFirst is TestFullServerDeleteFirst for a
// coalesced batch of single-key takes (lua/takes.lua, via flat.lua): its
// first caller's zero-cost take of a fresh key leaves nothing to keep, and
// the DEL of that key, which does not exist, was the call's first write,
// after which a full Redis let the next caller's SET of a new key through.
// The batch is refused with OOM and writes nothing.
func TestFullServerFlatBatchDeleteFirst(t *testing.T) {
	s, do, fill := fillableRedis(t)
	if s == nil {
		return
	}
	fill()
	for _, p := range []algo.Params{
		{Algorithm: algo.FixedWindow, Limit: 3, Period: time.Hour},
		{Algorithm: algo.GCRA, Limit: 3, Period: time.Hour},
		{Algorithm: algo.TokenBucket, Limit: 3, Period: time.Hour},
	} {
		l, err := algo.Compile(p)
		if err != nil {
			t.Fatal(err)
		}
		fresh, added := "fg:oomflat:"+p.Algorithm.String()+":fresh", "fg:oomflat:"+p.Algorithm.String()+":added"
		reqs := []store.Request{{Key: fresh, Limit: l, Cost: 0}, {Key: added, Limit: l, Cost: 1}}
		// Two callers' takes in one call, as the batcher sends them.
		var sa scriptArgs
		s.appendGroup(&sa, opTake, "", reqs, []int{0}, nil)
		s.appendGroup(&sa, opTake, "", reqs, []int{1}, nil)
		if programFor(&sa) != flatTakes {
			t.Fatalf("%s: the batch does not run lua/takes.lua", p.Algorithm)
		}
		err = s.evalMulti(context.Background(), []scriptArgs{sa})[0].Error()
		if err == nil || !strings.Contains(err.Error(), "OOM command not allowed") {
			t.Errorf("%s: a batch of a take of 0 on a fresh key and 1 on a new one, on a full server: %v; want the OOM error", p.Algorithm, err)
		}
		if n := do("EXISTS", added).(int64); n != 0 {
			t.Errorf("%s: the full server refused nothing: %s was written", p.Algorithm, added)
		}
	}
}
