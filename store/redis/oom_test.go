package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
)

// TestFullServerRefusesTakes: with maxmemory reached under noeviction,
// every algorithm's take fails with Redis' OOM error (wrapping
// store.ErrUnavailable) and changes nothing, on a key that holds units, a
// key at its limit (a refused take writes its state too, so it is refused
// like the string algorithms' refused takes), a new key and a key of
// another type, alone, all-or-nothing and in coalesced batches. The
// sorted-set scripts (sliding log, concurrency) used to trim first, a write
// Redis allows on a full server, after which Redis let their ZADD through.
// A peek still answers, a concurrency renewal and release and a reset still
// go through, and once memory is raised the decisions go on from the states
// as they were.
func TestFullServerRefusesTakes(t *testing.T) {
	s, do, fill := fillableRedis(t)
	if s == nil {
		return
	}
	ctx := context.Background()

	type limit struct {
		name string
		l    *algo.Limit
		zset bool
	}
	var limits []limit
	for _, p := range []algo.Params{
		{Algorithm: algo.FixedWindow, Limit: 3, Period: time.Hour},
		{Algorithm: algo.GCRA, Limit: 3, Period: time.Hour},
		{Algorithm: algo.SlidingWindow, Limit: 3, Period: time.Hour},
		{Algorithm: algo.SlidingLog, Limit: 3, Period: time.Hour},
		{Algorithm: algo.Concurrency, Limit: 3, LeaseTTL: time.Hour},
	} {
		l, err := algo.Compile(p)
		if err != nil {
			t.Fatal(err)
		}
		z := p.Algorithm == algo.SlidingLog || p.Algorithm == algo.Concurrency
		limits = append(limits, limit{p.Algorithm.String(), l, z})
	}
	key := func(lm limit, what string) string { return "fg:oom:{" + lm.name + "}:" + what }
	take := func(lm limit, cost int64, lease uint64, keys ...string) (algo.Decision, error) {
		reqs := make([]store.Request, len(keys))
		for i, k := range keys {
			reqs[i] = store.Request{Key: k, Limit: lm.l, Cost: cost, Lease: lease}
		}
		out := make([]algo.Decision, len(keys))
		_, err := s.Take(ctx, reqs, out)
		return out[0], err
	}

	// Before: "used" holds 1 unit, "full" its 3 (concurrency: lease 7).
	for _, lm := range limits {
		if d, err := take(lm, 1, 0, key(lm, "used")); err != nil || !d.Allowed {
			t.Fatalf("%s: take 1 on an empty server = %+v, %v", lm.name, d, err)
		}
		if d, err := take(lm, 3, 7, key(lm, "full")); err != nil || !d.Allowed {
			t.Fatalf("%s: take 3 on an empty server = %+v, %v", lm.name, d, err)
		}
	}
	// "other" holds a list, as a key left by something else would.
	for _, lm := range limits {
		do("RPUSH", key(lm, "other"), "x")
		do("PEXPIRE", key(lm, "other"), "3600000")
	}
	// snapshot is a key's whole value and absolute expiry.
	snapshot := func(k string) string {
		return fmt.Sprintf("%q expires %v", do("DUMP", k), do("PEXPIRETIME", k))
	}
	before := map[string]string{}
	for _, lm := range limits {
		for _, w := range []string{"used", "full", "other"} {
			before[key(lm, w)] = snapshot(key(lm, w))
		}
	}

	restore := fill()

	isOOM := func(err error) bool {
		return errors.Is(err, store.ErrUnavailable) && err != nil && strings.Contains(err.Error(), "OOM command not allowed")
	}
	for _, lm := range limits {
		for _, c := range []struct {
			what  string
			cost  int64
			lease uint64
			keys  []string
		}{
			{"take 1 on a key holding 1", 1, 0, []string{key(lm, "used")}},
			{"take 1 with a lease on a key holding 1", 1, 9, []string{key(lm, "used")}},
			{"take 1 on a key at its limit", 1, 0, []string{key(lm, "full")}},
			{"take 1 on a new key", 1, 0, []string{key(lm, "new")}},
			{"take 1 on a key of another type", 1, 0, []string{key(lm, "other")}},
			{"take 3 on a new key", 3, 0, []string{key(lm, "new")}},
			{"all-or-nothing take over a used and a new key", 1, 0, []string{key(lm, "used"), key(lm, "new")}},
			{"all-or-nothing take over a used and a full key", 1, 0, []string{key(lm, "used"), key(lm, "full")}},
		} {
			if d, err := take(lm, c.cost, c.lease, c.keys...); !isOOM(err) {
				t.Errorf("%s: %s on a full server = %+v, %v; want Redis' OOM error wrapping store.ErrUnavailable", lm.name, c.what, d, err)
			}
		}
		// Concurrent takes, coalesced into batches.
		var wg sync.WaitGroup
		errs := make([]error, 32)
		for i := range errs {
			wg.Go(func() {
				k := key(lm, "new")
				if i%2 == 1 {
					k = key(lm, fmt.Sprint("batch", i))
				}
				_, errs[i] = take(lm, 1, 0, k)
			})
		}
		wg.Wait()
		for i, err := range errs {
			if !isOOM(err) {
				t.Errorf("%s: concurrent take %d on a full server: %v; want Redis' OOM error", lm.name, i, err)
			}
		}
		// A peek writes nothing, so a full server answers it.
		out := make([]algo.Decision, 1)
		if err := s.Peek(ctx, []store.Request{{Key: key(lm, "used"), Limit: lm.l, Cost: 2}}, out); err != nil || !out[0].Allowed || out[0].Remaining != 0 {
			t.Errorf("%s: peek 2 on a full server = %+v, %v; want allowed, 0 remaining", lm.name, out[0], err)
		}
	}
	for _, lm := range limits {
		for _, w := range []string{"used", "full", "other"} {
			if got := snapshot(key(lm, w)); got != before[key(lm, w)] {
				t.Errorf("%s: a full server refused the takes but %s changed:\n%s\nwas\n%s", lm.name, key(lm, w), got, before[key(lm, w)])
			}
		}
		if n := do("EXISTS", key(lm, "new"), key(lm, "batch1"), key(lm, "batch3")).(int64); n != 0 {
			t.Errorf("%s: a full server refused the takes but %d new keys exist", lm.name, n)
		}
	}
	// A renewal adds no slot and a release or reset frees memory: a full
	// server lets them through.
	for _, lm := range limits {
		if lm.name != algo.Concurrency.String() {
			if err := s.Reset(ctx, key(lm, "full")); err != nil {
				t.Errorf("%s: reset on a full server: %v", lm.name, err)
			}
			if n := do("EXISTS", key(lm, "full")).(int64); n != 0 {
				t.Errorf("%s: after a reset on a full server, %s still exists", lm.name, key(lm, "full"))
			}
			continue
		}
		was := do("PEXPIRETIME", key(lm, "full")).(int64)
		time.Sleep(5 * time.Millisecond)
		if err := s.Renew(ctx, []store.Request{{Key: key(lm, "full"), Limit: lm.l, Lease: 7}}); err != nil {
			t.Errorf("renew on a full server: %v", err)
		}
		if now := do("PEXPIRETIME", key(lm, "full")).(int64); now <= was {
			t.Errorf("renew on a full server left %s expiring at %d ms, as before", key(lm, "full"), now)
		}
		if err := s.Release(ctx, []store.Request{{Key: key(lm, "full"), Limit: lm.l, Lease: 7}}); err != nil {
			t.Errorf("release on a full server: %v", err)
		}
		if n := do("EXISTS", key(lm, "full")).(int64); n != 0 {
			t.Errorf("after releasing lease 7, its only one, on a full server, %s still exists", key(lm, "full"))
		}
	}

	// With memory again, the sorted sets decide from where they were.
	restore()
	for _, lm := range limits {
		if !lm.zset {
			continue
		}
		for _, c := range []struct {
			k       string
			cost    int64
			allowed bool
			rem     int64
		}{
			{key(lm, "used"), 2, true, 0},
			{key(lm, "used"), 1, false, 0},
			{key(lm, "new"), 3, true, 0},
			{key(lm, "new"), 1, false, 0},
		} {
			d, err := take(lm, c.cost, 0, c.k)
			if err != nil || d.Allowed != c.allowed || d.Remaining != c.rem {
				t.Errorf("%s: take %d on %s after memory was raised = %+v, %v; want allowed %v, %d remaining", lm.name, c.cost, c.k, d, err, c.allowed, c.rem)
			}
		}
		if n := do("ZCARD", key(lm, "used")).(int64); n != 4 {
			t.Errorf("%s: ZCARD %s = %d, want 4 (3 units and META)", lm.name, key(lm, "used"), n)
		}
		if ttl := do("PTTL", key(lm, "used")).(int64); ttl <= 0 || ttl > time.Hour.Milliseconds() {
			t.Errorf("%s: PTTL %s = %d ms, want at most an hour", lm.name, key(lm, "used"), ttl)
		}
	}
}

// fillableRedis starts a private redis-server and returns a store on it,
// a runner of raw commands (failing the test on an error), and fill, which
// makes the server full (maxmemory 1 under noeviction) and returns the
// function that restores its settings, which the test's cleanup also
// calls. The store is nil when no server can be started.
func fillableRedis(t *testing.T) (*Store, func(args ...string) any, func() (restore func())) {
	t.Helper()
	srv := testserver.NewRedis(t)
	if srv == nil {
		return nil, nil, nil
	}
	s := openT(t, "redis://"+srv.Addr)
	do := func(args ...string) any {
		t.Helper()
		v, err := testserver.RedisDo(srv.Addr, 2*time.Second, args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return v
	}
	fill := func() func() {
		policy := do("CONFIG", "GET", "maxmemory-policy").([]any)[1].(string)
		maxmem := do("CONFIG", "GET", "maxmemory").([]any)[1].(string)
		set := func(args ...string) error {
			_, err := testserver.RedisDo(srv.Addr, 2*time.Second, args...)
			return err
		}
		restore := func() {
			if err := errors.Join(set("CONFIG", "SET", "maxmemory", maxmem), set("CONFIG", "SET", "maxmemory-policy", policy)); err != nil {
				t.Errorf("restoring maxmemory and its policy: %v", err)
			}
		}
		t.Cleanup(restore)
		do("CONFIG", "SET", "maxmemory-policy", "noeviction")
		do("CONFIG", "SET", "maxmemory", "1")
		return restore
	}
	return s, do, fill
}
