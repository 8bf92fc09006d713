package redis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// TestFullServerDeleteFirst: a script call whose first write would be a
// DEL of a key that does not exist (a zero-cost take on a fresh key leaves
// nothing to keep) must not open the way for its later writes on a full
// Redis: Redis checks memory only at a script's first write, and a DEL,
// even of nothing, is one. The take over a fresh key (cost 0) and a new
// key (cost 1) is refused with OOM and writes nothing, for each string
// algorithm.
func TestFullServerDeleteFirst(t *testing.T) {
	s, do, fill := fillableRedis(t)
	if s == nil {
		return
	}
	fill()
	for _, p := range []algo.Params{
		{Algorithm: algo.FixedWindow, Limit: 3, Period: time.Hour},
		{Algorithm: algo.GCRA, Limit: 3, Period: time.Hour},
		{Algorithm: algo.TokenBucket, Limit: 3, Period: time.Hour},
		{Algorithm: algo.SlidingWindow, Limit: 3, Period: time.Hour},
	} {
		l, err := algo.Compile(p)
		if err != nil {
			t.Fatal(err)
		}
		fresh, added := "fg:oomdel:{"+p.Algorithm.String()+"}:fresh", "fg:oomdel:{"+p.Algorithm.String()+"}:added"
		reqs := []store.Request{{Key: fresh, Limit: l, Cost: 0}, {Key: added, Limit: l, Cost: 1}}
		out := make([]algo.Decision, 2)
		_, err = s.Take(context.Background(), reqs, out)
		if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "OOM command not allowed") {
			t.Errorf("%s: a take of 0 on a fresh key and 1 on a new one, on a full server: %+v, %v; want the OOM error", p.Algorithm, out, err)
		}
		if n := do("EXISTS", added).(int64); n != 0 {
			t.Errorf("%s: the full server refused nothing: %s was written", p.Algorithm, added)
		}
	}
}
