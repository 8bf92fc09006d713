package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
)

// commandCalls reads INFO commandstats: calls per command, the scripts'
// own calls included.
func commandCalls(t *testing.T, addr string) map[string]int {
	t.Helper()
	v, err := testserver.RedisDo(addr, 2*time.Second, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for _, line := range strings.Split(fmt.Sprint(v), "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if n, ok := strings.CutPrefix(f, "calls="); ok {
				calls[name], _ = strconv.Atoi(n)
			}
		}
	}
	return calls
}

// TestLargeCostsAreBatched: the per-unit states (sliding log, concurrency)
// keep a sorted-set member per unit, so a cost of N writes N members; the
// scripts must do it in a few calls (ZADD and ZREM of many members each),
// never one call per unit, or a large cost holds Redis (which runs one
// script at a time) for every tenant that much longer. Counted with INFO
// commandstats on a private server, over a take, a second take, a renewal
// and a release of 5000 units each.
func TestLargeCostsAreBatched(t *testing.T) {
	srv := testserver.NewRedis(t)
	if srv == nil {
		return
	}
	s := openT(t, "redis://"+srv.Addr)
	const cost = 5000
	for _, p := range []algo.Params{
		{Algorithm: algo.SlidingLog, Limit: 4 * cost, Period: time.Minute},
		{Algorithm: algo.Concurrency, Limit: 4 * cost, LeaseTTL: time.Minute},
	} {
		l, err := algo.Compile(p)
		if err != nil {
			t.Fatal(err)
		}
		key := "fg:large:" + p.Algorithm.String()
		ctx := context.Background()
		steps := []struct {
			what string
			run  func() error
		}{
			{"take", func() error {
				_, err := s.Take(ctx, []store.Request{{Key: key, Limit: l, Cost: cost, Lease: 1}}, make([]algo.Decision, 1))
				return err
			}},
			{"second take", func() error {
				_, err := s.Take(ctx, []store.Request{{Key: key, Limit: l, Cost: cost, Lease: 2}}, make([]algo.Decision, 1))
				return err
			}},
			{"renew", func() error { return s.Renew(ctx, []store.Request{{Key: key, Limit: l, Lease: 1}}) }},
			{"release", func() error { return s.Release(ctx, []store.Request{{Key: key, Limit: l, Lease: 1}}) }},
		}
		for _, st := range steps {
			if p.Algorithm == algo.SlidingLog && (st.what == "renew" || st.what == "release") {
				continue
			}
			if _, err := testserver.RedisDo(srv.Addr, 2*time.Second, "CONFIG", "RESETSTAT"); err != nil {
				t.Fatal(err)
			}
			if err := st.run(); err != nil {
				t.Fatalf("%s %s: %v", p.Algorithm, st.what, err)
			}
			calls := commandCalls(t, srv.Addr)
			total := 0
			for name, n := range calls {
				if name != "config|resetstat" && name != "info" {
					total += n
				}
			}
			t.Logf("%s %s of %d units: %d commands %v", p.Algorithm, st.what, cost, total, calls)
			if total > 50 {
				t.Errorf("%s %s of %d units ran %d commands %v, want a few batched calls", p.Algorithm, st.what, cost, total, calls)
			}
		}
		if card, err := s.client.Do(ctx, s.client.B().Zcard().Key(key).Build()).AsInt64(); err != nil || card < cost {
			t.Errorf("%s: ZCARD %d, %v; want the units held", p.Algorithm, card, err)
		}
	}
}
