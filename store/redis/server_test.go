package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/storetest"
)

// TestSlotMatchesCluster compares Slot with the server's CLUSTER KEYSLOT.
func TestSlotMatchesCluster(t *testing.T) {
	s := openT(t, clusterURL(t))
	for i := 0; i < 300; i++ {
		key := fmt.Sprintf("k%d", i*7919)
		switch i % 4 {
		case 1:
			key = fmt.Sprintf("{t%d}:u%d", i, i*3)
		case 2:
			key = fmt.Sprintf("x{}%d{y}", i)
		case 3:
			key = fmt.Sprintf("{%d", i)
		}
		want, err := s.client.Do(t.Context(), s.client.B().ClusterKeyslot().Key(key).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if got := Slot(key); got != int(want) {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", key, got, want)
		}
	}
}

// TestScriptReload flushes the server's script cache, then restarts the
// server: the store reloads its script transparently (NOSCRIPT → EVAL).
func TestScriptReload(t *testing.T) {
	srv := testserver.NewRedis(t)
	if srv == nil {
		return
	}
	s := openT(t, "redis://"+srv.Addr)
	l, err := algo.Compile(algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	take := func(what string) {
		t.Helper()
		out := make([]algo.Decision, 1)
		var err error
		// After a restart the first call may meet the dead connection.
		for i := 0; i < 50; i++ {
			if _, err = s.Take(t.Context(), []store.Request{{Key: "reload", Limit: l, Cost: 1}}, out); err == nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%s: Take: %v", what, err)
	}
	take("loaded")
	if err := s.client.Do(t.Context(), s.client.B().ScriptFlush().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	take("after SCRIPT FLUSH")
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	take("after a restart")
	// A lone take runs lua/take.lua.
	exists, err := s.client.Do(t.Context(), s.client.B().ScriptExists().Sha1(loneTake.sha).Build()).AsIntSlice()
	if err != nil || len(exists) != 1 || exists[0] != 1 {
		t.Errorf("after the reload, SCRIPT EXISTS = %v, %v; want the script cached again", exists, err)
	}
}

// TestServerClockRules shows what the server clock buys. Two instances
// whose callers' clocks are 30s apart, passing their own time (as a store
// on the caller's clock would), straddle a one-hour fixed window's
// boundary and admit more than the limit within a minute; on the server's
// clock the same calls count in one window and stop at the limit. (A real
// hour boundary falling inside the test's few milliseconds would split
// that window too: a chance of about one in a million.)
func TestServerClockRules(t *testing.T) {
	url := redisURL(t)
	l, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// 15s before an hour ends: the second instance's clock, 30s ahead, is
	// in the next window.
	callerNow := time.Date(2025, 6, 1, 12, 59, 45, 0, time.UTC)
	run := func(a, b *Store, key string) (admitted int, resets []time.Duration) {
		out := make([]algo.Decision, 1)
		for i := 0; i < 20; i++ {
			st := a
			if i%2 == 1 {
				st = b
			}
			res, err := st.Take(t.Context(), []store.Request{{Key: key, Limit: l, Cost: 1}}, out)
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed {
				admitted++
			}
			resets = append(resets, out[0].ResetAfter)
		}
		return admitted, resets
	}

	// Callers' clocks, 30s apart, passed to the scripts.
	callerA := openT(t, url, WithTestClock(func() time.Time { return callerNow }))
	callerB := openT(t, url, WithTestClock(func() time.Time { return callerNow.Add(30 * time.Second) }))
	if got, _ := run(callerA, callerB, fmt.Sprintf("skew:%s:caller", runID)); got <= 10 {
		t.Fatalf("on the callers' clocks 30s apart, the two instances admitted %d of 20 against a limit of 10 per hour; want more than 10 (the skew splits the window)", got)
	}

	// The server's clock: both instances read it.
	a, b := openT(t, url), openT(t, url)
	got, resets := run(a, b, fmt.Sprintf("skew:%s:server", runID))
	if got != 10 {
		t.Errorf("on the server's clock the two instances admitted %d of 20, want the limit 10", got)
	}
	// Both instances see one window: its end, as each reports it, moves
	// only by the time between the calls.
	for i := 1; i < len(resets); i++ {
		if d := resets[i-1] - resets[i]; d < 0 || d > 5*time.Second {
			t.Errorf("ResetAfter went from %v to %v between two calls of different instances: not one window", resets[i-1], resets[i])
		}
	}
}

// TestResultAtIsServerTime checks that decisions are stamped with the
// server's TIME, not the caller's clock.
func TestResultAtIsServerTime(t *testing.T) {
	url := redisURL(t)
	s := openT(t, url)
	l, err := algo.Compile(algo.Params{Algorithm: algo.GCRA, Limit: 10, Period: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	before, err := s.serverTime(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Take(t.Context(), []store.Request{{Key: "at:" + runID, Limit: l, Cost: 1}}, make([]algo.Decision, 1))
	if err != nil {
		t.Fatal(err)
	}
	after, err := s.serverTime(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if res.At < before || res.At > after {
		t.Errorf("Result.At = %d, want the server's time, between %d and %d", res.At, before, after)
	}
}

// TestKeyTTL checks that a key's TTL is its state's ExpiresAt, on the
// server clock, so that idle keys vanish.
func TestKeyTTL(t *testing.T) {
	url := redisURL(t)
	s := openT(t, url)
	for _, tc := range []struct {
		p    algo.Params
		cost int64
		want time.Duration
	}{
		{algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second}, 5, 500 * time.Millisecond},
		{algo.Params{Algorithm: algo.GCRA, Limit: 2, Period: time.Hour}, 1, 30 * time.Minute},
		{algo.Params{Algorithm: algo.SlidingLog, Limit: 5, Period: 90 * time.Second}, 2, 90 * time.Second},
		{algo.Params{Algorithm: algo.Concurrency, Limit: 5, LeaseTTL: 45 * time.Second}, 1, 45 * time.Second},
	} {
		l, err := algo.Compile(tc.p)
		if err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("ttl:%s:%s", runID, l.Algorithm())
		if _, err := s.Take(t.Context(), []store.Request{{Key: key, Limit: l, Cost: tc.cost, Lease: 1}}, make([]algo.Decision, 1)); err != nil {
			t.Fatal(err)
		}
		ttl, ok := pttl(t, s, key)
		if !ok || ttl > tc.want || ttl < tc.want-time.Second {
			t.Errorf("%s: after a take of %d, PTTL = %v (exists %v), want %v (less the time since)", l, tc.cost, ttl, ok, tc.want)
		}
	}
}

// TestConcurrentStoresShareState runs two stores (as two instances would)
// and a Peek of each: they see each other's charges at once.
func TestConcurrentStoresShareState(t *testing.T) {
	url := redisURL(t)
	a, b := openT(t, url), openT(t, url)
	l, err := algo.Compile(algo.Params{Algorithm: algo.SlidingLog, Limit: 4, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	key := "share:" + runID
	out := make([]algo.Decision, 1)
	if _, err := a.Take(t.Context(), []store.Request{{Key: key, Limit: l, Cost: 3}}, out); err != nil {
		t.Fatal(err)
	}
	if err := b.Peek(t.Context(), []store.Request{{Key: key, Limit: l, Cost: 1}}, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Remaining != 0 || !out[0].Allowed {
		t.Errorf("the other instance's Peek = %+v, want the last unit available", out[0])
	}
}

// TestBatching runs many concurrent takes through a store whose batches
// are forced to coalesce, and checks each caller got its own decision.
func TestBatching(t *testing.T) {
	url := redisURL(t)
	for _, opts := range [][]Option{
		{WithBatchSize(8), WithInflightBatches(1)},
		{WithBatchSize(64), WithBatchWindow(200 * time.Microsecond)},
		{WithBatchSize(1)},
	} {
		s := openT(t, url, opts...)
		l, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 1000, Period: 1000 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		prefix := fmt.Sprintf("batch:%s:%d:", runID, time.Now().UnixNano())
		const callers, each = 32, 20
		errs := make(chan error, callers)
		for g := 0; g < callers; g++ {
			go func() {
				out := make([]algo.Decision, 1)
				key := fmt.Sprintf("%s%d", prefix, g)
				for i := 1; i <= each; i++ {
					if _, err := s.Take(context.Background(), []store.Request{{Key: key, Limit: l, Cost: int64(g + 1)}}, out); err != nil {
						errs <- err
						return
					}
					// Each caller's own key: its remaining tells whose
					// decision it got.
					if want := 1000 - int64(i*(g+1)); out[0].Remaining != want {
						errs <- fmt.Errorf("caller %d, take %d: remaining %d, want %d", g, i, out[0].Remaining, want)
						return
					}
				}
				errs <- nil
			}()
		}
		for g := 0; g < callers; g++ {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	}
}

// TestClosed checks every method after Close.
func TestClosedStore(t *testing.T) {
	s := openT(t, redisURL(t))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	l, _ := algo.Compile(algo.Params{Algorithm: algo.GCRA, Limit: 1, Period: time.Second})
	reqs := []store.Request{{Key: "k", Limit: l, Cost: 1}}
	if _, err := s.Take(t.Context(), reqs, make([]algo.Decision, 1)); err != store.ErrClosed {
		t.Errorf("Take after Close: %v", err)
	}
	if _, _, err := s.Inspect(t.Context(), "k"); err != store.ErrClosed {
		t.Errorf("Inspect after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestNewFromClient wraps a rueidis client the caller made.
func TestNewFromClient(t *testing.T) {
	addr := testserver.Redis(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Mode() != Standalone {
		t.Errorf("Mode = %v", s.Mode())
	}
	l, _ := algo.Compile(algo.Params{Algorithm: algo.GCRA, Limit: 1, Period: time.Second})
	out := make([]algo.Decision, 1)
	if _, err := s.Take(t.Context(), []store.Request{{Key: "new:" + runID, Limit: l, Cost: 1}}, out); err != nil || !out[0].Allowed {
		t.Errorf("Take = %+v, %v", out[0], err)
	}
	if !strings.Contains(s.Mode().String(), "standalone") {
		t.Errorf("Mode.String = %q", s.Mode())
	}
}

// TestBatchingMixedKinds has callers of different algorithms and limits,
// each on its own key, share batches (and so both the flat script and the
// general one): every decision must be the reference's for its key.
func TestBatchingMixedKinds(t *testing.T) {
	url := redisURL(t)
	ck := new(clock)
	ck.us.Store(time.Date(2026, 2, 2, 2, 2, 2, 0, time.UTC).UnixMicro())
	s := openT(t, url, WithTestClock(ck.Now), WithBatchSize(16), WithBatchWindow(100*time.Microsecond))
	two := int64(2)
	params := []algo.Params{
		{Algorithm: algo.FixedWindow, Limit: 20, Period: time.Minute},
		{Algorithm: algo.FixedWindow, Limit: 7, Period: 10 * time.Second},
		{Algorithm: algo.GCRA, Limit: 10, Period: time.Second, Burst: 15},
		{Algorithm: algo.TokenBucket, Limit: 5, Period: time.Second, Burst: 9, InitialTokens: &two},
		{Algorithm: algo.Shaper, Limit: 4, Period: time.Second, Burst: 6, Delay: 2},
		{Algorithm: algo.SlidingLog, Limit: 12, Period: time.Minute},
		{Algorithm: algo.SmoothBursty, Limit: 10, Period: time.Second, MaxWait: 300 * time.Millisecond},
		{Algorithm: algo.FixedWindow, Limit: 9, Calendar: algo.CalendarMonth},
	}
	errs := make(chan error, 3*len(params))
	for g := 0; g < 3*len(params); g++ {
		go func() {
			l, err := algo.Compile(params[g%len(params)])
			if err != nil {
				errs <- err
				return
			}
			key := fmt.Sprintf("mixed:%s:%d", runID, g)
			ref := storetest.NewReference()
			out := make([]algo.Decision, 1)
			for i := 0; i < 25; i++ {
				q := store.Request{Key: key, Limit: l, Cost: int64(1 + (g+i)%3)}
				ok, want := ref.Take([]store.Request{q}, ck.us.Load())
				res, err := s.Take(context.Background(), []store.Request{q}, out)
				if err != nil {
					errs <- err
					return
				}
				if res.Allowed != ok || out[0] != want[0] {
					errs <- fmt.Errorf("%s, take %d (cost %d): %+v, reference %+v", l, i, q.Cost, out[0], want[0])
					return
				}
			}
			errs <- nil
		}()
	}
	for range 3 * len(params) {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestStoreTimeout pauses the server (SIGSTOP): a Take with no deadline
// of its own must fail with store.ErrUnavailable within about the store's
// timeout, and decide again once the server resumes.
func TestStoreTimeout(t *testing.T) {
	srv := testserver.NewRedis(t)
	if srv == nil {
		return
	}
	s := openT(t, "redis://"+srv.Addr, WithTimeout(300*time.Millisecond))
	l, err := algo.Compile(algo.Params{Algorithm: algo.GCRA, Limit: 10, Period: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	reqs := []store.Request{{Key: "timeout", Limit: l, Cost: 1}}
	out := make([]algo.Decision, 1)
	if _, err := s.Take(context.Background(), reqs, out); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = s.Take(context.Background(), reqs, out)
	took := time.Since(start)
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Take on a paused server: %v, want store.ErrUnavailable", err)
	}
	if took > 5*time.Second {
		t.Errorf("Take on a paused server failed after %v; want about the 300ms timeout", took)
	}
	t.Logf("failed after %v: %v", took.Round(time.Millisecond), err)
	for i := 0; ; i++ {
		if _, err = s.Take(context.Background(), reqs, out); err == nil {
			break
		}
		if i == 100 {
			t.Fatalf("no decision after the server resumed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSentinelURLAtADataNode: redis-sentinel:// pointed at a Redis data
// node (the master's port, a common slip) fails saying what to check,
// rather than with the server's bare "unknown command".
func TestSentinelURLAtADataNode(t *testing.T) {
	addr := testserver.Redis(t)
	if addr == "" {
		return
	}
	s, err := Open("redis-sentinel://mymaster@" + addr)
	if err == nil {
		s.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "is it a Redis Sentinel? redis-sentinel:// takes the sentinels' addresses") {
		t.Fatalf("Open(redis-sentinel:// at a data node) = %v, want the sentinel hint", err)
	}
}
