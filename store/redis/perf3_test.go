package redis

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

func TestPerfOps(t *testing.T) {
	s := openT(t, redisURL(t))
	c := s.client
	l, _ := algo.Compile(algo.Params{Algorithm: algo.GCRA, Limit: 1, Period: time.Hour, Burst: 2000000})
	stat := func(name string) {
		v, _ := c.Do(t.Context(), c.B().Info().Section("commandstats").Build()).ToString()
		i := strings.Index(v, "cmdstat_evalsha")
		t.Log(name, v[i:i+80])
		c.Do(t.Context(), c.B().ConfigResetstat().Build())
	}
	mk := func(n int, op string) scriptArgs {
		var sa scriptArgs
		for i := 0; i < n; i++ {
			s.appendGroup(&sa, op, "", []store.Request{{Key: "pk" + itoa(int64(i)), Limit: l, Cost: 1}}, nil, nil)
		}
		return sa
	}
	c.Do(t.Context(), c.B().ConfigResetstat().Build())
	for _, tc := range []struct {
		n  int
		op string
	}{{1, opTake}, {1, opPeek}, {10, opTake}, {64, opTake}} {
		sa := mk(tc.n, tc.op)
		for i := 0; i < 300; i++ {
			if err := s.eval(t.Context(), scriptFor(sa.fams), sa.keys, sa.argv("0")).Error(); err != nil {
				t.Fatal(err)
			}
		}
		stat(itoa(int64(tc.n)) + tc.op)
	}
}
